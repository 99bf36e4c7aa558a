"""Catch-up through the binlog reader process and the applier lanes, on real servers.

- every column type the fleet can hold arrives exact (CHECKSUM TABLE and row by
  row), through inserts, updates, key changes and deletes, on several lanes;
- XA: a prepared-then-rolled-back transaction is not applied; committed ones are;
- generated columns take no value, an explicit AUTO_INCREMENT id 0 stays 0;
- kill -9 of the catch-up process while its lanes stand at different points of
  a round, then resume: the target ends identical to the source.
"""

from __future__ import annotations

import json
import os
import random
import time

from migrator.engine import catch_up
from migrator.engine.catch_up.lanes import STAGGER_ENV, Pacer
from migrator.engine.catch_up.tailer import Tailer
from migrator.engine.migration import MigrationStore
from migrator.fleet.gtid import GtidPos
from tests.conftest import SEED
from tests.integration.engine import catchup_helpers as h

DB = "db00002"  # a moving shard of the fixture's layout, on MySQL001A

TYPES_DDL = """CREATE TABLE types_t (
  id BIGINT NOT NULL, sub INT UNSIGNED NOT NULL,
  ti TINYINT, tu TINYINT UNSIGNED, si SMALLINT, su SMALLINT UNSIGNED, mi MEDIUMINT, mu MEDIUMINT UNSIGNED,
  ii INT, iu INT UNSIGNED, bi BIGINT, bu BIGINT UNSIGNED,
  f FLOAT, dd DOUBLE, dc DECIMAL(20,6), dc2 DECIMAL(5,0), dc3 DECIMAL(30,25),
  dt DATE, dtm DATETIME, dtm6 DATETIME(6), dtm3 DATETIME(3), ts TIMESTAMP NULL, ts6 TIMESTAMP(6) NULL,
  tm TIME, tm6 TIME(6), tm2 TIME(2), yr YEAR,
  c CHAR(10), vc VARCHAR(300), vl1 VARCHAR(20) CHARACTER SET latin1, tx TEXT, mt MEDIUMTEXT, lt LONGTEXT,
  bn BINARY(4), vb VARBINARY(10), bl BLOB, tb TINYBLOB, lb LONGBLOB,
  js JSON, en ENUM('a','b','c'), st SET('x','y','z'), b1 BIT(1), b10 BIT(10), b64 BIT(64),
  g GEOMETRY NULL, c255 CHAR(255) CHARACTER SET utf8mb4,
  PRIMARY KEY (id, sub)) ENGINE=InnoDB"""


