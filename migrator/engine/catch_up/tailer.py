"""The tailer: a long-lived binlog tail from a source master into a target master.

Runs inside the catch-up worker (one across passes), in the cutover process
for the final drain under the write fence, and in a rollback (new master back
into the tombstone schemas, ``schema_map``).

Layout::

    reader process --(decoded transactions, positions)--> coordinator --(rounds)--> lanes
    (migrator.engine.binlog)                               (this module)              (.lanes)

The reader process (:mod:`migrator.engine.binlog.process`) reads and decodes
the binlog ahead, so decoding never waits for a commit on the target. The
coordinator routes every row change to its lane, cuts rounds, and calls back
with a checkpoint only once every lane has committed a round: a crash replays
from the last checkpoint, which the idempotent apply makes harmless. The
:class:`Tailer` keeps what lasts across its apply calls (the reader process,
the lanes, the connections, the fencing token, the applied position); each
:meth:`Tailer.apply_until` call runs the coordinator's loop as one
:class:`_Apply`, which owns that call's rounds and its :class:`TailStats`.
Statements (partition maintenance, index changes; :mod:`.statements`) are
barriers: the rounds before them are committed first, then the statement runs
on the target, then the tail goes on.

With a fencing token (``epoch``, :class:`~migrator.engine.catch_up.lanes.Epoch`)
the tail claims it on the target before it writes anything, every lane
transaction checks it, and a statement runs while another connection holds the
epoch row in share mode (a statement commits by itself, so it cannot check the
row in its own transaction; the shared lock keeps a newer tail's claim waiting
until the statement is done, and a statement of a tail that lost its claim is
refused). A tail that finds a newer token stops with :class:`StaleApplier`.

How fast it applies, against a native replica (one SQL thread, and four parallel
optimistic threads) on the same backlog: ``python -m bench.catchup``, with the
figures and where the time goes in docs/performance.md.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from multiprocessing.connection import wait as mp_wait
from typing import Any

import pymysql
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_fixed

from migrator.engine.binlog import process as rproc
from migrator.engine.binlog import reader as rd
from migrator.engine.binlog.messages import Failure, Format, Shapes, Tick, Txns
from migrator.engine.catch_up import fast
from migrator.engine.catch_up.keys import ChangedKeys
from migrator.engine.catch_up.lanes import Epoch, LaneSet, StaleEpoch
from migrator.engine.catch_up.pacer import Cut, Pacer, pacer_from_env
from migrator.engine.catch_up.sql import Target, target_for
from migrator.engine.catch_up.statements import apply_statement, classify, source_definitions
from migrator.errors import MigratorError
from migrator.fleet import mysql
from migrator.fleet.config import Credentials
from migrator.fleet.gtid import GtidPos, GtidState
from migrator.fleet.model import Host
from migrator.fleet.mysql import binlog_pos, ident

log = logging.getLogger(__name__)

#: the apply paths a tail can be told to take (:attr:`Tailer.path`)
APPLY_PATHS = ("auto", "row", "fast")


def _lock_wait_timeout(exc: BaseException) -> bool:
    return isinstance(exc, pymysql.err.OperationalError) and bool(exc.args) and exc.args[0] == 1205


class CatchUpError(MigratorError):
    component = "catch_up"


class DrainTimeout(CatchUpError):
    """The target GTID was not applied within the drain's time limit."""

    #: what the call applied meanwhile (None: not known), which a wait made of several drains counts in
    #: (:func:`~migrator.engine.verify.waits.drain_progressing`)
    stats: TailStats | None = None


class CatchUpConflict(CatchUpError):
    """Someone else applies this migration's binlog (or wrote its checkpoint) meanwhile: two tails run."""

    exit_code = 3


class StaleApplier(CatchUpConflict):
    """This tail lost its claim (its applier lock, its fencing token): a newer tail applies now."""


def stale_message(applier: str, target: str, detail: str) -> str:
    return (f"{applier}: this tail lost its right to apply to {target} ({detail}); another tail took over "
            "(this one's ZooKeeper session expired, so its applier lock went with it). It stops here: its "
            "last round was rolled back and nothing of it landed; the other tail goes on from the checkpoint")


