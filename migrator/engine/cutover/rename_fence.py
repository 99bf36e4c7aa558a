"""The write fence on a source master: no client can write the moving tables.

Runs in the cutover worker, against the source master, for the few hundred
milliseconds of a cutover freeze.

MariaDB refuses ``RENAME TABLE`` under ``LOCK TABLES``, so the fence uses
several connections (the trick gh-ost's cut-over uses for the same limit):

* connection **A** takes ``LOCK TABLES <every moving table> WRITE,
  <sentinel> WRITE``. Writers now queue on the metadata lock; A alone can read
  the tables and write the sentinel row.
* connections **B1..Bn**, one per moving table, each send ``RENAME TABLE db.t
  TO tomb.t``; each queues behind A's lock. We wait until the server shows
  every one of them waiting, so each is ahead of any writer of its table that
  arrives later.
* :meth:`Fence.unlock` (after the flip) first ends every client statement
  waiting on a moving table (``KILL QUERY ID``: it fails with 1317 "query
  execution was interrupted", nothing written), then sends ``UNLOCK TABLES`` on
  A, which lets each RENAME run before any writer of its table.
  :meth:`Fence.wait_renamed` waits for the renames and, until the last one has
  run, ends every stale writer that queued behind them meanwhile, every
  :data:`SWEEP_INTERVAL_S`. So a client that waited on the fence gets an error
  at the flip (not when the renames end: a partitioned table's RENAME takes
  hundreds of ms) and retries where the flipped map sends it; one that arrives
  later with a stale map gets 1317 within a sweep, or 1146 "table doesn't
  exist" once its table is renamed. Both mean: refresh the shard map and retry.
  Nothing reaches the renamed (tombstone) tables: a RENAME's queued exclusive
  lock is ahead of every writer that was not ended. If A's connection dies
  instead (a crash after the flip), the RENAMEs still run first.
* :meth:`Fence.abort` undoes the fence without the renames: every started
  RENAME's connection is killed (``KILL CONNECTION``, so a statement still on
  its way can never run later) *before* A unlocks, so the tables stay in place
  and the source keeps serving. Once aborted, a fence refuses to lock or
  rename: a watchdog that undoes a freeze from its own thread cannot be
  overtaken by the main thread's next step.

Why one RENAME per table and not one multi-table RENAME: a statement waits for
its metadata locks one at a time, in key order, so a multi-table RENAME queues
an exclusive request on its *first* table only. On UNLOCK, writers of the other
tables are granted at once and commit before the RENAME reaches them (seen on
MariaDB 10.11: a row written to ``db00002.pins`` after the fence). A pending
exclusive request on every table is what keeps every writer out.

The renames are not binlogged (``sql_log_bin=0``) when the pair's passive
member is fenced too (:mod:`migrator.engine.cutover.trigger_gate`): each member of the pair
then renames its own tables, after it has applied every row of the other, so
no member replays a rename that would strand its partner's last writes.
Without a passive fence they are binlogged and the partner follows them.

Connections are opened in :meth:`Fence.open` (before the freeze starts), so
the freeze pays only for statements. The cost is one connection per moving
table for the length of the freeze: :data:`MAX_TABLES` bounds it.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass

import pymysql

from migrator.engine.fencing import MAX_TABLES, FenceError, fence_mode
from migrator.engine.mdl import LockWait, run_locking
from migrator.fleet.config import Credentials
from migrator.fleet.model import Host
from migrator.fleet.mysql import (
    ER_NO_SUCH_THREAD,
    kill_connection,
    kill_connections,
    mark_own,
    qualified,
    query,
    scalar,
    tag,
    wait_connections_gone,
)
from migrator.fleet.mysql import connect as mysql_connect

TAG = tag("cutover")
ER_QUERY_INTERRUPTED = 1317
ER_NO_SUCH_QUERY = 1957
#: after the UNLOCK, how often the fence ends the stale writers queued behind its renames (the longest a
#: client routed by a stale map waits on the old master once the map is flipped)
SWEEP_INTERVAL_S = 0.01

__all__ = ["MAX_TABLES", "Fence", "FenceError", "Move", "fence_mode", "take_spare"]


@dataclass(frozen=True)
class Move:
    """One table the fence renames: ``db.table`` -> ``tomb_db.table``."""

    db: str
    table: str
    tomb_db: str


class Fence:
    """LOCK TABLES on A, one RENAME to the tombstones queued per table on B1..Bn, KILL from C."""

    def __init__(self, host: Host, credentials: Credentials, moves: Sequence[Move],
                 locked_only: Sequence[tuple[str, str]] = (), *, lock_wait_timeout: float = 5.0,
                 rename_wait_timeout: float = 600.0, log_renames: bool = False, log_lock: bool = True,
                 lock_wait: LockWait | None = None, phase: str = "cutover"):
        #: the direction's label (``cutover``, ``rollback``): the phase its errors name
        self.phase = phase
        if not moves:
            raise FenceError("nothing to fence: no moving tables", phase=phase)
        if len(moves) > MAX_TABLES:
            raise FenceError(f"{len(moves)} tables would need {len(moves)} fence connections (at most {MAX_TABLES}): "
                             "move fewer shards per migration", phase=phase)
        self.host = host
        self.credentials = credentials
        self.moves = list(moves)
        self.locked_only = list(locked_only)
        self.lock_wait_timeout = lock_wait_timeout
        #: outside a freeze (a member renamed after the flip, a reconcile): the LOCK waits in short tries, so no
        #: client queues behind it for long (:func:`migrator.engine.mdl.run_locking`); inside a freeze the
        #: freeze's own budget and watchdog bound it (None)
        self.lock_wait = lock_wait
        self.rename_wait_timeout = rename_wait_timeout
        self.log_renames = log_renames
        self.log_lock = log_lock
        self.a: pymysql.connections.Connection | None = None
        self.c: pymysql.connections.Connection | None = None
        #: opened ahead for the undo's KILLs (taken once by :class:`_side_conn`)
        self.spare: pymysql.connections.Connection | None = None
        self.a_id: int | None = None
        self.renamers: list[_Renamer] = []
        self.locked = False
        #: set by :meth:`abort` (maybe from the watchdog's thread): nothing may lock or rename after it
        self.aborted = False
        self._locking = False
        self._state = threading.Lock()
        self._owner: threading.Thread | None = None
        #: when :meth:`unlock` sent UNLOCK TABLES (monotonic), for :meth:`release_times`
        self.unlocked_at: float | None = None
        self.c_id: int | None = None
        #: client statements :meth:`end_waiters` ended, and whether it still may (a failed sweep stops)
        self.waiters_ended = 0
        self.sweeping = True
        self._names: dict[str, tuple[re.Pattern[str], re.Pattern[str]]] | None = None

    # -- lifecycle ------------------------------------------------------------------
    def open(self) -> Fence:
        self.a = mark_own(mysql_connect(self.host, self.credentials, read_timeout=600))
        self.c = mark_own(mysql_connect(self.host, self.credentials, read_timeout=30))
        self.spare = mark_own(mysql_connect(self.host, self.credentials, read_timeout=30))
        self.a_id = int(scalar(self.a, "SELECT CONNECTION_ID()"))
        self.c_id = int(scalar(self.c, "SELECT CONNECTION_ID()"))
        with self.a.cursor() as cur:
            cur.execute(f"{TAG}SET SESSION lock_wait_timeout = {max(1, int(self.lock_wait_timeout))}")
            cur.execute(f"{TAG}SET SESSION time_zone = '+00:00'")
            if not self.log_lock:
                cur.execute(f"{TAG}SET SESSION sql_log_bin = 0")
        self.renamers = _open_renamers(self, self.moves)
        return self

    def close(self) -> None:
        for conn in (self.a, self.c, self.spare):
            if conn is not None:
                try:
                    conn.close()
                except Exception:  # a killed connection is already gone
                    pass
        for r in self.renamers:
            r.close()

    @property
    def renamed(self) -> bool:
        return any(r.renamed for r in self.renamers)

    # -- the fence -------------------------------------------------------------------
    def lock_sql(self) -> str:
        names = [qualified(m.db, m.table) for m in self.moves] + [qualified(d, t) for d, t in self.locked_only]
        return f"{TAG}LOCK TABLES " + ", ".join(f"{n} WRITE" for n in names)

    def lock(self) -> None:
        """A: LOCK TABLES ... WRITE. From here on writers wait."""
        assert self.a is not None
        with self._state:
            if self.aborted:
                raise FenceError(f"the fence on {self.host.name} was undone; not locking", phase=self.phase)
            self._locking = True
            self._owner = threading.current_thread()
        try:
            if self.lock_wait is not None:
                run_locking(self.a, self.lock_sql(), server=self.host.name, wait=self.lock_wait,
                            tables=[(m.db, m.table) for m in self.moves] + list(self.locked_only),
                            what="the tombstone renames' LOCK TABLES")
            else:
                with self.a.cursor() as cur:
                    cur.execute(self.lock_sql())
        except pymysql.err.OperationalError as exc:
            if self.aborted:
                raise FenceError(f"the fence on {self.host.name} was undone while locking", phase=self.phase) from None
            raise FenceError(
                f"could not lock the moving tables on {self.host.name} within {self.lock_wait_timeout:.0f}s "
                f"({exc.args[-1]}): a long transaction holds them; retry the cutover when it is gone",
                phase=self.phase,
            ) from None
        finally:
            with self._state:
                self._locking = False
        with self._state:
            # an abort that raced the LOCK killed A's connection: its locks are gone with it
            self.locked = not self.aborted
        if self.aborted:
            raise FenceError(f"the fence on {self.host.name} was undone while locking", phase=self.phase)

    def queue_rename(self, timeout: float = 5.0) -> None:
        """B1..Bn: send the RENAMEs; return once the server shows each one waiting behind A."""
        with self._state:
            if self.aborted or not self.locked:
                raise FenceError(f"the fence on {self.host.name} is not locked; not renaming", phase=self.phase)
            for r in self.renamers:
                r.start()
        deadline = time.monotonic() + timeout
        while True:
            failed = [r for r in self.renamers if r.done.is_set()]
            if failed:
                raise FenceError(f"the tombstone RENAME of {failed[0].move.db}.{failed[0].move.table} on "
                                 f"{self.host.name} did not wait for the lock: {failed[0].error or 'it ran'}",
                                 phase=self.phase)
            if self.rename_waiting():
                return
            if time.monotonic() > deadline:
                raise FenceError(f"the tombstone RENAMEs on {self.host.name} never all queued behind the lock",
                                 phase=self.phase)
            time.sleep(0.001)

    def rename_waiting(self) -> bool:
        """Every RENAME is queued on the metadata lock (checked from C)."""
        assert self.c is not None
        ids = [r.conn_id for r in self.renamers]
        marks = ", ".join(["%s"] * len(ids))
        rows = query(self.c, f"SELECT ID, STATE, INFO FROM information_schema.PROCESSLIST WHERE ID IN ({marks})", ids)
        waiting = {r[0] for r in rows if r[2] and "RENAME TABLE" in r[2] and "metadata lock" in (r[1] or "")}
        return waiting == set(ids)

    def release(self, timeout: float = 30.0) -> None:
        """:meth:`unlock`, then :meth:`wait_renamed`: the tables are in the tombstones."""
        self.unlock()
        self.wait_renamed(timeout)

    def unlock(self) -> None:
        """End the clients waiting on the fence, then A: UNLOCK TABLES; each queued RENAME runs before
        any writer of its table. Returns at once: :meth:`wait_renamed` waits for the renames."""
        assert self.a is not None
        self.end_waiters()
        self.unlocked_at = time.monotonic()
        try:
            with self.a.cursor() as cur:
                cur.execute(f"{TAG}UNLOCK TABLES")
            self.locked = False
        except pymysql.err.MySQLError as exc:
            # A's lock must end for the RENAMEs to run: end it with its connection (checked below)
            self._kill_a(f"UNLOCK TABLES failed ({exc.args[-1]}), then ")

    def wait_renamed(self, timeout: float = 30.0) -> None:
        """Wait until every RENAME has run, ending the stale writers queued behind them meanwhile
        (every :data:`SWEEP_INTERVAL_S`); raise if one failed or did not run within ``timeout``."""
        deadline = time.monotonic() + timeout
        for r in self.renamers:
            while not r.done.wait(SWEEP_INTERVAL_S):
                if time.monotonic() > deadline:
                    raise FenceError(f"the tombstone RENAME of {r.move.db}.{r.move.table} on {self.host.name} did "
                                     f"not finish within {timeout:.0f}s", phase=self.phase)
                self.end_waiters()
            if r.error is not None:
                raise FenceError(f"the tombstone RENAME of {r.move.db}.{r.move.table} on {self.host.name} failed: "
                                 f"{r.error}", phase=self.phase)

    def end_waiters(self) -> int:
        """``KILL QUERY ID`` every client statement waiting for the metadata lock of a moving table
        (from C): it fails with 1317 and nothing of it is written. Only statements are ended, by their
        query id, so a client that moved on meanwhile loses nothing; replication threads (not
        ``Query`` commands) and the fence's own connections are never touched. Returns how many were
        ended; a sweep that fails stops sweeping (the writers then wait for the renames, as safe)."""
        if self.c is None or not self.sweeping:
            return 0
        ours = [i for i in (self.a_id, self.c_id, *(r.conn_id for r in self.renamers)) if i is not None]
        marks = ", ".join(["%s"] * len(ours))
        try:
            rows = query(self.c, "SELECT ID, QUERY_ID, DB, INFO FROM information_schema.PROCESSLIST WHERE "
                                 "COMMAND = 'Query' AND STATE = 'Waiting for table metadata lock' "
                                 f"AND ID NOT IN ({marks})", ours)
            ended = 0
            with self.c.cursor() as cur:
                for _id, query_id, db, info in rows:
                    if not self.names_moving(db, info):
                        continue
                    try:
                        cur.execute(f"{TAG}KILL QUERY ID {int(query_id)}")
                        ended += 1
                    except pymysql.err.MySQLError as exc:
                        if not exc.args or exc.args[0] not in (ER_NO_SUCH_QUERY, ER_NO_SUCH_THREAD):
                            raise  # else it ended meanwhile
        except pymysql.err.MySQLError:
            self.sweeping = False
            return 0
        self.waiters_ended += ended
        return ended

    def names_moving(self, db: str | None, info: str | None) -> bool:
        """The statement text ``info`` (run in database ``db``) names a moving table."""
        if not info:
            return False
        if self._names is None:
            by_db: dict[str, set[str]] = {}
            for m in self.moves:
                by_db.setdefault(m.db, set()).add(m.table)
            self._names = {d: _name_pattern(d, tables) for d, tables in by_db.items()}
        return any(p[0].search(info) or (db == d and p[1].search(info)) for d, p in self._names.items())

    def release_times(self) -> dict[str, float]:
        """ms from the UNLOCK until each table's RENAME had run (its writers waited that long), slowest
        first: where the release's time went."""
        if self.unlocked_at is None:
            return {}
        done = [(f"{r.move.db}.{r.move.table}", (r.finished_at - self.unlocked_at) * 1000)
                for r in self.renamers if r.finished_at is not None]
        return {name: round(ms, 1) for name, ms in sorted(done, key=lambda x: -x[1])}

    def abort(self, *, rename_back: bool = True) -> None:
        """Undo the fence: end every started RENAME's connection, wait until the server has ended them,
        unlock, then put back live any table a RENAME moved (read from the server, not from the answers).

        ``rename_back=False`` after a flip (a release that failed midway): a table its RENAME moved stays in
        its tombstone, fenced; only the RENAMEs still pending are ended. Put back live, it would take a stale
        writer's rows on the old master.

        Safe to call from another thread (the watchdog) at any moment, even
        while the main thread is locking or queueing: once it has run, nothing
        can lock or rename any more. It kills connections rather than queries,
        so a RENAME that was about to be sent can never run later; and it
        unlocks only once those connections are gone from the server, since a
        killed RENAME whose lock is granted before its thread wakes still runs
        (:func:`migrator.fleet.mysql.wait_connections_gone`). A RENAME whose
        answer was lost (its connection ended as it ran) is found by the
        tables themselves.
        """
        with self._state:
            self.aborted = True
            started = [r for r in self.renamers if r.started]
            a_busy = self._locking or self.locked
        pending = [r for r in started if not r.done.is_set()]
        if not (started or a_busy):
            return
        with _side_cursor(self) as cur:
            if pending:
                self._end_renamers(cur, pending)
            if a_busy:
                self._unlock_or_kill_a(cur)
            if rename_back and started:
                # before a flip: the tables are live on this master again, whatever the renamers heard
                self._rename_back(cur, started)

    def _end_renamers(self, cur: pymysql.cursors.Cursor, pending: Sequence[_Renamer]) -> None:
        """KILL the pending renamers' connections (one round trip), and wait until the server has ended them."""
        try:  # one round trip: the undo's kills are a freeze's last steps, and clients wait through them
            kill_connections(cur, [int(r.conn_id) for r in pending], TAG)
            refused: Sequence[_Renamer] = []
        except pymysql.err.MySQLError:  # one by one, to name the one refused
            refused = pending
        for r in refused:
            if (exc := kill_connection(cur, int(r.conn_id), TAG)) is not None:
                raise FenceError(
                    f"could not kill the pending tombstone RENAME of {r.move.db}.{r.move.table} on "
                    f"{self.host.name} (thread {r.conn_id}): {exc.args[-1]}; kill that connection by "
                    "hand before anything else, or it renames the table when the lock goes",
                    phase=self.phase)
        left = wait_connections_gone(cur, [int(r.conn_id) for r in pending], timeout=10)
        for r in pending:
            if int(r.conn_id) in left or not r.done.wait(10):
                raise FenceError(f"could not stop the pending RENAME on {self.host.name} (thread {r.conn_id}); "
                                 "kill it by hand before anything else", phase=self.phase)

    def _unlock_or_kill_a(self, cur: pymysql.cursors.Cursor | None = None) -> None:
        """Release A's lock: UNLOCK from A's own thread, else (or if that fails) KILL A's connection."""
        unlock_error = ""
        if self._owner is threading.current_thread() and self.locked:
            try:
                with self.a.cursor() as a_cur:  # type: ignore[union-attr]
                    a_cur.execute(f"{TAG}UNLOCK TABLES")
                self.locked = False
                return
            except pymysql.err.MySQLError as exc:  # the KILL below ends the lock either way
                unlock_error = f"UNLOCK TABLES failed ({exc.args[-1]}), then "
        self._kill_a(unlock_error, cur)

    def _kill_a(self, before: str = "", cur: pymysql.cursors.Cursor | None = None) -> None:
        try:
            with nullcontext(cur) if cur is not None else _side_cursor(self) as kill_cur:
                failed = kill_connection(kill_cur, int(self.a_id or 0), TAG)  # None: gone, and its lock too
        except pymysql.err.MySQLError as exc:  # the side connection itself
            failed = exc
        if failed is not None:
            raise FenceError(f"could not release the fence lock on {self.host.name} (thread {self.a_id}): "
                             f"{before}KILL failed ({failed.args[-1]}); kill that connection by hand",
                             phase=self.phase)
        self.locked = False

    def _rename_back(self, cur: pymysql.cursors.Cursor, started: Sequence[_Renamer]) -> None:
        """Rename back, in one statement, each started move's table found in its tombstone and missing
        under its name (the server's tables, not the renamers' answers, say which)."""
        schemas = sorted({r.move.tomb_db for r in started} | {r.move.db for r in started})
        marks = ", ".join(["%s"] * len(schemas))
        cur.execute("SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
                    f"WHERE TABLE_SCHEMA IN ({marks})", schemas)
        there = {(str(d), str(t)) for d, t in cur.fetchall()}
        back = [r for r in started if (r.move.tomb_db, r.move.table) in there
                and (r.move.db, r.move.table) not in there]
        if back:
            if not self.log_renames:
                cur.execute(f"{TAG}SET SESSION sql_log_bin = 0")
            cur.execute(f"{TAG}RENAME TABLE " + ", ".join(
                f"{qualified(r.move.tomb_db, r.move.table)} TO {qualified(r.move.db, r.move.table)}" for r in back))
        for r in started:
            r.renamed = False