def _row(rng: random.Random, i: int) -> tuple:
    def maybe(v):
        return None if rng.random() < 0.15 else v

    def text(n):
        return "".join(rng.choice("aé€😀\\'\"\n\t%_ b0") for _ in range(rng.randrange(n)))

    day = f"{rng.randrange(1000, 9999)}-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}"
    clock = f"{rng.randrange(24):02d}:{rng.randrange(60):02d}:{rng.randrange(60):02d}"
    sign = rng.choice(["-", ""])
    return (
        i, rng.randrange(3), maybe(rng.randrange(-128, 128)), maybe(rng.randrange(256)),
        maybe(rng.randrange(-32768, 32768)), maybe(rng.randrange(65536)), maybe(rng.randrange(-2**23, 2**23)),
        maybe(rng.randrange(2**24)), maybe(rng.randrange(-2**31, 2**31)), maybe(rng.randrange(2**32)),
        maybe(rng.randrange(-2**63, 2**63)), maybe(rng.randrange(2**64)), maybe(rng.uniform(-1e6, 1e6)),
        maybe(rng.uniform(-1e300, 1e300)), maybe(f"{rng.randrange(-10**13, 10**13)}.{rng.randrange(10**6):06d}"),
        maybe(str(rng.randrange(-99999, 99999))), maybe(f"-{rng.randrange(10**4)}.{rng.randrange(10**25):025d}"),
        maybe(day), maybe(f"{day} {clock}"), maybe(f"2020-01-02 03:04:05.{rng.randrange(10**6):06d}"),
        maybe(f"1999-12-31 23:59:59.{rng.randrange(1000):03d}"), maybe(f"20{rng.randrange(10, 37)}-01-02 {clock}"),
        maybe(f"2001-01-02 03:04:05.{rng.randrange(10**6):06d}"), maybe(f"{sign}{rng.randrange(838):02d}:00:01"),
        maybe(f"{sign}{rng.randrange(838):02d}:{rng.randrange(60):02d}:01.{rng.randrange(10**6):06d}"),
        maybe(f"-00:00:0{rng.randrange(10)}.{rng.randrange(100):02d}"), maybe(rng.choice([1901, 2155, 2000, 0])),
        maybe(text(10)), maybe(text(300)), maybe("".join(rng.choice("abcéÿ\\'") for _ in range(rng.randrange(20)))),
        maybe(text(200)), maybe(text(500)), maybe(text(2000)),
        maybe(bytes(rng.randrange(256) for _ in range(rng.randrange(5)))),
        maybe(bytes(rng.randrange(256) for _ in range(rng.randrange(11)))), maybe(rng.randbytes(rng.randrange(300))),
        maybe(rng.randbytes(rng.randrange(255))), maybe(rng.randbytes(rng.randrange(70000))),
        maybe(json.dumps({"k": text(20), "n": rng.random()})), maybe(rng.choice(["a", "b", "c", ""])),
        maybe(rng.choice(["", "x", "x,z", "x,y,z"])), maybe(rng.randrange(2)), maybe(rng.randrange(1024)),
        maybe(rng.randrange(2**64)), None, maybe(text(255)),
    )


def _tail(fleet, start: str, head: str, lanes: int = 4) -> None:
    hosts = fleet.hosts
    with Tailer(hosts[h.SOURCE], hosts[h.TARGET], fleet.credentials, start=GtidPos.parse(start),
                schema_map={DB: DB}, pacer=Pacer(lanes=lanes, round_rows=64, adapt=False)) as tailer:
        stats = tailer.drain_to(head, 120)
    assert stats.events > 0


def _same(fleet, table: str) -> None:
    with h.conn(fleet, h.SOURCE) as s, h.conn(fleet, h.TARGET) as t, s.cursor() as sc, t.cursor() as tc:
        for cur in (sc, tc):
            cur.execute(f"CHECKSUM TABLE `{DB}`.`{table}`")
        assert sc.fetchone()[1] == tc.fetchone()[1], f"{table}: CHECKSUM TABLE differs"
        order = "1, 2" if table == "types_t" else "1"
        for cur in (sc, tc):
            cur.execute(f"SELECT * FROM `{DB}`.`{table}` ORDER BY {order}")
        assert sc.fetchall() == tc.fetchall()


def _both(fleet, *sql: str) -> None:
    for host in (h.SOURCE, h.TARGET):
        with h.conn(fleet, host) as c, c.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS `{DB}`")
            cur.execute(f"USE `{DB}`")
            for s in sql:
                cur.execute(s)


def test_every_column_type_arrives_exact_through_lanes(fleet):
    _both(fleet, "DROP TABLE IF EXISTS types_t", TYPES_DDL)
    rng = random.Random(SEED)
    with h.conn(fleet, h.SOURCE, DB) as c, c.cursor() as cur:
        start = h.binlog_pos(c)
        cur.execute("SET SESSION sql_mode = 'NO_AUTO_VALUE_ON_ZERO'")
        marks = ",".join(["%s"] * 46)
        for i in range(250):
            cur.execute(f"INSERT INTO types_t VALUES ({marks})", _row(rng, i))
        cur.execute("UPDATE types_t SET id = id + 1000 WHERE id % 7 = 0")  # key changes
        for _ in range(120):
            cur.execute(f"REPLACE INTO types_t VALUES ({marks})", _row(rng, rng.randrange(250)))
        cur.execute("DELETE FROM types_t WHERE id % 5 = 0")
        cur.execute("UPDATE types_t SET tx = CONCAT(IFNULL(tx, ''), 'z'), f = f * 2 WHERE id % 3 = 0")
        cur.execute("INSERT INTO types_t (id, sub, ts, ts6, dtm, dt, g) VALUES (0, 0, '0000-00-00 00:00:00', "
                    "'0000-00-00 00:00:00', '0000-00-00 00:00:00', '0000-00-00', ST_GeomFromText('POINT(1 2)'))")
        head = h.binlog_pos(c)
    _tail(fleet, start, head)
    _same(fleet, "types_t")


