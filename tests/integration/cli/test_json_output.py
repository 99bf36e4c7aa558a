"""``--json`` is safe to parse: every command that reports something prints exactly one JSON document on
stdout and nothing else (``--json --follow``: one JSON document per line), on one fleet, one after another.

Most commands run in this process (``migrator.cli.main.run``, stdout captured), a move followed to its end
runs as an operator's process with a real ``migrator worker``: its progress lines go to stderr, its stdout
is the plan and how the move ended, one document.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from migrator.cli import main
from tests.integration.cli_helpers import run_cli
from tests.integration.ops.operator_support import redis_of, stop_process

PLAYBOOK = Path(__file__).resolve().parents[3] / "playbooks" / "move-shards.yaml"


def test_every_json_command_prints_one_document(fleet, capsys, tmp_path):
    cfg = str(fleet.config_path)
    parsed: dict[str, object] = {}

    ran: set[str] = {"move"}  # the command words of each command run with --json below

    def doc(*args: str, code: int = 0) -> dict:
        ran.add(_command_words(args))
        rc = main.run(["--config", cfg, *args])
        out = capsys.readouterr()
        assert rc == code, (args, rc, out.err)
        parsed[" ".join(args[:2])] = value = json.loads(out.out)  # one document, nothing else
        return value

    # a move followed to its end by the operator's process, stdout to a pipe: one document
    worker = subprocess.Popen([sys.executable, "-m", "migrator", "--config", cfg, "worker", "--name", "json-1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        res = run_cli("move", "--shards", "4-5", "--to", "MySQL003A", "--yes", "--json", config=cfg, timeout=240)
    finally:
        stop_process(worker)
    assert res.returncode == 0, res.stderr
    moved = json.loads(res.stdout)
    first = moved["run"]["migration"]
    assert moved["id"] == first and moved["run"]["phase"] == "done" and moved["run"]["freeze_ms"] > 0, moved
    assert re.search(rf"^\d\d:\d\d:\d\d {first}: catch-up pass 1:", res.stderr, re.M), res.stderr
    # JSON lines while following: every line one document, the last the result
    rc = main.run(["--config", cfg, "status", first, "--json", "--follow"])
    lines = [json.loads(ln) for ln in capsys.readouterr().out.splitlines()]
    assert rc == 0 and lines[-1]["event"] == "result" and lines[-1]["data"]["phase"] == "done", lines[-1]
    assert {"phase", "pass", "attempt"} <= {ln["event"] for ln in lines}, lines
    redis_of(fleet).flushdb()  # nothing queued for what follows (it is driven by hand)

    # no fleet needed
    doc("id", "decode", "0x40001000000007", "--json")
    doc("id", "encode", "--shard", "3", "--type", "1", "--local", "7", "--json")
    doc("id", "mod-shard", "pin-1", "--json")
    doc("playbook", "steps", "--json")
    doc("run", str(PLAYBOOK), "--set", "shards=2-3", "--set", "target=MySQL003A", "--dry-run", "--json")
    # the fleet
    doc("topology", "show", "--no-sizes", "--json")
    doc("topology", "history", "--json")
    doc("history", "--json")
    doc("status", "--json")
    doc("status", first, "--json")
    doc("split", "MySQL001A", "--to", "MySQL003A", "--json")
    doc("rebalance", "--window", "0.5", "--json")
    mid = doc("move", "--shards", "2-3", "--to", "MySQL003A", "--yes", "--no-start", "--json")["id"]
    doc("preflight", mid, "--json")
    doc("set", mid, "--max-lag", "3", "--json")
    doc("postpone", mid, "--json")
    doc("postpone", mid, "--release", "--json")
    doc("pause", mid, "--json")
    doc("copy", mid, "--sync", "--json")
    doc("resume", mid, "--json")
    doc("restart-copy", mid, "--yes", "--json")
    redis_of(fleet).flushdb()
    doc("copy", mid, "--sync", "--json")
    doc("catchup", mid, "--sync", "--json")
    doc("verify", mid, "--json")
    doc("cutover", mid, "--yes", "--json")
    doc("cleanup", mid, "--now", "--yes", "--json")
    doc("rollback", first, "--sync", "--yes", "--json")
    other = doc("move", "--shards", "6", "--to", "MySQL003A", "--yes", "--no-start", "--json")["id"]
    doc("abort", other, "--yes", "--json")
    doc("playbook", "list", "--json")
    # the queue service
    doc("queue", "create", "jq", "--partitions", "2", "--json")
    doc("move-partition", "--queue", "jq", "--partition", "1", "--to", "MySQL003A", "--json")  # a dry run
    doc("queue", "list", "--json")
    doc("queue", "show", "jq", "--json")
    doc("queue", "update", "jq", "--lease", "20", "--yes", "--json")
    job = doc("queue", "enqueue", "jq", "a", "b", "--json")["jobs"][0]["id"]
    doc("queue", "counts", "jq", "--json")
    doc("queue", "lookup", "jq", str(job), "--json")
    doc("queue", "scan", "jq", "--json")
    doc("queue", "retry", "jq", "--json")
    doc("queue", "pause", "jq", "--yes", "--json")
    doc("queue", "resume", "jq", "--json")
    doc("queue", "purge", "jq", "--state", "NEW", "--yes", "--json")
    ledger = str(tmp_path / "ledger.db")
    doc("queue", "load", "--queue", "jq", "--rate", "20", "--duration", "1", "--ledger", ledger, "--json")
    doc("queue", "ledger", "check", "--ledger", ledger, "--json")
    doc("queue", "delete", "jq", "--yes", "--json")
    doc("partitions", "maintain", "--dry-run", "--json")
    doc("partitions", "pause", "5", "--json")
    doc("partitions", "paused", "--json")
    doc("partitions", "resume", "5", "--json")
    doc("sandbox", "status", "--dir", str(fleet.sandbox.dir), "--json")
    assert doc("topology", "create-shards", "--json")["created"] == []  # every shard's database is there
    assert len(parsed) >= 40, sorted(parsed)
    # every command that takes --json ran above, but these: each needs a playbook run or a sandbox of its own,
    # or changes the topology the commands above rely on. The test named parses its --json stdout.
    elsewhere = {"approve": "ops/test_playbook_engine.py", "playbook resume": "ops/test_playbook_engine.py",
                 "playbook status": "ops/test_playbook_engine.py", "topology add-pair": "ops/test_rebalance.py",
                 "topology init": "cli/test_bounded_inputs.py"}
    root = Path(__file__).resolve().parents[1]
    for name, path in elsewhere.items():
        text = (root / path).read_text()
        words = ", ".join(f'"{w}"' for w in name.split())
        call = re.search(rf"cli\((?:cfg_path, )?{words},(?:(?!cli\().)*?\"--json\".*?json\.loads", text, re.S)
        assert call, f"{path} runs `{name} --json` and parses its stdout"
    assert _json_commands() - set(elsewhere) <= ran, sorted(_json_commands() - set(elsewhere) - ran)


def _command_words(args) -> str:
    """The words of ``args`` that name a command (``queue show jq --json`` -> ``queue show``)."""
    cmd, words = main.command(), []
    for a in args:
        sub = getattr(cmd, "commands", {}).get(a)
        if sub is None:
            break
        cmd, words = sub, [*words, a]
    return " ".join(words)


def _json_commands() -> set[str]:
    out: set[str] = set()

    def walk(group, path):
        for name, cmd in group.commands.items():
            if hasattr(cmd, "commands"):
                walk(cmd, [*path, name])
            elif any("--json" in p.opts for p in cmd.params):
                out.add(" ".join([*path, name]))

    walk(main.command(), [])
    return out
