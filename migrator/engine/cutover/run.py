"""One cutover attempt: freeze -> fence -> sentinel -> drain -> compare -> flip -> release.

Runs in the cutover process (and in a rollback, with the reverse
:class:`~migrator.engine.cutover.direction.Direction`). :class:`CutoverRun`
is one attempt's runbook: :meth:`CutoverRun.run` is steps 3 to 8 of the
runbook in :mod:`migrator.engine.cutover`, and :meth:`CutoverRun.undo` puts
everything back as long as the flip has not been made. What it works with
lives beside it: the source pair's fence (:class:`~.fences.PairFence`, the
only one that knows which fence it is), the map edits (:class:`~.maps.MapEdits`),
the record (:class:`~.record.AttemptRecord`); hooks see a
:class:`~.hooks.RunView`, a direction's steps a :class:`~.direction.StepView`.

How an attempt can end, and what it leaves:

* **flipped**: the flip CAS landed (or, after a lost answer, the map read back
  shows it); the fence is released and the gated members finished.
* **undone**: it stopped before the flip; the fence and the gates are opened
  again, the ranges unfrozen, the phase set back.
* **flip unknown** (:class:`~migrator.engine.cutover.errors.FlipUnknown`): the
  flip CAS was sent and no answer came back, and the map read back does not
  show it. A request the ZooKeeper server holds can still commit later, so
  "not done" is a guess: the fences stay closed (the RENAMEs run, the gates and
  their triggers stay) and the decision is left to the settler, which reads the
  map once the lease is gone, when the flip CAS (guarded by the lease) can no
  longer land (Spirit's ``errRenameOwnershipAmbiguous`` is the same rule).

Nothing a process does after losing its lease can undo another attempt's
fence: the gates it made are named per attempt (so its reopen and remove reach
only its own), its unfreeze and phase writes are guarded by the lease in the
same ZooKeeper transaction (refused once it is gone), and what it changes on
shared tables (a rollback's renames of the old master's tables) it changes
under the settle lock, with its lease checked under that lock.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pymysql

from migrator.engine.binlog.rows import string_literal
from migrator.engine.cutover import recheck
from migrator.engine.cutover.direction import Direction, StepView, forward
from migrator.engine.cutover.errors import (
    ZK_LOST,
    AbortedBeforeFlip,
    CloseFailed,
    CopyIncomplete,
    FenceLost,
    FlipUnknown,
    FreezeOverrun,
    LeaseLost,
    PairLags,
    PassiveLags,
    SentinelNotDrained,
    SentinelTableMissing,
)
from migrator.engine.cutover.fences import PairFence
from migrator.engine.cutover.hooks import CutoverHooks, CutoverResult, RunView
from migrator.engine.cutover.lease import CutoverLease
from migrator.engine.cutover.maps import LeaseGuard, MapEdits
from migrator.engine.cutover.record import AttemptEntry, AttemptRecord, FencePoint
from migrator.engine.cutover.watchdog import AFTER_CLAIM_MS, Watchdog
from migrator.engine.migration import MigrationStore, Spec
from migrator.engine.names import SENTINEL_TABLE, tomb_db
from migrator.engine.sentinel import ensure_sentinel, has_sentinel
from migrator.engine.verify.checksums import TableInfo, load_tables, prepare_session
from migrator.engine.verify.drainers import Drainer
from migrator.errors import MigratorError
from migrator.fleet.config import Config, Credentials
from migrator.fleet.gtid import GtidPos
from migrator.fleet.mysql import (
    binlog_pos,
    binlog_state,
    ident,
    own_gtids,
    qualified,
    query,
    replication_problem,
    tag,
    wait_applied,
)
from migrator.fleet.mysql import connect as mysql_connect
from migrator.fleet.shard_map import HostRegistry, ShardMapStore
from migrator.fleet.zk import ZK

TAG = tag("cutover")
log = logging.getLogger(__name__)
#: the steps of a freeze in the order they run (what the attempt records in ``steps_ms``)
FREEZE_STEPS = ("freeze_cas", "passive_close", "passive_sync", "fence", "sentinel", "drain", "compare", "flip_cas",
                "release")


@dataclass
class _UndoState:
    """What :meth:`CutoverRun.undo` needs to run once: taken under ``lock``; ``pre_flipped``: the direction's
    step before the flip ran and is to be undone."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    done: bool = False
    pre_flipped: bool = False


