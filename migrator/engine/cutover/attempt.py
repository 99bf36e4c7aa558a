"""One fenced attempt, forward (a cutover) or back (a rollback): the driver both run.

Runs in the cutover process, or a rollback's. The caller holds the lease
(:class:`~migrator.engine.cutover.lease.CutoverLease`) and has a prepared
:class:`~migrator.engine.cutover.run.CutoverRun`; the :class:`Way` carries what
differs between the two directions (phases, record nodes, the error raised,
whose pair serves when an attempt is undone). Every attempt ends in one of
these ownership outcomes, each handled in one place:

* **flipped**: the phase moves on (``after``) and the result is recorded;
* **flipped, release failed**: the phase stays ``running`` (guarded by the lease),
  so a settler finishes it once the lease is gone;
* **stopped before the flip**: the phase goes back (``before``) while the lease is
  held; with the lease gone, the settler finishes the undo, and the error says so;
* **flip unknown** (:class:`FlipUnknown`): propagated; the caller gives the lease
  up and :func:`settle_after_unknown` lets the map decide, as a settler would.

Every attempt is recorded, refused and undone ones too (:func:`record_attempt`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from migrator.engine.cutover import blockers, freeze_stats
from migrator.engine.cutover.errors import CutoverAborted, CutoverError, FlipUnknown, FreezeBudgetExceeded
from migrator.engine.cutover.hooks import CutoverHooks, CutoverResult
from migrator.engine.cutover.lease import CutoverLease
from migrator.engine.cutover.reconcile import reconcile, settle_unknown
from migrator.engine.cutover.run import CutoverRun
from migrator.engine.mdl import LockBusy
from migrator.engine.migration import GuardLost, MigrationStore, Node, Phase, PhaseConflict, Spec
from migrator.errors import MigratorError, describe
from migrator.fleet.config import Config
from migrator.fleet.zk import ZK

log = logging.getLogger(__name__)


class RollbackError(CutoverError):
    component = "rollback"


@dataclass(frozen=True)
class Way:
    """What differs between a cutover attempt and a rollback attempt."""

    label: str
    #: the phase an attempt starts from, holds while it runs, and ends in once flipped
    before: Phase
    running: Phase
    after: Phase
    error: type[CutoverError]
    #: raised when an unknown flip is settled as not landed (the attempt undone)
    undone_error: type[CutoverError]
    #: where the attempts are recorded, and how many are kept
    attempts_node: str
    keep: int
    #: where the flip's result is recorded
    result_node: str
    #: what the attempt is called in its outcome once flipped
    flipped: str
    #: the host that serves when an attempt is undone, and the one the ranges flip to
    serving: Callable[[Spec], str]
    flips_to: Callable[[Spec], str]
    #: a stopped attempt's error names the client transactions that held the fence's locks
    name_blockers: bool


FORWARD = Way("cutover", Phase.CONVERGED, Phase.CUTOVER, Phase.DONE, CutoverError, CutoverAborted,
              Node.CUTOVER_ATTEMPTS, 20, Node.CUTOVER, "flipped", lambda s: s.source_master,
              lambda s: s.target_master, True)
BACK = Way("rollback", Phase.DONE, Phase.ROLLING_BACK, Phase.ROLLED_BACK, RollbackError, RollbackError,
           Node.ROLLBACK_PASSES, 30, Node.ROLLBACK, "flipped back", lambda s: s.target_master,
           lambda s: s.source_master, False)


def record_attempt(store: MigrationStore, way: Way, migration_id: str, attempt: dict[str, Any]) -> None:
    """Keep ``attempt`` (its freeze and steps: they count in the freeze a client saw) in the way's node,
    beside what else that node holds. Bookkeeping never hides the attempt's own outcome."""
    try:
        node, version = store.get_progress(migration_id, way.attempts_node)
        record = dict(node or {})
        record["attempts"] = list(record.get("attempts", []))[-(way.keep - 1):] + [attempt]
        store.put_progress(migration_id, way.attempts_node, record, version=version)
    except Exception:  # noqa: BLE001 - see above
        pass


def record_next_try(store: MigrationStore, migration_id: str, next_try: dict[str, Any] | None) -> None:
    """Keep when the pipeline tries the cutover again (``{"at", "attempt", "delay_s", "until"}``), or None
    once it will not (flipped, given up), in the attempts node beside the attempts: ``migrator status ID``
    and the CLI's progress lines read it there. Bookkeeping: a lost write never stops the pipeline."""
    for _ in range(3):  # a compare-and-set: an attempt recorded meanwhile is kept, and this is tried again
        try:
            node, version = store.get_progress(migration_id, FORWARD.attempts_node)
            if node is None and next_try is None:
                return
            store.put_progress(migration_id, FORWARD.attempts_node, {**(node or {}), "next_try": next_try},
                               version=version)
            return
        except Exception:  # noqa: BLE001 - see above
            continue


