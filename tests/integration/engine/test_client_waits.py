"""No client waits on the cutover's statements outside the freeze, on either member of the source pair.

A report holds a read transaction on a moving table (``BEGIN; SELECT COUNT(*) FROM db00002.pins``) while a
client writes a row into the same table every 20 ms on the same member, timing each statement. The write
gate's ``CREATE TRIGGER`` (and, after the flip, the member's ``LOCK TABLES`` for its tombstone renames) needs
that table's metadata lock: taken with the server's default wait, every later statement on the table queued
behind it for as long as the report lasted (56 s seen). Taken in short bounded tries
(:mod:`migrator.engine.mdl`), the cutover waits for the report and the client never waits longer than the
freeze budget.

- on the passive member (rename fence on the master, trigger gate on the passive member);
- on the active master of a gated move (``fence=gate``, as a move over one rename fence's tables is gated);
- opted in (``kill_blockers``): a read-only holder that outlasts the tries is ended and recorded, a holder
  that changed rows is never ended, and the refusal names it and leaves no trigger or gate table behind.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import pymysql
import pytest

from migrator.engine.cutover import cutover
from migrator.engine.mdl import LockBusy
from migrator.engine.migration import Options, Phase
from migrator.fleet.mysql import connect as mysql_connect
from migrator.fleet.mysql import own_gtids, wait_applied

from .cutover_setup import gate_leftovers, prepare_converged, replicating, source_pair_left_clean
from .test_cutover_refusals import OpenTransaction

MOVING = (2, 3)
#: how long the report holds its read transaction
REPORT_S = 6.0
BUDGET_MS = 1000
#: what a busy box may add to a client's statement on top of the budget (commits, scheduling): the promise is
#: the budget; without bounded tries the client waits the report's REPORT_S
SLACK_S = 1.5


class Report:
    """A read transaction held open on one table (as a reporting client on a replica holds one)."""

    def __init__(self, host, creds, table: str = "db00002.pins"):
        self.conn = mysql_connect(host, creds, read_timeout=120)
        with self.conn.cursor() as cur:
            cur.execute("SELECT CONNECTION_ID()")
            self.id = int(cur.fetchone()[0])
            cur.execute("BEGIN")
            cur.execute(f"SELECT COUNT(*) FROM {table}")

    def alive(self) -> bool:
        try:
            with self.conn.cursor() as cur:
                cur.execute("SELECT 1")
            return True
        except pymysql.err.MySQLError:
            return False

    def end(self) -> None:
        try:
            self.conn.rollback()
            self.conn.close()
        except pymysql.err.MySQLError:
            pass


@dataclass
class TimedWriter:
    """Inserts a row into one table of one member every 20 ms and times each statement (refusals included:
    a refused write returns at once)."""

    host: object
    creds: object
    table: str = "db00002.pins"
    waits: list[tuple[float, float]] = field(default_factory=list)  # (start, seconds)
    refused: int = 0
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> TimedWriter:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(120)

    @property
    def longest(self) -> float:
        return max((s for _, s in self.waits), default=0.0)

    def _run(self) -> None:
        conn = mysql_connect(self.host, self.creds, read_timeout=120)
        try:
            while not self._stop.is_set():
                t0 = time.monotonic()
                try:
                    with conn.cursor() as cur:
                        cur.execute(f"INSERT INTO {self.table} (data) VALUES ('{{\"w\": 1}}')")
                except pymysql.err.MySQLError as exc:
                    if exc.args and exc.args[0] in (1146, 1317):
                        self.refused += 1  # the gate (or the renamed table): the shard moved
                    else:
                        self.errors.append(str(exc))
                self.waits.append((t0, time.monotonic() - t0))
                time.sleep(0.02)
        finally:
            conn.close()


def _report_later(report: Report, after_s: float) -> threading.Timer:
    t = threading.Timer(after_s, report.end)
    t.daemon = True
    t.start()
    return t


@pytest.mark.parametrize("member", ["passive", "active"])
def test_a_report_on_a_member_never_makes_a_client_wait_longer_than_the_budget(fleet, member):
    fence = "rename" if member == "passive" else "gate"
    prep = prepare_converged(fleet, MOVING, options=Options(freeze_budget_ms=BUDGET_MS, fence=fence))
    spec = prep.spec
    host = fleet.hosts[spec.source_passive if member == "passive" else spec.source_master]
    writer = TimedWriter(host, fleet.credentials).start()
    time.sleep(0.3)
    report = Report(host, fleet.credentials)
    ending = _report_later(report, REPORT_S)
    try:
        t0 = time.monotonic()
        result = cutover(fleet.config, spec.id)
        took = time.monotonic() - t0
        time.sleep(0.3)
    finally:
        ending.cancel()
        report.end()
        writer.stop()

    attempts, _ = prep.store.get_progress(spec.id, "cutover_attempts")
    waits = attempts["attempts"][-1]["lock_waits"][host.name]
    print(f"\n{member}: cutover {took:.1f} s, freeze {result.freeze_ms:.0f} ms; the client's longest statement "
          f"{writer.longest * 1000:.0f} ms over {len(writer.waits)} writes ({writer.refused} refused); "
          f"gate tries {waits}")
    assert prep.store.state(spec.id)[0].phase == Phase.DONE
    # the report held the table: the gate's statements were refused by it, then got through once it ended
    assert waits["busy"] > 0 and took >= REPORT_S * 0.8, (waits, took)
    assert not waits["killed"]
    # ... and no client statement waited on them longer than the budget
    assert writer.longest < BUDGET_MS / 1000 + SLACK_S, writer.longest
    assert not writer.errors, writer.errors[:3]
    source_pair_left_clean(fleet.credentials, prep.source, fleet.hosts[spec.source_passive])


def test_opted_in_the_migration_ends_a_reader_never_a_writer(fleet):
    prep = prepare_converged(fleet, MOVING, options=Options(freeze_budget_ms=BUDGET_MS, lock_retry_s=1.0,
                                                            kill_blockers=True, kill_blockers_max_rows=0))
    spec = prep.spec
    passive = fleet.hosts[spec.source_passive]
    writer = TimedWriter(passive, fleet.credentials, table="db00003.pins").start()
    report = Report(passive, fleet.credentials)  # db00002.pins: read only, ended when it outlasts the tries
    holder = OpenTransaction(passive, fleet.credentials,  # db00003.pins: changed a row, never ended
                             "UPDATE db00003.pins SET data = '{\"held\": 1}' WHERE local_id = 1")
    try:
        with pytest.raises(LockBusy) as refused:
            cutover(fleet.config, spec.id)
        assert not report.alive()
        # the refusal names the writer's connection and the way out; nothing is left installed
        assert f"connection {holder.id} " in str(refused.value) and "db00003.pins" in str(refused.value)
        assert holder.id in {b.id for b in refused.value.blockers}
        b = mysql_connect(passive, fleet.credentials)
        try:
            assert gate_leftovers(b) == []
        finally:
            b.close()
        attempts, _ = prep.store.get_progress(spec.id, "cutover_attempts")
        killed = attempts["attempts"][-1]["lock_waits"][passive.name]["killed"]
        assert [k["id"] for k in killed] == [report.id], killed
        assert prep.store.state(spec.id)[0].phase == Phase.CONVERGED
    finally:
        holder.end()
        report.end()
        writer.stop()
    assert writer.longest < BUDGET_MS / 1000 + SLACK_S, writer.longest
    # with the writer's transaction gone, the next attempt flips
    result = cutover(fleet.config, spec.id)
    assert result.freeze_ms is not None and prep.store.state(spec.id)[0].phase == Phase.DONE


def test_a_statement_slower_than_its_try_with_no_holder_gets_longer_tries(fleet):
    """A try interrupted while nothing holds the table was the statement's own time (a CREATE TRIGGER on a table
    of many partitions), not a lock wait: the next tries take longer, and it gets through."""
    from migrator.engine.mdl import Attempts, LockWait, run_locking

    host = fleet.hosts["MySQL001B"]
    conn = mysql_connect(host, fleet.credentials)
    try:
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            cur.execute("CREATE DATABASE IF NOT EXISTS mdl_slow")
            cur.execute("CREATE TABLE mdl_slow.p (id INT NOT NULL PRIMARY KEY) PARTITION BY HASH(id) PARTITIONS 1024")
        attempts = Attempts()
        run_locking(conn, "CREATE TRIGGER IF NOT EXISTS mdl_slow.tg BEFORE INSERT ON mdl_slow.p FOR EACH ROW BEGIN END",
                    tables=[("mdl_slow", "p")], server=host.name, wait=LockWait(try_s=0.001, retry_s=10),
                    attempts=attempts, side=lambda: mysql_connect(host, fleet.credentials))
        # a try that was cut short with nobody holding the table counted as slow, and the longer tries got
        # through (a fast server may finish the statement inside the first try: then nothing was cut short)
        assert attempts.busy == 0 or attempts.slow >= 1, attempts
        with conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA = 'mdl_slow'")
            assert cur.fetchone()[0] == 1
    finally:
        with conn.cursor() as cur:
            cur.execute("DROP DATABASE IF EXISTS mdl_slow")
        conn.close()


def _replication_threads(conn) -> set[int]:
    """The ids of the server's replication threads (IO, SQL, parallel workers)."""
    with conn.cursor() as cur:
        cur.execute("SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND IN ('Slave_IO', 'Slave_SQL', "
                    "'Slave_worker')")
        return {int(r[0]) for r in cur.fetchall()}


