"""The fence's UNLOCK and KILL failures on a real server: raised with what to do, never swallowed."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pymysql
import pytest

from migrator.engine.cutover.rename_fence import Fence, FenceError, Move
from migrator.engine.cutover.trigger_gate import GateError, TriggerGate
from migrator.fleet.mysql import close_quietly, scalar
from migrator.fleet.mysql import connect as mysql_connect

from .cutover_setup import tables_in

TOMB = "_tomb_fencefail_db00002"
LIMITED = "fence_limited"


def limited(fleet, host):
    """An identity with what the fence needs but no right to kill other users' threads (no CONNECTION ADMIN)."""
    with fleet.sandbox.root_conn(host.name) as c, c.cursor() as cur:  # the sandbox admin makes users
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute(f"CREATE USER IF NOT EXISTS '{LIMITED}'@'%' IDENTIFIED BY 'limited-pw'")
        cur.execute(f"GRANT SELECT, INSERT, CREATE, DROP, ALTER, LOCK TABLES, BINLOG ADMIN ON *.* TO '{LIMITED}'@'%'")
    return fleet.credentials.model_copy(update={"mysql_user": LIMITED, "mysql_password": "limited-pw"})


def _fence(fleet, creds=None) -> Fence:
    source = fleet.hosts[fleet.smap.master_of(2)]
    with mysql_connect(source, fleet.credentials) as c, c.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute(f"CREATE DATABASE IF NOT EXISTS `{TOMB}`")
    return Fence(source, creds or fleet.credentials, [Move("db00002", "pins", TOMB)], log_renames=False,
                 lock_wait_timeout=5).open()


def _put_back(fleet) -> None:
    source = fleet.hosts[fleet.smap.master_of(2)]
    with mysql_connect(source, fleet.credentials) as c, c.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        if "pins" in tables_in(c, TOMB):
            cur.execute(f"RENAME TABLE `{TOMB}`.`pins` TO `db00002`.`pins`")
        cur.execute(f"DROP DATABASE IF EXISTS `{TOMB}`")


def test_a_kill_that_fails_is_raised_with_the_thread_to_kill(fleet):
    """KILL of a pending RENAME refused by the server (1095: not the owner of that thread)."""
    source = fleet.hosts[fleet.smap.master_of(2)]
    fence = _fence(fleet, limited(fleet, source))
    other = mysql_connect(source, fleet.credentials)  # another user's thread: not the fence's to kill
    try:
        fence.lock()
        fence.queue_rename(timeout=10)
        renamer = fence.renamers[0]
        real_id = renamer.conn_id
        renamer.conn_id = int(scalar(other, "SELECT CONNECTION_ID()"))
        # the server's reason and the thread to kill, at once (not a timeout that hides why)
        with pytest.raises(FenceError, match=f"thread {renamer.conn_id}.*not owner.*kill that connection by hand"):
            fence.abort()
        renamer.conn_id = real_id
        with mysql_connect(fence.host, fleet.credentials) as c, c.cursor() as cur:  # clean up as the message says
            cur.execute(f"KILL CONNECTION {real_id}")
            cur.execute(f"KILL CONNECTION {fence.a_id}")
    finally:
        other.close()
        fence.close()
        _put_back(fleet)


def test_a_release_whose_lock_connection_died_completes_or_says_why(fleet):
    """UNLOCK fails because A's connection is gone: the lock went with it, the RENAMEs ran; the release
    checks that instead of failing on the UNLOCK error."""
    fence = _fence(fleet)
    try:
        fence.lock()
        fence.queue_rename(timeout=10)
        with mysql_connect(fence.host, fleet.credentials) as c, c.cursor() as cur:
            cur.execute(f"KILL CONNECTION {fence.a_id}")
        fence.release(timeout=30)
        with mysql_connect(fence.host, fleet.credentials) as c:
            assert "pins" in tables_in(c, TOMB) and "pins" not in tables_in(c, "db00002")
    finally:
        fence.close()
        _put_back(fleet)


