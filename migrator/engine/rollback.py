"""Rollback: move the ranges of a finished migration back to the old pair, within the retention.

Runs on the RQ workers: ``migrator rollback ID`` enqueues it
(:func:`migrator.ops.command.start_rollback`) and follows it from the record; the
job ``jobs.rollback.run`` calls :func:`rollback_slice` once per job, each job a
slice of about two minutes that enqueues the next on its own queue (the
migration's, its source pair's). :func:`rollback` runs the same steps in one
call, in the calling process (``migrator rollback ID --sync``, the playbook
step ``rollback``, tests). Only after a cutover, while the tombstones still
exist on the old master.

The old master's tombstones (``_tomb_<suffix>_dbNNNNN``) hold the rows as they
were at the flip. Since then clients wrote to the new master. So:

1. **Reverse tail**: the catch-up :class:`~migrator.engine.catch_up.tailer.Tailer` reads the
   new master's binlog from the position recorded under the cutover fence
   (``cutover`` progress node, ``target_gtid``) and applies the moving
   schemas' events to the old master with a schema mapping ``dbNNNNN ->
   _tomb_<suffix>_dbNNNNN``; its checkpoint lives in ``rollback_tail``, and the
   applier lock ``appliers/<id>-rollback`` (taken before the checkpoint is
   read) keeps two reverse tails from applying at once. It runs in converging
   passes, measured and judged like the forward catch-up's
   (:func:`reverse_passes`, node ``rollback_passes``), until a pass predicts a
   freeze inside the budget; a reverse tail that cannot keep up is reported as
   not converging, with the rates. A slice killed in its passes loses nothing:
   the next one (``migrator resume ID`` enqueues it from the record's
   ``rollback_requested``) goes on from the checkpoint.
2. **Verify**: at the flip the tombstones equalled the new tables (the cutover
   proved it under its fence), so the rows that can differ are exactly those
   changed on the new master since ``target_gtid``. They are compared (and
   re-copied) before the freeze, and again inside it for the last few.
3. **Flip back with the same protocol** (:class:`migrator.engine.cutover.run.CutoverRun`
   with the reverse :class:`~migrator.engine.cutover.direction.Direction`), under the
   cutover's lease, phase ``rolling_back``: freeze, fence the
   new master's tables (they become its tombstones), sentinel through the
   reverse tail, compare, then, still under the fence, rename the old master's
   tombstones back to ``dbNNNNN`` and flip the ranges back in one CAS. If the
   flip does not land, the old master's tables go back to the tombstone names
   and the new master's fence is undone: the new master keeps serving. Those
   renames of the old master's tables are made under the settle lock while the
   lease is held, never by a process that lost it. A flip back whose outcome
   is unknown keeps its fences closed and is settled from the map once the
   lease is given up, as the cutover's is. A process killed inside it is
   settled by a live ``migrator worker``
   (:mod:`migrator.engine.cutover.settle`), wholly before or after the flip.
   An attempt stopped before the flip (budget overrun, drain timeout) is
   followed by more passes and another attempt, up to :data:`MAX_ATTEMPTS` in
   all (the count carries from slice to slice).

Phase ``done`` -> ``rolled_back``. A verdict (not converging, every attempt
stopped, no freeze inside the budget after :data:`MAX_PASSES` passes) is a
:class:`RollbackError`; on the workers it lands in the record (``stopped``,
``error``) with the next step. The new master's tables stay as tombstones
(``_tomb_<suffix>_dbNNNNN`` on that host) until :func:`migrator.engine.cleanup.cleanup`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

from kazoo.exceptions import LockTimeout, SessionExpiredError

from migrator.engine.catch_up.checkpoint import applier_claim, applier_lock, apply_path_from_env
from migrator.engine.catch_up.checkpoint import moving_tables as tail_tables
from migrator.engine.catch_up.passes import PassResult, judge, measure_pass
from migrator.engine.catch_up.tailer import DrainTimeout, Tailer
from migrator.engine.cutover.attempt import BACK, RollbackError, drive, settle_after_unknown
from migrator.engine.cutover.budget import FIXED_FREEZE_MS
from migrator.engine.cutover.direction import Direction, passive_of
from migrator.engine.cutover.errors import FlipUnknown, FreezeBudgetExceeded
from migrator.engine.cutover.hooks import CutoverHooks, CutoverResult, RunView
from migrator.engine.cutover.lease import CutoverLease
from migrator.engine.cutover.reconcile import reconcile
from migrator.engine.cutover.run import CutoverRun
from migrator.engine.migration import GuardLost, MigrationStore, Node, Phase, PhaseConflict, Spec
from migrator.engine.names import SENTINEL_TABLE, rename_tomb_tables, tomb_db
from migrator.engine.records import AttemptsNode, CatchupNode, CatchupPass, FlipNode
from migrator.engine.sentinel import ensure_sentinel
from migrator.engine.verify.checksums import moving_tables
from migrator.engine.verify.drainers import Drainer, TailDrainer
from migrator.engine.verify.waits import Stalled, drain_progressing
from migrator.errors import describe
from migrator.fleet import zk as zk_mod
from migrator.fleet.config import Config, Credentials, load_credentials
from migrator.fleet.gtid import GtidPos, GtidState
from migrator.fleet.model import Host
from migrator.fleet.mysql import binlog_pos, tag
from migrator.fleet.mysql import connect as mysql_connect
from migrator.fleet.shard_map import HostRegistry

TAG = tag("rollback")
TAIL_NODE = Node.ROLLBACK_TAIL
VERIFY_NODE = Node.ROLLBACK_VERIFY

class ReverseDrainer(TailDrainer):
    """:class:`~migrator.engine.verify.drainers.Drainer` tailing the new master back into the old
    master's tombstones."""

    def __init__(self, store: MigrationStore, spec: Spec, new_master: Host, old_master: Host,
                 credentials: Credentials, start: str, start_state: str = ""):
        self.store = store
        self.spec = spec
        self.new_master = new_master
        self.old_master = old_master
        self.credentials = credentials
        self.start = start
        #: the new master's binlog state read with ``start`` (the cutover's ``target_state``)
        self.start_state = start_state
        self._tailer: Any = None
        self._lock: Any = None

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self._lock is not None:
                try:
                    self._lock.release()
                except Exception:  # noqa: BLE001 - a lost session released it already
                    pass
                self._lock = None

    def open(self) -> ReverseDrainer:
        if self._tailer is None:
            key = f"{self.spec.id}-rollback"
            if self._lock is None:  # one reverse tail at a time, taken before the checkpoint is read
                self._lock = applier_lock(self.store.zk, key, "rollback")
            # its node guards the checkpoint writes; its token fences the writes into the tombstones
            claim = applier_claim(self.store.zk, self._lock, key)
            node = CatchupNode.parse(self.store.get_progress(self.spec.id, TAIL_NODE)[0])
            tailer = Tailer(
                self.new_master, self.old_master, self.credentials, start=GtidPos.parse(node.gtid or self.start),
                start_state=node.state if node.gtid else self.start_state,
                schema_map={db: tomb_db(self.spec.id, db) for db in self.spec.databases},
                tables=_with_sentinel(tail_tables(self.spec)), epoch=claim.epoch(),
                # the tombstones held exactly the new master's rows at the flip (the cutover compared them
                # under its fence): from there the new master's rows events apply strictly (the fast path)
                fast_from=GtidState.of(GtidPos.parse(self.start), self.start_state), path=apply_path_from_env(),
            )

            def checkpoint(pos: GtidPos) -> None:
                try:
                    node = {"gtid": str(pos), "state": str(tailer.applied_state), "at": time.time()}
                    self.store.put_progress(self.spec.id, TAIL_NODE, node, guard=claim.node)
                except GuardLost:
                    raise claim.lost("its applier lock is gone, so the reverse tail's checkpoint was not "
                                     "written") from None
                except SessionExpiredError:
                    raise claim.lost("its ZooKeeper session expired, and its applier lock with it") from None

            tailer.on_checkpoint = checkpoint
            self._tailer = tailer
        return self


