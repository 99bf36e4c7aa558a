"""Preflight on the sandbox: a clean plan passes, each broken precondition gives
its own clear failure line, and plans that must not exist are refused."""

from __future__ import annotations

import pytest

from migrator.engine.migration import MigrationStore, Phase, ShardsBusy
from migrator.engine.plan import PlanError
from migrator.engine.preflight import PreflightFailed
from migrator.errors import UnknownHost
from migrator.fleet.shard_map import ShardMapStore
from migrator.ops import command


def _fails(result, name: str, *words: str) -> list[str]:
    lines = [c.line() for c in result.failures if c.name == name]
    assert any(all(w in line for w in words) for line in lines), (name, words, result.lines())
    return lines


def test_clean_split_passes_every_check(fleet):
    spec = command.plan_split(fleet.config, "MySQL001A").spec
    res = command.preflight(fleet.config, spec.id)
    assert res.ok, res.lines()
    names = {c.name for c in res.checks if c.ok}
    assert {"hosts", "binlog", "gtid", "primary keys", "server ids", "target replication", "target empty",
            "source is master", "grants", "binlog retention", "local_infile", "transactional tables",
            "foreign keys", "writable"} <= names
    writable = {c.message.split(" takes")[0] for c in res.checks if c.name == "writable" and c.ok}
    assert writable == {"source master MySQL001A", "source slave MySQL001B", "target master MySQL003A",
                        "target slave MySQL003B"}, res.lines()
    assert not res.warnings, res.lines()


def test_table_without_primary_key_fails_and_copy_refuses(fleet, conns):
    with conns("MySQL001A").cursor() as cur:
        cur.execute("CREATE TABLE db00003.nokey (a INT, b TEXT)")
        cur.execute("CREATE TABLE db00003.nullable_unique (a INT NULL, UNIQUE KEY (a))")
    spec = command.plan_split(fleet.config, "MySQL001A").spec
    res = command.preflight(fleet.config, spec.id)
    _fails(res, "primary keys", "db00003.nokey", "no primary key")
    _fails(res, "primary keys", "db00003.nullable_unique")
    with pytest.raises(PreflightFailed, match="preflight check"):
        command.run_copy(fleet.config, spec.id)
    st, _ = MigrationStore(fleet.zk).state(spec.id)
    assert st.phase == Phase.PREFLIGHT and "nokey" in (st.error or "")
    with conns("MySQL003A").cursor() as cur:  # nothing was created on the target
        cur.execute("SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name LIKE 'db0000%'")
        assert cur.fetchone()[0] == 0


def test_statement_binlog_on_the_source_fails(fleet):
    spec = command.plan_split(fleet.config, "MySQL001A").spec
    with fleet.sandbox.root_conn("MySQL001A") as root, root.cursor() as cur:
        cur.execute("SET GLOBAL binlog_format = 'STATEMENT'")
        try:
            res = command.preflight(fleet.config, spec.id)
        finally:
            cur.execute("SET GLOBAL binlog_format = 'ROW'")
    _fails(res, "binlog", "binlog_format is STATEMENT", "MySQL001A")


@pytest.mark.parametrize("host,role", [("MySQL001B", "source slave"), ("MySQL003B", "target slave"),
                                       ("MySQL003A", "target master")])
def test_statement_binlog_on_any_member_of_either_pair_fails(fleet, host, role):
    """The passive member's writes reach the master's binlog through replication: its format counts too."""
    spec = command.plan_split(fleet.config, "MySQL001A").spec
    with fleet.sandbox.root_conn(host) as root, root.cursor() as cur:
        cur.execute("SET GLOBAL binlog_format = 'STATEMENT'")
        try:
            res = command.preflight(fleet.config, spec.id)
            with pytest.raises(PreflightFailed, match=f"binlog_format is STATEMENT on {role} {host}"):
                command.run_copy(fleet.config, spec.id)
        finally:
            cur.execute("SET GLOBAL binlog_format = 'ROW'")
    line = _fails(res, "binlog", "binlog_format is STATEMENT", f"{role} {host}", "binlog_format=ROW")[0]
    assert len([c for c in res.failures if c.name == "binlog"]) == 1, line