def test_xa_rolled_back_after_prepare_is_not_applied(fleet):
    _both(fleet, "DROP TABLE IF EXISTS xa_t", "CREATE TABLE xa_t (id INT PRIMARY KEY, v INT) ENGINE=InnoDB")
    with h.conn(fleet, h.SOURCE, DB) as c, h.conn(fleet, h.SOURCE, DB) as other, c.cursor() as cur:
        start = h.binlog_pos(c)
        cur.execute("XA START 'mig-x1'")
        cur.execute("INSERT INTO xa_t VALUES (1, 1)")
        cur.execute("XA END 'mig-x1'")
        cur.execute("XA PREPARE 'mig-x1'")
        with other.cursor() as oc:
            oc.execute("INSERT INTO xa_t VALUES (5, 5)")  # committed while x1 is prepared
        cur.execute("XA ROLLBACK 'mig-x1'")
        cur.execute("XA START 'mig-x2'")
        cur.execute("INSERT INTO xa_t VALUES (2, 2)")
        cur.execute("XA END 'mig-x2'")
        cur.execute("XA PREPARE 'mig-x2'")
        cur.execute("XA COMMIT 'mig-x2'")
        cur.execute("XA START 'mig-x3'")
        cur.execute("INSERT INTO xa_t VALUES (3, 3)")
        cur.execute("XA END 'mig-x3'")
        cur.execute("XA COMMIT 'mig-x3' ONE PHASE")
        head = h.binlog_pos(c)
    _tail(fleet, start, head, lanes=2)
    with h.conn(fleet, h.TARGET, DB) as t, t.cursor() as cur:
        cur.execute("SELECT id FROM xa_t ORDER BY id")
        assert [r[0] for r in cur.fetchall()] == [2, 3, 5]


def test_generated_columns_take_no_value_and_id_zero_stays_zero(fleet):
    ddl = ("CREATE TABLE gen_t (id INT NOT NULL AUTO_INCREMENT PRIMARY KEY, a INT, b INT, "
           "s INT AS (a + b) STORED, v INT AS (a * b) VIRTUAL, KEY (s)) ENGINE=InnoDB")
    _both(fleet, "DROP TABLE IF EXISTS gen_t", ddl)
    with h.conn(fleet, h.SOURCE, DB) as c, c.cursor() as cur:
        start = h.binlog_pos(c)
        cur.execute("SET SESSION sql_mode = 'NO_AUTO_VALUE_ON_ZERO'")
        cur.execute("INSERT INTO gen_t (id, a, b) VALUES (0, 1, 2), (5, 3, 4)")
        cur.execute("INSERT INTO gen_t (a, b) VALUES (7, 8)")
        cur.execute("UPDATE gen_t SET a = a + 10 WHERE id = 0")
        head = h.binlog_pos(c)
    _tail(fleet, start, head, lanes=2)
    _same(fleet, "gen_t")
    with h.conn(fleet, h.TARGET, DB) as t, t.cursor() as cur:
        cur.execute("SELECT a, s FROM gen_t WHERE id = 0")
        assert cur.fetchone() == (11, 13)


def _lane_transactions(fleet) -> int:
    """Open transactions on the target that changed rows (the lanes' uncommitted part of a round)."""
    with fleet.sandbox.root_conn(h.TARGET) as c, c.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM information_schema.INNODB_TRX WHERE trx_rows_modified > 0")
        return int(cur.fetchone()[0])


