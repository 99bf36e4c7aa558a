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
from migrator.fleet.mysql import connect as mysql_connect
from migrator.fleet.shard_map import ShardMapStore
from tests.integration.cli_helpers import assert_one_line_error, run_cli


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


def refused(fleet, *args: str, needles: tuple[str, ...], config: Path | None = None, env=None) -> None:
    before = fleet_state(fleet)
    res = run_cli(*args, config=config or fleet.config_path, env=env)
    assert_one_line_error(res, *needles)
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
    res = run_cli("topology", "init", "--from", str(gap), config=cfg_path)
    assert_one_line_error(res, "shards 4..4 are not covered")
    overlap = tmp_path / "overlap.json"
    overlap.write_text(json.dumps([{"range": [0, 4], "master": "MySQL001A", "slave": "MySQL001B"},
                                   {"range": [4, 7], "master": "MySQL002A", "slave": "MySQL002B"}]))
    assert_one_line_error(run_cli("topology", "init", "--from", str(overlap), config=cfg_path), "overlap")
    assert not ShardMapStore(zk).exists()  # nothing was written


def test_shards_already_moving(fleet):
    first = run_cli("split", "MySQL001A", config=fleet.config_path)
    assert first.returncode == 0, first.stderr
    [mid] = MigrationStore(fleet.zk).list()
    refused(fleet, "split", "MySQL001A", needles=("already moving", mid))
    refused(fleet, "move", "--shards", "3", "--to", "MySQL003A", needles=("already moving", "shard 3"))


def test_source_that_is_the_passive_side(fleet):
    ShardMapStore(fleet.zk).update(lambda m: m.reassign(0, 3, "MySQL001B", "MySQL001A"), reason="test: failover")
    refused(fleet, "split", "MySQL001A", needles=("MySQL001A",))


def test_missing_credentials(fleet, tmp_path):
    text = fleet.config_path.read_text().replace(str(fleet.sandbox.secrets_file), str(tmp_path / "nope.toml"))
    cfg = tmp_path / "nocreds.toml"
    cfg.write_text(text)
    refused(fleet, "split", "MySQL001A", needles=("nope.toml",), config=cfg)
    empty = tmp_path / "empty-secrets.toml"
    empty.write_text("[mysql]\nuser = \"migrator\"\n")
    cfg.write_text(fleet.config_path.read_text().replace(str(fleet.sandbox.secrets_file), str(empty)))
    refused(fleet, "split", "MySQL001A", needles=("no MySQL credentials",), config=cfg)


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
    res = run_cli("split", "MySQL001A", config=fleet.config_path)
    assert res.returncode == 0, res.stderr
    return MigrationStore(fleet.zk).list()[0]


def _copy_refused(fleet, mid: str, *needles: str) -> None:
    before = fleet_state(fleet)
    res = run_cli("copy", mid, "--sync", config=fleet.config_path)
    assert_one_line_error(res, "preflight", *needles)
    assert fleet_state(fleet) == before
    st, _ = MigrationStore(fleet.zk).state(mid)
    assert st.phase == Phase.PREFLIGHT and all(n in (st.error or "") for n in needles), st
    abort = run_cli("abort", mid, "--yes", config=fleet.config_path)
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
    for args in (("resume", "m-nope"), ("abort", "m-nope", "--yes"), ("restart-copy", "m-nope", "--yes"),
                 ("cutover", "m-nope"), ("preflight", "m-nope")):
        refused(fleet, *args, needles=("no migration 'm-nope'",))


def test_restart_copy_refused_after_the_cutover_started(fleet):
    res = run_cli("split", "MySQL001A", config=fleet.config_path)
    assert res.returncode == 0, res.stderr
    [mid] = MigrationStore(fleet.zk).list()
    MigrationStore(fleet.zk).set_phase(mid, Phase.CUTOVER)
    refused(fleet, "restart-copy", mid, "--yes", needles=("only be restarted before the cutover",))
    refused(fleet, "resume", mid, needles=(f"migrator cutover {mid}",))
