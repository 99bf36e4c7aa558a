"""Bad inputs through the real CLI: each is one clear line on stderr, a non-zero exit, and
nothing changed (shard-map epoch, migration records, shard locks, target databases).

Covered elsewhere and not repeated here: overlapping ranges, an unknown host in a
map file and malformed JSON (``test_foundation.py::test_cli_errors_are_one_line``);
each preflight failure's own line (``engine/test_preflight.py``). This file drives
the same conditions end to end through ``migrator`` as an operator types it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from migrator.engine.migration import LOCKS, MigrationStore, Phase
from migrator.errors import ExitCode
from migrator.fleet.mysql import connect as mysql_connect
from migrator.fleet.shard_map import ShardMapStore
from tests.integration.cli_helpers import assert_one_line_error, run_cli, run_cli_here


def fleet_state(fleet) -> tuple:
    """What a refused command must leave as it was."""
    zk = fleet.zk
    locks = zk.path(LOCKS)
    held = sorted(zk.client.get_children(locks)) if zk.client.exists(locks) else []
    with mysql_connect(fleet.hosts["MySQL003A"], fleet.credentials) as c, c.cursor() as cur:
        cur.execute("SELECT schema_name FROM information_schema.schemata WHERE schema_name LIKE 'db0%' "
                    "ORDER BY schema_name")
        target_dbs = [r[0] for r in cur.fetchall()]
    return ShardMapStore(zk).read().epoch, MigrationStore(zk).list(), held, target_dbs


def refused(fleet, *args: str, needles: tuple[str, ...], config: Path | None = None, env=None,
            code: int | None = None, through=run_cli_here) -> None:
    """``args`` fail in one line naming ``needles`` (with exit ``code`` when given) and change nothing
    (run ``through`` the CLI in this process, or the script's subprocess: :func:`run_cli`)."""
    before = fleet_state(fleet)
    res = through(*args, config=config or fleet.config_path, env=env)
    assert_one_line_error(res, *needles)
    if code is not None:
        assert res.returncode == code, (res.returncode, res.stderr)
    assert fleet_state(fleet) == before


def test_unknown_host_or_pair(fleet):
    refused(fleet, "split", "MySQL009A", needles=("MySQL009A",))
    refused(fleet, "move", "--shards", "4-7", "--to", "MySQL009A", needles=("MySQL009A",))
    refused(fleet, "split", "MySQL001A", "--to", "MySQL404B", needles=("MySQL404B",))


def test_bad_shard_lists(fleet):
    refused(fleet, "move", "--shards", "6-99", "--to", "MySQL003A", needles=("outside 0..7",))
    refused(fleet, "move", "--shards", "7-4", "--to", "MySQL003A", needles=("7-4",))
    refused(fleet, "move", "--shards", "banana", "--to", "MySQL003A", needles=("banana",))
    # shards of two different source pairs cannot move as one migration
    refused(fleet, "move", "--shards", "3-4", "--to", "MySQL003A", needles=())


def test_gapped_and_overlapping_map_files(zk_root, tmp_path):
    _cfg, cfg_path, _creds, zk = zk_root
    gap = tmp_path / "gap.json"
    gap.write_text(json.dumps([{"range": [0, 3], "master": "MySQL001A", "slave": "MySQL001B"},
                               {"range": [5, 7], "master": "MySQL002A", "slave": "MySQL002B"}]))
    res = run_cli_here("topology", "init", "--from", str(gap), config=cfg_path)
    assert_one_line_error(res, "shards 4..4 are not covered")
    overlap = tmp_path / "overlap.json"
    overlap.write_text(json.dumps([{"range": [0, 4], "master": "MySQL001A", "slave": "MySQL001B"},
                                   {"range": [4, 7], "master": "MySQL002A", "slave": "MySQL002B"}]))
    assert_one_line_error(run_cli_here("topology", "init", "--from", str(overlap), config=cfg_path), "overlap")
    assert not ShardMapStore(zk).exists()  # nothing was written


def test_shards_already_moving(fleet):
    first = run_cli_here("split", "MySQL001A", "--yes", "--no-start", config=fleet.config_path)
    assert first.returncode == 0, first.stderr
    [mid] = MigrationStore(fleet.zk).list()
    refused(fleet, "split", "MySQL001A", needles=("already moving", mid), code=ExitCode.REFUSED)
    refused(fleet, "move", "--shards", "3", "--to", "MySQL003A", needles=("already moving", "shard 3"),
            code=ExitCode.REFUSED)


def test_source_that_is_the_passive_side(fleet):
    ShardMapStore(fleet.zk).update(lambda m: m.reassign(0, 3, "MySQL001B", "MySQL001A"), reason="test: failover")
    refused(fleet, "split", "MySQL001A", needles=("MySQL001A",))


def test_missing_credentials(fleet, tmp_path):
    text = fleet.config_path.read_text().replace(str(fleet.sandbox.secrets_file), str(tmp_path / "nope.toml"))
    cfg = tmp_path / "nocreds.toml"
    cfg.write_text(text)
    refused(fleet, "split", "MySQL001A", needles=("nope.toml",), config=cfg, code=ExitCode.CONFIG)
    empty = tmp_path / "empty-secrets.toml"
    empty.write_text("[mysql]\nuser = \"migrator\"\n")
    empty.chmod(0o600)
    cfg.write_text(fleet.config_path.read_text().replace(str(fleet.sandbox.secrets_file), str(empty)))
    refused(fleet, "split", "MySQL001A", needles=("no MySQL credentials",), config=cfg, code=ExitCode.CONFIG)


def test_malformed_playbooks(fleet, tmp_path):
    not_yaml = tmp_path / "broken.yaml"
    not_yaml.write_text("name: x\nsteps: [unclosed\n")
    refused(fleet, "run", str(not_yaml), needles=("broken.yaml",))
    bad_step = tmp_path / "bad-step.yaml"
    bad_step.write_text("name: bad\nsteps:\n  - id: s1\n    call: launch_missiles\n")
    refused(fleet, "run", str(bad_step), needles=("launch_missiles",))
    refused(fleet, "run", str(tmp_path / "missing.yaml"), needles=("missing.yaml",))


# -- conditions preflight finds: the plan is recorded, the copy refuses to start -------------------
# ``split`` records the plan (and its shard locks) before preflight runs, so for these the
# unchanged things are the map, the target databases and the other migrations; the refused
# migration stays in phase preflight with its reason until `migrator abort ID`.

def _plan(fleet) -> str:
    res = run_cli_here("split", "MySQL001A", "--yes", "--no-start", config=fleet.config_path)
    assert res.returncode == 0, res.stderr
    return MigrationStore(fleet.zk).list()[0]


def _copy_refused(fleet, mid: str, *needles: str) -> None:
    before = fleet_state(fleet)
    res = run_cli_here("copy", mid, "--sync", config=fleet.config_path)
    assert_one_line_error(res, "preflight", *needles)
    assert res.returncode == ExitCode.REFUSED, res.stderr  # a preflight failure is a safety check's no
    assert fleet_state(fleet) == before
    st, _ = MigrationStore(fleet.zk).state(mid)
    assert st.phase == Phase.PREFLIGHT and all(n in (st.error or "") for n in needles), st
    abort = run_cli_here("abort", mid, "--yes", config=fleet.config_path)
    assert abort.returncode == 0, abort.stderr
    assert not MigrationStore(fleet.zk).holders([2, 3])


def test_table_without_primary_key(fleet):
    with mysql_connect(fleet.hosts["MySQL001A"], fleet.credentials) as c, c.cursor() as cur:
        cur.execute("CREATE TABLE db00002.nokey (a INT, b TEXT)")
    _copy_refused(fleet, _plan(fleet), "db00002.nokey")


def test_target_not_empty(fleet):
    with mysql_connect(fleet.hosts["MySQL003A"], fleet.credentials) as c, c.cursor() as cur:
        cur.execute("CREATE DATABASE db00003")
    fleet.sandbox.wait_pairs_converged()
    try:
        _copy_refused(fleet, _plan(fleet), "db00003 on MySQL003A")
    finally:
        with mysql_connect(fleet.hosts["MySQL003A"], fleet.credentials) as c, c.cursor() as cur:
            cur.execute("DROP DATABASE IF EXISTS db00003")


@pytest.mark.parametrize("fmt", ["STATEMENT", "MIXED"])
def test_binlog_format_not_row(fleet, fmt):
    mid = _plan(fleet)
    with fleet.sandbox.root_conn("MySQL001A") as root, root.cursor() as cur:
        cur.execute(f"SET GLOBAL binlog_format = '{fmt}'")
        try:
            _copy_refused(fleet, mid, f"binlog_format is {fmt}")
        finally:
            cur.execute("SET GLOBAL binlog_format = 'ROW'")


def test_unknown_migration_id(fleet):
    unknown = "m-20260101-000000-abcdef"
    for args in (("resume", unknown), ("abort", unknown, "--yes"), ("restart-copy", unknown, "--yes"),
                 ("cutover", unknown), ("preflight", unknown)):
        refused(fleet, *args, needles=(f"no migration '{unknown}'",))
    refused(fleet, "resume", "m-nope", needles=("m-nope", "not a migration id"))


def test_restart_copy_refused_after_the_cutover_started(fleet):
    res = run_cli_here("split", "MySQL001A", "--yes", "--no-start", config=fleet.config_path)
    assert res.returncode == 0, res.stderr
    [mid] = MigrationStore(fleet.zk).list()
    MigrationStore(fleet.zk).set_phase(mid, Phase.CUTOVER)
    refused(fleet, "restart-copy", mid, "--yes", needles=("only be restarted before the cutover",))
    refused(fleet, "resume", mid, needles=(f"migrator cutover {mid}",))


# -- every command, its bad inputs: one line, a non-zero exit, no traceback ---------------------------

def _commands() -> list[list[str]]:
    """Every leaf command of `migrator`, as the words that name it."""
    import typer.main

    from migrator.cli import main

    main._load_plugins()
    out = []

    def walk(group, path):
        for name, cmd in sorted(group.commands.items()):
            if getattr(cmd, "commands", None):
                walk(cmd, [*path, name])
            else:
                out.append([*path, name])

    walk(typer.main.get_command(main.app), [])
    return out


def run_here(*args: str, env: dict | None = None) -> tuple[int, str, str]:
    """The CLI in this process (:func:`run_cli_here`) as (exit code, stdout, stderr)."""
    res = run_cli_here(*args, env=env)
    return res.returncode, res.stdout, res.stderr


def assert_one_line(code: int, err: str, *needles: str, exit_code: int | None = None) -> str:
    assert code != 0, err
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), lines[0]
    for n in needles:
        assert n in lines[0], (n, lines[0])
    if exit_code is not None:
        assert code == exit_code, (code, lines[0])
    return lines[0]