def test_kill_9_with_lanes_at_different_points_of_a_round_then_resume(fleet):
    h.create_extra_tables(fleet, rows=10)
    spec = h.create_migration(fleet, converge_events=50)
    h.copy_tables(fleet, spec)
    store = MigrationStore(fleet.zk)
    start = catch_up.copy_start(store, spec.id)[0]
    rnd = random.Random(SEED)
    with h.conn(fleet, h.SOURCE) as c, c.cursor() as cur:
        # single-row transactions spread over many keys: every lane gets a part. Enough for three rounds
        # of 2,000 rows: the checkpoint is saved at most every 0.5 s, so a round must still follow the
        # first save for the kill to land mid-round between two saved checkpoints
        for i in range(6000):
            db = f"db{h.MOVING[i % 2]:05d}"
            cur.execute(f"INSERT INTO `{db}`.jobs (state, updated_at, body) VALUES (0, '2020-01-03', %s)",
                        (rnd.randbytes(20),))
        head = GtidPos.parse(h.binlog_pos(c))
    with h.catchup_process(fleet, spec.id, {"MIGRATOR_CATCHUP_LANES": "4", STAGGER_ENV: "600"}) as proc:
        deadline = time.monotonic() + 90
        open_lanes = 0
        moved = False
        while time.monotonic() < deadline and proc.poll() is None:
            if not moved:  # first a round committed by every lane, so the checkpoint moved
                node, _ = store.get_progress(spec.id, "catchup")
                moved = bool(node and node.get("gtid") and GtidPos.parse(node["gtid"]) != start)
            else:
                open_lanes = _lane_transactions(fleet)
                if 1 <= open_lanes <= 3:  # some lanes committed this round, some have not
                    break
            # INNODB_TRX is a cache InnoDB refreshes only once it has not been read for 0.1 s: polled
            # faster it keeps showing the first state it caught (seen: 4 open transactions, for ever)
            time.sleep(0.02 if not moved else 0.15)
        assert 1 <= open_lanes <= 3, f"never caught the lanes mid-round (open: {open_lanes}, exit {proc.poll()})"
        h.kill_9(proc)
    time.sleep(0.5)
    assert _lane_transactions(fleet) == 0  # the server rolled the dead lanes' parts back
    node, _ = store.get_progress(spec.id, "catchup")
    killed_at = GtidPos.parse(node["gtid"])
    assert killed_at != start and not killed_at.contains(head), "not killed between two checkpoints of the pass"
    time.sleep(1.0)
    with fleet.sandbox.root_conn(h.SOURCE) as c, c.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%%' "
                    "AND USER = %s", (fleet.credentials.mysql_user,))
        assert cur.fetchone()[0] == 0, "the reader process outlived its killed parent"
    # resume from the checkpoint, in this process, with a different lane count
    os.environ.pop(STAGGER_ENV, None)
    catch_up.drain_to(fleet.config, spec.id, str(head), timeout=120)
    assert GtidPos.parse(store.get_progress(spec.id, "catchup")[0]["gtid"]).contains(head)
    assert h.compare(fleet, spec) == {}


