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


def _params():
    """(command path, option names) of every option of every command."""
    import typer.main

    from migrator.cli import main

    main._load_plugins()
    out = []

    def walk(cmd, path):
        for p in cmd.params:
            out.append((" ".join(path) or "migrator", [*p.opts, *p.secondary_opts]))
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, [*path, name])

    walk(typer.main.get_command(main.app), [])
    return out


def test_each_short_flag_has_one_meaning():
    longs: dict[str, set] = {}
    for _path, opts in _params():
        for s in (o for o in opts if o.startswith("-") and not o.startswith("--")):
            longs.setdefault(s, set()).update(o for o in opts if o.startswith("--"))
    assert {s: ls for s, ls in longs.items() if len(ls) != 1} == {}
    assert longs["-y"] == {"--yes"} and longs["-v"] == {"--verbose"} and longs["-c"] == {"--config"}


def test_one_name_for_a_listen_address():
    names = {o for _path, opts in _params() for o in opts}
    assert not names & {"--port", "--bind", "--addr", "--metrics-port"}, names & {"--port", "--bind", "--addr"}
    listening = {path for path, opts in _params() if "--listen" in opts}
    assert {"metrics", "console", "queue serve", "queue broker"} <= listening, listening
    assert any(path == "worker" and "--metrics-listen" in opts for path, opts in _params())


def test_yes_means_go_ahead_on_every_command_that_destroys_or_switches():
    with_yes = {path for path, opts in _params() if "--yes" in opts}
    assert {"split", "move", "move-partition", "rebalance", "cutover", "rollback", "cleanup", "abort",
            "restart-copy", "queue delete", "queue purge"} <= with_yes, with_yes


def test_limits_settable_at_launch_and_with_set():
    flags = {"--max-lag", "--max-threads-running", "--freeze-budget-ms", "--cutover-retry-s"}
    opts_of: dict[str, set] = {}
    for path, opts in _params():
        opts_of.setdefault(path, set()).update(opts)
    for cmd in ("split", "move", "move-partition", "rebalance", "set"):
        assert flags <= opts_of[cmd], (cmd, flags - opts_of[cmd])
    for cmd in ("split", "move", "move-partition", "rebalance"):
        assert "--postpone-cutover" in opts_of[cmd], cmd


#: the commands without --json: servers and long-running processes (they report nothing to parse), the
#: sandbox's setup, and the playbook reference (Markdown)
NO_JSON = {"metrics", "console", "worker", "demo", "queue serve", "queue broker", "queue worker", "sandbox up",
           "sandbox down", "sandbox add-pair", "playbook reference"}


def test_every_command_that_reports_something_takes_json():
    opts_of: dict[str, set] = {}
    for path, opts in _params():
        opts_of.setdefault(path, set()).update(opts)
    import typer.main

    from migrator.cli import main

    leaves = []

    def walk(cmd, path):
        subs = getattr(cmd, "commands", None)
        if subs is None:
            leaves.append(" ".join(path))
        for name, sub in (subs or {}).items():
            walk(sub, [*path, name])

    walk(typer.main.get_command(main.app), [])
    missing = sorted(p for p in leaves if p not in NO_JSON and "--json" not in opts_of.get(p, set()))
    assert missing == [], missing
    following = {p for p in leaves if "--follow" in opts_of.get(p, set())}
    assert {"split", "move", "move-partition", "rebalance", "status", "rollback"} <= following, following
