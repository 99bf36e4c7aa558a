"""A pipeline step that gives up lands in the migration record, and `split --yes` says so at once.

A real `migrator worker` runs the steps; the copy's first step fails (preflight:
the target already holds a moving shard), RQ's failure callback records it, and
the foreground `migrator split --yes` stops following and exits 3 (refused) with the
reason and the next step in one line, instead of waiting on a migration that will not go on.
"""

from __future__ import annotations

import subprocess
import sys
import time

from migrator.engine.migration import MigrationStore, Phase
from migrator.ops import command
from tests.integration.cli_helpers import assert_one_line_error, run_cli
from tests.integration.ops.operator_support import host_conn, stop_process


def test_a_failed_step_is_recorded_and_split_exits_at_once(fleet):
    with host_conn(fleet, "MySQL003A") as c, c.cursor() as cur:  # the target is not empty for db00002
        cur.execute("CREATE DATABASE IF NOT EXISTS db00002")
        cur.execute("CREATE TABLE IF NOT EXISTS db00002.pins (local_id BIGINT PRIMARY KEY, data TEXT)")
        cur.execute("INSERT INTO db00002.pins VALUES (1, 'in the way')")
    worker = subprocess.Popen([sys.executable, "-m", "migrator", "--config", str(fleet.config_path), "worker",
                               "--name", "stops-1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        t0 = time.monotonic()
        res = run_cli("move", "--shards", "2-3", "--to", "MySQL003A", "--yes", config=fleet.config_path, timeout=120)
        took = time.monotonic() - t0
    finally:
        stop_process(worker)
    assert res.returncode == 3, (res.stdout, res.stderr)
    assert_one_line_error(res, "stopped in copy-start", "next:")  # the plan printed on stdout, the verdict one line
    assert took < 60
    mids = [m["id"] for m in command.status(fleet.config)["migrations"]]
    assert len(mids) == 1
    st, _ = MigrationStore(fleet.zk).state(mids[0])
    assert st.stopped and st.stopped["step"] == "copy-start" and "migrator resume" in st.stopped["next"]
    assert st.phase in (Phase.PREFLIGHT, Phase.PLANNED)
    # resuming clears the verdict (the step runs again and would record a new one if it fails again)
    command.abort(fleet.config, mids[0])
