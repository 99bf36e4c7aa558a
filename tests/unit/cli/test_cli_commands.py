"""Every operator command is reachable from `migrator --help`."""

import subprocess
import sys

EXPECTED = {
    "split", "move", "move-partition", "preflight", "copy", "status", "pause", "resume", "abort", "set",
    "postpone", "catchup", "verify", "cutover", "rollback", "cleanup", "restart-copy", "run", "approve",
    "playbook", "history", "metrics", "worker", "demo", "sandbox", "topology", "id", "queue", "partitions",
}


def test_every_command_is_registered():
    from migrator.cli import main

    main._load_plugins()
    import typer.main

    group = typer.main.get_command(main.app)
    assert EXPECTED <= set(group.commands), sorted(EXPECTED - set(group.commands))


def test_help_runs_without_servers():
    res = subprocess.run([sys.executable, "-m", "migrator", "--help"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "split" in res.stdout and "Traceback" not in res.stderr