@dataclass
class TailStats:
    """What one :meth:`Tailer.apply_until` call did."""

    start: str
    end: str
    reached: bool
    events: int = 0
    transactions: int = 0
    bytes: int = 0
    statements: int = 0
    rounds: int = 0
    duration_s: float = 0.0
    first_ts: int = 0  # binlog timestamp of the first kept transaction (0: none)
    last_ts: int = 0
    lanes: int = 0
    #: seconds until the reader had delivered everything up to the target (the rest is applying it)
    read_s: float = 0.0
    #: seconds spent handing checkpoints to ``on_checkpoint`` (ZooKeeper writes)
    save_s: float = 0.0
    #: seconds until the last round went to the lanes (the rest is its commit)
    submit_s: float = 0.0
    #: seconds until the reader process sent the last transactions (``read_s`` is when they were taken)
    sent_s: float = 0.0
    #: lane parts written again after a deadlock, a lock wait timeout or a lost connection, and the last cause
    retries: int = 0
    retry_cause: str = ""
    #: (the cutover's drain) seconds until a following tail had applied the target, and until it had stopped
    reached_s: float = 0.0
    stopped_s: float = 0.0
    #: lane connections opened during the call; ms of the last round (hand-over to every lane's commit)
    connects: int = 0
    last_round_ms: float = 0.0
    #: which apply path applied the call: ``row`` (decoded rows as SQL, :mod:`.lanes`), ``fast`` (the
    #: source's rows events through the server's own applier, :mod:`.fast`), or ``fast+row`` (the fast
    #: path stopped and the row path went on); ``fast_failure``: why it stopped (table, GTID, error)
    path: str = "row"
    fast_failure: dict[str, Any] | None = None
    #: windows of the fast path the target refused and that were written again as SQL by key (table, GTID,
    #: error of each): rows a re-check or verify re-copied ahead of the tail (:meth:`.fast.FastApplier.add`)
    fast_replays: list[dict[str, Any]] = field(default_factory=list)

    def absorb(self, earlier: TailStats) -> None:
        """Count in what an earlier part of the same call did (the fast path, before it stopped)."""
        self.start = earlier.start
        for name in ("events", "transactions", "bytes", "statements", "rounds"):
            setattr(self, name, getattr(self, name) + getattr(earlier, name))
        self.first_ts = earlier.first_ts or self.first_ts
        self.fast_replays = earlier.fast_replays + self.fast_replays

    def and_then(self, later: TailStats) -> TailStats:
        """This call and ``later``, the next call of the same wait (the slices of a long drain:
        :func:`~migrator.engine.verify.waits.drain_progressing`), as one call: the work, time and retries of
        both, ending where ``later`` ended; a time counted from the start of a call is counted from this
        one's start (``later``'s plus this call's duration, or this call's when ``later`` saw none)."""

        def from_start(name: str) -> float:
            mine, theirs = getattr(self, name), getattr(later, name)
            return self.duration_s + theirs if theirs else mine

        return replace(
            later, start=self.start,
            **{name: getattr(self, name) + getattr(later, name)
               for name in ("events", "transactions", "bytes", "statements", "rounds", "duration_s", "save_s",
                            "retries", "connects")},
            **{name: from_start(name) for name in ("read_s", "submit_s", "sent_s", "reached_s", "stopped_s")},
            first_ts=self.first_ts or later.first_ts, last_ts=later.last_ts or self.last_ts,
            lanes=max(self.lanes, later.lanes), retry_cause=later.retry_cause or self.retry_cause,
            path=later.path if later.path == self.path else "fast+row",
            fast_failure=later.fast_failure or self.fast_failure, fast_replays=self.fast_replays + later.fast_replays)

    def drain_record(self) -> dict[str, Any]:
        """Where a drain's time went, as a cutover attempt records it (``events``: row changes read;
        ``*_ms``: from the start of the call until the reader sent / the tail took the last
        transactions, the last round left for the lanes, and the time spent saving checkpoints)."""
        return {"events": self.events, "rounds": self.rounds, "lanes": self.lanes,
                "sent_ms": round(self.sent_s * 1000, 1), "read_ms": round(self.read_s * 1000, 1),
                "submit_ms": round(self.submit_s * 1000, 1), "save_ms": round(self.save_s * 1000, 1),
                "reached_ms": round(self.reached_s * 1000, 1), "stopped_ms": round(self.stopped_s * 1000, 1),
                "last_round_ms": round(self.last_round_ms, 1), "lane_connects": self.connects,
                "lane_retries": self.retries, "lane_retry_cause": self.retry_cause, "path": self.path}


@dataclass
class _Rounds:
    """Where the round being collected and the round being written end (reader positions, and the
    reader's state there: the last transaction read of each (domain, server))."""

    collect_pos: str | None = None
    inflight_pos: str | None = None
    collect_state: GtidState = GtidState()
    inflight_state: GtidState = GtidState()
    started: float = 0.0

    def covers(self, want: GtidState) -> bool:
        """The rounds read so far reach ``want``: committing them is all that is left."""
        for p, st in ((self.collect_pos, self.collect_state), (self.inflight_pos, self.inflight_state)):
            if p is not None and st.reaches(want):
                return True
        return False