def _with_sentinel(tables: set[str] | None) -> set[str] | None:
    """A table filter that lets the sentinel row through (None: every table)."""
    return None if tables is None else set(tables) | {SENTINEL_TABLE}


def _renamer(old_master: Host, creds: Credentials, spec: Spec, tables: Callable[[], list[tuple[str, str]]],
             *, to_live: bool) -> Callable[[RunView], None]:
    """Rename the old master's tombstones to the live names (or back), in one statement."""

    def run(_: RunView) -> None:
        pairs = tables()
        if not pairs:
            return
        with mysql_connect(old_master, creds) as conn:
            rename_tomb_tables(conn, spec.id, pairs, to_live=to_live, tag=TAG, server=old_master.name)

    return run


#: reverse passes before one attempt at most (each is judged like a forward catch-up pass)
MAX_PASSES = 200
#: fenced attempts to flip back before the command gives up (between two, more passes run)
MAX_ATTEMPTS = 5
#: the progress node holding the reverse passes and the attempts
PASSES_NODE = Node.ROLLBACK_PASSES
#: passes kept in the record
PASSES_KEPT = 30


def reverse_passes(store: MigrationStore, spec: Spec, drainer: ReverseDrainer, *,
                   on_pass: Callable[[PassResult], None] | None = None, deadline: float | None = None,
                   max_passes: int = MAX_PASSES, prev_head_at: float | None = None) -> PassResult | None:
    """Converging reverse catch-up passes: tail the new master into the tombstones, each pass to
    the head seen at its start, until a pass converges (delta and lag under the migration's
    thresholds) with a predicted freeze inside the budget; returns that pass. The same measures
    and verdicts as the forward catch-up (:func:`~migrator.engine.catch_up.passes.measure_pass`,
    :func:`judge`): when the apply rate stays below the new master's write rate for
    ``not_converging_passes`` passes it stops with :class:`RollbackError`, and so it does after
    ``max_passes`` passes without a freeze inside the budget. Every pass lands in the
    ``rollback_passes`` node. With a ``deadline`` (``time.monotonic()``) it returns None once the
    deadline passed between two passes without such a pass (an RQ slice ends there)."""
    opts = spec.options
    tailer = drainer.open()._tailer
    node, _ = store.get_progress(spec.id, PASSES_NODE)
    record = dict(node or {})
    passes = AttemptsNode.parse(node).passes
    for n in range(max_passes):
        if n and deadline is not None and time.monotonic() >= deadline:
            return None
        started_at = time.time()
        head = tailer.source_head()
        head_at = time.time()
        stats = tailer.apply_until(GtidState.of(head), timeout_s=3600)
        if not stats.reached:
            raise RollbackError(f"a reverse pass did not reach the new master's head {head} within an hour; "
                                "run `migrator rollback ID` again (it resumes from its checkpoint)", phase="rollback")
        res = measure_pass(stats, number=(passes[-1].number or 0) + 1 if passes else 1, started_at=started_at,
                           head=str(head), head_at=head_at, prev_head_at=prev_head_at)
        prev_head_at = head_at
        res.converged, res.not_converging = judge(res, passes, opts)
        passes.append(CatchupPass.parse(asdict(res)))
        record["passes"] = [p.dump() for p in passes[-PASSES_KEPT:]]
        record["head_at"] = head_at
        store.put_progress(spec.id, PASSES_NODE, record)
        if on_pass is not None:
            on_pass(res)
        if res.not_converging:
            raise RollbackError(
                f"rollback of {spec.id} is not converging: for {opts.not_converging_passes} reverse passes the "
                f"apply rate stayed below the write rate on {spec.target_master} (last pass: apply "
                f"{res.apply_rate:.0f} events/s < write {res.write_rate:.0f} events/s). Reduce the write load on "
                f"the moved shards, then run `migrator rollback {spec.id}` again", phase="rollback")
        if res.converged and res.predicted_freeze_ms + FIXED_FREEZE_MS <= opts.freeze_budget_ms:
            return res
    raise RollbackError(f"rollback of {spec.id}: {MAX_PASSES} reverse passes without a freeze predicted inside the "
                        f"budget of {opts.freeze_budget_ms} ms; lower the write load or raise freeze_budget_ms "
                        f"(`migrator set {spec.id} --freeze-budget-ms N`), then run `migrator rollback` again",
                        phase="rollback")