def phase_while_held(store: MigrationStore, way: Way, migration_id: str, phase: Phase, lease: CutoverLease,
                     error: str) -> bool:
    """Set the phase from ``running``, guarded by the lease; False when the lease is gone (the settler
    sets it then) or the phase moved on (it settled already)."""
    try:
        store.set_phase(migration_id, phase, error=error, expect=way.running, guard=lease.path)
        return True
    except (GuardLost, PhaseConflict):
        return False


def drive(way: Way, store: MigrationStore, spec: Spec, run: CutoverRun, lease: CutoverLease, hooks: CutoverHooks,
          *, gate: Callable[[CutoverRun], dict[str, Any]] | None = None,
          on_flipped: Callable[[CutoverResult], bool]) -> CutoverResult:
    """One attempt of ``run`` under ``lease``: prepare, the gate (``gate`` returns the phase's extra
    fields, or raises with the attempt recorded as refused), the target's standby, the re-check, the
    phase, the freeze. ``on_flipped`` records the flip (True: by this process) before the attempt is.
    Raises :class:`FlipUnknown` for the caller to settle; closes the run."""
    migration_id = spec.id
    failure: BaseException | None = None
    took = run.record.before_freeze
    run.hooks = hooks  # the gates' install asks them too (CutoverRun._owns_gates)

    @contextmanager
    def before_freeze(step: str) -> Iterator[None]:
        lease.before_freeze(step, run.attempt_id, way.label)  # where it was, should this process die here
        with _timed(took, step):
            yield

    def held(step: str, hook: Callable[[Any], None] | None) -> None:
        """A hook that holds the attempt (a batch waits for the one before it); what stops it is recorded."""
        if hook is None:
            return
        try:
            with before_freeze(step):
                hook(run.view())
        except MigratorError as exc:
            record_attempt(store, way, migration_id, run.attempt(f"held: {exc.message}").as_dict())
            raise

    try:
        # what earlier attempts that died before their freeze left (their gates' triggers, in any phase)
        # goes first, under the settle lock: this attempt's own are named apart and installed after
        with _timed(took, "settle"):
            reconcile(run.config, migration_id, zk=run.zk, lease=lease)
        with before_freeze("prepare"):
            _prepare_while_warming(run)
        extra: dict[str, Any] = {}
        if gate is not None:
            try:
                with before_freeze("gate"):
                    extra = gate(run)
            except FreezeBudgetExceeded as exc:
                record_attempt(store, way, migration_id, run.attempt(f"refused: {exc.message}").as_dict())
                raise
        with before_freeze("standby"):
            run.check_target_passive()
        with before_freeze("recheck"):
            run.refresh_verified_gtid()
        held("held", hooks.before_freeze)
        # the gates' triggers, after every wait that can last (the gate's drain, the target's standby, the
        # re-check, the batch before this one): they live from here to each member's finish, at most
        # `gate_lifetime_s` before the freeze (CutoverRun._gates_within_lifetime)
        with before_freeze("gates"):
            try:
                run.install_gates()
            except LockBusy as exc:  # a client's transaction held a moving table past the tries: named
                entry = run.attempt(f"refused: {exc.message}")
                entry.lock_waits[exc.server] = exc.attempts.to_dict()
                entry.blockers = [b.to_dict() for b in exc.blockers]
                record_attempt(store, way, migration_id, entry.as_dict())
                raise
        held("held_freeze", hooks.after_gates)
        # from `before`, and only while this process holds the lease (a settler may be at work otherwise)
        store.set_phase(migration_id, way.running, expect=way.before, guard=lease.path, **extra)
        # the freeze is known once it is over: kept for the next attempts' predictions then, not after the
        # renames and the passive member's finish (the next batch of a batched migration predicts meanwhile)
        run.on_released = lambda: freeze_stats.remember(run.zk, run.attempt(way.flipped).as_dict(),
                                                        fence=run.fences.mode, tables=len(run.tables),
                                                        migration=migration_id)
        try:
            result = run.run(hooks)
        except FlipUnknown:
            raise  # the phase stays `running`, the fences closed: settled from the map once the lease is given up
        except BaseException as exc:
            _stopped(way, store, spec, run, lease, exc)
            raise
        recorded = on_flipped(result)
        attempt = run.attempt(way.flipped if recorded else f"{way.flipped} (recorded by a settler)")
        record_attempt(store, way, migration_id, attempt.as_dict())
        return result
    except BaseException as exc:
        failure = exc
        raise
    finally:
        run.close(failure)