class Tailer:
    """A long-lived binlog tail from ``source`` into ``target``.

    ``schema_map``: source schema -> target schema; its keys are the schemas
    read. ``tables``: only these tables of those schemas (None: all).
    ``on_checkpoint(pos)`` is called after each round every lane committed,
    with the position whose every transaction is now applied (:attr:`applied_state`
    says the same per (domain, server): what decides whether a target is reached,
    exact in every GTID layout; :mod:`migrator.fleet.gtid`).

    Keep one open across several calls (passes, then the cutover's drain): the
    reader process, the lanes' connections and the source control connection
    are opened once.
    """

    def __init__(self, source: Host, target: Host, credentials: Credentials, *, start: GtidPos,
                 start_state: GtidState | str | None = None,
                 schema_map: Mapping[str, str], tables: Iterable[str] | None = None,
                 on_checkpoint: Callable[[GtidPos], None] | None = None, pacer: Pacer | None = None,
                 idle_checkpoint_s: float = 1.0, heartbeat_s: float = 0.25, checkpoint_every_s: float = 0.5,
                 epoch: Epoch | None = None, fast_from: GtidState | str | None = None, path: str = "auto"):
        self.source = source
        if path not in APPLY_PATHS:
            raise ValueError(f"apply path {path!r}: one of {', '.join(APPLY_PATHS)}")
        #: ``auto``: the fast path from ``fast_from`` on (the position verify proved equal; None: never),
        #: ``row``: never, ``fast``: from the start (the target is known equal there: benchmarks)
        self.path = path
        self.fast_from = GtidState.of(fast_from) if isinstance(fast_from, str) else fast_from
        #: the fast path's applier while it applies (None: the row path applies)
        self._fast: fast.FastApplier | None = None
        #: why the fast path stopped for this tail (it stays on the row path from then on)
        self.fast_failure: dict[str, Any] | None = None
        self._row_part_bytes: int | None = 0
        #: the fencing token every write of this tail to the target carries (None: unfenced)
        self.epoch = epoch
        self._claimed = False
        self._epoch_conn: pymysql.connections.Connection | None = None
        self.target = target
        self.schema_map = dict(schema_map)
        self.tables = set(tables) if tables else None
        self.on_checkpoint = on_checkpoint
        self.idle_checkpoint_s = idle_checkpoint_s
        self.checkpoint_every_s = checkpoint_every_s
        self._saved_text = str(start)  # the last position handed to on_checkpoint
        self._saved_at = 0.0
        #: seconds spent in ``on_checkpoint`` so far
        self.save_s = 0.0
        self._credentials = credentials
        self.applied = start
        self._applied_text = str(start)
        #: the last applied transaction of each (domain, server); ``start_state`` is what the tail that
        #: saved ``start`` had (a saved checkpoint's ``state``), else what ``start`` itself names
        self._seen = GtidState.of(start, start_state)
        #: notified whenever ``applied`` moves (and by whoever stops waiting on the tail)
        self.applied_changed = threading.Condition()
        #: row changes read so far (all calls)
        self.events_read = 0
        #: when the reader last delivered transactions, and when a round last went to the lanes (monotonic)
        self.last_txns_at = 0.0
        self.last_submit_at = 0.0
        #: when the reader process sent the last transactions it delivered (monotonic, its clock is ours)
        self.last_txns_sent_at = 0.0
        self.reader_spec = rproc.ReaderSpec(source.address, source.port, credentials.mysql_user,
                                         credentials.mysql_password, str(start), tuple(sorted(self.schema_map)),
                                         tuple(sorted(self.tables)) if self.tables else None, heartbeat_s=heartbeat_s,
                                         tls=mysql.tls_of(source, credentials))
        self._shapes: dict[int, rd.Shape] = {}
        self._targets: dict[int, Target] = {}
        self._stmt_conn: pymysql.connections.Connection | None = None
        self._source_conn: Any = None
        self.lanes = LaneSet(self._connect_target, self._target, pacer or pacer_from_env(), epoch=epoch)
        self._proc: Any = None
        self._pipe: Any = None
        self._pending: list[Txns | Tick] = []  # messages read, not yet applied
        self._last_checkpoint_at = time.monotonic()
        #: keys of changes to these (source schema, table) since :meth:`collect`, as SQL literal tuples
        self._collect: ChangedKeys | None = None

    # -- connections ---------------------------------------------------------------------
    def _connect_target(self) -> pymysql.connections.Connection:
        return mysql.connect(self.target, self._credentials, autocommit=False, read_timeout=600)

    def _statement_conn(self) -> pymysql.connections.Connection:
        if self._stmt_conn is None or not self._stmt_conn.open:
            conn = self._connect_target()
            with conn.cursor() as cur:
                cur.execute("/* migrator:catchup */ SET SESSION time_zone = '+00:00'")
            self._stmt_conn = conn
        return self._stmt_conn

    # -- the fencing token ---------------------------------------------------------------------
    def _claim(self) -> None:
        """Raise the target's token to ours before the first write (once per tail)."""
        if self.epoch is None or self._claimed:
            return
        # the claim waits for an older tail's transactions in flight (a long statement among them can
        # outlast innodb_lock_wait_timeout): try again a few times before giving up
        for attempt in Retrying(stop=stop_after_attempt(5), wait=wait_fixed(1.0), reraise=True,
                                retry=retry_if_exception(_lock_wait_timeout)):
            with attempt:
                conn = self._statement_conn()
                try:
                    self.epoch.claim(conn)
                except BaseException:
                    try:
                        conn.rollback()
                    except Exception:  # noqa: BLE001 - a broken connection is opened again on retry
                        self._stmt_conn = None
                    raise
        self._claimed = True

    def _hold_epoch(self) -> pymysql.connections.Connection | None:
        """Begin a transaction holding the epoch row in share mode (checked: :class:`StaleEpoch`);
        the caller commits it once the statement it protects has run."""
        if self.epoch is None:
            return None
        if self._epoch_conn is None or not self._epoch_conn.open:
            self._epoch_conn = self._connect_target()
        conn = self._epoch_conn
        try:
            with conn.cursor() as cur:
                self.epoch.check(cur)
        except BaseException:
            conn.rollback()
            raise
        return conn

    def _stale(self, exc: StaleEpoch) -> StaleApplier:
        return StaleApplier(stale_message(exc.applier, self.target.name, f"the target holds fencing token "
                                          f"{exc.found} of {exc.holder or 'another tail'}, this tail's is {exc.mine}"))

    def _source(self) -> pymysql.connections.Connection:
        if self._source_conn is None or not self._source_conn.open:
            self._source_conn = mysql.connect(self.source, self._credentials)
        return self._source_conn

    def source_head(self) -> GtidPos:
        """The source's ``@@gtid_binlog_pos`` now (one query on a kept connection)."""
        for attempt in range(2):
            try:
                if self._source_conn is None or not self._source_conn.open:
                    self._source_conn = mysql.connect(self.source, self._credentials)
                return binlog_pos(self._source_conn)
            except MigratorError:
                raise
            except Exception as exc:  # noqa: BLE001 - a dropped connection is retried once
                self._source_conn = None
                if attempt:
                    raise CatchUpError(f"cannot read @@gtid_binlog_pos on {self.source.name}: {exc}") from None
        raise AssertionError("unreachable")

    # -- the reader process ------------------------------------------------------------------
    def _open(self) -> None:
        if self._proc is None:
            self.reader_spec.start = self._applied_text
            self._proc, self._pipe = rproc.start_reader(self.reader_spec)

    def _close_reader(self) -> None:
        if self._pipe is not None:
            self._pipe.close()
        if self._proc is not None:
            # it only reads the source and writes the pipe, which is closed: nothing of it is worth waiting
            # for, and it would notice the closed pipe only at its next binlog heartbeat (about 0.5 s: the
            # time every drainer's close took)
            try:
                self._proc.terminate()
                self._proc.wait(timeout=2)
            except Exception:  # noqa: BLE001 - it did not stop by itself
                self._proc.kill()
                self._proc.wait(timeout=5)
        self._proc = self._pipe = None
        self._pending.clear()
        # a new reader numbers its table shapes from 1 again: what was cached by the old one's numbers goes
        self._shapes.clear()
        self._targets.clear()

    def _message_ready(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for the reader's next message. The wait also ends (False) when a
        lane finishes, so the coordinator sends the next round at once instead of blocking on the
        one in flight or sleeping out its poll, and on :meth:`wake` (a stop flag was set)."""
        assert self._pipe is not None
        lanes = self.lanes
        if lanes.inflight and not lanes.busy():
            # a round written and not yet checkpointed: nothing to wait for but a message already there
            return bool(self._pipe.poll(0.0))
        reader = self._pipe.reader
        got = mp_wait([reader, self.lanes.wake_fd], max(0.0, timeout))
        self.lanes.clear_wake()
        return reader in got

    def wake(self) -> None:
        """End the coordinator's wait for the reader now (from another thread: it then looks at the
        ``stop`` flag of :meth:`apply_until` at once, not after its next poll)."""
        self.lanes.wake()

    def _receive(self, timeout: float) -> bool:
        """Take the reader's next message; False when none came within ``timeout`` (or a lane
        finished meanwhile)."""
        assert self._pipe is not None
        if not self._message_ready(timeout):
            if self._proc is not None and self._proc.poll() is not None:
                code = self._proc.returncode
                self._close_reader()
                raise CatchUpError(f"the binlog reader process of {self.source.name} died (exit code {code}); "
                                   "resume from the checkpoint (`migrator resume ID`)")
            return False
        try:
            msg = self._pipe.recv()
        except EOFError:
            self._close_reader()
            raise CatchUpError(f"the binlog reader process of {self.source.name} closed its pipe") from None
        match msg:
            case Txns(sent_at=sent_at):
                self._pending.append(msg)
                self.last_txns_at = time.monotonic()
                self.last_txns_sent_at = sent_at
            case Tick() | Format():
                self._pending.append(msg)
            case Shapes(shapes):
                for sh in shapes:
                    self._shapes[sh.id] = sh
            case Failure(message, code):
                self._close_reader()
                if code == 1236:
                    raise CatchUpError(
                        f"{self.source.name} can no longer stream from {self._applied_text or 'the beginning'}: "
                        f"{message}. The binlog it needs is gone (purged?); the copy has to be redone "
                        "(`migrator restart-copy ID`)")
                raise CatchUpError(f"reading the binlog of {self.source.name} from {self._applied_text}: {message}")
        return True

    # -- targets -----------------------------------------------------------------------------
    def target_schema(self, schema: str) -> str:
        return self.schema_map.get(schema, schema)

    def _target(self, shape_id: int) -> Target:
        t = self._targets.get(shape_id)
        if t is None:
            sh = self._shapes[shape_id]
            conn = self._statement_conn()
            t = target_for(conn, self.target_schema(sh.schema), sh.table, sh.names, sh.key_names, ident)
            conn.commit()
            self._targets[shape_id] = t
        return t

    # -- key collection (the cutover's compare) -------------------------------------------------
    def collect(self, tables: Iterable[tuple[str, str]]) -> None:
        """From now on, remember the keys of every change to these (source schema, table)."""
        self._collect = ChangedKeys(tables)

    def collected(self) -> dict[tuple[str, str], set[tuple[str, ...]]]:
        return {} if self._collect is None else self._collect.copy()

    # -- applying ------------------------------------------------------------------------------
    @staticmethod
    def _wanted(target: GtidPos | GtidState | str) -> GtidState:
        """A target of :meth:`reached` or :meth:`drain_to` as the GTIDs it names: a position (e.g. a head
        read from the source), a state (``@@gtid_binlog_state``), or either's text (a record, the
        :class:`~migrator.engine.verify.drainers.Drainer` protocol). The one place they are converted."""
        return target if isinstance(target, GtidState) else GtidState.of(target)

    @property
    def applied_state(self) -> GtidState:
        """The last applied transaction of each (domain, server) (:class:`~migrator.fleet.gtid.GtidState`)."""
        return self._seen

    def reached(self, target: GtidPos | GtidState | str) -> bool:
        """Every transaction of ``target`` (a position, e.g. a head read from the source, or a state)
        is applied: exact in every GTID layout, unlike comparing positions per domain."""
        return self._seen.reaches(self._wanted(target))

    def _checkpoint(self, pos: str, state: GtidState | None = None) -> None:
        if pos == self._applied_text and not state:
            return
        self._applied_text = pos
        with self.applied_changed:
            self.applied = GtidPos.parse(pos)
            self._seen = GtidState.of(self._seen, pos, state)
            self.applied_changed.notify_all()
        self._last_checkpoint_at = time.monotonic()
        self._save()

    def _save(self, *, force: bool = False) -> None:
        """Hand the committed position to ``on_checkpoint`` (a ZooKeeper write): at most every
        ``checkpoint_every_s`` while the tail runs, and always when an apply call ends. A crash
        replays from the last saved position, which the idempotent apply makes harmless; saving
        every round cost a synchronous ZooKeeper write (an fsync on its side) per round."""
        if self.on_checkpoint is None or self._saved_text == self._applied_text:
            return
        now = time.monotonic()
        if not force and now - self._saved_at < self.checkpoint_every_s:
            return
        self.on_checkpoint(self.applied)
        self._saved_text, self._saved_at = self._applied_text, now
        self.save_s += time.monotonic() - now

    def apply_until(self, until: GtidState | None, *, timeout_s: float | None = None,
                    stop: threading.Event | None = None, save: bool = True) -> TailStats:
        """Apply every kept transaction up to and including ``until`` (None: until the timeout),
        checkpointing after each committed round (a target position, e.g. a head read from the
        source, is given as ``GtidState.of(pos)``: its GTIDs). Returns once ``until`` is committed and
        checkpointed, or at the timeout or once ``stop`` is set (``reached`` False), with
        everything read so far committed.

        ``save=False``: the committed position is not handed to ``on_checkpoint`` on return
        (the next call or :meth:`close` does it). The cutover's drains under the fence use it:
        a saved checkpoint only bounds what a crash replays, so it need not cost a ZooKeeper
        write inside the freeze."""
        if save:  # never inside a freeze (its drains do not save): going over restarts the reader process
            self._choose_path()
        self._open()
        call: _Apply | fast.FastApply
        if self._fast is not None:
            call = fast.FastApply(self, self._fast, until, timeout_s, stop,
                                  TailStats(start=self._applied_text, end="", reached=False, path="fast"))
        else:
            call = _Apply(self, until, timeout_s, stop)
        saved0, retries0 = self.save_s, self.lanes.retries
        try:
            self._claim()
            try:
                call.run()
            except fast.FastApplyFailed as failed:
                left = None if timeout_s is None else max(0.0, timeout_s - (time.monotonic() - call.t0))
                self._fall_back(failed)
                done = call.stats
                call = _Apply(self, until, left, stop, t0=call.t0)
                call.stats.absorb(done)
                call.stats.path, call.stats.fast_failure = "fast+row", failed.record()
                call.run()
            if save:
                self._save(force=True)
        except BaseException as failure:
            try:
                self.lanes.wait()
            except Exception as exc:  # noqa: BLE001 - the first error is the one reported
                log.warning("a round in flight failed too: %s", exc)
            if isinstance(failure, StaleEpoch):
                raise self._stale(failure) from None
            raise
        stats = call.stats
        if stats.fast_failure is None and self.fast_failure is not None:
            stats.fast_failure = self.fast_failure  # the row path applies because the fast path was refused
        stats.reached = until is None or self._seen.reaches(until)
        stats.end = self._applied_text
        stats.duration_s = time.monotonic() - call.t0
        stats.lanes = self.lanes.lanes
        stats.save_s = self.save_s - saved0
        stats.retries = self.lanes.retries - retries0
        stats.retry_cause = self.lanes.last_retry if stats.retries else ""
        return stats

    # -- the apply path ------------------------------------------------------------------------------
    def _choose_path(self) -> None:
        """Between two apply calls: go over to the fast path once the tail has passed ``fast_from``
        (everything up to there committed: the row path's calls end settled). The reader process starts
        again from the applied position, now forwarding rows events whole; if the target recorded a
        later position of this applier's fast path (a kill -9 after its commit, before the checkpoint
        reached ZooKeeper), the tail resumes there: a strict apply never sees a committed event twice."""
        if self._fast is not None or self.path == "row" or self.fast_failure is not None:
            return
        if self.path == "auto" and (self.fast_from is None or not self._seen.reaches(self.fast_from)):
            return
        conn = self._statement_conn()
        if not fast.may_replay(conn):
            self.fast_failure = {"table": "", "gtid": "", "code": 1227, "error": (
                f"the migration user lacks BINLOG REPLAY on {self.target.name}: the row path applies (GRANT BINLOG "
                "REPLAY ON *.* to it for the fast path)")}
            log.warning("%s", self.fast_failure["error"])
            return
        self._close_reader()
        applier = self.epoch.applier if self.epoch is not None else \
            f"tail {self.source.name}->{self.target.name} {','.join(sorted(self.schema_map))}"[:255]
        found = fast.recorded(conn, applier)
        if found is not None:
            pos, state = found
            if state.reaches(self._seen) and not self._seen.reaches(state):
                log.info("the target recorded this tail's fast path up to %s: resuming there", pos)
                self._checkpoint(str(pos), state)
        limit = fast.packet_limit(conn)
        spec = self.reader_spec
        self._row_part_bytes = spec.part_bytes
        # smaller parts: the target starts applying a large transaction while the reader still reads it
        # (the parts of one source transaction go into one target transaction on this path)
        spec.part_bytes = min(spec.part_bytes or rd.part_bytes_from_env(), fast.PART_BYTES)
        spec.raw, spec.raw_max = True, limit - (64 << 10)
        self._fast = fast.FastApplier(self, applier, self.epoch, limit)

    def _fall_back(self, failed: fast.FastApplyFailed) -> None:
        """The fast path stopped (:class:`~.fast.FastApplyFailed`): the reader starts again, decoding rows,
        from the last committed position, and the row path applies from there (idempotently: the
        window the fast path rolled back is replayed), for the rest of this tail."""
        log.warning("%s", failed)
        self.fast_failure = failed.record()
        if self._fast is not None:
            self._fast.rollback()
            self._fast.close()
        self._fast = None
        self._close_reader()
        self.reader_spec.raw, self.reader_spec.raw_max = False, 0
        self.reader_spec.part_bytes = self._row_part_bytes
        self._open()

    def _reader_has_more(self) -> bool:
        """Messages read and not yet dispatched, or one waiting in the pipe (never blocks)."""
        return bool(self._pending) or bool(self._pipe.poll(0))

    def _add_rows(self, changes: list[rd.Change]) -> None:
        """Hand row changes to the lanes' round being collected (and their keys to :meth:`collect`)."""
        add = self.lanes.add
        shapes = self._shapes
        targets = self._targets
        coll = self._collect
        for sid, kind, key, old_key, row in changes:
            sh = shapes[sid]
            if sid not in targets:
                self._target(sid)  # resolved here, in this thread: the lanes only read the cache
            tname = (sh.schema, sh.table)
            add(sid, tname, kind, key, old_key, row)
            if coll is not None and coll.wants(tname):
                coll.add(tname, (key,) if old_key is None else (key, old_key))
        self.events_read += len(changes)

    def _run_statements(self, txn: rd.Committed) -> int:
        """Run the statements of ``txn`` on the target (everything before them already committed:
        :meth:`_Apply._barrier`); returns how many were carried over (not ignored)."""
        done = 0
        for st in txn.statements:
            held = self._hold_epoch()  # until the statement ran: a newer tail's claim waits for it
            try:
                applied = apply_statement(self._statement_conn(), st, set(self.schema_map), self.tables,
                                          self.target_schema, source_definitions(self._source))
            finally:
                if held is not None:
                    held.commit()
            if applied != "ignored":
                done += 1
                if self._collect is not None:
                    # rows a statement removed (DROP/TRUNCATE PARTITION, TRUNCATE) have no row
                    # events: the whole table must be compared again
                    d = classify(st, set(self.schema_map), self.tables)
                    self._collect.whole((d.schema, d.table))
        self._targets.clear()  # a statement may have changed the tables' shapes
        return done

    def warm(self) -> TailStats:
        """Start the reader now and apply what is already there. Call it before a freeze, not
        inside one: the reader process and the server's GTID lookup take a few hundred ms."""
        return self.apply_until(None, timeout_s=0.5)

    def drain_to(self, target_gtid: GtidPos | GtidState | str, timeout_s: float, *, save: bool = True) -> TailStats:
        """Apply up to and including ``target_gtid`` (a position, or a state: ``@@gtid_binlog_state``; as
        read from a server or a record, text or parsed: :meth:`apply_until` gets its GTIDs);
        raise :class:`DrainTimeout` if it is not committed (and, with ``save``, checkpointed) within
        ``timeout_s``."""
        stats = self.apply_until(self._wanted(target_gtid), timeout_s=timeout_s, save=save)
        if not stats.reached:
            short = DrainTimeout(
                f"drain to {target_gtid} did not finish within {timeout_s:.3f}s (applied up to {self.applied}); "
                "the cutover should release its fence and retry later")
            short.stats = stats
            raise short
        return stats

    def close(self) -> None:
        try:
            self.lanes.wait()
        except Exception as exc:  # noqa: BLE001 - closing; the caller saw (or will see) the error
            log.warning("the last round failed while closing: %s", exc)
        try:
            self._save(force=True)  # what an apply call with save=False left unsaved
        except Exception as exc:  # noqa: BLE001 - a later tail replays from the last saved position
            log.warning("could not save the last checkpoint while closing: %r", exc)
        self.lanes.close()
        if self._fast is not None:
            self._fast.close()
        self._close_reader()
        for conn in (self._stmt_conn, self._source_conn, self._epoch_conn):
            if conn is not None:
                try:
                    conn.close()
                except Exception:  # noqa: BLE001 - already gone
                    pass
        self._stmt_conn = self._source_conn = self._epoch_conn = None

    def __enter__(self) -> Tailer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