@dataclass
class SliceResult:
    """What one slice of a rollback did; the counters carry over to the next slice (an RQ job)."""

    #: the reverse passes of this slice
    passes: list[PassResult] = field(default_factory=list)
    #: fenced attempts stopped before the flip back so far (this rollback's, every slice's)
    attempts: int = 0
    #: reverse passes since the last stopped attempt (or the start)
    since_attempt: int = 0
    #: when the last pass read the new master's head (its write rate is measured from there)
    head_at: float | None = None
    #: the last stopped attempt's reason
    stopped: str | None = None
    #: set once the ranges flipped back
    result: CutoverResult | None = None

    @property
    def done(self) -> bool:
        return self.result is not None


def rollback(config: Config, migration_id: str, *, drainer: Drainer | None = None,
             hooks: CutoverHooks | None = None, on_pass: Callable[[PassResult], None] | None = None,
             max_attempts: int = MAX_ATTEMPTS) -> CutoverResult:
    """Flip a finished migration back to its old pair, in this process (see the module doc).

    One call finishes under any write load the forward catch-up converges under:
    reverse passes run until the predicted freeze fits the budget, then the fenced
    flip back is attempted; an attempt stopped before the flip (budget overrun,
    drain timeout) is followed by more passes and another attempt, up to
    ``max_attempts``. It stops with a plain reason when the reverse tail does not
    converge or every attempt was stopped. ``migrator rollback ID`` runs the same
    steps as a chain of RQ jobs, one :func:`rollback_slice` each.
    """
    out = rollback_slice(config, migration_id, drainer=drainer, hooks=hooks, on_pass=on_pass,
                         max_attempts=max_attempts)
    assert out.result is not None  # without a slice length, a slice ends flipped back or raises
    return out.result