def test_every_command_refuses_an_unknown_option_in_one_line(tmp_path):
    missing = str(tmp_path / "missing.toml")
    commands = _commands()
    assert len(commands) > 50 and ["split"] in commands and ["queue", "ledger", "check"] in commands
    for words in commands:
        code, _out, err = run_here("--config", missing, *words, "--no-such-flag")
        assert_one_line(code, err, "No such option", "--no-such-flag", exit_code=2)


def test_every_command_with_arguments_says_which_is_missing(tmp_path):
    import typer.main

    from migrator.cli import main

    group = typer.main.get_command(main.app)
    missing = str(tmp_path / "missing.toml")
    checked = 0
    for words in _commands():
        cmd = group
        for w in words:
            cmd = cmd.commands[w]
        required = [p for p in cmd.params if p.required]
        if not required:
            continue
        code, _out, err = run_here("--config", missing, *words)
        assert_one_line(code, err, "Missing", exit_code=2)
        checked += 1
    assert checked > 20


def test_help_texts_keep_their_brackets():
    code, out, _err = run_here("console", "--help")
    assert code == 0 and "[queue] token" in out.replace("\n", " "), out


def test_version():
    code, out, _err = run_here("--version")
    assert code == 0 and out.startswith("migrator ") and out.split()[1][0].isdigit(), out


