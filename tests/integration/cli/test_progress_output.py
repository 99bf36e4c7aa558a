"""What a script or a log file gets from the CLI while a move runs.

``migrator split --yes > split.log`` with a real ``migrator worker``: the log holds one line per event
while the move runs (each phase change, each catch-up pass, each cutover attempt with its reason, and when
the next try is due), not only a final frame; ``migrator status ID`` shows the refused attempts and the
next try meanwhile. A client's open transaction on a moving table refuses the cutover until it ends.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

from migrator.fleet.mysql import connect as mysql_connect
from migrator.ops import command
from tests.integration.cli_helpers import run_cli
from tests.integration.ops.operator_support import stop_process, wait_for

#: every progress line starts with the local time of the event, then the migration id
LINE = re.compile(r"^\d\d:\d\d:\d\d m-\S+: ")


def test_split_to_a_file_writes_a_line_per_pass_and_attempt_while_it_runs(fleet, tmp_path):
    client = mysql_connect(fleet.hosts["MySQL001A"], fleet.credentials)  # holds a moving table's lock
    with client.cursor() as cur:
        cur.execute("BEGIN")
        cur.execute("UPDATE db00002.pins SET data = data WHERE local_id = 1")
    worker = subprocess.Popen([sys.executable, "-m", "migrator", "--config", str(fleet.config_path), "worker",
                               "--name", "progress-1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    log = tmp_path / "split.log"
    split = None
    try:
        with open(log, "w") as out:
            split = subprocess.Popen([sys.executable, "-m", "migrator", "--config", str(fleet.config_path), "split",
                                      "MySQL001A", "--to", "MySQL003A", "--yes", "--lock-retry-s", "1",
                                      "--cutover-retry-s", "600"], stdout=out, stderr=subprocess.PIPE, text=True)

        def refused_and_retrying() -> str | None:
            text = log.read_text()
            return text if "cutover attempt" in text and "next cutover try" in text else None

        text = wait_for(refused_and_retrying, timeout=240, every=0.5)
        assert split.poll() is None, "the split must still be running: the lines came as it went"
        lines = [ln for ln in text.splitlines() if LINE.match(ln)]
        assert any(": phase copying" in ln for ln in lines), text
        assert any(": catch-up pass 1:" in ln and "events" in ln and "lag" in ln for ln in lines), text
        attempt = next(ln for ln in lines if "cutover attempt" in ln)
        assert "flipped" not in attempt and len(attempt.split(": ", 2)[2]) > 20, attempt  # the reason is there
        assert re.search(r"next cutover try \(attempt \d+\) at \d\d:\d\d:\d\d", text), text

        mid = command.status(fleet.config)["migrations"][0]["id"]
        human = run_cli("status", mid, config=fleet.config_path, env={"COLUMNS": "200"}).stdout
        assert "cutover attempts" in human and "next cutover try" in human, human
        st = json.loads(run_cli("status", mid, "--json", config=fleet.config_path).stdout)
        assert st["cutover_attempts"] and st["cutover_next_try"]["at"] > st["cutover_attempts"][-1]["at"], st

        client.rollback()  # the lock is gone: the next try cuts over
        _, err = split.communicate(timeout=240)
        assert split.returncode == 0, err
    finally:
        client.close()
        if split is not None and split.poll() is None:
            stop_process(split)
        stop_process(worker)
    text = log.read_text()
    assert re.search(r"cutover attempt flipped: write freeze \d+ ms", text), text
    assert f"{mid}: phase done" in text and f"{mid} done: write freeze" in text, text
    assert text.index("cutover attempt") < text.index(": phase done"), text  # in the order they happened