def rollback_slice(config: Config, migration_id: str, *, slice_s: float | None = None, attempts: int = 0,
                   since_attempt: int = 0, prev_head_at: float | None = None, drainer: Drainer | None = None,
                   hooks: CutoverHooks | None = None, on_pass: Callable[[PassResult], None] | None = None,
                   max_attempts: int = MAX_ATTEMPTS) -> SliceResult:
    """One slice of a rollback: reverse passes for about ``slice_s`` seconds (None: no limit) and,
    once a pass converges with a freeze inside the budget, the fenced flip back.

    Returns with ``result`` set once the ranges flipped back; without it when the slice ran out
    of time in its passes (or after a stopped attempt): the next slice goes on with the counters
    of the returned :class:`SliceResult` (``attempts``, ``since_attempt``, ``head_at``). Raises
    :class:`RollbackError` with the verdict (not converging, every attempt stopped, no freeze
    inside the budget after :data:`MAX_PASSES` passes). Everything a slice resumes from is in
    the migration record: the reverse tail's checkpoint (``rollback_tail``) and the passes
    (``rollback_passes``); a slice killed anywhere loses nothing (a flip back it died in is
    settled by a worker, or by the next slice).
    """
    out = SliceResult(attempts=attempts, since_attempt=since_attempt, head_at=prev_head_at)
    deadline = None if slice_s is None else time.monotonic() + slice_s

    def counted(res: PassResult) -> None:
        out.passes.append(res)
        out.since_attempt += 1
        if on_pass is not None:
            on_pass(res)

    creds = load_credentials(config)
    with zk_mod.connect(config, creds) as zk, _reading_tombstones(zk, migration_id):
        store = MigrationStore(zk)
        spec = store.spec(migration_id)
        state, _ = store.state(migration_id)
        if state.phase == Phase.ROLLING_BACK:
            # an earlier rollback died in its flip back: settle it first (finish or undo), as a worker would
            reconcile(config, migration_id, zk=zk)
            state, _ = store.state(migration_id)
            if state.phase == Phase.ROLLED_BACK:
                raise RollbackError(f"migration {migration_id} had already flipped back; it is rolled back",
                                    phase="rollback")
        if state.phase != Phase.DONE:
            raise RollbackError(f"migration {migration_id} is {state.phase.value}: only a finished (done) migration "
                                "with its tombstones can be rolled back", phase="rollback")
        node = FlipNode.parse(store.get_progress(migration_id, Node.CUTOVER)[0])
        if not node.target_gtid:
            raise RollbackError(f"migration {migration_id} recorded no new-master position at its flip; "
                                "it cannot be tailed back", phase="rollback")
        reg = HostRegistry(zk)
        old_master, new_master = reg.get(spec.source_master), reg.get(spec.target_master)
        moved: list[tuple[str, str]] = []
        with mysql_connect(old_master, creds) as conn:
            for db in spec.databases:
                tomb = tomb_db(migration_id, db)
                names = moving_tables(conn, tomb, spec.tables)
                if not names:
                    raise RollbackError(f"no tombstones in {tomb} on {old_master.name}: cleaned up already?",
                                        phase="rollback")
                moved += [(db, t) for t in names]
                ensure_sentinel(conn, tomb)
        if store.get_progress(migration_id, VERIFY_NODE)[0] is None:
            # the cutover proved tombstones == new tables at target_gtid
            store.put_progress(migration_id, VERIFY_NODE, {"verified_gtid": node.target_gtid,
                                                           "suspect_chunks": [], "at": time.time()})
        own_drainer = drainer is None
        if drainer is None:
            drainer = ReverseDrainer(store, spec, new_master, old_master, creds, node.target_gtid,
                                     node.target_state or "")
        direction = Direction(
            "rollback", source=new_master, target=old_master, from_master=spec.target_master,
            to_master=spec.source_master, to_passive=spec.source_passive, verify_node=VERIFY_NODE,
            target_db_of=lambda db: tomb_db(migration_id, db),
            passive=passive_of(reg, spec.target_master, spec.target_passive, spec),
            pre_flip=_renamer(old_master, creds, spec, lambda: moved, to_live=True),
            undo_pre_flip=_renamer(old_master, creds, spec, lambda: moved, to_live=False),
        )
        try:
            while True:
                if isinstance(drainer, ReverseDrainer):
                    ready = reverse_passes(store, spec, drainer, on_pass=counted, deadline=deadline,
                                           max_passes=max(1, MAX_PASSES - out.since_attempt),
                                           prev_head_at=out.head_at)
                    if out.passes:  # a pass reads the head right as it starts: the next pass's window opens here
                        out.head_at = out.passes[-1].started_at
                    if ready is None:
                        return out  # the slice is over: the next one goes on from the checkpoint
                else:
                    _timed_gate(spec, drainer, new_master, creds)
                try:
                    out.result = _attempt(config, zk, store, creds, spec, drainer, direction, hooks)
                    return out
                except (FreezeBudgetExceeded, DrainTimeout, Stalled) as exc:  # timing: more passes, then again
                    out.attempts += 1
                    out.since_attempt = 0
                    out.stopped = describe(exc)
                    if out.attempts >= max_attempts:
                        raise RollbackError(f"rollback of {migration_id}: {max_attempts} fenced attempts were stopped "
                                            f"before the flip back (last: {out.stopped}); {spec.target_master} keeps "
                                            f"serving. Lower the write load or raise freeze_budget_ms, then run "
                                            f"`migrator rollback {migration_id}` again", phase="rollback") from None
                    if deadline is not None and time.monotonic() >= deadline:
                        return out
        finally:
            if own_drainer:
                drainer.close()