def test_non_transactional_moving_tables_are_refused_before_any_copy(fleet, conns):
    with conns("MySQL001A").cursor() as cur:
        cur.execute("CREATE TABLE db00003.log_aria (id INT PRIMARY KEY, v INT) ENGINE=Aria")
        cur.execute("CREATE TABLE db00002.log_aria (id INT PRIMARY KEY, v INT) ENGINE=Aria TRANSACTIONAL=1")
        cur.execute("CREATE TABLE db00002.log_myisam (id INT PRIMARY KEY, v INT) ENGINE=MyISAM")
        cur.execute("CREATE TABLE db00003.hot (id INT PRIMARY KEY, v INT) ENGINE=MEMORY")
        cur.execute("CREATE TABLE db00001.log_aria (id INT PRIMARY KEY) ENGINE=Aria")  # shard 1 does not move
    spec = command.plan_split(fleet.config, "MySQL001A").spec
    res = command.preflight(fleet.config, spec.id)
    aria = [c.line() for c in res.failures if c.name == "transactional tables" and "Aria" in c.line()][0]
    assert "2 moving table(s) use Aria" in aria and "db00002.log_aria, db00003.log_aria" in aria, aria
    assert "ALTER TABLE `db00002`.`log_aria` ENGINE=InnoDB" in aria and "keep them out of the shards" in aria
    assert "db00001" not in aria
    _fails(res, "transactional tables", "MyISAM", "db00002.log_myisam")
    _fails(res, "transactional tables", "MEMORY", "db00003.hot")
    with pytest.raises(PreflightFailed, match="preflight check"):
        command.run_copy(fleet.config, spec.id)
    with conns("MySQL003A").cursor() as cur:  # nothing was created on the target
        cur.execute("SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name LIKE 'db0000%'")
        assert cur.fetchone()[0] == 0


def test_target_refusing_load_data_local_fails(fleet):
    spec = command.plan_split(fleet.config, "MySQL001A").spec
    with fleet.sandbox.root_conn("MySQL003A") as root, root.cursor() as cur:
        cur.execute("SET GLOBAL local_infile = OFF")
        try:
            res = command.preflight(fleet.config, spec.id)
        finally:
            cur.execute("SET GLOBAL local_infile = ON")
    _fails(res, "local_infile", "MySQL003A", "LOAD DATA LOCAL", "SET GLOBAL local_infile = ON")


def test_source_that_became_the_passive_side_fails(fleet):
    spec = command.plan_split(fleet.config, "MySQL001A").spec
    store = ShardMapStore(fleet.zk)
    store.update(lambda m: m.reassign(0, 3, "MySQL001B", "MySQL001A"), reason="test: failover")
    res = command.preflight(fleet.config, spec.id)
    _fails(res, "source is master", "MySQL001A is not the active master of shards 2,3", "MySQL001B")
    with pytest.raises(PlanError, match="standby"):
        command.plan_split(fleet.config, "MySQL001A")


def test_target_holding_a_moving_database_fails(fleet, conns):
    with conns("MySQL003A").cursor() as cur:
        cur.execute("CREATE DATABASE db00003")
    fleet.sandbox.wait_pairs_converged()
    spec = command.plan_split(fleet.config, "MySQL001A").spec
    res = command.preflight(fleet.config, spec.id)
    _fails(res, "target empty", "db00003 on MySQL003A")
    _fails(res, "target empty", "db00003 on MySQL003B")


def test_target_pair_not_replicating_fails(fleet):
    spec = command.plan_split(fleet.config, "MySQL001A").spec
    with fleet.sandbox.root_conn("MySQL003B") as root, root.cursor() as cur:
        cur.execute("STOP SLAVE")
        try:
            res = command.preflight(fleet.config, spec.id)
        finally:
            cur.execute("START SLAVE")
    _fails(res, "target replication", "MySQL003B", "not running")


