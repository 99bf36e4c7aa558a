"""The fast apply path: from the verified position on, the source's own rows events are applied on the
target by the server (``BINLOG '<base64>'``, migrator.engine.catch_up.fast), strictly and exactly once.

Every test first brings the target level with the source on the row path and records that position as
the one verify proved equal (the ``verify`` node's ``verified_gtid``), then writes on the source and
drains again: the tail must take the fast path and end equal (CHECKSUM TABLE, row counts, partitions).
What must hold: transactions that also write tables that stay, savepoints undone past a
non-transactional write, XA, rows too wide for one statement, sysbench's writes, a kill -9 of the tail
in the middle of a source transaction and after some commits (the resume never replays a committed
event: an insert replayed strictly would be refused); a divergence planted on the target stops the fast
path, which names the table and the GTID, and the row path takes the window over and ends equal; a
migration identity without ``BINLOG REPLAY`` stays on the row path, and preflight says so.
"""

from __future__ import annotations

import time

from bench import sysbench
from migrator.engine import catch_up
from migrator.engine import preflight as pf
from migrator.engine.catch_up.fast import APPLIED_TABLE, PART_PAUSE_ENV
from migrator.engine.catch_up.lanes import EPOCH_SCHEMA
from migrator.engine.migration import MigrationStore, Node
from migrator.engine.records import CatchupNode

from . import catchup_helpers as h


def _level(fleet, spec) -> None:
    """Drain on the row path to the source's head, check the target equal, and record the tail's position
    as the verified one (what a full check stores)."""
    with h.conn(fleet, h.SOURCE) as c:
        head = h.binlog_pos(c)
    stats = catch_up.drain_to(fleet.config, spec.id, head, timeout=120)
    assert stats["path"] == "row", stats
    assert h.compare(fleet, spec) == {}
    store = MigrationStore(fleet.zk)
    node = CatchupNode.parse(store.get_progress(spec.id, Node.CATCHUP)[0])
    store.put_progress(spec.id, Node.VERIFY, {"verified_gtid": node.state or node.gtid})


def _migration(fleet, rows: int = 10, ddl: tuple[str, ...] = ()):
    h.create_extra_tables(fleet, rows=rows)
    if ddl:  # tables made before the copy (a CREATE TABLE in a moving shard stops catch-up)
        with h.conn(fleet, h.SOURCE) as c, c.cursor() as cur:
            for statement in ddl:
                cur.execute(statement)
    spec = h.create_migration(fleet, converge_events=50)
    h.copy_tables(fleet, spec)
    _level(fleet, spec)
    return spec


def _drain(fleet, spec, timeout: float = 180) -> dict:
    h.wait_source_has_partner_writes(fleet)
    with h.conn(fleet, h.SOURCE) as c:
        head = h.binlog_pos(c)
    return catch_up.drain_to(fleet.config, spec.id, head, timeout=timeout)


def test_the_fast_path_ends_equal_under_random_writes_on_both_members(fleet):
    spec = _migration(fleet)
    writer = h.Writer(fleet, seed=11).start()
    try:
        time.sleep(3)
        mid = _drain(fleet, spec)  # the fast path while the writers go on
        time.sleep(2)
    finally:
        writer.stop()
    stats = _drain(fleet, spec)
    assert mid["path"] == "fast" and stats["path"] == "fast", (mid, stats)
    assert mid["events"] > 0 and writer.ops > 50 and writer.partner_ops > 10
    assert h.compare(fleet, spec) == {}