def test_a_quiet_master_does_not_hold_the_last_transactions_until_its_heartbeat(fleet):
    """Under a cutover's fence the master goes quiet: what the reader holds must come through
    at once, not with the next event or heartbeat (5 s here; the drain has 2 s)."""
    _both(fleet, "DROP TABLE IF EXISTS quiet_t", "CREATE TABLE quiet_t (id INT PRIMARY KEY, v INT) ENGINE=InnoDB")
    hosts = fleet.hosts
    with h.conn(fleet, h.SOURCE, DB) as c, c.cursor() as cur:
        start = h.binlog_pos(c)
        with Tailer(hosts[h.SOURCE], hosts[h.TARGET], fleet.credentials, start=GtidPos.parse(start),
                    schema_map={DB: DB}, heartbeat_s=5.0) as tailer:
            tailer.warm()
            for i in range(3):
                cur.execute("INSERT INTO quiet_t VALUES (%s, %s)", (i, i))  # a kept transaction last
                t0 = time.monotonic()
                tailer.drain_to(h.binlog_pos(c), 2.0)
                assert time.monotonic() - t0 < 2.0
                cur.execute("CREATE DATABASE IF NOT EXISTS db_quiet_other")
                cur.execute("CREATE TABLE IF NOT EXISTS db_quiet_other.t (id INT PRIMARY KEY) ENGINE=InnoDB")
                cur.execute("REPLACE INTO db_quiet_other.t VALUES (%s)", (i,))  # a transaction not kept last
                tailer.drain_to(h.binlog_pos(c), 2.0)
            cur.execute("DROP DATABASE db_quiet_other")
    _same(fleet, "quiet_t")


def test_a_lane_writes_under_read_committed_on_a_row_logging_target(fleet):
    """Row locks only, no gap locks: lanes writing neighbouring keys do not deadlock on next-key locks."""
    from migrator.engine.catch_up.lanes import Lane
    from migrator.fleet.mysql import connect as mysql_connect

    host = fleet.hosts["MySQL003A"]
    lane = Lane(0, lambda: mysql_connect(host, fleet.credentials, autocommit=False), lambda tkey: None)
    try:
        with lane.conn.cursor() as cur:
            cur.execute("SELECT @@SESSION.tx_isolation, @@SESSION.binlog_format")
            assert cur.fetchone() == ("READ-COMMITTED", "ROW")
    finally:
        lane.close()


def test_the_fencing_token_does_not_serialise_the_lanes(fleet):
    """The lanes' check of the epoch row is a shared-mode read: lane transactions hold it side by
    side without waiting for each other. A newer tail's claim waits for the ones in flight (their
    writes land first); a lane transaction that starts while the claim waits queues behind it and
    then finds the newer token (it writes nothing)."""
    import threading

    import pymysql
    import pytest

    from migrator.engine.catch_up.lanes import Epoch, StaleEpoch

    applier = f"test-{SEED}-{time.monotonic_ns()}"
    old, new = Epoch(applier, 100, "old tail"), Epoch(applier, 200, "new tail")

    def lane_conn():
        c = h.conn(fleet, h.TARGET, autocommit=False)
        with c.cursor() as cur:
            cur.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            cur.execute("SET SESSION innodb_lock_wait_timeout = 5")
        c.commit()
        return c

    setup, a, b, late, claimer = (lane_conn() for _ in range(5))
    try:
        old.claim(setup)
        with pytest.raises(StaleEpoch):  # a lower token never lowers the row
            Epoch(applier, 50).claim(setup)
        t0 = time.monotonic()
        with a.cursor() as ca, b.cursor() as cb:  # two lanes, each in its transaction, at once
            old.check(ca)
            old.check(cb)
        assert time.monotonic() - t0 < 1.0  # neither waited for the other
        claimed: list[float] = []
        t = threading.Thread(target=lambda: (new.claim(claimer), claimed.append(time.monotonic())), daemon=True)
        t.start()
        time.sleep(1.0)
        assert t.is_alive() and not claimed  # the claim waits for the lanes in flight
        found: list[BaseException] = []

        def late_lane() -> None:
            with late.cursor() as cl:
                try:
                    old.check(cl)  # queued behind the claim's exclusive lock
                except StaleEpoch as exc:
                    found.append(exc)
                finally:
                    late.rollback()

        lt = threading.Thread(target=late_lane, daemon=True)
        lt.start()
        time.sleep(0.5)
        assert lt.is_alive() and not found  # it waits, it does not read the old token
        a.commit()
        b.commit()
        t.join(10)
        lt.join(10)
        assert claimed and found and found[0].found == 200
    finally:
        for c in (setup, a, b, late, claimer):
            try:
                c.close()
            except pymysql.err.Error:
                pass