def test_reopening_a_gate_whose_kill_fails_is_raised(fleet):
    passive = fleet.hosts[fleet.smap.range_of(2).passive]
    gate = TriggerGate(passive, limited(fleet, passive), [("db00002", "pins")], "fencefail",
                       {"db00002": TOMB}).open()
    other = mysql_connect(passive, fleet.credentials)
    try:
        gate._closing = True  # a close in flight, whose connection the reopen must end first
        gate.conn_id = int(scalar(other, "SELECT CONNECTION_ID()"))  # ... but not the gate's to kill
        with pytest.raises(GateError, match="kill it by hand"):
            gate.reopen()
    finally:
        other.close()
        gate._closing = False
        gate.close_connection()
        with mysql_connect(passive, fleet.credentials) as c, c.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            try:
                cur.execute("DROP TABLE IF EXISTS `_migrator_gates`.`moving_fencefail`")
            except pymysql.err.MySQLError:
                pass


def test_a_trigger_whose_name_file_is_gone_is_still_removed(fleet):
    """A trigger its table's .TRG lists but whose .TRN is gone: DROP TRIGGER IF EXISTS only notes 1360 and
    leaves it (it fires, and keeps a RENAME out of the schema); the gate's removal makes it droppable and drops it."""
    passive = fleet.hosts[fleet.smap.range_of(2).passive]
    gate = TriggerGate(passive, fleet.credentials, [("db00002", "pins")], "orphan", {"db00002": TOMB}).open()
    try:
        gate.install()
        names = sorted(n for _, n, _ in gate._existing_triggers())
        assert len(names) == 3
        with mysql_connect(passive, fleet.credentials) as c, c.cursor() as cur:
            datadir = Path(str(scalar(c, "SELECT @@datadir")))
            (datadir / "db00002" / f"{names[0]}.TRN").unlink()
            cur.execute("FLUSH TABLES `db00002`.`pins`")
            cur.execute("SET SESSION sql_log_bin = 0")
            cur.execute(f"DROP TRIGGER IF EXISTS `db00002`.`{names[0]}`")
            cur.execute("SHOW WARNINGS")
            assert [w[1] for w in cur.fetchall()] == [1360]  # the orphan: not dropped, still listed
        assert names[0] in {n for _, n, _ in gate._existing_triggers()}
        gate.remove()
        assert gate._existing_triggers() == set()
        assert not gate.gate_exists()
        with mysql_connect(passive, fleet.credentials) as c:
            assert "pins" in tables_in(c, "db00002")
    finally:
        try:
            gate.remove()
        finally:
            gate.close_connection()


@pytest.mark.parametrize("rename_back", [False, True])
def test_an_abort_after_the_renames_ran_keeps_them_only_after_a_flip(fleet, rename_back):
    """A release that failed after some RENAMEs ran, then its abort: after a flip (``rename_back=False``) the
    renamed table stays fenced in its tombstone; before one it is put back live."""
    fence = _fence(fleet)
    try:
        fence.lock()
        fence.queue_rename(timeout=10)
        fence.release(timeout=30)
        fence.abort(rename_back=rename_back)
        with mysql_connect(fence.host, fleet.credentials) as c:
            assert ("pins" in tables_in(c, "db00002")) is rename_back
            assert ("pins" in tables_in(c, TOMB)) is not rename_back
    finally:
        fence.close()
        _put_back(fleet)


SCRATCH, SCRATCH_TOMB, SCRATCH_TABLES = "_fencefail_race", "_fencefail_race_tomb", [f"t{i}" for i in range(8)]


@pytest.fixture
def scratch(fleet):
    """Eight empty tables on db00002's master (unlogged: this member only), and their tombstone schema."""
    source = fleet.hosts[fleet.smap.master_of(2)]
    with mysql_connect(source, fleet.credentials) as c, c.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        for db in (SCRATCH, SCRATCH_TOMB):
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
            cur.execute(f"CREATE DATABASE `{db}`")
        for t in SCRATCH_TABLES:
            cur.execute(f"CREATE TABLE `{SCRATCH}`.`{t}` (id INT PRIMARY KEY)")
    yield source
    with mysql_connect(source, fleet.credentials) as c, c.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        for db in (SCRATCH, SCRATCH_TOMB):
            cur.execute(f"DROP DATABASE IF EXISTS `{db}`")