def test_transactions_mixing_staying_tables_savepoints_xa_and_wide_rows(fleet):
    spec = _migration(fleet, ddl=("CREATE TABLE db00000.notes (id INT PRIMARY KEY, v INT) ENGINE=Aria",
                                  "CREATE TABLE db00002.wide (id INT PRIMARY KEY, b LONGBLOB) ENGINE=InnoDB",
                                  "CREATE TABLE db00003.wide (id INT PRIMARY KEY, b LONGBLOB) ENGINE=InnoDB"))
    with h.conn(fleet, h.SOURCE) as c, c.cursor() as cur:
        # one transaction over moving and staying shards, and one statement over both
        cur.execute("BEGIN")
        cur.execute("UPDATE db00002.pins SET data = JSON_SET(data, '$.m', 1) LIMIT 3")
        cur.execute("UPDATE db00000.pins SET data = JSON_SET(data, '$.m', 1) LIMIT 3")
        cur.execute("INSERT INTO db00003.board_has_pins VALUES (77, 77, 77)")
        cur.execute("DELETE FROM db00000.board_has_pins LIMIT 1")
        cur.execute("COMMIT")
        cur.execute("UPDATE db00000.pins s JOIN db00002.pins m ON m.local_id = s.local_id "
                    "SET s.data = JSON_SET(s.data, '$.j', 2), m.data = JSON_SET(m.data, '$.j', 2)")
        cur.execute("UPDATE db00002.pins m JOIN db00000.pins s ON m.local_id = s.local_id "
                    "SET m.data = JSON_SET(m.data, '$.k', 3), s.data = JSON_SET(s.data, '$.k', 3)")
        # a savepoint undone past a non-transactional write: the undone rows are logged and must not land
        cur.execute("BEGIN")
        cur.execute("UPDATE db00002.pins SET data = JSON_SET(data, '$.kept', 1) LIMIT 2")
        cur.execute("SAVEPOINT s1")
        cur.execute("UPDATE db00002.pins SET data = JSON_SET(data, '$.undone', 1)")
        cur.execute("INSERT INTO db00000.notes VALUES (1, 1)")
        cur.execute("ROLLBACK TO SAVEPOINT s1")
        cur.execute("INSERT INTO db00003.board_has_pins VALUES (78, 78, 78)")
        cur.execute("COMMIT")
        # XA, committed and rolled back
        for xid, verb in (("fa1", "COMMIT"), ("fa2", "ROLLBACK")):
            cur.execute(f"XA START '{xid}'")
            cur.execute(f"UPDATE db00003.pins SET data = JSON_SET(data, '$.xa', '{xid}')")
            cur.execute(f"XA END '{xid}'")
            cur.execute(f"XA PREPARE '{xid}'")
            cur.execute(f"XA {verb} '{xid}'")
        # wide rows: 3 MiB (one statement of its own) and 7 MiB (an update event over the target's packet:
        # written as SQL in the same target transaction)
        for mib in (3, 7):
            cur.execute("BEGIN")
            cur.execute(f"INSERT INTO db00002.wide VALUES ({mib}, REPEAT('a', {mib} << 20))")
            cur.execute(f"UPDATE db00002.wide SET b = REPEAT('b', {mib} << 20) WHERE id = {mib}")
            cur.execute("INSERT INTO db00003.wide VALUES (1, 'small')")
            cur.execute("DELETE FROM db00003.wide")
            cur.execute("COMMIT")
    stats = _drain(fleet, spec)
    assert stats["path"] == "fast", stats
    assert h.compare(fleet, spec) == {}
    with h.conn(fleet, h.TARGET) as t, t.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM db00002.pins WHERE JSON_EXISTS(data, '$.undone')")
        assert cur.fetchone()[0] == 0
        cur.execute("SELECT COUNT(*) FROM db00003.pins WHERE JSON_VALUE(data, '$.xa') = 'fa1'")
        assert cur.fetchone()[0] > 0
        cur.execute("SELECT id, LENGTH(b), LEFT(b, 1) FROM db00002.wide ORDER BY id")
        assert cur.fetchall() == ((3, 3 << 20, b"b"), (7, 7 << 20, b"b"))


def _binlog_bytes(fleet, host: str) -> int:
    with h.conn(fleet, host) as c, c.cursor() as cur:
        cur.execute("SHOW BINARY LOGS")
        return sum(int(r[1]) for r in cur.fetchall())