def test_shards_already_moving_refuse_a_second_plan(fleet):
    first = command.plan_move(fleet.config, "2-3", "MySQL003A").spec
    # the same move planned again (the split of MySQL001A moves shards 2-3 to the spare pair too) takes up the
    # planned one instead of storing a second (as a launch run again after ZooKeeper went away does) ...
    again = command.plan_split(fleet.config, "MySQL001A")
    assert again.adopted == "planned" and again.spec.id == first.id
    # ... and any other move of those shards is refused, naming the holder
    with pytest.raises(ShardsBusy, match=f"shard 3 by {first.id}"):
        command.plan_move(fleet.config, [3], "MySQL003A")
    with pytest.raises(ShardsBusy, match=f"shard 2 by {first.id}"):
        command.plan_move(fleet.config, [1, 2], "MySQL003A")
    # a dry run touches nothing, so it is allowed and leaves no record
    dry = command.plan_move(fleet.config, [0], "MySQL003A", dry_run=True)
    assert not dry.stored and MigrationStore(fleet.zk).list() == [first.id]
    # after an abort the shards are free again
    command.abort(fleet.config, first.id)
    assert command.plan_split(fleet.config, "MySQL001A").stored


def test_unknown_target_host_is_refused(fleet):
    with pytest.raises(UnknownHost, match="MySQL009A"):
        command.plan_move(fleet.config, "4-7", "MySQL009A")
    with pytest.raises(UnknownHost, match="Nope"):
        command.plan_split(fleet.config, "Nope")
    assert MigrationStore(fleet.zk).list() == []


def test_more_tables_than_the_rename_fence_takes(fleet, conns, monkeypatch):
    from migrator.engine import fencing
    from migrator.engine.migration import Options

    # the split moves 2 shards x 5 seed tables; a rename-fence limit below that:
    monkeypatch.setattr(fencing, "MAX_TABLES", 8)
    # fence=rename cannot take them: refused up front, before any copy
    spec = command.plan_split(fleet.config, "MySQL001A", options=Options(fence="rename")).spec
    res = command.preflight(fleet.config, spec.id)
    _fails(res, "fence", "10 tables", "at most 8", "fence=auto")
    command.abort(fleet.config, spec.id)
    # fence=auto fences them with the write gate, whose prerequisites on the master are checked
    spec = command.plan_split(fleet.config, "MySQL001A").spec
    res = command.preflight(fleet.config, spec.id)
    lines = [c.line() for c in res.checks if c.name in ("fence", "master gate") and c.ok]
    assert any("write gate" in line for line in lines) and any("MySQL001A" in line for line in lines), res.lines()
    assert not res.failures and any("MDEV-26048" in w.line() for w in res.warnings), res.lines()


# the sandbox's migration identity ("migrator", MIGRATOR_GRANTS) holds neither SUPER nor READ_ONLY ADMIN: under
# read_only its writes get 1290, as a production identity's would. Grants are changed on the one host, unlogged
# (each host has its own user), and put back in a finally.

@pytest.mark.parametrize("host,role", [("MySQL001B", "source slave"), ("MySQL003A", "target master"),
                                       ("MySQL003B", "target slave")])
def test_a_read_only_member_a_later_step_writes_to_is_refused_before_the_copy(fleet, host, role):
    """The cutover's write gate writes to the source pair's passive member, a rollback's to the target's: a
    read_only member there would let the copy, catch-up and verify run, then fail every cutover's prepare."""
    spec = command.plan_split(fleet.config, "MySQL001A").spec
    with fleet.sandbox.root_conn(host) as root, root.cursor() as cur:
        cur.execute("SET GLOBAL read_only = 1")
        try:
            res = command.preflight(fleet.config, spec.id)
            if role == "source slave":  # the copy refuses too, naming it
                with pytest.raises(PreflightFailed, match=f"read_only is ON on {role} {host}"):
                    command.run_copy(fleet.config, spec.id)
        finally:
            cur.execute("SET GLOBAL read_only = 0")
    lines = _fails(res, "writable", f"read_only is ON on {role} {host}", "READ_ONLY ADMIN",
                   f"SET GLOBAL read_only=0 on {host}")
    assert len(lines) == 1 and len(res.failures) == 1, res.lines()
    if role == "source slave":
        assert "write gate" in lines[0], lines
        with fleet.sandbox.root_conn("MySQL003A") as c, c.cursor() as cur:  # nothing was copied
            cur.execute("SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name LIKE 'db0000%'")
            assert cur.fetchone()[0] == 0