class CutoverRun:
    """One cutover attempt: the runbook and its undo (hooks see a :class:`RunView` of it)."""

    def __init__(self, config: Config, zk: ZK, creds: Credentials, spec: Spec, drainer: Drainer,
                 direction: Direction | None = None):
        self.config = config
        self.zk = zk
        self.creds = creds
        self.spec = spec
        self.drainer = drainer
        self.store = MigrationStore(zk)
        self.direction = direction or forward(zk, spec)
        #: names what this attempt creates on the servers (its gates' triggers and gate tables)
        self.attempt_id = uuid.uuid4().hex[:6]
        #: the source pair's fence (:mod:`migrator.engine.cutover.fences`), opened in :meth:`prepare`
        self.fences = PairFence(self.direction.source, self.direction.passive, creds, self.attempt_id,
                                phase=self.direction.label)
        self.tables: list[TableInfo] = []
        self.target_conn: pymysql.connections.Connection | None = None
        #: the last re-check before the freeze (:func:`recheck.refresh_verified_gtid`)
        self.refreshed: recheck.Refreshed | None = None
        #: what this attempt measured and how it ended (:mod:`migrator.engine.cutover.record`)
        self.record = AttemptRecord()
        #: the sentinel's token and the positions of the fence on both sides
        self.point = FencePoint()
        #: the cutover's lease (see :attr:`lease`), which guards the map edits and the phase writes
        self._guard = LeaseGuard()
        #: the freeze, the flip and the unfreeze of this attempt (what they change in the shard map: the
        #: spec's moving ranges, or a queue partition's route), each guarded by the lease
        self.edits = MapEdits(ShardMapStore(zk), spec.moving, spec.ranges(), self.direction, spec.id, self._guard)
        self.hooks = CutoverHooks()
        #: called once the freeze is over (flipped and released), before the steps behind it
        self.on_released: Callable[[], None] | None = None
        #: the drainer's reader was started ahead, while the fences were prepared (the gate does not warm it)
        self.warmed = False
        self.watchdog: Watchdog | None = None
        self._undo = _UndoState()
        self.fences.owner = self._owns_gates

    # -- helpers ------------------------------------------------------------------------
    @property
    def lease(self) -> CutoverLease | None:
        """The cutover's lease (:mod:`migrator.engine.cutover.lease`): it records the steps and guards the
        flip, the unfreeze and the phase writes of this attempt."""
        return self._guard.lease

    @lease.setter
    def lease(self, lease: CutoverLease | None) -> None:
        self._guard.lease = lease

    def view(self) -> RunView:
        """What a hook may see of this attempt."""
        return RunView(self.spec, self.attempt_id, self.record, self.edits.ranges, self.zk, self.edits, self.lease,
                       self.fences.writer, self.target_conn)

    def attempt(self, outcome: str) -> AttemptEntry:
        """What this attempt did, for the record (kept for aborted attempts too)."""
        return self.record.entry(outcome, self.fences.lock_waits(), self.fences.triggers_ms())

    def _owns_gates(self) -> bool:
        """This attempt still holds its lease: asked before each group of its gates' install statements (a
        test's hook runs first). Without a lease (a test's bare run) it always does."""
        if self.hooks.gate_statement is not None:
            self.hooks.gate_statement(self.view())
        return self.lease is None or self.lease.alive

    def remaining_s(self) -> float:
        budget = self.spec.options.freeze_budget_ms / 1000
        if self.record.t_freeze is None:
            return budget
        return max(0.01, budget - (time.monotonic() - self.record.t_freeze))

    def _while_holding(self, action: Callable[[StepView], None]) -> bool:
        """``action`` (a direction's step) while this process holds the lease (:meth:`LeaseGuard.while_holding`)."""
        return self._guard.while_holding(self.zk, self.spec.id, lambda: action(self.view()))

    # -- prepare --------------------------------------------------------------------------
    def prepare(self) -> None:
        spec, source, target, label = self.spec, self.direction.source, self.direction.target, self.direction.label
        src = mysql_connect(source, self.creds, read_timeout=600)
        try:
            prepare_session(src)
            for db in spec.databases:
                if not has_sentinel(src, db):
                    raise SentinelTableMissing(label, db, SENTINEL_TABLE, source.name)
                with src.cursor() as cur:
                    cur.execute(f"{TAG}CREATE DATABASE IF NOT EXISTS {ident(tomb_db(spec.id, db))}")
            self.tables = load_tables(src, spec.databases, spec.tables)
        finally:
            src.close()
        self.target_conn = mysql_connect(target, self.creds, read_timeout=600)
        prepare_session(self.target_conn)
        tdb = self.direction.target_db_of
        for db in spec.databases:
            ensure_sentinel(self.target_conn, tdb(db))
        schemas = sorted({tdb(t.db) for t in self.tables})
        there: set[tuple[str, str]] = set()
        for k in range(0, len(schemas), 500):  # one read for every table of the move, not one per table
            part = schemas[k:k + 500]
            there.update((r[0], r[1]) for r in query(
                self.target_conn, f"{TAG}SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
                                  f"WHERE TABLE_SCHEMA IN ({', '.join(['%s'] * len(part))})", part))
        missing = [t.name for t in self.tables if (tdb(t.db), t.table) not in there]
        if missing:
            raise CopyIncomplete(label, missing, target.name)
        self.fences.prepare(spec, [(t.db, t.table) for t in self.tables])

    def install_gates(self) -> None:
        """Install the gates' triggers (on the passive member; on the master too for a gated move): the last
        thing before the freeze, after every wait that can last, so they live only around it."""
        self.fences.install_gates()

    def _gates_within_lifetime(self) -> None:
        """Right before the freeze: triggers older than ``gate_lifetime_s`` (something before the freeze ran
        long) come off and go back on, so no trigger lives past its bound before the freeze."""
        if self.fences.gates_age_s() > self.spec.options.gate_lifetime_s:
            t0 = time.monotonic()
            self.fences.reinstall_gates()
            self.record.before_freeze["gates_again"] = round((time.monotonic() - t0) * 1000, 1)

    def check_target_passive(self, timeout: float = 30.0) -> None:
        """Before the freeze: the target's standby has applied everything its master wrote so far.

        A flip to a pair whose standby lags (or does not replicate) would leave
        the new owner without a standby to fail over to; refused here, not
        discovered after the flip.
        """
        assert self.target_conn is not None
        target = self.direction.target
        passive = HostRegistry(self.zk).get(self.direction.to_passive)
        head = own_gtids(self.target_conn)  # everything the target master wrote itself: the copy, the tail
        with mysql_connect(passive, self.creds, read_timeout=int(timeout) + 30) as conn:
            problem = replication_problem(conn, passive.name, target.name)
            if problem is None and wait_applied(conn, head, timeout):
                return
        raise PassiveLags(self.direction.label, passive.name, target.name, head, timeout, problem)

    def moving_tables(self) -> recheck.Moving:
        assert self.target_conn is not None
        return recheck.Moving(self.spec, self.direction, self.direction.source, self.creds, self.tables,
                              self.target_conn, self.drainer)

    def refresh_verified_gtid(self, *, max_rounds: int = 8, quiet_s: float = 0.2, quiet_keys: int = 300) -> str:
        """Re-check, outside the freeze, the rows changed since the last full check
        (:func:`migrator.engine.cutover.recheck.refresh_verified_gtid`)."""
        self.refreshed = recheck.refresh_verified_gtid(self.config, self.store, self.moving_tables(),
                                                       max_rounds=max_rounds, quiet_s=quiet_s, quiet_keys=quiet_keys)
        self.record.refresh_rounds.extend(self.refreshed.rounds)
        return self.refreshed.verified_gtid

    def close(self, failure: BaseException | None = None) -> None:
        """Close connections; a never-flipped attempt puts its gated members back as they were.

        An attempt whose flip outcome is unknown leaves its gates closed and their
        triggers in place: the settler opens them (not landed) or finishes them
        (landed) from the map. The gates reopened and removed here are this
        attempt's own (named per attempt), never another attempt's.

        A failure to reopen a gate is not swallowed: it is raised, or,
        when the cutover is already failing (``failure``), added to that error.
        """
        if self.refreshed is not None and self.refreshed.tracker is not None:
            self.refreshed.tracker.stop()
        problems: list[str] = []
        try:
            self.drainer.stop_following()  # the drainer is its owner's again, idle
        except Exception as exc:  # noqa: BLE001 - reported below, never instead of the cause
            problems.append(f"the background tail of the cutover failed ({type(exc).__name__}: {exc})")
        # never flipped (or undone): the members go back to how they were; an unknown flip keeps them
        problems += self.fences.close(keep_closed=self.edits.flipped_epoch is not None or self.record.flip_unknown)
        if self.target_conn is not None:
            self.target_conn.close()
        if problems:
            problem = "; also ".join(problems)
            if isinstance(failure, MigratorError):
                failure.message = f"{failure.message}; also {problem}"
            elif failure is not None:
                failure.add_note(problem)
            else:
                raise CloseFailed(self.direction.label, problems)

    # -- undo --------------------------------------------------------------------------------
    def undo(self) -> None:
        """Before the flip: kill the pending RENAME, release the lock, reopen this attempt's gates,
        unfreeze. Idempotent. What is not this attempt's own (the unfreeze, a rollback's renames of
        the old master's tables) is done only while the lease is held; otherwise the settler does it."""
        with self._undo.lock:
            if self._undo.done:
                return
            self._undo.done = True
            t0 = time.monotonic()
            try:
                if self._undo.pre_flipped and self.direction.undo_pre_flip is not None:
                    self._undo.pre_flipped = False
                    if not self._while_holding(self.direction.undo_pre_flip):
                        self.edits.lease_lost = True
            finally:
                try:
                    self.fences.undo()
                finally:
                    if self.edits.frozen_epoch is not None and self.edits.unfreeze():
                        self.record.t_released = time.monotonic()  # clients wait no longer
                        self.record.undo_ms = round((self.record.t_released - t0) * 1000, 1)

    # -- the freeze ----------------------------------------------------------------------------
    def run(self, hooks: CutoverHooks) -> CutoverResult:
        """Steps 3 to 8 of the runbook; each step a named call, timed from the end of the one before."""
        assert self.fences.writer is not None and self.target_conn is not None
        self.hooks = hooks
        label, rec, fences = self.direction.label, self.record, self.fences
        node, _ = self.store.get_progress(self.spec.id, self.direction.verify_node)
        verified = (node or {}).get("verified_gtid") or ""
        suspect = (node or {}).get("suspect_chunks") or []
        if self.lease is not None:
            self.lease.record["attempt"] = self.attempt_id  # for people: which gates are this attempt's
        if self.lease is not None and not self.lease.alive:
            # a worker may be settling this cutover already: never start a freeze without the lease
            raise LeaseLost(label, "the freeze", "nothing was frozen")
        self._gates_within_lifetime()
        rec.step_end = time.monotonic()
        with self.step("freeze_cas"):
            self.edits.freeze()
        rec.t_freeze = rec.step_end  # the freeze starts when the frozen map is committed: clients wait
        # the watchdog's last chance is the claim: it keeps back what follows it (the flip CAS, the release),
        # as the gate measured it (:func:`migrator.engine.cutover.budget.after_claim_ms`; a rollback has no gate)
        reserve_ms = float(rec.predicted.get("after_claim_ms") or AFTER_CLAIM_MS)
        self.watchdog = Watchdog(self.spec.options.freeze_budget_ms / 1000, self._overrun,
                                 reserve_s=reserve_ms / 1000).start()
        flipped = False
        try:
            self._hook(hooks.after_freeze)
            if fences.passive is not None:
                with self.step("passive_close"):
                    passive_own = fences.close_passive(self.remaining_s())
                with self.step("passive_sync"):
                    self._sync_passive(passive_own)
            with self.step("fence"):
                fences.engage(self.remaining_s())
            self._hook(hooks.after_fence)
            with self.step("sentinel"):
                self._write_sentinels()
            with self.step("drain"):
                self._drain_to_sentinel()
            with self.step("compare"):
                self._compare_in_freeze(verified, suspect)
            self._hook(hooks.before_flip)
            with self.step("flip_cas"):
                self._claim_flip()
                flipped = self.edits.flip({"fence_gtid": self.point.fence_gtid, "target_gtid": self.point.target_pos,
                                           "target_state": self.point.target_state})
            with self.step("release"):
                fences.release()
            rec.t_released = rec.step_end
            freeze_ms = (rec.t_released - rec.t_freeze) * 1000
            self._note_over_budget(freeze_ms)
            if self.on_released is not None:
                self.on_released()
            # outside the freeze: the renames, each member kept from stale writers meanwhile (ended by the
            # rename fence, refused by a gate's triggers)
            try:
                for name, fence in fences.to_finish():
                    with self.step(name):
                        fence.finish(self.point.fence_own, 60 + 0.05 * len(self.tables))
            finally:
                rec.released, rec.waiters_ended = fences.released, fences.waiters_ended
        except FlipUnknown as exc:
            # An unknown outcome is its own outcome: neither undo nor claim success. The gates stay
            # closed with their triggers (close() leaves them) and the lock stays held while the
            # lease is given up; from then on the flip CAS (guarded by it) cannot commit, so the
            # map read after that is final. Landed, or still unknown (ZooKeeper unreachable): the
            # RENAMEs run, the tables stay fenced in the tombstones and writers get 1146 until the
            # settler renames them back (not landed) or finishes. Known not landed: the RENAMEs are
            # killed, the tables stay where they are. Gates, unfreeze and phase are the settler's
            # (:func:`migrator.engine.cutover.reconcile.settle_unknown`). Never a split brain.
            rec.flip_unknown = True
            landed = self.edits.landed_once_lease_is_gone()
            try:
                fences.settle_unknown(landed)
            except BaseException as rel:  # noqa: BLE001 - the unknown flip is what the caller must see
                exc.message = (f"{exc.message}; also, putting the rename fence on its side failed ({rel}): the "
                               "settler finishes or undoes it")
            exc.result = self._result((time.monotonic() - (rec.t_freeze or time.monotonic())) * 1000)
            raise
        except BaseException as exc:
            if not flipped:
                if self.watchdog.claim() or not self.watchdog.fired:
                    self.undo()
                if self.watchdog.fired:
                    raise self._overrun_error() from None
            if isinstance(exc, (MigratorError, pymysql.err.MySQLError, *ZK_LOST)) and not flipped:
                if isinstance(exc, MigratorError):
                    raise
                raise AbortedBeforeFlip(label, exc) from None
            raise
        self._hook(hooks.after_flip)
        assert self.edits.flipped_epoch is not None
        return self._result(freeze_ms)

    def _note_over_budget(self, freeze_ms: float) -> None:
        """A flipped freeze that went over the budget cannot be undone (the flip stands): it is recorded as
        such (the attempt's outcome, ``over_budget_ms`` in its entry and in the result), never as a plain
        flip, and the next attempts' watchdog keeps back more (the steps after the claim, measured here)."""
        over = freeze_ms - self.spec.options.freeze_budget_ms
        if over > 0:
            self.record.over_budget_ms = round(over, 1)
            log.warning("%s %s: the freeze took %.0f ms, %.0f ms over its budget of %d ms after a flip that could "
                        "not be undone (steps ms: %s)", self.direction.label, self.spec.id, freeze_ms, over,
                        self.spec.options.freeze_budget_ms, self.record.steps)

    # -- the steps of the freeze ---------------------------------------------------------------
    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        """Time one step of the freeze from the end of the one before (so the steps add up to the
        freeze) and record it when it completes: a step that raised is not recorded, which is how
        :meth:`pending_step` names the step an overrun caught."""
        yield
        self.record.step_done(name)
        if self.lease is not None:
            self.lease.step(name)
        if self.hooks.at_step:
            self.hooks.at_step(self.view(), name)

    def _hook(self, hook: Callable[[RunView], None] | None) -> None:
        if hook is not None:
            hook(self.view())

    def _sync_passive(self, passive_own: GtidPos) -> None:
        """The source has applied the passive member's last writes (named by their own GTIDs, which
        holds in any GTID layout), so they are in its binlog before the fence."""
        assert self.fences.passive is not None
        if not wait_applied(self.fences.control, passive_own, self.remaining_s()):
            raise PairLags(self.direction.label, self.direction.source.name, self.fences.passive.host.name,
                           passive_own)

    def _drain_to_sentinel(self) -> None:
        """Catch-up applies everything up to the sentinel (the background tail, if any, goes on to it
        by itself, then stops); the target's position is read right after."""
        assert self.target_conn is not None
        point = self.point
        got = self.drainer.drain_to(point.fence_gtid, self.remaining_s(), save=False)
        if got is not None:
            self.record.drained = got.drain_record()
        missing = self._sentinels_missing()
        if missing:
            raise SentinelNotDrained(self.direction.label, missing[0], self.direction.target.name, point.fence_gtid)
        # where a reverse tail would start: the state first, so it never names a transaction after the
        # position (a shared GTID domain needs it to know which server's transactions are before it)
        point.target_state = str(binlog_state(self.target_conn))
        point.target_pos = binlog_pos(self.target_conn)

    def _claim_flip(self) -> None:
        """The last checks before the flip: the watchdog has not undone the freeze (and now never
        will), every fence still holds, and a rollback's old tables are back under their names."""
        assert self.watchdog is not None
        if not self.watchdog.claim():
            raise self._overrun_error()
        lost = self.fences.holding()
        if lost is not None:
            raise FenceLost(self.direction.label, lost)
        if self.direction.pre_flip is not None:
            self._undo.pre_flipped = True
            if not self._while_holding(self.direction.pre_flip):
                self._undo.pre_flipped = False
                raise LeaseLost(self.direction.label, "the flip", "nothing was renamed and the flip was not made")

    def _result(self, freeze_ms: float) -> CutoverResult:
        rec, point = self.record, self.point
        return CutoverResult(self.spec.id, round(freeze_ms, 2), self.edits.flipped_epoch or 0, point.fence_gtid,
                             point.target_pos, rec.rows_checked, rec.rows_repaired, dict(rec.steps), rec.keys_from,
                             point.target_state, rec.over_budget_ms)

    def _write_sentinels(self) -> None:
        """A unique row in each moving db's sentinel table, all in one commit; ``fence_gtid`` is the
        position after it (where the drain goes, and where a reader of what came after the fence starts),
        ``fence_own`` the master's own transactions up to it (what its partner waits for).

        One commit instead of one per db is what keeps this step short for a batch of many dbs
        (docs/performance.md, "Constants measured by the benchmarks"); under the rename fence it
        must not end LOCK TABLES (:meth:`PairFence.one_commit`).
        """
        point = self.point
        point.token = uuid.uuid4().hex
        with self.fences.one_commit() as cur:
            for db in self.spec.databases:
                cur.execute(f"{TAG}INSERT INTO {qualified(db, SENTINEL_TABLE)} (token, migration_id) "
                            "VALUES (%s, %s)", (point.token, self.spec.id))
        w = self.fences.writer
        assert w is not None
        point.fence_gtid = binlog_pos(w)
        point.fence_own = own_gtids(w)

    def _sentinels_missing(self, per_query: int = 200) -> list[str]:
        """The moving dbs whose sentinel row is not on the target (a few queries, not one per db)."""
        assert self.target_conn is not None
        tdb = self.direction.target_db_of
        dbs = list(self.spec.databases)
        have: set[int] = set()
        for k in range(0, len(dbs), per_query):
            sql = " UNION ALL ".join(f"SELECT {i} FROM {qualified(tdb(dbs[i]), SENTINEL_TABLE)} WHERE token = "
                                     f"{string_literal(self.point.token)}"
                                     for i in range(k, min(len(dbs), k + per_query)))
            have.update(int(r[0]) for r in query(self.target_conn, f"{TAG}{sql}"))
        return [db for i, db in enumerate(dbs) if i not in have]

    def pending_step(self) -> str:
        """The freeze step under way now: the first of :data:`FREEZE_STEPS` not yet recorded."""
        skip = () if self.fences.passive is not None else ("passive_close", "passive_sync")
        return next((s for s in FREEZE_STEPS if s not in self.record.steps and s not in skip), "release")

    def _overrun(self) -> None:
        """The watchdog fired: note the step it caught (the main thread may finish that step before it
        sees the watchdog, and the refusal must name the step the budget ran out in), then undo."""
        self.record.overrun_step = self.pending_step()
        self.undo()

    def _overrun_error(self) -> FreezeOverrun:
        """Why the watchdog undid the freeze, named by the step that was running when the budget ran out."""
        passive = self.fences.passive.host.name if self.fences.passive is not None else "the passive member"
        return FreezeOverrun(self.direction.label, self.spec.options.freeze_budget_ms,
                             self.record.overrun_step or self.pending_step(), self.direction.source.name, passive,
                             self.watchdog.error if self.watchdog else None)

    def _compare_in_freeze(self, verified: str, suspect: list[dict[str, Any]]) -> None:
        assert self.fences.writer is not None
        got = recheck.compare_in_freeze(self.moving_tables(), self.fences.writer, self.refreshed, verified, suspect,
                                        token=self.point.token, fence_gtid=self.point.fence_gtid,
                                        remaining_s=self.remaining_s)
        self.record.steps["compare_keys"] = got.keys_ms
        rec = self.record
        rec.keys_from, rec.rows_checked, rec.rows_repaired = got.keys_from, got.rows_checked, got.rows_repaired