def test_the_fast_path_ends_equal_under_sysbench(fleet):
    """sysbench's binary-protocol prepared statements on the source; the target's own binlog grows about as
    much as the source's (each BINLOG statement annotated in it grew it to gigabytes once)."""
    source = fleet.hosts[h.SOURCE]
    sysbench.prepare(source, fleet.credentials, "db00002", tables=2, table_size=2000)
    spec = _migration(fleet, rows=5)
    before = {host: _binlog_bytes(fleet, host) for host in (h.SOURCE, h.TARGET)}
    load = sysbench.Background(source, fleet.credentials, "db00002", threads=2, rate=150, tables=2,
                               table_size=2000)
    try:
        time.sleep(3)
        mid = _drain(fleet, spec)
        time.sleep(2)
    finally:
        result = load.stop()
    stats = _drain(fleet, spec)
    assert result.tps > 10, result
    assert mid["path"] == "fast" and stats["path"] == "fast", (mid, stats)
    assert h.compare(fleet, spec) == {}
    grew = {host: _binlog_bytes(fleet, host) - before[host] for host in before}
    assert grew[h.TARGET] < 3 * grew[h.SOURCE] + (1 << 20), grew


def _target_count(fleet, sql: str) -> int:
    with h.conn(fleet, h.TARGET) as t, t.cursor() as cur:
        cur.execute(sql)
        return int(cur.fetchone()[0])


def test_kill_9_mid_transaction_and_after_commits_then_resume_applies_each_event_once(fleet):
    """Inserts and deletes only: an event replayed on the strict path would be refused (1062/1032) and show
    as a fall back to the row path; the resumed tail must stay on the fast path and end equal."""
    spec = _migration(fleet, rows=5, ddl=("CREATE TABLE db00002.ev (id INT PRIMARY KEY, pad VARCHAR(40)) "
                                          "ENGINE=InnoDB",))
    with h.conn(fleet, h.SOURCE) as c, c.cursor() as cur:
        for k in range(40):  # 40 transactions of 2,000 inserts (and the deletes of half the previous)
            lo, hi = k * 2000 + 1, k * 2000 + 2000
            cur.execute(f"INSERT INTO db00002.ev SELECT seq, 'row' FROM db00002.seq_{lo}_to_{hi}")
            if k:
                cur.execute(f"DELETE FROM db00002.ev WHERE id > {(k - 1) * 2000} AND id <= {(k - 1) * 2000 + 1000}")
        cur.execute("BEGIN")  # one transaction of 60,000 inserts: many parts of one target transaction
        cur.execute("INSERT INTO db00002.ev SELECT seq, 'one big transaction' FROM db00002.seq_100001_to_160000")
        cur.execute("COMMIT")
        head = h.binlog_pos(c)
    env = {"MIGRATOR_CATCHUP_PART_BYTES": str(256 << 10), PART_PAUSE_ENV: "300"}
    with h.catchup_process(fleet, spec.id, env) as proc:
        deadline = time.monotonic() + 120
        seen = 0
        while time.monotonic() < deadline and proc.poll() is None:
            # the small transactions commit before the big one's first part goes out: from then on an open
            # transaction on the target is the big one
            seen = _target_count(fleet, "SELECT COUNT(*) FROM db00002.ev") == 41000 and _target_count(
                fleet, "SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_rows_modified > 0")
            if seen:
                break  # the big transaction is open on the target, some of it sent
            # INNODB_TRX is a cache refreshed only when nobody read it for 0.1 s: polled faster, it never changes
            time.sleep(0.15)
        node = MigrationStore(fleet.zk).get_progress(spec.id, Node.CATCHUP)[0]
        assert seen, f"never caught the big transaction open on the target (exit {proc.poll()}): {node}"
        h.kill_9(proc)
    committed = _target_count(fleet, "SELECT COUNT(*) FROM db00002.ev")
    assert 0 < committed, "no transaction committed before the kill"
    recorded = _target_count(fleet, f"SELECT COUNT(*) FROM `{EPOCH_SCHEMA}`.`{APPLIED_TABLE}` WHERE applier = "
                                    f"'{spec.id}'")
    assert recorded == 1
    stats = catch_up.drain_to(fleet.config, spec.id, head, timeout=300)
    assert stats["path"] == "fast" and stats["fast_failure"] is None, stats
    assert h.compare(fleet, spec) == {}
    assert _target_count(fleet, "SELECT COUNT(*) FROM db00002.ev WHERE pad = 'one big transaction'") == 60000