def test_opted_in_the_migration_never_ends_a_replication_thread(fleet):
    """A long replicated statement on the passive member (the master's UPDATE of a row a client holds there)
    keeps its replication thread on the moving table past the tries: the thread holds the table's metadata
    lock as a client does and changed no row yet, yet ending it would stop replication. It is named, never
    ended, and replication runs on once the client's transaction is gone."""
    prep = prepare_converged(fleet, MOVING, options=Options(freeze_budget_ms=BUDGET_MS, lock_retry_s=1.0,
                                                            kill_blockers=True, kill_blockers_max_rows=0))
    spec = prep.spec
    passive = fleet.hosts[spec.source_passive]
    holder = OpenTransaction(passive, fleet.credentials,  # changed a row: never ended either
                             "UPDATE db00002.pins SET data = '{\"held\": 1}' WHERE local_id = 1")
    master = mysql_connect(prep.source, fleet.credentials)
    b = mysql_connect(passive, fleet.credentials)
    try:
        with master.cursor() as cur:  # replicated, it waits on the passive member for the holder's row lock
            cur.execute("UPDATE db00002.pins SET data = '{\"replicated\": 1}' WHERE local_id = 1")
        replication = _replication_threads(b)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # the replicated update is waiting on the row, holding the table
            with b.cursor() as cur:
                cur.execute("SELECT COUNT(*) FROM information_schema.METADATA_LOCK_INFO m JOIN "
                            "information_schema.PROCESSLIST p ON p.ID = m.THREAD_ID WHERE m.TABLE_SCHEMA = "
                            "'db00002' AND m.TABLE_NAME = 'pins' AND p.USER = 'system user'")
                if cur.fetchone()[0]:
                    break
            time.sleep(0.1)
        else:
            pytest.fail("the replicated update never held db00002.pins on the passive member")
        with pytest.raises(LockBusy) as refused:
            cutover(fleet.config, spec.id)
        attempts, _ = prep.store.get_progress(spec.id, "cutover_attempts")
        killed = attempts["attempts"][-1]["lock_waits"][passive.name]["killed"]
        assert not {k["id"] for k in killed} & replication, (killed, replication)
        assert f"connection {holder.id} " in str(refused.value)
    finally:
        holder.end()
    try:
        # the holder gone, the replicated update applies and replication goes on
        assert wait_applied(b, own_gtids(master), 30)
        replicating(b)
        with b.cursor() as cur:
            cur.execute("SELECT data FROM db00002.pins WHERE local_id = 1")
            assert "replicated" in cur.fetchone()[0]
        assert gate_leftovers(b) == []
    finally:
        master.close()
        b.close()
    result = cutover(fleet.config, spec.id)
    assert result.freeze_ms is not None and prep.store.state(spec.id)[0].phase == Phase.DONE


