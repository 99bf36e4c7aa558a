"""Schema objects and statements on real servers: what preflight refuses (triggers,
events, views it could not create), a replayed DDL counted as applied only when
the target's definition matches, and rows removed by a partition statement seen
by the changed-key check."""

from __future__ import annotations

import pytest

from migrator.engine.binlog.reader import Statement
from migrator.engine.catch_up.statements import WHOLE_TABLE, ApplierError, apply_statement, source_definitions
from migrator.engine.verify.changes import changed_keys
from migrator.engine.verify.checksums import Side, table_info
from migrator.engine.verify.repair import check_rows
from migrator.fleet.ids import shard_db
from migrator.fleet.mysql import binlog_pos
from migrator.ops import command

PART_TABLE = """CREATE TABLE {name} (
  id INT NOT NULL, state TINYINT NOT NULL, body VARCHAR(20) NOT NULL, PRIMARY KEY (id, state)
) ENGINE=InnoDB PARTITION BY LIST (state) (PARTITION p0 VALUES IN (0), PARTITION p1 VALUES IN (1),
  PARTITION p2 VALUES IN (2))"""


def _lines(res, name):
    return [c.line() for c in res.failures if c.name == name]


def test_preflight_refuses_triggers_and_events_and_views_it_cannot_create(fleet, conns):
    spec = command.plan_split(fleet.config, "MySQL001A").spec
    db = shard_db(spec.shards[0])
    with fleet.sandbox.root_conn("MySQL001A") as root, root.cursor() as cur:
        cur.execute(f"CREATE TRIGGER {db}.pins_audit BEFORE UPDATE ON {db}.pins FOR EACH ROW SET NEW.data = NEW.data")
        cur.execute(f"CREATE EVENT {db}.nightly ON SCHEDULE EVERY 1 DAY DISABLE DO DELETE FROM {db}.pins "
                    "WHERE local_id < 0")
    with conns("MySQL001A").cursor() as cur:
        cur.execute(f"CREATE VIEW {db}.mine AS SELECT local_id FROM {db}.pins")  # DEFINER: the migration user
    res = command.preflight(fleet.config, spec.id)
    lines = _lines(res, "schema objects")
    assert any(f"trigger {db}.pins_audit on {db}.pins" in ln and "after the cutover" in ln for ln in lines), lines
    assert any(f"event {db}.nightly" in ln and "drop it for the move" in ln for ln in lines), lines
    assert not any("mine" in ln for ln in lines), lines
    with fleet.sandbox.root_conn("MySQL001A") as root, root.cursor() as cur:
        cur.execute(f"DROP TRIGGER {db}.pins_audit")
        cur.execute(f"DROP EVENT {db}.nightly")
    res = command.preflight(fleet.config, spec.id)
    assert res.ok, res.lines()


def test_preflight_refuses_a_view_whose_definer_the_target_lacks(fleet, conns):
    spec = command.plan_split(fleet.config, "MySQL001A").spec
    db = shard_db(spec.shards[0])
    with fleet.sandbox.root_conn("MySQL001A") as root, root.cursor() as cur:
        # an account only the source pair has; creating under it needs SET USER too
        cur.execute(f"CREATE DEFINER=`reporting`@`10.%` SQL SECURITY INVOKER VIEW {db}.report AS "
                    f"SELECT COUNT(*) AS n FROM {db}.pins")
    res = command.preflight(fleet.config, spec.id)
    lines = _lines(res, "schema objects")
    assert any("lacks SET USER" in ln for ln in lines), lines
    assert any(f"view {db}.report run as DEFINER reporting@10.%" in ln and "create it on the target" in ln
               for ln in lines), lines


def test_a_replayed_ddl_counts_as_applied_only_when_the_definitions_match(fleet, conns):
    src, tgt = conns("MySQL001A"), conns("MySQL003A")
    for c in (src, tgt):  # binlogged: each pair's other member has the table too
        with c.cursor() as cur:
            cur.execute("CREATE DATABASE IF NOT EXISTS ddl_replay")
            cur.execute("DROP TABLE IF EXISTS ddl_replay.parts")
            cur.execute(PART_TABLE.format(name="ddl_replay.parts"))
    target = fleet.hosts["MySQL003A"]
    from migrator.fleet.mysql import connect

    applier = connect(target, fleet.credentials, autocommit=False)
    try:
        st = Statement("ddl_replay", "ALTER TABLE parts DROP PARTITION p2")
        defs = source_definitions(lambda: src)
        with src.cursor() as cur:
            cur.execute("ALTER TABLE ddl_replay.parts DROP PARTITION p2")
        assert apply_statement(applier, st, {"ddl_replay"}, None, lambda s: s, defs) == "applied"
        # replayed after a crash: the target refuses (1507) and now equals the source: skipped
        assert apply_statement(applier, st, {"ddl_replay"}, None, lambda s: s, defs) == "skipped"
        # the target differs from the source (an index only it has): the same error is not "applied"
        with tgt.cursor() as cur:
            cur.execute("ALTER TABLE ddl_replay.parts ADD INDEX body (body)")
        with pytest.raises(ApplierError, match="differs from the source"):
            apply_statement(applier, st, {"ddl_replay"}, None, lambda s: s, defs)
        with pytest.raises(ApplierError, match="differs from the source"):
            apply_statement(applier, st, {"ddl_replay"}, None, lambda s: s, None)
    finally:
        applier.close()
        for c in (src, tgt):
            with c.cursor() as cur:
                cur.execute("DROP DATABASE IF EXISTS ddl_replay")


@pytest.mark.parametrize("ddl", ["ALTER TABLE db00002.parts TRUNCATE PARTITION p1",
                                 "ALTER TABLE db00002.parts DROP PARTITION p1",
                                 "TRUNCATE TABLE db00002.parts"])
def test_rows_removed_by_a_partition_statement_are_seen_by_the_changed_key_check(fleet, conns, ddl):
    src, tgt = conns("MySQL001A"), conns("MySQL003A")
    with src.cursor() as cur:
        cur.execute(PART_TABLE.format(name="db00002.parts"))
        cur.execute("INSERT INTO db00002.parts SELECT seq, seq % 3, CONCAT('r', seq) FROM db00002.seq_1_to_30")
    with tgt.cursor() as cur:  # the target's copy, as the copy leaves it
        cur.execute("CREATE DATABASE IF NOT EXISTS db00002")
        cur.execute(PART_TABLE.format(name="db00002.parts"))
        cur.execute("INSERT INTO db00002.parts SELECT seq, seq % 3, CONCAT('r', seq) FROM db00002.seq_1_to_30")
    try:
        since = binlog_pos(src)
        with src.cursor() as cur:
            cur.execute(ddl)  # no row events: the rows vanish from the binlog's view
        until = binlog_pos(src)
        t = table_info(src, "db00002", "parts")
        keys = changed_keys(fleet.hosts["MySQL001A"], fleet.credentials, [t], since, until)
        assert WHOLE_TABLE in keys[t.name], keys
        diffs, fixed = check_rows(Side(src), Side(tgt), t, keys[t.name], repair=True)
        assert {d.kind for d in diffs} == {"extra_on_target"} and fixed == len(diffs) >= 10
        assert check_rows(Side(src), Side(tgt), t, keys[t.name], repair=False)[0] == []
    finally:
        with tgt.cursor() as cur:
            cur.execute("DROP DATABASE IF EXISTS db00002")