#: how long a rollback waits for a cleanup that is dropping the tombstones before it refuses (seconds)
TOMBSTONE_LOCK_WAIT_S = 30.0


@contextmanager
def _reading_tombstones(zk: Any, migration_id: str) -> Iterator[None]:
    """The shared side of the tombstones' lock, held while this rollback (any path: an RQ slice, ``--sync``,
    a playbook step, ``command.rollback``) reads them: a cleanup, which takes the exclusive side, never drops
    them under it, and a rollback never starts while a cleanup drops them."""
    lock = MigrationStore(zk).tombstone_lock(migration_id, "rollback", exclusive=False)
    try:
        got = lock.acquire(timeout=TOMBSTONE_LOCK_WAIT_S)
    except LockTimeout:
        got = False
    if not got:
        holders = ", ".join(str(c) for c in lock.contenders()) or "?"
        raise RollbackError(f"a cleanup of {migration_id} is dropping its tombstones ({holders}): there is nothing "
                            "left to roll back to once it is done; see `migrator status ID`", phase="rollback")
    try:
        yield
    finally:
        try:
            lock.release()
        except Exception:  # noqa: BLE001 - a lost session released it already
            pass


def _timed_gate(spec: Spec, drainer: Drainer, new_master: Host, creds: Credentials) -> None:
    """For a drainer that is not the reverse tail (tests): one timed drain to the head as the gate."""
    with mysql_connect(new_master, creds) as c:
        head = binlog_pos(c)
    t0 = time.monotonic()
    drain_progressing(drainer, head, what=f"rollback of {spec.id}", phase="rollback")  # outside the freeze
    predicted = (time.monotonic() - t0) * 1000 + FIXED_FREEZE_MS
    if predicted > spec.options.freeze_budget_ms:
        raise FreezeBudgetExceeded(f"predicted freeze {predicted:.0f} ms exceeds the budget of "
                                   f"{spec.options.freeze_budget_ms} ms", phase="rollback")