def test_a_longer_try_gives_way_to_a_client_that_queues_behind_it(fleet):
    """The longer tries of a statement slower than its try with nothing holding its table (here a copying
    ALTER, as a CREATE TRIGGER on a table of many partitions is on a busy server) are watched: a client
    statement that queues behind one interrupts it, so no client waits past the bound (the try of a
    migration: at most 1 s), whatever the statement needs."""
    from migrator.engine.mdl import Attempts, LockBusy, LockWait, run_locking

    host = fleet.hosts["MySQL001B"]
    conn = mysql_connect(host, fleet.credentials, read_timeout=120)
    bound = LockWait(try_s=0.05, retry_s=4)
    slow_sql = "ALTER TABLE mdl_queue.p FORCE, ALGORITHM=COPY"
    writer = None
    try:
        with conn.cursor() as cur:
            # logged: the client's writes replicate to the partner, which must have the table too
            cur.execute("CREATE DATABASE IF NOT EXISTS mdl_queue")
            cur.execute("CREATE TABLE mdl_queue.p (id INT NOT NULL AUTO_INCREMENT PRIMARY KEY, data TEXT)")
            cur.execute("INSERT INTO mdl_queue.p (data) SELECT REPEAT('x', 100) FROM mdl_queue.seq_1_to_400000")
            cur.execute("SET SESSION sql_log_bin = 0")  # the ALTERs stay on this member
            t0 = time.monotonic()
            cur.execute(slow_sql)
            took = time.monotonic() - t0
        writer = TimedWriter(host, fleet.credentials, table="mdl_queue.p").start()
        time.sleep(0.3)
        attempts = Attempts()
        try:
            run_locking(conn, slow_sql, tables=[("mdl_queue", "p")], server=host.name, wait=bound,
                        attempts=attempts, side=lambda: mysql_connect(host, fleet.credentials))
        except LockBusy:
            pass  # the statement never fitted a try with the client writing: refused, the client unharmed
        time.sleep(0.2)
        writer.stop()
        print(f"\nthe statement alone {took * 1000:.0f} ms; tries {attempts}; the client's longest statement "
              f"{writer.longest * 1000:.0f} ms over {len(writer.waits)} writes")
        assert not writer.errors, writer.errors[:3]
        # the statement outran the bound by itself, so it got longer tries; none kept the client past the bound
        assert took > 4 * bound.try_s and attempts.slow >= 1, (took, attempts)
        assert writer.longest < bound.try_s + 0.45, writer.longest
    finally:
        if writer is not None:
            writer.stop()
        with conn.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 1")
            cur.execute("DROP DATABASE IF EXISTS mdl_queue")
        conn.close()
