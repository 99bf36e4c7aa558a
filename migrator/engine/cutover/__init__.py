"""Cutover: the short write freeze that moves the moving ranges to the target pair.

Runs in the migration worker (``migrator cutover ID``, ``jobs.cutover``) once
catch-up has converged. It reads like the runbook:

1. **Gate.** The migration is ``converged`` and the predicted freeze
   (``State.predicted_freeze_ms``, else a timed drain to the source head plus
   the fixed cost) fits ``Options.freeze_budget_ms``.
2. **Prepare** (no freeze yet): the sentinel table exists in every moving db on
   both sides (:func:`prepare_sentinels` made it before the copy), the
   tombstone schemas exist on the source, a full verify has recorded
   ``verified_gtid`` and the rows changed since then are re-checked
   (:mod:`migrator.engine.verify`), the target's standby has applied its
   master's writes, and the fence connections are open. Last, after every
   wait that can last, the trigger gates' triggers are installed (only while
   the attempt holds its lease): they live from here to each member's finish,
   and come off and go on again if the freeze does not start within
   ``Options.gate_lifetime_s``.
3. **Freeze** the moving ranges in the shard map (one CAS). Well-behaved
   clients now wait (``ShardRouter.wait_unfrozen``). A watchdog timer of the
   freeze budget starts: if it fires before the flip it undoes everything by
   itself (kills the pending RENAMEs, releases the lock, unfreezes). The
   budget bounds the time to the flip decision; once the flip CAS is under
   way nothing is undone (the release after it is one sweep and an UNLOCK).
4. **Fence** the source tables (:class:`migrator.engine.cutover.rename_fence.Fence`): LOCK TABLES
   ... WRITE on connection A, one RENAME per table to the tombstones queued on
   B1..Bn (one per table: see the fence module for why).
5. **Sentinel**: under the lock, A writes a unique row to ``_migrator_sentinel``
   in each moving db and reads ``@@gtid_binlog_pos``; catch-up drains to that
   exact position and the row must be on the target. This proves the target has
   every write the source accepted (idea: gh-ost's ``waitForEventsUpToLock``).
6. **Compare** the rows changed since the last check (their keys are those the
   drain applied since ``verified_gtid``, trusted only if the sentinel row is
   among them; else a background binlog reader's, else the binlog segment read
   then) and the chunks the full check left suspect; re-copy any difference
   (the source is fenced, so this is exact) and require a clean second look.
7. **Flip** the ranges to the target pair and unfreeze them in one CAS on the
   epoch of our freeze. A conflict aborts; it is never retried.
8. **Release**: the client statements waiting on the fence are ended (1317,
   nothing written: they refresh the map and go to the target at once), then
   UNLOCK on A; each table's RENAME runs before any writer of it. The freeze
   ends here. The renames finish behind it (a partitioned table's takes
   hundreds of ms), stale writers ended meanwhile (1317) or refused after
   (1146); then the source tables are tombstones. Partition maintenance may
   run again on the moved shards.
9. Record ``freeze_ms`` (from the commit of the freeze CAS to the end of the
   release; the CAS itself, ``steps_ms["freeze_cas"]``, is not in it, nor are
   the renames after it, ``steps_ms["renames"]``), the flipped epoch, the
   tombstone suffix and ``cleanup_after``; phase ``done``.

Any failure before the flip leaves the source serving and the ranges unfrozen.
A ZooKeeper connection loss during the flip CAS is an unknown outcome, not a
failure: if the map read back shows the flip, it is finished; if not, the CAS
may still commit (a server that held the request), so the fences stay closed,
the lease is given up (from then on the guarded CAS cannot commit) and the
cutover is settled from the map as a settler would
(:func:`~migrator.engine.cutover.reconcile.settle_unknown`). A cutover whose
process died midway (phase still ``cutover``) is never left so: the process
holds a lease in ZooKeeper (:mod:`migrator.engine.cutover.lease`) and, once it
ends, a live ``migrator worker`` reconciles the cutover the same way within
seconds (:mod:`migrator.engine.cutover.settle`); so does the next ``cutover``
call. The flip CAS is guarded by the lease: a process that lost it cannot
flip, nor unfreeze the ranges or set the phase (those writes carry the same
guard), nor open another attempt's gates (they are named per attempt).

Queue-partition moves
---------------------
A queue partition moves on its own table route in the shard map (see
``ShardMap.routes`` and docs/architecture.md): the shard's range stays where it
is and its other tables keep serving. The run changes the map only through the
spec's :class:`~migrator.fleet.model.MovingSet`, which for a partition freezes
and flips the route instead of ranges (one CAS, as for shards); it fences only
``Spec.tables`` (the partition's tables; the sentinel lives in the same db).

Words and modules
-----------------
* **budget** (:mod:`.budget`): the check before the freeze that the predicted
  freeze fits ``freeze_budget_ms``; the attempt records it as its ``gate`` step.
* **rename fence** (:mod:`.rename_fence`): ``LOCK TABLES`` plus one queued
  ``RENAME`` per table on a master (``fence=rename``).
* **trigger gate** (:mod:`.trigger_gate`): triggers reading a gate table on a
  member, dropping the table closes it to clients, not to replication (the
  passive member always; the master too under ``fence=gate``).
* **pair fence** (:mod:`.fences`): both members of the source pair behind one
  interface, with the mode chosen once (:func:`migrator.engine.fencing.fence_mode`).
* **passive**: the pair member the map does not name as master (the map's wire
  key is ``slave``: :data:`migrator.fleet.model.WIRE_NAMES`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_fixed

from migrator.engine.cutover.attempt import FORWARD, drive, settle_after_unknown
from migrator.engine.cutover.budget import FIXED_FREEZE_MS, check_budget, predict_freeze_ms
from migrator.engine.cutover.direction import Direction, forward, passive_of
from migrator.engine.cutover.errors import (
    ZK_LOST,
    CutoverAborted,
    CutoverError,
    FlipUnknown,
    FreezeBudgetExceeded,
    NotConverged,
)
from migrator.engine.cutover.hooks import CutoverHooks, CutoverResult
from migrator.engine.cutover.lease import CutoverLease, CutoverRunning
from migrator.engine.cutover.reconcile import reconcile
from migrator.engine.cutover.run import CutoverRun
from migrator.engine.migration import MigrationStore, Node, Phase, PhaseConflict
from migrator.engine.names import tomb_suffix
from migrator.engine.plan import release_maintenance_pause
from migrator.engine.sentinel import prepare_sentinels
from migrator.engine.verify.drainers import Drainer, default_drainer
from migrator.fleet import zk as zk_mod
from migrator.fleet.config import Config, Credentials, load_credentials
from migrator.fleet.zk import ZK

__all__ = [
    "FIXED_FREEZE_MS", "CutoverAborted", "CutoverError", "CutoverHooks", "CutoverLease", "CutoverResult", "CutoverRun",
    "CutoverRunning", "Direction", "FlipUnknown", "FreezeBudgetExceeded", "NotConverged", "cutover", "forward",
    "passive_of", "predict_freeze_ms", "prepare_sentinels", "reconcile",
]


def cutover(config: Config, migration_id: str, *, drainer: Drainer | None = None,
            hooks: CutoverHooks | None = None, now: Callable[[], float] = time.time) -> CutoverResult:
    """Freeze, fence, drain to the sentinel, compare, flip and release (see the module doc).

    Raises :class:`NotConverged` before anything is touched when the migration
    is not ready, and :class:`CutoverAborted` / :class:`FreezeBudgetExceeded`
    when it stopped before the flip (source serving, ranges unfrozen).
    """
    creds = load_credentials(config)
    hooks = hooks or CutoverHooks()
    with zk_mod.connect(config, creds) as zk:
        # held from before the phase is "cutover" until it is settled; if this process dies,
        # a `migrator worker` settles the cutover (module migrator.engine.cutover.settle)
        spec = MigrationStore(zk).spec(migration_id)  # an unknown id is refused before anything is written
        if spec.batched:
            raise NotConverged(f"migration {migration_id} cuts over in batches: its pipeline hands its shards to "
                               "batch migrations one batch at a time, each cut over on its own "
                               f"(`migrator resume {migration_id}` runs it; `migrator status` lists them)",
                               phase="cutover")
        lease = CutoverLease(config, creds, migration_id).acquire()
        try:
            return _cutover(config, zk, creds, migration_id, lease, drainer, hooks, now)
        except FlipUnknown as exc:
            # the spec read before: ZooKeeper may be unreachable right now, which is why the flip is unknown
            return settle_after_unknown(FORWARD, config, zk, spec, lease, exc)
        finally:
            lease.release()


def _cutover(config: Config, zk: ZK, creds: Credentials, migration_id: str, lease: CutoverLease,
             drainer: Drainer | None, hooks: CutoverHooks, now: Callable[[], float]) -> CutoverResult:
    store = MigrationStore(zk)
    spec = store.spec(migration_id)
    state, _ = store.state(migration_id)
    if state.phase == Phase.CUTOVER:
        reconcile(config, migration_id, zk=zk, lease=lease)
        state, _ = store.state(migration_id)
        if state.phase == Phase.DONE:
            raise CutoverError(f"migration {migration_id} had already flipped; it is done", phase="cutover")
    if state.phase != Phase.CONVERGED:
        raise NotConverged(f"migration {migration_id} is {state.phase.value}, not converged: "
                           "wait for catch-up to converge (`migrator status ID`)", phase="cutover")
    own_drainer = drainer is None
    drainer = drainer or default_drainer(config, migration_id, state.phase)
    run = CutoverRun(config, zk, creds, spec, drainer)
    run.lease = lease

    def gate(run: CutoverRun) -> dict[str, Any]:
        try:
            predicted, run.record.predicted = check_budget(run, state.predicted_freeze_ms)
        except FreezeBudgetExceeded as exc:
            run.record.predicted = exc.predicted or {}
            raise
        return {"predicted_freeze_ms": predicted}

    def record_flip(result: CutoverResult) -> bool:
        # the flip landed: record it even across a ZooKeeper session loss (each write is idempotent). From
        # "cutover" only, and not guarded by the lease: the flip stands whoever records it; a settler that
        # finished it first leaves the phase "done" (PhaseConflict: nothing left to write here)
        recorded = True
        for attempt in Retrying(stop=stop_after_delay(60), wait=wait_fixed(0.2),
                                retry=retry_if_exception_type(ZK_LOST), reraise=True):
            with attempt:
                try:
                    store.set_phase(migration_id, Phase.DONE, freeze_ms=result.freeze_ms,
                                    flipped_epoch=result.flipped_epoch, tombstone_db_suffix=tomb_suffix(migration_id),
                                    cleanup_after=now() + spec.options.retention_s, expect=Phase.CUTOVER)
                except PhaseConflict:
                    recorded = False
                if recorded:
                    store.put_progress(migration_id, Node.CUTOVER, result.to_dict())
                release_maintenance_pause(zk, spec)
        return recorded

    try:
        return drive(FORWARD, store, spec, run, lease, hooks, gate=gate, on_flipped=record_flip)
    finally:
        if own_drainer:
            drainer.close()