def _attempt(config: Config, zk: Any, store: MigrationStore, creds: Credentials, spec: Spec, drainer: Drainer,
             direction: Direction, hooks: CutoverHooks | None) -> CutoverResult:
    """One fenced flip back (the cutover's attempt driver in the reverse direction)."""
    # held through the flip back: if this process dies there, a `migrator worker` settles it
    lease = CutoverLease(config, creds, spec.id).acquire()
    run = CutoverRun(config, zk, creds, spec, drainer, direction)
    run.lease = lease

    def record_flip_back(result: CutoverResult) -> bool:
        try:
            store.set_phase(spec.id, Phase.ROLLED_BACK, freeze_ms=result.freeze_ms,
                            flipped_epoch=result.flipped_epoch, expect=Phase.ROLLING_BACK)
            store.put_progress(spec.id, Node.ROLLBACK, result.to_dict())
            return True
        except PhaseConflict:
            return False  # a settler finished it first: the flip back stands, recorded by it

    try:
        return drive(BACK, store, spec, run, lease, hooks or CutoverHooks(), on_flipped=record_flip_back)
    except FlipUnknown as exc:
        unknown = exc  # the phase stays rolling_back, the fences closed: settled from the map below
    finally:
        lease.release()
    # the lease is given up (the guarded CAS can no longer land), then the map decides, as a settler would
    return settle_after_unknown(BACK, config, zk, spec, lease, unknown)