# inputs refused before any server is asked: (arguments, what the line names, exit code)
NO_SERVER = [
    (("split", "MySQL001A", "--fence", "bogus"), ("--fence bogus", "'auto', 'rename' or 'gate'"), 2),
    (("split", "MySQL001A", "--freeze-budget-ms", "-5"), ("--freeze-budget-ms -5", "greater than or equal to 1"), 2),
    (("move", "--shards", "1", "--to", "B", "--max-lag", "0"), ("--max-lag 0", "greater than 0"), 2),
    (("split", "MySQL001A", "--yes", "--dry-run"), ("contradict",), 2),
    (("split", "MySQL001A", "--no-start"), ("--no-start goes with --yes",), 2),
    (("rebalance", "--dry-run", "--yes"), ("contradict",), 2),
    (("rebalance", "--objective", "beauty"), ("--objective beauty", "bytes"), 2),
    (("set", "m-20260101-000000-abcdef"), ("give at least one of",), 2),
    (("set", "m-20260101-000000-abcdef", "--cutover-retry-s", "-1"), ("--cutover-retry-s -1",), 2),
    (("topology", "add-pair", "A=10.0.0.1:99999", "B=10.0.0.2:3306"), ("A=10.0.0.1:99999", "less than or equal"), 2),
    (("topology", "add-pair", "A", "B=10.0.0.2:3306"), ("give NAME=ADDRESS:PORT",), 2),
    (("id", "decode", "7" * 5000), ("too long for an id", "5000 characters"), 2),
    (("id", "decode", "0xZZ"), ("not an integer id",), 2),
    (("id", "encode", "--shard", "-1", "--type", "1", "--local", "1"), ("out of range",), 2),
    (("id", "mod-shard", "k", "--shards", "0"), ("positive",), 2),
    (("queue", "broker", "--listen", "nonsense"), ("--listen nonsense", "HOST:PORT"), 2),
    (("metrics", "--listen", "127.0.0.1:99999"), ("--listen 127.0.0.1:99999",), 2),
    (("console", "--listen", "here"), ("--listen here",), 2),
    (("catchup", "m-20260101-000000-abcdef", "--passes", "0"), ("--passes",), 2),
]