#: connections a fence opens at once for its renamers (their TLS handshakes, not the server, are the cost)
OPEN_PARALLEL = 8


def _open_renamers(fence: Fence, moves: Sequence[Move]) -> list[_Renamer]:
    """One renamer per move, their connections opened :data:`OPEN_PARALLEL` at a time (one fence holds
    up to :data:`MAX_TABLES`); if any fails, the ones opened are closed and the error raised."""
    if len(moves) <= 1:
        return [_Renamer(fence, m) for m in moves]
    with ThreadPoolExecutor(max_workers=min(OPEN_PARALLEL, len(moves)), thread_name_prefix="fence-open") as pool:
        futures = [pool.submit(_Renamer, fence, m) for m in moves]
    failed = [f.exception() for f in futures if f.exception() is not None]
    if failed:
        for f in futures:
            if f.exception() is None:
                f.result().close()
        raise failed[0]  # type: ignore[misc]
    return [f.result() for f in futures]


class _Renamer:
    """One B connection: ``RENAME TABLE db.t TO tomb.t`` sent from its own thread."""

    def __init__(self, fence: Fence, move: Move):
        self.move = move
        self.conn = mark_own(mysql_connect(fence.host, fence.credentials, read_timeout=fence.rename_wait_timeout + 60))
        self.conn_id = int(scalar(self.conn, "SELECT CONNECTION_ID()"))
        with self.conn.cursor() as cur:
            # a RENAME that timed out would leave the source writable after the
            # flip: it must outlive any freeze (the watchdog bounds the freeze)
            cur.execute(f"{TAG}SET SESSION lock_wait_timeout = {int(fence.rename_wait_timeout)}")
            if not fence.log_renames:
                cur.execute(f"{TAG}SET SESSION sql_log_bin = 0")
        self.sql = (f"{TAG}RENAME TABLE {qualified(move.db, move.table)} TO "
                    f"{qualified(move.tomb_db, move.table)}")
        self.started = False
        self.renamed = False
        self.error: BaseException | None = None
        self.done = threading.Event()
        #: when the RENAME returned (monotonic)
        self.finished_at: float | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.started = True
        self._thread = threading.Thread(target=self._run, name=f"fence-rename-{self.move.table}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            with self.conn.cursor() as cur:
                cur.execute(self.sql)
            self.renamed = True
        except BaseException as exc:  # reported through release()/abort()
            self.error = exc
        finally:
            self.finished_at = time.monotonic()
            self.done.set()

    def close(self) -> None:
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            self.conn.close()
        except Exception:  # already gone
            pass


def _name_pattern(db: str, tables: set[str]) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """Patterns for a statement naming one of ``tables`` of ``db``: qualified (``db.t``, either part
    quoted or not), and bare (not qualified: for a statement run in ``db``)."""
    names = "|".join(re.escape(t) for t in sorted(tables, key=len, reverse=True))
    table = rf"(?:`(?:{names})`|(?:{names})(?![\w$`]))"
    qualified_re = re.compile(rf"(?:`{re.escape(db)}`|(?<![\w$`]){re.escape(db)})\s*\.\s*{table}")
    bare = re.compile(rf"(?<![.\w$`]){table}")
    return qualified_re, bare


def take_spare(owner: object, attr: str) -> pymysql.connections.Connection | None:
    """Take the connection an object opened ahead in ``attr`` (once), alive, else None."""
    spare = getattr(owner, attr)
    setattr(owner, attr, None)
    if spare is None:
        return None
    try:
        spare.ping(reconnect=True)  # an idle connection the server closed is opened again
    except pymysql.err.MySQLError:
        return None
    return spare


@contextmanager
def _side_cursor(fence: Fence) -> Iterator[pymysql.cursors.Cursor]:
    """A cursor on a :class:`_side_conn`, closed with it."""
    with _side_conn(fence) as c, c.cursor() as cur:
        yield cur


class _side_conn:
    """A connection for KILLs from another thread (C may be in use): the one opened ahead
    with the fence (no connect inside a freeze's undo), else a fresh one."""

    def __init__(self, fence: Fence):
        self.fence = fence
        self.conn: pymysql.connections.Connection | None = None

    def __enter__(self) -> pymysql.connections.Connection:
        self.conn = take_spare(self.fence, "spare") or mysql_connect(self.fence.host, self.fence.credentials,
                                                                      read_timeout=30)
        return self.conn

    def __exit__(self, *exc: object) -> None:
        if self.conn is not None:
            self.conn.close()