def _queued_renames(host, creds, lock):
    """LOCK TABLES WRITE of the scratch tables on ``lock``, then one RENAME of each to the tombstone schema,
    sent from its own connection and thread and waiting behind the lock: (connections, threads)."""
    with lock.cursor() as cur:
        cur.execute("LOCK TABLES " + ", ".join(f"`{SCRATCH}`.`{t}` WRITE" for t in SCRATCH_TABLES))
    conns = [mysql_connect(host, creds) for _ in SCRATCH_TABLES]

    def rename(conn, table):
        try:
            with conn.cursor() as cur:
                cur.execute("SET SESSION sql_log_bin = 0")
                cur.execute(f"RENAME TABLE `{SCRATCH}`.`{table}` TO `{SCRATCH_TOMB}`.`{table}`")
        except pymysql.err.MySQLError:  # killed: what the server did is read from its tables
            pass

    threads = [threading.Thread(target=rename, args=(c, t), daemon=True) for c, t in zip(conns, SCRATCH_TABLES,
                                                                                         strict=True)]
    for t in threads:
        t.start()
    return conns, threads


def _all_waiting(conn, ids) -> bool:
    marks = ", ".join(["%s"] * len(ids))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with conn.cursor() as cur:
            cur.execute(f"SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID IN ({marks}) "
                        "AND STATE = 'Waiting for table metadata lock'", ids)
            if cur.fetchone()[0] == len(ids):
                return True
        time.sleep(0.005)
    return False


def test_a_killed_rename_runs_nothing_once_its_connection_is_gone(fleet, scratch):
    """RENAMEs queued behind LOCK TABLES, KILLed, then the lock released at once: a KILL returns (and its
    client sees the connection close) before the thread has ended, and one whose lock is granted in between
    still renames (84 of 200 such rounds renamed a table on MariaDB 10.11). After
    :func:`wait_connections_gone` none does, in any of 100 rounds (without it some do)."""
    from migrator.fleet.mysql import kill_connections, wait_connections_gone

    ctl = mysql_connect(scratch, fleet.credentials)
    try:
        for _ in range(100):
            lock = mysql_connect(scratch, fleet.credentials)
            conns, threads = _queued_renames(scratch, fleet.credentials, lock)
            ids = [c.thread_id() for c in conns]
            try:
                assert _all_waiting(ctl, ids)
                with ctl.cursor() as cur:
                    kill_connections(cur, ids)
                    assert wait_connections_gone(cur, ids, timeout=10) == []
                with lock.cursor() as cur:
                    cur.execute("UNLOCK TABLES")
                for t in threads:
                    t.join(10)
                assert tables_in(ctl, SCRATCH_TOMB) == set()
                assert set(SCRATCH_TABLES) <= tables_in(ctl, SCRATCH)
            finally:
                for conn in (lock, *conns):
                    close_quietly(conn)
    finally:
        ctl.close()


def test_an_abort_puts_back_a_table_whose_rename_answer_was_lost(fleet):
    """A RENAME that ran while its renamer heard nothing of it (its connection ended as it ran): the abort
    before a flip reads the tables, not the answers, and puts the table back live."""
    fence = _fence(fleet)
    try:
        fence.lock()
        fence.queue_rename(timeout=10)
        with mysql_connect(fence.host, fleet.credentials) as c, c.cursor() as cur:
            cur.execute(f"KILL CONNECTION {fence.a_id}")  # the lock goes: the queued RENAME runs
        renamer = fence.renamers[0]
        assert renamer.done.wait(10) and renamer.renamed
        renamer.renamed = False  # ... and its answer is lost
        fence.abort()
        with mysql_connect(fence.host, fleet.credentials) as c:
            assert "pins" in tables_in(c, "db00002") and "pins" not in tables_in(c, TOMB)
    finally:
        fence.close()
        _put_back(fleet)