def _grant(fleet, host: str, verb: str, priv: str) -> None:
    user = fleet.credentials.mysql_user
    with fleet.sandbox.root_conn(host) as root, root.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute(f"{verb} {priv} ON *.* {'TO' if verb == 'GRANT' else 'FROM'} %s@'%%'", (user,))


def test_a_read_only_passive_member_passes_when_the_user_may_write_there_or_nothing_writes_there(fleet):
    """The refusal reads the identity's grants (READ_ONLY ADMIN lets it write; SUPER does not on 10.11), and a
    member the cutover does not write to (``fence_passive=false``) is not refused."""
    from migrator.engine.migration import Options

    with fleet.sandbox.root_conn("MySQL001B") as root, root.cursor() as cur:
        cur.execute("SET GLOBAL read_only = 1")
        try:
            spec = command.plan_split(fleet.config, "MySQL001A", options=Options(fence_passive=False)).spec
            unfenced = command.preflight(fleet.config, spec.id)
            command.abort(fleet.config, spec.id)
            spec = command.plan_split(fleet.config, "MySQL001A").spec
            _grant(fleet, "MySQL001B", "GRANT", "SUPER")
            try:
                with_super = command.preflight(fleet.config, spec.id)
                _grant(fleet, "MySQL001B", "GRANT", "READ_ONLY ADMIN")
                with_admin = command.preflight(fleet.config, spec.id)
            finally:
                _grant(fleet, "MySQL001B", "REVOKE", "SUPER, READ_ONLY ADMIN")
        finally:
            cur.execute("SET GLOBAL read_only = 0")
    assert unfenced.ok, unfenced.lines()
    assert not any("MySQL001B" in c.message for c in unfenced.checks if c.name == "writable"), unfenced.lines()
    _fails(with_super, "writable", "read_only is ON on source slave MySQL001B")
    assert with_admin.ok, with_admin.lines()
    assert any(c.ok and "MySQL001B is read_only; the migration user writes there with READ_ONLY ADMIN" in c.message
               for c in with_admin.checks), with_admin.lines()


def test_what_the_passive_gate_needs_on_the_passive_member_is_checked_there(fleet):
    """Grants are per server: the gate's are asked of the passive members, and its MEMORY gate table of the
    server's enforce_storage_engine; read-only transactions by default refuse writes whatever the grants."""
    spec = command.plan_split(fleet.config, "MySQL001A").spec
    _grant(fleet, "MySQL003B", "REVOKE", "TRIGGER")
    try:
        with fleet.sandbox.root_conn("MySQL001B") as root, root.cursor() as cur:
            cur.execute("SET GLOBAL enforce_storage_engine = 'InnoDB', tx_read_only = 1")
            try:
                res = command.preflight(fleet.config, spec.id)
            finally:
                cur.execute("SET GLOBAL enforce_storage_engine = NULL, tx_read_only = 0")
    finally:
        _grant(fleet, "MySQL003B", "GRANT", "TRIGGER")
    _fails(res, "grants", "lacks TRIGGER on target slave MySQL003B", "GRANT TRIGGER")
    _fails(res, "passive gate", "enforce_storage_engine is INNODB on MySQL001B", "enforce_storage_engine=NULL")
    _fails(res, "writable", "tx_read_only is ON on source slave MySQL001B", "SET GLOBAL tx_read_only=0")
    assert len(res.failures) == 3, res.lines()