class _Apply:
    """One :meth:`Tailer.apply_until` call: the coordinator's loop, with the rounds it cuts
    (:class:`_Rounds`) and what it counts (:class:`TailStats`, returned by the call).

    The tailer keeps what outlives a call (the reader process and what it sent ahead, the
    lanes, the connections, the fencing token, the applied position and its checkpoints);
    this object lives for one call and is dropped with it.
    """

    def __init__(self, tailer: Tailer, want: GtidState | None, timeout_s: float | None,
                 stop: threading.Event | None, *, t0: float | None = None):
        self.tailer = tailer
        self.lanes = tailer.lanes
        #: what the call applies up to (None: until the deadline or ``stop``)
        self.want = want
        self.stop = stop
        now = time.monotonic()
        #: when the call began (the fast path's part, when the row path goes on after it: ``t0``)
        self.t0 = now if t0 is None else t0
        self.deadline = None if timeout_s is None else now + timeout_s
        self.stats = TailStats(start=tailer._applied_text, end="", reached=False)
        self.rounds = _Rounds()

    def run(self) -> None:
        """Receive, dispatch, maybe cut a round, until an exit (:meth:`_done`); then commit and
        checkpoint everything read."""
        tailer, stats = self.tailer, self.stats
        while not self._done():
            if not tailer._pending:
                self._await_reader()
                continue
            match tailer._pending.pop(0):
                case Tick(position, last_ts, state):
                    stats.last_ts = last_ts or stats.last_ts
                    self._passed(position, GtidState.parse(state))
                case Txns(txns, position, last_ts, _, state):
                    stats.last_ts = last_ts or stats.last_ts
                    self._take(txns, position, GtidState.parse(state))
                    self._maybe_cut(last_ts)
        self.settle()

    def _done(self) -> bool:
        """The call ends: ``stop`` set, ``want`` applied, or the deadline passed. Rounds read that
        reach ``want`` are committed here first (all that is left), then it looks again."""
        stop, want = self.stop, self.want
        while True:
            if stop is not None and stop.is_set():
                return True
            if want is None:
                break
            if self.tailer._seen.reaches(want):
                return True
            if not self.rounds.covers(want):
                break
            self.stats.read_s = self.stats.read_s or time.monotonic() - self.t0
            self.settle()
        return self.deadline is not None and time.monotonic() >= self.deadline

    def _await_reader(self) -> None:
        """Take the reader's next message if one comes within a short poll. When none came and no
        lane is writing, commit and checkpoint what was read, so the checkpoint follows the reader."""
        # a stoppable tail (the cutover's background follower) looks at its stop flag often:
        # the drain under the fence starts by stopping it
        poll = 0.01 if self.stop is not None else 0.05
        deadline = self.deadline
        left = poll if deadline is None else min(poll, deadline - time.monotonic())
        if left > 0 and self.tailer._receive(left):
            return
        lanes = self.lanes
        if lanes.busy():
            return  # a round is being written: wait for it beside the reader, not on it
        # quiet, lanes idle: checkpoint the round written, send what was collected, so the
        # checkpoint follows the reader (a lane finishing wakes this loop)
        rounds = self.rounds
        if lanes.pending() or lanes.inflight or rounds.collect_pos is not None or rounds.inflight_pos is not None:
            self._submit()
        self.tailer._save()

    def _passed(self, pos: str, state: GtidState) -> None:
        """A tick: the reader passed transactions the tail does not keep. Its position ends the round
        being collected; with nothing collected or in flight, it is checkpointed every
        ``idle_checkpoint_s``."""
        rounds, tailer = self.rounds, self.tailer
        rounds.collect_pos, rounds.collect_state = pos, state
        if not self.lanes.pending() and rounds.inflight_pos is None and \
                time.monotonic() - tailer._last_checkpoint_at >= tailer.idle_checkpoint_s:
            self.settle()

    def _take(self, txns: list[rd.Committed], pos: str, state: GtidState) -> None:
        """Route the row changes of ``txns`` into the round being collected, which now ends at ``pos``;
        a transaction with statements is a barrier (:meth:`_barrier`)."""
        lanes, stats, rounds = self.lanes, self.stats, self.rounds
        add_rows = self.tailer._add_rows
        if not lanes.pending():
            rounds.started = time.monotonic()
        for txn in txns:
            if not txn.partial:  # a transaction that came in parts counts once, at its end (its size too)
                stats.transactions += 1
                stats.bytes += txn.size
            if not stats.first_ts:
                stats.first_ts = txn.timestamp
            # the round's byte bound; the end of a transaction that came in parts counts its whole size
            # again (a round cut early, never late)
            lanes.add_bytes(txn.size)
            add_rows(txn.changes)
            stats.events += len(txn.changes)
            if txn.statements:
                self._barrier(txn, pos, state)
        rounds.collect_pos, rounds.collect_state = pos, state

    def _maybe_cut(self, last_ts: int) -> None:
        """Send the round being collected to the lanes if the pacer says so (:meth:`Pacer.cut`)."""
        lanes = self.lanes
        cut = lanes.pacer.cut(lanes.pending(), self.rounds.started, last_ts, lanes.busy,
                              self.tailer._reader_has_more, lanes.bytes)
        if cut is not None:
            self._submit(cut_by_size=cut is Cut.SIZE)
            self.rounds.started = time.monotonic()

    def _barrier(self, txn: rd.Committed, pos: str, state: GtidState) -> None:
        """Commit everything before a statement (checkpointed just before it), then run the statement.

        The reader ends a message at a statement, so ``txn`` is its message's last
        transaction and the position just before it is ``pos`` with ``txn``'s domain set back.
        """
        rounds = self.rounds
        rounds.collect_pos = str(GtidPos.parse(pos).before(txn.gtid, txn.prev))
        rounds.collect_state = state.before(txn.gtid, txn.prev_seen)
        self.settle()
        self.tailer._save(force=True)  # a crash after the statement never replays rows from before it
        self.stats.statements += self.tailer._run_statements(txn)

    def _submit(self, *, cut_by_size: bool = False) -> None:
        """Commit the round in flight (checkpoint it), then send the collected round to the lanes."""
        lanes, rounds, tailer = self.lanes, self.rounds, self.tailer
        lanes.wait()
        if rounds.inflight_pos is not None:
            tailer._checkpoint(rounds.inflight_pos, rounds.inflight_state)
            rounds.inflight_pos = None
        if lanes.pending():
            lanes.submit(cut_by_size=cut_by_size)
            tailer.last_submit_at = time.monotonic()
            self.stats.rounds += 1
            rounds.inflight_pos, rounds.inflight_state = rounds.collect_pos, rounds.collect_state
        elif rounds.collect_pos is not None:
            tailer._checkpoint(rounds.collect_pos, rounds.collect_state)
        rounds.collect_pos = None

    def settle(self) -> None:
        """Everything collected and in flight committed, and checkpointed."""
        self._submit()
        self.lanes.wait()
        rounds = self.rounds
        if rounds.inflight_pos is not None:
            self.tailer._checkpoint(rounds.inflight_pos, rounds.inflight_state)
            rounds.inflight_pos = None
