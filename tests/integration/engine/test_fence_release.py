"""The rename fence's release on a real server: clients waiting on it are ended at the flip, not when the
renames end; stale writers behind the renames are ended too; nothing reaches a tombstone; a statement
waiting on a table that does not move is left alone."""

from __future__ import annotations

import threading
import time

import pymysql

from migrator.engine.cutover.rename_fence import Fence, Move
from migrator.fleet.mysql import ER_NO_SUCH_TABLE, ER_QUERY_INTERRUPTED, query, scalar
from migrator.fleet.mysql import connect as mysql_connect

DB = "fence_release"
TOMB = "_tomb_fencerel_fence_release"
#: enough partitions that the partitioned table's RENAME is slow (one file per partition)
PARTITIONS = 64


class Client(threading.Thread):
    """One statement from its own connection; records the error code (None: it went through)."""

    def __init__(self, host, creds, sql: str, db: str | None = None):
        super().__init__(daemon=True)
        self.conn = mysql_connect(host, creds, read_timeout=60)
        with self.conn.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")  # the tables are this host's own (see the test)
            if db:
                cur.execute(f"USE `{db}`")
        self.conn_id = int(scalar(self.conn, "SELECT CONNECTION_ID()"))
        self.sql = sql
        self.code: int | None = -1

    def run(self) -> None:
        try:
            with self.conn.cursor() as cur:
                cur.execute(self.sql)
            self.code = None
        except pymysql.err.MySQLError as exc:
            self.code = exc.args[0]
        finally:
            self.conn.close()


def _waiting(conn, ids: list[int]) -> set[int]:
    rows = query(conn, "SELECT ID, STATE FROM information_schema.PROCESSLIST")
    return {r[0] for r in rows if r[0] in ids and "metadata lock" in (r[1] or "")}


def _until(cond, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_waiters_are_ended_at_the_release_and_stale_writers_behind_the_renames_too(fleet):
    host = fleet.hosts[fleet.smap.master_of(2)]
    creds = fleet.credentials
    admin = mysql_connect(host, creds)
    with admin.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")  # this host's own tables: its partner never sees them
        for db in (DB, TOMB):
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
            cur.execute(f"CREATE DATABASE `{db}`")
        cur.execute(f"CREATE TABLE `{DB}`.jobs (id BIGINT PRIMARY KEY, v INT) PARTITION BY HASH (id) "
                    f"PARTITIONS {PARTITIONS}")
        cur.execute(f"CREATE TABLE `{DB}`.pins (id BIGINT AUTO_INCREMENT PRIMARY KEY, v INT)")
        cur.execute(f"CREATE TABLE `{DB}`.stays (id BIGINT AUTO_INCREMENT PRIMARY KEY, v INT)")
    fence = Fence(host, creds, [Move(DB, "jobs", TOMB), Move(DB, "pins", TOMB)], log_renames=False).open()
    holder = mysql_connect(host, creds)  # an unrelated lock: its waiter is no business of the fence
    clients: list[Client] = []
    try:
        with holder.cursor() as cur:
            cur.execute(f"LOCK TABLES `{DB}`.stays WRITE")
        fence.lock()
        fence.queue_rename(timeout=10)
        qualified = Client(host, creds, f"INSERT INTO `{DB}`.jobs (id, v) VALUES (1, 1)")
        bare = Client(host, creds, "INSERT INTO pins (v) VALUES (1)", db=DB)  # names the table bare, in its db
        other = Client(host, creds, f"INSERT INTO `{DB}`.stays (v) VALUES (1)")
        clients += [qualified, bare, other]
        for c in clients:
            c.start()
        _until(lambda: _waiting(admin, [c.conn_id for c in clients]) == {c.conn_id for c in clients})

        fence.unlock()
        # ended before the UNLOCK was sent: 1317, where waiting on would have meant 1146 after the renames
        qualified.join(10)
        bare.join(10)
        assert (qualified.code, bare.code) == (ER_QUERY_INTERRUPTED, ER_QUERY_INTERRUPTED)
        # a stale writer arriving behind the renames: ended by a sweep, or refused once its table is gone
        stale = Client(host, creds, f"INSERT INTO `{DB}`.jobs (id, v) VALUES (2, 2)")
        clients.append(stale)
        stale.start()
        fence.wait_renamed(timeout=60)
        stale.join(10)
        assert stale.code in (ER_QUERY_INTERRUPTED, ER_NO_SUCH_TABLE)
        assert fence.waiters_ended >= 2
        # the unrelated waiter was never ended: it still waits, and goes through once its lock goes
        assert other.is_alive() and _waiting(admin, [other.conn_id]) == {other.conn_id}
        with holder.cursor() as cur:
            cur.execute("UNLOCK TABLES")
        other.join(10)
        assert other.code is None
        # the tables are in the tombstone, and nothing of the ended writers is in them
        assert scalar(admin, f"SELECT COUNT(*) FROM `{TOMB}`.jobs") == 0
        assert scalar(admin, f"SELECT COUNT(*) FROM `{TOMB}`.pins") == 0
        assert set(fence.release_times()) == {f"{DB}.jobs", f"{DB}.pins"}
    finally:
        holder.close()  # its lock goes with it
        for c in clients:
            c.join(10)
        fence.close()
        with admin.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            for db in (DB, TOMB):
                cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
        admin.close()


def test_a_statement_that_ended_before_its_kill_does_not_stop_the_sweep(fleet, monkeypatch):
    """Between the sweep's processlist read and its KILL the statement may end (the server answers 1957,
    unknown query id): the sweep goes on."""
    from migrator.engine.cutover import rename_fence as fence_mod

    host = fleet.hosts[fleet.smap.master_of(2)]
    fence = Fence(host, fleet.credentials, [Move("db00002", "pins", TOMB)], log_renames=False).open()
    try:
        gone = [(999999, 2**40, None, "INSERT INTO db00002.pins (data) VALUES ('x')")]  # no such query
        monkeypatch.setattr(fence_mod, "query", lambda *a, **kw: gone)
        assert fence.end_waiters() == 0
        assert fence.sweeping
    finally:
        fence.close()