def _prepare_while_warming(run: CutoverRun) -> None:
    """Prepare the fences (connections; the triggers come right before the freeze) in a thread while this one starts
    the drainer's reader and applies what is there, the first thing the gate's prediction does (a few
    hundred ms). The reader is started here, not in the helper thread: it is killed when the thread that
    started it ends (``PR_SET_PDEATHSIG``). The gate warms it again if this failed, and reports why."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="cutover-prepare") as pool:
        preparing = pool.submit(run.prepare)
        try:
            run.drainer.warm()
            run.warmed = True
        except Exception as exc:  # noqa: BLE001 - the gate warms it again and reports what fails
            log.debug("warming the drainer while preparing failed: %s", exc)
        preparing.result()


@contextmanager
def _timed(into: dict[str, float], step: str) -> Iterator[None]:
    t0 = time.monotonic()
    try:
        yield
    finally:
        into[step] = round((time.monotonic() - t0) * 1000, 1)


def _stopped(way: Way, store: MigrationStore, spec: Spec, run: CutoverRun, lease: CutoverLease,
             exc: BaseException) -> None:
    """The attempt raised ``exc``: after the flip, left for the settler to finish (raises that);
    before it, the phase set back while the lease is held and the attempt recorded."""
    msg = describe(exc)
    if run.edits.flipped_epoch is not None:
        # flipped, but the release did not complete: a worker settles it (finishes) once this lease ends
        phase_while_held(store, way, spec.id, way.running, lease, error=f"{way.flipped}; release failed: {msg}")
        raise way.error(f"the ranges {way.flipped} to {way.flips_to(spec)} but releasing the fence failed ({msg}); "
                        f"a running `migrator worker` finishes it within seconds, or run `migrator {way.label} "
                        f"{spec.id}` again", phase=way.label) from None
    # a freeze that ran out waiting for a lock names who holds it (blockers.py)
    blocked = blockers.after_overrun(run) if way.name_blockers else []
    if blocked and isinstance(exc, MigratorError):
        exc.message = msg = blockers.named(msg, blocked)
    if not phase_while_held(store, way, spec.id, way.before, lease, error=f"{way.label} aborted: {msg}") \
            or run.edits.lease_lost:
        note = ("this process lost its lease meanwhile, so it left the unfreeze and the phase to the worker that "
                "settles the attempt (within seconds)")
        if isinstance(exc, MigratorError):
            exc.message = f"{exc.message}; {note}"
        else:
            exc.add_note(note)
    entry = run.attempt(f"aborted: {msg}")
    if blocked:
        entry.blockers = [b.to_dict() for b in blocked]
    record_attempt(store, way, spec.id, entry.as_dict())
    if run.record.undo_ms is not None:  # the next freezes' watchdogs keep back what this undo cost
        freeze_stats.remember_undo(run.zk, run.record.undo_ms, fence=run.fences.mode, tables=len(run.tables),
                                   migration=spec.id)


def settle_after_unknown(way: Way, config: Config, zk: ZK, spec: Spec, lease: CutoverLease,
                         exc: FlipUnknown) -> CutoverResult:
    """The flip's outcome was unknown and the fences stayed closed: give the lease up and let the map
    decide. Returns the result when the flip had landed (finished, recorded); raises the way's error
    when it had not (undone: the pair it flipped from still serves), or the :class:`FlipUnknown`
    itself when it cannot be settled now (a worker settles it later)."""
    store = MigrationStore(zk)
    phase = settle_unknown(config, zk, spec.id, lease)
    if phase == way.after and exc.result is not None:
        state, _ = store.state(spec.id)
        result = exc.result
        result.flipped_epoch = state.flipped_epoch or 0
        store.put_progress(spec.id, way.result_node, {**result.to_dict(), "settled_by": "reconcile"})
        record_attempt(store, way, spec.id, {"at": time.time(), "outcome": f"{way.flipped} (outcome unknown at the "
                                             "CAS; settled from the map)", "steps_ms": dict(result.steps_ms)})
        return result
    if phase == way.before:
        record_attempt(store, way, spec.id, {"at": time.time(), "outcome": f"aborted: {way.label}'s flip outcome "
                                             "unknown; settled from the map: not landed, undone"})
        raise way.undone_error(f"{exc.message}. Settled from the map once the lease was given up: the flip had not "
                               f"landed, so the {way.label} was undone and {way.serving(spec)} still serves; run "
                               f"`migrator {way.label} {spec.id}` again", phase=way.label) from None
    exc.message = (f"{exc.message}. It could not be settled now (ZooKeeper unreachable, or another settler at it): "
                   f"a running `migrator worker` settles it once this process's lease has ended, or run "
                   f"`migrator {way.label} {spec.id}` again")
    raise exc