@pytest.mark.parametrize(("args", "needles", "code"), NO_SERVER, ids=lambda v: " ".join(v)[:40] if
                         isinstance(v, tuple) else None)
def test_bad_values_refused_before_anything_is_asked(tmp_path, args, needles, code):
    line = assert_one_line(*run_here("--config", str(tmp_path / "missing.toml"), *args)[::2], *needles,
                           exit_code=code)
    assert len(line) < 400, line  # a 5000-digit argument is not echoed


def test_config_and_state_files_that_are_not_what_they_should_be(tmp_path):
    # --config naming a directory, a binary file, a file that is not TOML
    assert_one_line(*run_here("--config", str(tmp_path), "status")[::2], "is a directory", exit_code=5)
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"\xff\xfe\x00\x01")
    assert_one_line(*run_here("--config", str(binary), "status")[::2], "not valid TOML", exit_code=5)
    notoml = tmp_path / "x.toml"
    notoml.write_text("[zookeeper\nhosts=")
    assert_one_line(*run_here("--config", str(notoml), "status")[::2], "not valid TOML", exit_code=5)
    # the default config is missing and the demo's exists: the hint names the demo's config
    demo = tmp_path / ".sandbox-demo"
    demo.mkdir()
    (demo / "migrator.toml").write_text("")
    import os

    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert_one_line(*run_here("status", env={"MIGRATOR_CONFIG": ""})[::2], "--config .sandbox-demo/migrator.toml",
                        exit_code=5)
    finally:
        os.chdir(cwd)
    # a sandbox state file that is not one
    sb = tmp_path / "sb"
    sb.mkdir()
    (sb / "state.json").write_text("{truncated")
    for args in (("sandbox", "status", "--dir", str(sb)), ("sandbox", "down", "--dir", str(sb)),
                 ("sandbox", "up", "--dir", str(sb))):
        assert_one_line(*run_here(*args)[::2], "not a sandbox state file")
    assert (sb / "state.json").exists()


