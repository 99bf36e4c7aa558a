"""Applier lanes: row changes written to the target on several connections at once, in rounds.

Runs in the catch-up worker process, fed by the binlog reader process
(:mod:`migrator.engine.binlog.process`) through :mod:`.tailer`. Every row change
goes to lane ``hash(table, key) % lanes``, so all changes of one key stay in one lane, in binlog order. Within a lane
the changes of one *round* are collapsed per key (the last change of a key
wins: ``REPLACE`` of its after image, or ``DELETE`` by key; an update that
changes the key deletes the old key in the old key's lane), then written in
one target transaction: one multi-row ``DELETE`` and one multi-row
``REPLACE`` per table. Idempotent by key, so replaying from an earlier
position converges.

Rounds are the unit of progress: a round is every change read up to a
position; each lane commits its part; once every lane has committed, the
round's end position is the checkpoint. So the checkpoint is always the
highest position that every lane has committed, and a kill -9 with lanes at
different points of a round replays that round from the previous checkpoint,
harmlessly. While the lanes write round *k*, round *k+1* is collected from the
reader (:meth:`LaneSet.submit` returns at once; :meth:`LaneSet.wait` joins).

Round size and lane count adapt (:class:`~.pacer.Pacer`, which also says when
a round is cut): a round aims at ``round_target_ms`` of writing; the lane count
moves by one at a time toward whichever count gave the best measured row rate.
The statements a lane writes are built in :mod:`.sql`.

Why lanes when one connection already outruns the decoder on small rows: a
lane's round is a wait on the target server (parse, index maintenance, its
binlog); several lanes keep several server threads busy while Python builds
the next statements, which pays off on wide rows, on tables with many
secondary indexes and on machines with more cores than this one.

Fencing token
-------------
A ZooKeeper lock proves nothing to a MySQL server: a tail whose session
expired while it applied keeps its connections and would go on writing beside
the tail that took the lock over, older row images after newer ones. So every
lane transaction carries the tail's :class:`Epoch` and the target checks it in
the same transaction (Kleppmann's fencing token). The target holds one row per
applier (``_migrator_fence.appliers``); a tail raises it to its own token when
it starts (:meth:`Epoch.claim`: the token is the czxid of its applier-lock
node, which grows with every new holder), and each lane transaction begins
with a shared-mode read of that row (``LOCK IN SHARE MODE``) and rolls back
unless it holds this tail's token (:class:`StaleEpoch`).

Why a shared-mode read and not ``UPDATE ... WHERE epoch = mine``: an update
takes the row's exclusive lock, and every lane would wait for the one before
it to commit: one hot row would serialise the lanes. Shared locks do not
conflict with each other, so the lanes still commit side by side; the claim's
exclusive lock waits for the lane transactions in flight (their writes land
before the new tail writes anything) and, queued, holds back any lane
transaction that starts after it, which then reads the new token and rolls
back. The read comes first in the transaction: a lane waiting on the row holds
no other lock yet, so the row adds no deadlock.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pymysql
from tenacity import RetryCallState, Retrying, retry_if_exception, wait_exponential, wait_random_exponential

from migrator.engine.catch_up.pacer import Pacer
from migrator.engine.catch_up.sql import TAG, Target, delete_statements, replace_statements
from migrator.fleet.mysql import close_quietly

log = logging.getLogger(__name__)

#: the target session: explicit zero ids stay zero, TIMESTAMP literals are UTC, no FK checks on replay
SESSION = ("SET SESSION time_zone = '+00:00', foreign_key_checks = 0, "
           "sql_mode = 'NO_AUTO_VALUE_ON_ZERO,NO_ENGINE_SUBSTITUTION'")


#: where fencing tokens live on a target: one row per applier (a migration's tail, or its reverse tail)
EPOCH_SCHEMA = "_migrator_fence"
EPOCH_TABLE = "appliers"
_EPOCH = f"`{EPOCH_SCHEMA}`.`{EPOCH_TABLE}`"


class StaleEpoch(Exception):
    """The target's epoch row does not hold this tail's token: a newer tail took over."""

    def __init__(self, applier: str, mine: int, found: int | None, holder: str = ""):
        super().__init__(f"{applier}: the target holds fencing token {found} ({holder or '?'}), not {mine}")
        self.applier = applier
        self.mine = mine
        self.found = found
        self.holder = holder


@dataclass(frozen=True)
class Epoch:
    """A tail's fencing token on its target, checked in every transaction it writes there.

    ``applier`` names the row (the migration id, ``<id>-rollback`` for a reverse tail),
    ``token`` must grow with every new holder of the applier's lock, ``holder`` is for people.
    """

    applier: str
    token: int
    holder: str = ""

    def claim(self, conn: pymysql.connections.Connection) -> None:
        """Raise the target's token to ours (never lower it); :class:`StaleEpoch` if a newer one is there.

        Waits, on the row's exclusive lock, for the lane transactions of an older tail still
        in flight: they commit (or roll back) before this returns, so none lands after it."""
        with conn.cursor() as cur:
            # made once per target; not again when it exists (DDL on the table would wait for the
            # metadata locks of every lane transaction of an older tail, and stop new ones meanwhile)
            cur.execute(f"{TAG}SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
                        "AND TABLE_NAME = %s", (EPOCH_SCHEMA, EPOCH_TABLE))
            row = cur.fetchone()
            if not row or not row[0]:
                cur.execute(f"{TAG}CREATE DATABASE IF NOT EXISTS `{EPOCH_SCHEMA}`")
                cur.execute(f"{TAG}CREATE TABLE IF NOT EXISTS {_EPOCH} (applier VARBINARY(255) NOT NULL "
                            "PRIMARY KEY, epoch BIGINT UNSIGNED NOT NULL, holder VARCHAR(255) NOT NULL DEFAULT '', "
                            "claimed_at DATETIME(6) NOT NULL) ENGINE=InnoDB")
            # assignments run left to right: holder and claimed_at look at the epoch before it is raised
            cur.execute(f"{TAG}INSERT INTO {_EPOCH} (applier, epoch, holder, claimed_at) "
                        "VALUES (%s, %s, %s, UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE "
                        "holder = IF(VALUES(epoch) > epoch, VALUES(holder), holder), "
                        "claimed_at = IF(VALUES(epoch) > epoch, VALUES(claimed_at), claimed_at), "
                        "epoch = GREATEST(epoch, VALUES(epoch))", (self.applier, self.token, self.holder[:255]))
            cur.execute(f"{TAG}SELECT epoch, holder FROM {_EPOCH} WHERE applier = %s", (self.applier,))
            row = cur.fetchone()
        conn.commit()
        if row is None or int(row[0]) != self.token:
            raise StaleEpoch(self.applier, self.token, None if row is None else int(row[0]),
                             "" if row is None else row[1])

    def check(self, cur: pymysql.cursors.Cursor) -> None:
        """First statement of a transaction: hold the epoch row in share mode until it ends, and
        raise :class:`StaleEpoch` (the caller rolls back) unless it holds our token."""
        cur.execute(f"{TAG}SELECT epoch, holder FROM {_EPOCH} WHERE applier = %s LOCK IN SHARE MODE",
                    (self.applier,))
        row = cur.fetchone()
        if row is None or int(row[0]) != self.token:
            raise StaleEpoch(self.applier, self.token, None if row is None else int(row[0]),
                             "" if row is None else row[1])


# -- one lane's part of a round ---------------------------------------------------------------

class Part:
    """The collapsed changes of one round for one lane: per table, upserts and deletes by key."""

    __slots__ = ("ups", "dels", "ops")

    def __init__(self) -> None:
        self.ups: dict[int, dict[tuple[str, ...], tuple[str, ...]]] = {}
        self.dels: dict[int, dict[tuple[str, ...], None]] = {}
        self.ops = 0

    def upsert(self, tkey: int, key: tuple[str, ...], row: tuple[str, ...]) -> None:
        d = self.dels.get(tkey)
        if d:
            d.pop(key, None)
        u = self.ups.get(tkey)
        if u is None:
            u = self.ups[tkey] = {}
        u[key] = row
        self.ops += 1

    def delete(self, tkey: int, key: tuple[str, ...]) -> None:
        u = self.ups.get(tkey)
        if u:
            u.pop(key, None)
        d = self.dels.get(tkey)
        if d is None:
            d = self.dels[tkey] = {}
        d[key] = None
        self.ops += 1

    def __bool__(self) -> bool:
        return self.ops > 0


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, pymysql.err.OperationalError):
        return bool(exc.args) and exc.args[0] in (1213, 1205, 2006, 2013, 2003)
    return isinstance(exc, pymysql.err.InterfaceError)


#: a deadlock victim writes again almost at once (random 0-2 ms, doubling, at most 10 tries); a lost
#: connection or a lock wait timeout backs off from 50 ms (at most 6 tries)
_WAIT_DEADLOCK = wait_random_exponential(multiplier=0.001, max=0.5)
_WAIT_OTHER = wait_exponential(multiplier=0.05, max=2)
_TRIES_DEADLOCK, _TRIES_OTHER = 10, 6


def _deadlock(state: RetryCallState) -> bool:
    exc = state.outcome.exception() if state.outcome is not None else None
    return isinstance(exc, pymysql.err.OperationalError) and bool(exc.args) and exc.args[0] == 1213


def _retry_wait(state: RetryCallState) -> float:
    """InnoDB has already let the other transaction of a deadlock on, so its victim retries at once
    (a few ms): two lanes' REPLACEs meet in a secondary unique index's gaps now and then, and a retry
    in the drain under the fence counts in the freeze. Other errors back off longer."""
    return _WAIT_DEADLOCK(state) if _deadlock(state) else _WAIT_OTHER(state)


def _retry_stop(state: RetryCallState) -> bool:
    return state.attempt_number >= (_TRIES_DEADLOCK if _deadlock(state) else _TRIES_OTHER)


#: fault injection for tests: lane i waits i times this long before it commits a round, so a kill
#: can land while some lanes have committed the round and others have not
STAGGER_ENV = "MIGRATOR_FAULT_LANE_STAGGER_MS"


class Lane:
    """One target connection and the thread that writes its parts."""

    def __init__(self, index: int, connect: Callable[[], pymysql.connections.Connection],
                 targets: Callable[[int], Target], on_done: Callable[[], None] | None = None,
                 epoch: Epoch | None = None):
        self.index = index
        self.epoch = epoch
        self._on_done = on_done
        self.stagger_s = index * float(os.environ.get(STAGGER_ENV, "0") or 0) / 1000
        self._connect = connect
        self._targets = targets
        self._conn: pymysql.connections.Connection | None = None
        self._work: Part | None = None
        self._cv = threading.Condition()
        self._busy = False
        self._stop = False
        self.error: BaseException | None = None
        self.write_s = 0.0
        self.rows = 0
        #: parts written again after a deadlock, a lock wait timeout or a lost connection; the last cause
        self.retries = 0
        self.last_retry = ""
        #: connections this lane opened (its first, and one after each lost connection)
        self.connects = 0
        self._retrying = Retrying(stop=_retry_stop, wait=_retry_wait,
                                  retry=retry_if_exception(_retryable), reraise=True, before_sleep=self._retried)
        self._thread = threading.Thread(target=self._run, name=f"catchup-lane-{index}", daemon=True)
        self._thread.start()

    @property
    def conn(self) -> pymysql.connections.Connection:
        if self._conn is None or not self._conn.open:
            conn = self._connect()
            self.connects += 1
            conn.autocommit(False)
            with conn.cursor() as cur:
                cur.execute(TAG + SESSION)
                # READ COMMITTED: the lanes' DELETEs and REPLACEs by primary key then lock the rows they
                # touch, not the gaps beside them. Under REPEATABLE READ two lanes writing neighbouring
                # keys of one index (a queue's jobs moving between partitions) deadlocked on next-key
                # locks hundreds of times a minute, each a part written again, in a cutover's drain
                # too. The lanes never read what they write, so nothing else changes. A target that
                # logs statements cannot take READ COMMITTED writes (error 1665): it keeps the default.
                cur.execute("SELECT @@SESSION.binlog_format")
                row = cur.fetchone()
                if row and str(row[0]).upper() in ("ROW", "MIXED"):
                    cur.execute(f"{TAG}SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            conn.commit()
            self._conn = conn
        return self._conn

    @property
    def busy(self) -> bool:
        return self._busy

    def _retried(self, state: Any) -> None:
        self.retries += 1
        exc = state.outcome.exception() if state.outcome is not None else None
        self.last_retry = f"{type(exc).__name__}: {exc}"[:200]

    def give(self, part: Part) -> None:
        with self._cv:
            self._work = part
            self._busy = True
            self._cv.notify_all()

    def join(self) -> None:
        with self._cv:
            self._cv.wait_for(lambda: not self._busy)
        if self.error is not None:
            err, self.error = self.error, None
            raise err

    def close(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        self._thread.join(timeout=30)
        close_quietly(self._conn)
        self._conn = None

    def _run(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(lambda: self._work is not None or self._stop)
                if self._stop:
                    return
                part, self._work = self._work, None
            try:
                t0 = time.monotonic()
                for attempt in self._retrying:
                    with attempt:
                        self._write(part)  # type: ignore[arg-type]
                self.write_s += time.monotonic() - t0
                self.rows += part.ops  # type: ignore[union-attr]
            except BaseException as exc:  # noqa: BLE001 - raised in the coordinator by join()
                self.error = exc
            finally:
                part = None  # written: its rows are not held while the next round is collected
                with self._cv:
                    self._busy = False
                    self._cv.notify_all()
                if self._on_done is not None:
                    self._on_done()

    def _write(self, part: Part) -> None:
        conn = self.conn
        try:
            with conn.cursor() as cur:
                if self.epoch is not None:
                    self.epoch.check(cur)  # before any write: a stale tail writes nothing
                for tkey, keys in part.dels.items():
                    if keys:
                        t = self._targets(tkey)
                        for sql in delete_statements(t, list(keys)):
                            cur.execute(sql)
                for tkey, rows in part.ups.items():
                    if rows:
                        t = self._targets(tkey)
                        for sql in replace_statements(t, rows.values()):
                            if isinstance(sql, bytes):  # a wide row: a cursor of its own lets the
                                with conn.cursor() as wide:  # statement go once it is written
                                    wide.execute(sql)
                            else:
                                cur.execute(sql)
                            del sql  # not held while the next statement is built (wide rows)
            if self.stagger_s:
                time.sleep(self.stagger_s)
            conn.commit()
        except BaseException:
            try:
                conn.rollback()
            except Exception:  # noqa: BLE001 - the connection is gone: reconnect on retry
                self._conn = None
            raise


# -- the set of lanes -------------------------------------------------------------------------------

class LaneSet:
    """The lanes, the round being collected and the round being written."""

    def __init__(self, connect: Callable[[], pymysql.connections.Connection], targets: Callable[[int], Target],
                 pacer: Pacer | None = None, epoch: Epoch | None = None):
        self._connect = connect
        self._targets = targets
        #: the tail's fencing token, checked by every lane transaction (None: unchecked)
        self.epoch = epoch
        self.pacer = pacer or Pacer()
        self._lanes: list[Lane] = []
        #: a byte is written here whenever a lane finishes its part: the coordinator can wait on it
        #: beside the reader's pipe (:attr:`wake_fd`) instead of blocking on a round in flight
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._ensure(self.pacer.lanes)
        self.parts = [Part() for _ in range(self.pacer.lanes)]
        self.rows = 0
        #: bytes of row events the collected round's changes were read from (:meth:`add_bytes`)
        self.bytes = 0
        self._inflight = False
        self._inflight_rows = 0
        self._inflight_started = 0.0
        self._inflight_cut_by_size = False
        self.rounds = 0
        self.write_s = 0.0
        #: ms the last round took, from its hand-over to the lanes until every lane had committed it
        self.last_round_ms = 0.0

    def _ensure(self, n: int) -> None:
        while len(self._lanes) < n:
            self._lanes.append(Lane(len(self._lanes), self._connect, self._targets, self.wake, self.epoch))

    @property
    def lanes(self) -> int:
        return len(self.parts)

    @property
    def wake_fd(self) -> int:
        """Readable once a lane has finished its part since :meth:`clear_wake` (select/poll on it)."""
        return self._wake_r

    def clear_wake(self) -> None:
        try:
            while os.read(self._wake_r, 4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def wake(self) -> None:
        """Make :attr:`wake_fd` readable (a lane finished its part, or the tail is asked to stop)."""
        try:
            os.write(self._wake_w, b"x")
        except (BlockingIOError, OSError):  # full (nobody waits) or closed: the state is in busy()
            pass

    # -- collecting ------------------------------------------------------------------------------
    def add(self, tkey: int, tname: Any, kind: str, key: tuple[str, ...], old_key: tuple[str, ...] | None,
            row: tuple[str, ...] | None) -> None:
        parts = self.parts
        n = len(parts)
        if old_key is not None:
            parts[hash((tname, old_key)) % n].delete(tkey, old_key)
        p = parts[hash((tname, key)) % n]
        if row is None:
            p.delete(tkey, key)
        else:
            p.upsert(tkey, key, row)
        self.rows += 1

    def pending(self) -> int:
        return self.rows

    def add_bytes(self, n: int) -> None:
        """The changes just added were read from ``n`` bytes of row events (the round's byte bound)."""
        self.bytes += n

    # -- writing ----------------------------------------------------------------------------------
    def submit(self, *, cut_by_size: bool = False) -> None:
        """Hand the collected round to the lanes (after the previous one committed) and start a new one."""
        self.wait()
        parts = self.parts
        n_rows = self.rows
        if n_rows:
            self._ensure(len(parts))
            for lane, part in zip(self._lanes, parts):
                if part:
                    lane.give(part)
            self._inflight = True
            self._inflight_rows = n_rows
            self._inflight_started = time.monotonic()
            self._inflight_cut_by_size = cut_by_size
        self.parts = [Part() for _ in range(self.pacer.lanes)]
        self.rows = 0
        self.bytes = 0

    @property
    def inflight(self) -> bool:
        """A round was handed to the lanes and not yet waited for (it may be written already)."""
        return self._inflight

    def busy(self) -> bool:
        """A round is in flight and some lane is still writing it (never blocks)."""
        return self._inflight and any(lane.busy for lane in self._lanes)

    def wait(self) -> bool:
        """Wait for the round in flight; True if one was in flight (and is now committed)."""
        if not self._inflight:
            return False
        self._inflight = False
        errors = []
        for lane in self._lanes:
            try:
                lane.join()
            except BaseException as exc:  # noqa: BLE001 - the first one is raised below
                errors.append(exc)
        if errors:
            raise errors[0]
        ms = (time.monotonic() - self._inflight_started) * 1000
        self.last_round_ms = ms
        self.write_s += ms / 1000
        self.rounds += 1
        self.pacer.after_round(self._inflight_rows, ms, self._inflight_cut_by_size)
        return True

    def close(self) -> None:
        for lane in self._lanes:
            lane.close()
        self._lanes = []
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
        self._wake_r = self._wake_w = -1

    @property
    def last_retry(self) -> str:
        return next((ln.last_retry for ln in self._lanes if ln.last_retry), "")

    @property
    def connects(self) -> int:
        """Connections the lanes opened so far."""
        return sum(ln.connects for ln in self._lanes)

    @property
    def retries(self) -> int:
        """Parts written again (deadlock or lock wait timeout) by all lanes so far."""
        return sum(ln.retries for ln in self._lanes)

