"""One cutover attempt: freeze -> fence -> sentinel -> drain -> compare -> flip -> release.

Runs in the cutover process (and in a rollback, with the reverse
:class:`~migrator.engine.cutover.direction.Direction`). :class:`CutoverRun`
holds the state of one attempt, which is what the hooks see;
:meth:`CutoverRun.run` is steps 3 to 8 of the runbook in
:mod:`migrator.engine.cutover`, and :meth:`CutoverRun.undo` puts everything
back as long as the flip has not been made.

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

import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager
from typing import Any

import pymysql
from kazoo.exceptions import KazooException

from migrator.engine.binlog.rows import string_literal
from migrator.engine.cutover import recheck
from migrator.engine.cutover.direction import Direction, forward
from migrator.engine.cutover.errors import (
    ZK_LOST,
    CutoverAborted,
    CutoverError,
    FlipUnknown,
    FreezeBudgetExceeded,
    LeaseLost,
)
from migrator.engine.cutover.fence import Fence, Move, fence_mode
from migrator.engine.cutover.fences import GateFence, PairFence, RenameFence
from migrator.engine.cutover.hooks import CutoverHooks, CutoverResult
from migrator.engine.cutover.lease import CutoverLease, settle_lock
from migrator.engine.cutover.maps import MapEdits, reread_map
from migrator.engine.cutover.passive_gate import TriggerGate
from migrator.engine.cutover.record import AttemptRecord
from migrator.engine.cutover.watchdog import Watchdog
from migrator.engine.mdl import LockWait
from migrator.engine.migration import MigrationStore, Spec
from migrator.engine.names import SENTINEL_TABLE, tomb_db, tomb_suffix
from migrator.engine.sentinel import ensure_sentinel, has_sentinel
from migrator.engine.verify.checksums import (
    TableInfo,
    load_tables,
    prepare_session,
)
from migrator.engine.verify.drainers import Drainer
from migrator.errors import MigratorError
from migrator.fleet.config import Config, Credentials
from migrator.fleet.gtid import GtidPos
from migrator.fleet.model import Host
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
#: the steps of a freeze in the order they run (what the attempt records in ``steps_ms``)
FREEZE_STEPS = ("freeze_cas", "passive_close", "passive_sync", "fence", "sentinel", "drain", "compare", "flip_cas",
                "release")


class CutoverRun:
    """The state of one cutover attempt (what the hooks see)."""

    def __init__(self, config: Config, zk: ZK, creds: Credentials, spec: Spec, drainer: Drainer,
                 direction: Direction | None = None):
        self.config = config
        self.zk = zk
        self.creds = creds
        self.spec = spec
        self.drainer = drainer
        self.store = MigrationStore(zk)
        self.maps = ShardMapStore(zk)
        self.direction = direction or forward(zk, spec)
        self.source: Host = self.direction.source
        self.target: Host = self.direction.target
        self.target_pos = ""
        self.target_state = ""
        self._pre_flipped = False
        #: the last re-check before the freeze (:func:`recheck.refresh_verified_gtid`)
        self.refreshed: recheck.Refreshed | None = None
        self.token = ""
        #: what this attempt measured and how it ended (:mod:`migrator.engine.cutover.record`)
        self.record = AttemptRecord()
        #: called once the freeze is over (flipped and released), before the steps behind it
        self.on_released: Callable[[], None] | None = None
        #: the drainer's reader was started ahead, while the fences were prepared (the gate does not warm it)
        self.warmed = False
        self.ranges = spec.ranges()
        #: what the freeze and the flip change in the shard map (ranges, or a queue partition's route)
        self.moving = spec.moving
        self.tables: list[TableInfo] = []
        #: the source pair's fence (:mod:`migrator.engine.cutover.fences`), made in :meth:`prepare`
        self.fences: PairFence | None = None
        #: the rename fence on the source, when the active member is fenced by one
        self.fence: Fence | None = None
        #: "rename" (:class:`Fence`) or "gate" (:attr:`active_gate`), see :func:`fence_mode`
        self.fence_mode = "rename"
        self.active_gate: TriggerGate | None = None
        #: the connection on the source that writes the sentinel rows and reads under the fence
        self.writer: pymysql.connections.Connection | None = None
        self.passive_gate: TriggerGate | None = None
        self.target_conn: pymysql.connections.Connection | None = None
        #: the freeze, the flip and the unfreeze of this attempt, each guarded by its lease
        self.edits = MapEdits(self.maps, self.moving, self.ranges, self.direction, spec.id,
                              guard=lambda: self.guard, lease_alive=lambda: self.lease is None or self.lease.alive)
        self.fence_gtid = ""
        #: the source master's own transactions up to and including the sentinel write (what a member of
        #: its pair must have applied before it renames: :func:`~migrator.fleet.mysql.wait_applied`)
        self.fence_own: GtidPos = GtidPos()
        #: when the last step of the freeze ended (each step is timed from the end of the one before)
        self._step_end = 0.0
        self.watchdog: Watchdog | None = None
        self._undo_lock = threading.Lock()
        self._undone = False
        #: the cutover's lease (:mod:`migrator.engine.cutover.lease`): it records the steps and guards the flip,
        #: the unfreeze and the phase writes of this attempt
        self.lease: CutoverLease | None = None
        self.hooks = CutoverHooks()
        #: names what this attempt creates on the servers (its gates' triggers and gate tables)
        self.attempt_id = uuid.uuid4().hex[:6]
        #: the flip CAS went out and its outcome is unknown: the fences stay closed for the settler
        self.flip_unknown = False
        #: the lease's node as last seen (see :attr:`guard`); a path no lease ever has until then
        self._guard_path = "/migrator-no-lease-held"

    # -- helpers ------------------------------------------------------------------------
    def attempt(self, outcome: str) -> dict[str, Any]:
        """What this attempt did, for the record (kept for aborted attempts too)."""
        return self.record.to_dict(outcome, {g.host.name: g.lock_attempts.to_dict()
                                             for g in (self.active_gate, self.passive_gate) if g is not None})

    def remaining_s(self) -> float:
        budget = self.spec.options.freeze_budget_ms / 1000
        if self.record.t_freeze is None:
            return budget
        return max(0.01, budget - (time.monotonic() - self.record.t_freeze))

    def tomb(self, db: str) -> str:
        return tomb_db(self.spec.id, db)

    @property
    def guard(self) -> str | None:
        """The lease's znode: the ZooKeeper writes of this attempt commit only while it exists (once
        the lease is given up, the node it had: nothing it guards commits any more)."""
        if self.lease is None:
            return None
        if self.lease.path is not None:
            self._guard_path = self.lease.path
        return self._guard_path

    def _while_holding(self, action: Any) -> bool:
        """Run ``action(self)``, a change to what is not this attempt's own (the old master's tables
        in a rollback), only while this process holds the lease: under the settle lock, which every
        settler takes before it acts, with the lease checked under it. False (nothing done) when
        the lease is gone or the lock is not free: then a settler decides, once the lease is gone."""
        if self.lease is None:
            action(self)
            return True
        lock = settle_lock(self.zk, self.spec.id)
        try:
            if not lock.acquire(blocking=True, timeout=5):
                return False
        except KazooException:  # ZooKeeper unreachable: the lease cannot be confirmed either
            return False
        try:
            if not self.lease.alive:
                return False
            action(self)
            return True
        finally:
            try:
                lock.release()
            except KazooException:
                pass  # the lock ends with this process's session

    # -- prepare --------------------------------------------------------------------------
    def prepare(self) -> None:
        spec = self.spec
        src = mysql_connect(self.source, self.creds, read_timeout=600)
        try:
            prepare_session(src)
            for db in spec.databases:
                if not has_sentinel(src, db):
                    raise CutoverError(
                        f"{db}.{SENTINEL_TABLE} is missing on {self.source.name}: it must exist before the copy "
                        "(migrator.engine.sentinel.prepare_sentinels), so that the copy carries it and "
                        "catch-up never sees its CREATE TABLE; abort this migration and plan it again",
                        phase=self.direction.label)
                with src.cursor() as cur:
                    cur.execute(f"{TAG}CREATE DATABASE IF NOT EXISTS {ident(self.tomb(db))}")
            self.tables = load_tables(src, spec.databases, spec.tables)
        finally:
            src.close()
        self.target_conn = mysql_connect(self.target, self.creds, read_timeout=600)
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
            raise CutoverError(f"tables {missing} are not on the target {self.target.name}: "
                               "the copy is incomplete; run the copy again", phase=self.direction.label)
        moves = [Move(t.db, t.table, self.tomb(t.db)) for t in self.tables]
        sentinels = [(db, SENTINEL_TABLE) for db in spec.databases]
        self.fence_mode = fence_mode(spec.options.fence, len(self.tables))
        if self.fence_mode == "rename":
            # with a gated passive member each side renames its own tables (unlogged); else the partner follows
            fence = Fence(self.source, self.creds, moves, sentinels,
                          lock_wait_timeout=max(1.0, spec.options.freeze_budget_ms / 1000),
                          log_renames=self.direction.passive is None)
            self._open_beside_passive_gate(fence)
            self.fence = fence
            rename = RenameFence(fence)
            self.fences = PairFence(rename, GateFence(self.passive_gate) if self.passive_gate is not None else None)
            self.writer = rename.writer
            return
        passive = None
        if self.direction.passive is not None:
            self.passive_gate = self._gate(self.direction.passive)
            passive = GateFence(self.passive_gate)
        # the gate fence: one DROP TABLE closes every moving table; the renames come after the flip
        self.active_gate = self._gate(self.source)
        self.fences = PairFence(GateFence(self.active_gate, log_renames=passive is None), passive)
        self.writer = mysql_connect(self.source, self.creds, read_timeout=600)
        with self.writer.cursor() as cur:
            cur.execute(f"{TAG}SET SESSION time_zone = '+00:00'")

    def _open_beside_passive_gate(self, fence: Fence) -> None:
        """Open the master's rename fence (its connections) while the passive member's gate is installed;
        if either fails, the fence's connections are closed and the error raised."""
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="fence-prepare") as pool:
            opening = pool.submit(fence.open)
            try:
                if self.direction.passive is not None:
                    self.passive_gate = self._gate(self.direction.passive)
                opening.result()
            except BaseException:
                wait([opening])
                fence.close()
                raise

    def _gate(self, host: Host) -> TriggerGate:
        """This attempt's trigger gate on ``host``, installed (open: clients still write)."""
        gate = TriggerGate(host, self.creds, [(t.db, t.table) for t in self.tables], tomb_suffix(self.spec.id),
                           {db: self.tomb(db) for db in self.spec.databases}, attempt=self.attempt_id,
                           lock_wait=LockWait.of(self.spec.options)).open()
        try:
            gate.install()
        except BaseException:
            gate.close_connection()
            raise
        return gate

    def check_target_standby(self, timeout: float = 30.0) -> None:
        """Before the freeze: the target's standby has applied everything its master wrote so far.

        A flip to a pair whose standby lags (or does not replicate) would leave
        the new owner without a standby to fail over to; refused here, not
        discovered after the flip.
        """
        assert self.target_conn is not None
        standby = HostRegistry(self.zk).get(self.direction.to_slave)
        head = own_gtids(self.target_conn)  # everything the target master wrote itself: the copy, the tail
        with mysql_connect(standby, self.creds, read_timeout=int(timeout) + 30) as conn:
            problem = replication_problem(conn, standby.name, self.target.name)
            if problem is None and wait_applied(conn, head, timeout):
                return
        raise CutoverAborted(f"the target's standby {standby.name} has not applied {self.target.name}'s writes up "
                             f"to {head} within {timeout:.0f}s ({problem or 'it lags'}): a flip now would leave the "
                             f"new owner without a caught-up standby; repair the target pair's replication, then "
                             f"retry the cutover", phase=self.direction.label)

    def moving_tables(self) -> recheck.Moving:
        assert self.target_conn is not None
        return recheck.Moving(self.spec, self.direction, self.source, self.creds, self.tables, self.target_conn,
                              self.drainer)

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
        if self.fences is not None:
            # never flipped (or undone): the members go back to how they were; an unknown flip keeps them
            problems += self.fences.close(keep_closed=self.edits.flipped_epoch is not None or self.flip_unknown)
        if self.writer is not None and self.fence is None:
            self.writer.close()
        if self.target_conn is not None:
            self.target_conn.close()
        if problems:
            problem = "; also ".join(problems)
            if isinstance(failure, MigratorError):
                failure.message = f"{failure.message}; also {problem}"
            elif failure is not None:
                failure.add_note(problem)
            else:
                raise CutoverError(problem, phase=self.direction.label)

    # -- undo --------------------------------------------------------------------------------
    def undo(self) -> None:
        """Before the flip: kill the pending RENAME, release the lock, reopen this attempt's gates,
        unfreeze. Idempotent. What is not this attempt's own (the unfreeze, a rollback's renames of
        the old master's tables) is done only while the lease is held; otherwise the settler does it."""
        with self._undo_lock:
            if self._undone:
                return
            self._undone = True
            try:
                if self._pre_flipped and self.direction.undo_pre_flip is not None:
                    self._pre_flipped = False
                    if not self._while_holding(self.direction.undo_pre_flip):
                        self.edits.lease_lost = True
            finally:
                try:
                    if self.fences is not None:
                        self.fences.undo()
                finally:
                    if self.edits.frozen_epoch is not None and self.edits.unfreeze():
                        self.record.t_released = time.monotonic()  # clients wait no longer

    # -- the freeze ----------------------------------------------------------------------------
    def run(self, hooks: CutoverHooks) -> CutoverResult:
        """Steps 3 to 8 of the runbook; each step a named call, timed from the end of the one before."""
        assert self.writer is not None and self.target_conn is not None and self.fences is not None
        self.hooks = hooks
        node, _ = self.store.get_progress(self.spec.id, self.direction.verify_node)
        verified = (node or {}).get("verified_gtid") or ""
        suspect = (node or {}).get("suspect_chunks") or []
        if self.lease is not None:
            self.lease.record["attempt"] = self.attempt_id  # for people: which gates are this attempt's
        if self.lease is not None and not self.lease.alive:
            # a worker may be settling this cutover already: never start a freeze without the lease
            raise LeaseLost(self.direction.label, "the freeze", "nothing was frozen")
        self._step_end = time.monotonic()
        with self.step("freeze_cas"):
            self.edits.freeze()
        self.record.t_freeze = self._step_end  # the freeze starts when the frozen map is committed: clients wait
        self.watchdog = Watchdog(self.spec.options.freeze_budget_ms / 1000, self._overrun).start()
        flipped = False
        try:
            self._hook(hooks.after_freeze)
            if self.fences.passive is not None:
                with self.step("passive_close"):
                    passive_own = self.fences.close_passive(self.remaining_s())
                with self.step("passive_sync"):
                    self._sync_passive(passive_own)
            with self.step("fence"):
                self.fences.engage(self.remaining_s())
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
                flipped = self.edits.flip({"fence_gtid": self.fence_gtid, "target_gtid": self.target_pos,
                                           "target_state": self.target_state})
            with self.step("release"):
                self.fences.release()
            self.record.t_released = self._step_end
            freeze_ms = (self.record.t_released - self.record.t_freeze) * 1000
            if self.on_released is not None:
                self.on_released()
            # outside the freeze: the renames, each member kept from stale writers meanwhile (ended by the
            # rename fence, refused by a gate's triggers)
            try:
                for name, fence in self.fences.to_finish():
                    with self.step(name):
                        fence.finish(self.fence_own, 60 + 0.05 * len(self.tables))
            finally:
                self.record.released = self.fences.released
                self.record.waiters_ended = self.fences.waiters_ended
        except FlipUnknown as exc:
            # An unknown outcome is its own outcome: neither undo nor claim success. The gates stay
            # closed with their triggers (close() leaves them) and the lock stays held while the
            # lease is given up; from then on the flip CAS (guarded by it) cannot commit, so the
            # map read after that is final. Landed, or still unknown (ZooKeeper unreachable): the
            # RENAMEs run, the tables stay fenced in the tombstones and writers get 1146 until the
            # settler renames them back (not landed) or finishes. Known not landed: the RENAMEs are
            # killed, the tables stay where they are. Gates, unfreeze and phase are the settler's
            # (:func:`migrator.engine.cutover.reconcile.settle_unknown`). Never a split brain.
            self.flip_unknown = True
            landed = self._landed_once_lease_is_gone()
            try:
                self.fences.settle_unknown(landed)
            except BaseException as rel:  # noqa: BLE001 - the unknown flip is what the caller must see
                exc.message = (f"{exc.message}; also, putting the rename fence on its side failed ({rel}): the "
                               "settler finishes or undoes it")
            exc.result = self._result((time.monotonic() - (self.record.t_freeze or time.monotonic())) * 1000)
            raise
        except BaseException as exc:
            if not flipped:
                if self.watchdog.claim() or not self.watchdog.fired:
                    self.undo()
                if self.watchdog.fired:
                    raise FreezeBudgetExceeded(self._overrun_msg(), phase=self.direction.label) from None
            if isinstance(exc, (MigratorError, pymysql.err.MySQLError, *ZK_LOST)) and not flipped:
                if isinstance(exc, MigratorError):
                    raise
                raise CutoverAborted(f"{self.direction.label} aborted before the flip, source still serves: "
                                     f"{str(exc) or type(exc).__name__}",
                                     phase=self.direction.label) from None
            raise
        self._hook(hooks.after_flip)
        assert self.edits.flipped_epoch is not None
        return self._result(freeze_ms)

    # -- the steps of the freeze ---------------------------------------------------------------
    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        """Time one step of the freeze from the end of the one before (so the steps add up to the
        freeze) and record it when it completes: a step that raised is not recorded, which is how
        :meth:`pending_step` names the step an overrun caught."""
        yield
        now = time.monotonic()
        self.record.steps[name] = round((now - self._step_end) * 1000, 2)
        self._step_end = now
        if self.lease is not None:
            self.lease.step(name)
        if self.hooks.at_step:
            self.hooks.at_step(self, name)

    def _hook(self, hook: Any) -> None:
        if hook is not None:
            hook(self)

    def _sync_passive(self, passive_own: GtidPos) -> None:
        """The source has applied the passive member's last writes (named by their own GTIDs, which
        holds in any GTID layout), so they are in its binlog before the fence."""
        assert self.passive_gate is not None and self.writer is not None
        ctl = self.fence.c if self.fence is not None else self.writer
        assert ctl is not None
        if not wait_applied(ctl, passive_own, self.remaining_s()):
            p = self.passive_gate.host.name
            raise CutoverAborted(f"{self.source.name} had not applied the last writes of {p} ({passive_own}) "
                                 f"when the freeze budget ran out: the replication {p} -> {self.source.name} "
                                 "lags (lag inside the source pair); the freeze was undone and the source "
                                 f"still serves; let it catch up (SHOW SLAVE STATUS on {self.source.name}), "
                                 "then retry", phase=self.direction.label)

    def _drain_to_sentinel(self) -> None:
        """Catch-up applies everything up to the sentinel (the background tail, if any, goes on to it
        by itself, then stops); the target's position is read right after."""
        assert self.target_conn is not None
        got = self.drainer.drain_to(self.fence_gtid, self.remaining_s(), save=False)
        if got is not None:
            self.record.drained = got.drain_record()
        missing = self._sentinels_missing()
        if missing:
            raise CutoverAborted(f"the sentinel row did not reach {missing[0]} on {self.target.name} after "
                                 f"draining to {self.fence_gtid}: catch-up is not applying; check it",
                                 phase=self.direction.label)
        # where a reverse tail would start: the state first, so it never names a transaction after the
        # position (a shared GTID domain needs it to know which server's transactions are before it)
        self.target_state = str(binlog_state(self.target_conn))
        self.target_pos = binlog_pos(self.target_conn)

    def _claim_flip(self) -> None:
        """The last checks before the flip: the watchdog has not undone the freeze (and now never
        will), every fence still holds, and a rollback's old tables are back under their names."""
        assert self.watchdog is not None and self.fences is not None
        if not self.watchdog.claim():
            raise FreezeBudgetExceeded(self._overrun_msg(), phase=self.direction.label)
        lost = self.fences.holding()
        if lost is not None:
            raise CutoverAborted(f"{lost}; not flipping", phase=self.direction.label)
        if self.direction.pre_flip is not None:
            self._pre_flipped = True
            if not self._while_holding(self.direction.pre_flip):
                self._pre_flipped = False
                raise LeaseLost(self.direction.label, "the flip", "nothing was renamed and the flip was not made")

    def _landed_once_lease_is_gone(self, timeout: float = 10.0) -> bool | None:
        """After an unknown flip: give the lease up, then read the map. True/False once the lease node
        is known gone (the guarded flip CAS can no longer commit, so the map is final); None when
        that cannot be known now (ZooKeeper unreachable)."""
        path = self.guard
        if self.lease is None or path is None:
            return None
        self.lease.release()  # its record stays while the phase is still "cutover": for the settler
        try:
            if self.zk.client.exists(path) is not None:
                return None  # not deleted (the lease's own session was cut off): it ends with that session
            return self.edits.flip_landed(reread_map(self.maps, timeout))
        except (*ZK_LOST, KazooException):
            return None

    def _result(self, freeze_ms: float) -> CutoverResult:
        rec = self.record
        return CutoverResult(self.spec.id, round(freeze_ms, 2), self.edits.flipped_epoch or 0, self.fence_gtid,
                             self.target_pos, rec.rows_checked, rec.rows_repaired, dict(rec.steps), rec.keys_from,
                             self.target_state)

    def _write_sentinels(self) -> None:
        """A unique row in each moving db's sentinel table, all in one commit; ``fence_gtid`` is the
        position after it (where the drain goes, and where a reader of what came after the fence starts),
        ``fence_own`` the master's own transactions up to it (what its partner waits for).

        Under the rename fence the rows are written with ``autocommit=0`` and one
        COMMIT: START TRANSACTION would end LOCK TABLES, a COMMIT does not (checked
        on MariaDB 10.11), and one commit instead of one per db is what keeps this
        step short for a batch of many dbs (docs/performance.md, "Constants measured by the benchmarks").
        """
        token = self.token = uuid.uuid4().hex
        w = self.writer
        assert w is not None
        with w.cursor() as cur:
            cur.execute(f"{TAG}START TRANSACTION" if self.fence is None else f"{TAG}SET SESSION autocommit = 0")
            for db in self.spec.databases:
                cur.execute(f"{TAG}INSERT INTO {qualified(db, SENTINEL_TABLE)} (token, migration_id) "
                            "VALUES (%s, %s)", (token, self.spec.id))
            cur.execute(f"{TAG}COMMIT")
            if self.fence is not None:
                cur.execute(f"{TAG}SET SESSION autocommit = 1")
        self.fence_gtid = binlog_pos(w)
        self.fence_own = own_gtids(w)

    def _sentinels_missing(self, per_query: int = 200) -> list[str]:
        """The moving dbs whose sentinel row is not on the target (a few queries, not one per db)."""
        assert self.target_conn is not None
        tdb = self.direction.target_db_of
        dbs = list(self.spec.databases)
        have: set[int] = set()
        for k in range(0, len(dbs), per_query):
            sql = " UNION ALL ".join(f"SELECT {i} FROM {qualified(tdb(dbs[i]), SENTINEL_TABLE)} WHERE token = "
                                     f"{string_literal(self.token)}" for i in range(k, min(len(dbs), k + per_query)))
            have.update(int(r[0]) for r in query(self.target_conn, f"{TAG}{sql}"))
        return [db for i, db in enumerate(dbs) if i not in have]

    def pending_step(self) -> str:
        """The freeze step under way now: the first of :data:`FREEZE_STEPS` not yet recorded."""
        skip = () if self.passive_gate is not None else ("passive_close", "passive_sync")
        return next((s for s in FREEZE_STEPS if s not in self.record.steps and s not in skip), "release")

    def _overrun(self) -> None:
        """The watchdog fired: note the step it caught (the main thread may finish that step before it
        sees the watchdog, and the refusal must name the step the budget ran out in), then undo."""
        self.record.overrun_step = self.pending_step()
        self.undo()

    def _overrun_msg(self) -> str:
        """Why the watchdog undid the freeze, named by the step that was running when the budget ran out."""
        extra = f" (undo failed: {self.watchdog.error})" if self.watchdog and self.watchdog.error else ""
        step = self.record.overrun_step or self.pending_step()
        passive = self.passive_gate.host.name if self.passive_gate is not None else "the passive member"
        why = {
            "passive_close": (f"while closing the write gate on {passive}: a transaction there holds a moving "
                              "table; let it end (or end it), then retry"),
            "passive_sync": (f"while {self.source.name} applied the last writes of {passive}: the replication "
                             f"{passive} -> {self.source.name} lags (lag inside the source pair); let it catch up "
                             f"(SHOW SLAVE STATUS on {self.source.name}), then retry"),
            "fence": ("while the fence waited for the moving tables' locks: a long transaction on a moving table "
                      f"holds them on {self.source.name} (SHOW PROCESSLIST); let it end (or end it), then retry"),
        }.get(step, f"in its {step} step: let catch-up converge further (or raise freeze_budget_ms) and retry")
        return (f"the freeze overran its budget of {self.spec.options.freeze_budget_ms} ms and was undone{extra}; "
                f"the source still serves. It ran out {why}")

    def _compare_in_freeze(self, verified: str, suspect: list[dict[str, Any]]) -> None:
        assert self.writer is not None
        got = recheck.compare_in_freeze(self.moving_tables(), self.writer, self.refreshed, verified, suspect,
                                        token=self.token, fence_gtid=self.fence_gtid, remaining_s=self.remaining_s)
        self.record.steps["compare_keys"] = got.keys_ms
        rec = self.record
        rec.keys_from, rec.rows_checked, rec.rows_repaired = got.keys_from, got.rows_checked, got.rows_repaired