def test_sandbox_purge_refuses_what_it_did_not_make(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    res = run_cli_here("sandbox", "down", "--dir", str(mine), "--purge")
    assert_one_line_error(res, "not a sandbox this tool made", str(mine))
    assert res.returncode == 3  # a safety check said no (docs/operations.md)
    assert (mine / "notes.txt").read_text() == "keep me"
    res = run_cli_here("sandbox", "up", "--dir", str(mine))
    assert_one_line_error(res, "holds no sandbox")
    assert res.returncode == 3
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    res = run_cli_here("sandbox", "down", "--dir", str(tmp_path / "never"))
    assert res.returncode == 0 and "nothing to stop" in res.stdout


def test_issue_inputs_through_the_real_script(fleet, tmp_path):
    """The inputs that printed a traceback or lost their reason, as an operator typed them."""
    cfg = fleet.config_path
    assert_one_line_error(run_cli("--config", str(tmp_path), "status"), "is a directory")
    bad_state = tmp_path / "sb"
    bad_state.mkdir()
    (bad_state / "state.json").write_text("not json")
    assert_one_line_error(run_cli("sandbox", "status", "--dir", str(bad_state)), "not a sandbox state file")
    assert_one_line_error(run_cli("queue", "serve", "--listen", "nonsense", config=cfg), "--listen nonsense")
    assert_one_line_error(run_cli("queue", "broker", "--listen", "nonsense", config=cfg), "--listen nonsense")
    notdb = tmp_path / "ledger.db"
    notdb.write_text("this is not sqlite " * 100)
    assert_one_line_error(run_cli("queue", "ledger", "check", "--ledger", str(notdb), config=cfg), str(notdb),
                          "not a ledger")
    assert_one_line_error(run_cli("queue", "ledger", "check", "--ledger", str(tmp_path / "none.db"), config=cfg),
                          "no such file")
    refused(fleet, "split", "MySQL001A", "--fence", "bogus", needles=("--fence bogus",), through=run_cli)
    refused(fleet, "split", "MySQL001A", "--freeze-budget-ms", "-5", needles=("--freeze-budget-ms -5",),
            through=run_cli)
    refused(fleet, "topology", "add-pair", "A=10.0.0.1:99999", "B=10.0.0.2:3306", needles=("99999",),
            through=run_cli)
    res = run_cli("id", "decode", "7" * 5000)
    assert_one_line_error(res, "too long for an id")
    assert len(res.stderr) < 400


def test_a_missing_secrets_file_says_what_to_do(fleet, tmp_path):
    text = fleet.config_path.read_text().replace(str(fleet.sandbox.secrets_file), str(tmp_path / "gone.toml"))
    cfg = tmp_path / "c.toml"
    cfg.write_text(text)
    line = assert_one_line(*run_here("--config", str(cfg), "status")[::2], "gone.toml", "does not exist",
                           "create it", exit_code=5)
    assert str(cfg) in line  # which config names it


def test_plain_split_and_move_are_dry_runs(fleet):
    before = fleet_state(fleet)
    for args in (("split", "MySQL001A"), ("move", "--shards", "4-5", "--to", "MySQL003A"),
                 ("split", "MySQL001A", "--dry-run")):
        res = run_cli_here(*args, config=fleet.config_path, env={"COLUMNS": "200"})
        assert res.returncode == 0, res.stderr
        assert "dry run" in res.stdout and "run it with --yes" in res.stdout, res.stdout
        assert fleet_state(fleet) == before  # nothing stored, nothing locked


def test_destroying_commands_ask_and_refuse_without_a_terminal(fleet):
    """cutover, rollback, cleanup --now, abort and restart-copy show what they would do; without a terminal
    and without --yes they refuse (exit 3) and change nothing."""
    res = run_cli_here("split", "MySQL001A", "--yes", "--no-start", config=fleet.config_path)
    assert res.returncode == 0, res.stderr
    [mid] = MigrationStore(fleet.zk).list()
    st_before, _ = MigrationStore(fleet.zk).state(mid)
    before = fleet_state(fleet)
    for args, what in ((("cutover", mid), "switch their traffic to MySQL003A"),
                       (("rollback", mid), "switch their traffic back to MySQL001A"),
                       (("cleanup", mid, "--now"), "can no longer be rolled back"),
                       (("abort", mid), "drop its copies"),
                       (("restart-copy", mid), "restart the copy")):
        res = run_cli_here(*args, config=fleet.config_path)
        assert_one_line_error(res, "not confirmed", what, "give --yes")
        assert res.returncode == 3, res.stderr
        assert fleet_state(fleet) == before
        st, _ = MigrationStore(fleet.zk).state(mid)
        assert st.phase == st_before.phase and st.history == st_before.history


def test_queue_delete_and_purge_ask_first(fleet):
    cfg = fleet.config_path
    assert run_cli_here("queue", "create", "keepme", config=cfg).returncode == 0
    assert run_cli_here("queue", "enqueue", "keepme", "a", "b", config=cfg).returncode == 0
    res = run_cli_here("queue", "purge", "keepme", "--state", "NEW", config=cfg)
    assert_one_line_error(res, "not confirmed", "delete up to 1000 NEW jobs of queue keepme (it holds 2 now)")
    res = run_cli_here("queue", "purge", "keepme", "--state", "BOGUS", "--yes", config=cfg)
    assert_one_line_error(res, "--state BOGUS")
    res = run_cli_here("queue", "delete", "keepme", config=cfg)
    assert_one_line_error(res, "not confirmed", "delete queue keepme", "2 NEW")
    counts = json.loads(run_cli_here("queue", "counts", "keepme", config=cfg).stdout)
    assert counts["NEW"] == 2
    assert run_cli_here("queue", "purge", "keepme", "--state", "NEW", "--yes", config=cfg).returncode == 0
    assert run_cli_here("queue", "delete", "keepme", "-y", config=cfg).returncode == 0


def test_verify_reports_unless_told_to_repair(fleet):
    from migrator.ops import command

    spec = command.plan_split(fleet.config, "MySQL001A").spec
    command.run_copy(fleet.config, spec.id)
    assert command.catchup(fleet.config, spec.id)["converged"]
    db = spec.databases[0]
    with mysql_connect(fleet.hosts["MySQL003A"], fleet.credentials) as c, c.cursor() as cur:
        cur.execute(f"UPDATE {db}.pins SET data = '{{\"tampered\": 1}}' ORDER BY local_id LIMIT 1")
    res = run_cli_here("verify", spec.id, config=fleet.config_path)
    assert res.returncode == 1 and "STILL DIFFERENT" in res.stdout and "--repair" in res.stdout, res.stdout
    again = run_cli_here("verify", spec.id, config=fleet.config_path)
    assert again.returncode == 1, again.stdout  # the report changed nothing
    unasked = run_cli_here("verify", spec.id, "--repair", config=fleet.config_path)  # re-copying asks first
    assert_one_line_error(unasked, "not confirmed", "re-copy onto the target of " + spec.id, "give --yes")
    assert unasked.returncode == 3
    fixed = run_cli_here("verify", spec.id, "--repair", "--yes", config=fleet.config_path)
    assert fixed.returncode == 0 and "1 re-copied" in fixed.stdout, fixed.stdout