def _plant_divergence(fleet) -> None:
    with h.conn(fleet, h.TARGET) as t, t.cursor() as cur:  # planted: a row gone, a row too many
        cur.execute("DELETE FROM db00002.pins ORDER BY local_id LIMIT 1")
        cur.execute("INSERT INTO db00003.board_has_pins VALUES (4242, 4242, 1)")


def test_a_window_the_target_refuses_is_written_again_by_key_and_the_fast_path_goes_on(fleet):
    """What a re-check re-copies ahead of the tail looks like this to a strict apply: the window is replayed
    as SQL by key (named in the record), and the transactions after it are applied fast again."""
    spec = _migration(fleet)
    _plant_divergence(fleet)
    with h.conn(fleet, h.SOURCE) as c, c.cursor() as cur:
        cur.execute("UPDATE db00002.pins SET data = JSON_SET(data, '$.d', 1)")  # meets the missing row
        cur.execute("INSERT INTO db00003.board_has_pins VALUES (4242, 4242, 2)")  # meets the extra one
        cur.execute("UPDATE db00003.pins SET data = JSON_SET(data, '$.after', 1)")
    stats = _drain(fleet, spec)
    assert stats["path"] == "fast" and stats["fast_failure"] is None, stats
    replays = stats["fast_replays"]
    assert replays and replays[0]["code"] == 1032 and "db00002.pins" in replays[0]["table"] and replays[0]["gtid"]
    assert h.compare(fleet, spec) == {}


def test_a_refusal_inside_a_transaction_larger_than_a_part_hands_the_tail_to_the_row_path(fleet, monkeypatch):
    monkeypatch.setenv("MIGRATOR_CATCHUP_PART_BYTES", str(4 << 10))  # the reader process takes it
    spec = _migration(fleet)
    with h.conn(fleet, h.TARGET) as t, t.cursor() as cur:  # planted: a row gone
        cur.execute("DELETE FROM db00002.pins ORDER BY local_id LIMIT 1")
    with h.conn(fleet, h.SOURCE) as c, c.cursor() as cur:
        cur.execute("BEGIN")  # one transaction of many parts: its first parts are gone when the refusal comes
        cur.execute("UPDATE db00003.pins SET data = JSON_SET(data, '$.first', REPEAT('x', 200))")
        cur.execute("UPDATE db00002.pins SET data = JSON_SET(data, '$.d', 1)")
        cur.execute("COMMIT")
    stats = _drain(fleet, spec)
    assert stats["path"] == "fast+row", stats
    failure = stats["fast_failure"]
    assert failure["code"] == 1032 and "db00002.pins" in failure["table"] and failure["gtid"], failure
    assert h.compare(fleet, spec) == {}


def test_without_binlog_replay_the_row_path_applies_and_preflight_says_so(fleet):
    with fleet.sandbox.root_conn(h.TARGET) as c, c.cursor() as cur:
        cur.execute("SET sql_log_bin = 0")
        cur.execute(f"REVOKE BINLOG REPLAY ON *.* FROM '{fleet.credentials.mysql_user}'@'%'")
    try:
        spec = _migration(fleet)
        with h.conn(fleet, h.SOURCE) as c, c.cursor() as cur:
            cur.execute("UPDATE db00002.pins SET data = JSON_SET(data, '$.r', 1)")
        stats = _drain(fleet, spec)
        assert stats["path"] == "row" and stats["fast_failure"]["code"] == 1227, stats
        assert "BINLOG REPLAY" in stats["fast_failure"]["error"]
        assert h.compare(fleet, spec) == {}
        res = pf.run(fleet.zk, spec, fleet.credentials)
        line = next(ch for ch in res.checks if ch.name == "apply_path")
        assert not line.ok and line.severity == "warning" and "row path" in line.message \
            and "BINLOG REPLAY" in line.message, line
    finally:
        with fleet.sandbox.root_conn(h.TARGET) as c, c.cursor() as cur:
            cur.execute("SET sql_log_bin = 0")
            cur.execute(f"GRANT BINLOG REPLAY ON *.* TO '{fleet.credentials.mysql_user}'@'%'")
