"""The batched split: one copy and tail, then cutovers in batches, one after another.

Runs in the RQ worker, one call of :func:`step` per run of the pipeline's
``finish`` job (``jobs.pipeline.finish``, which turns the :class:`Next` it
returns into the next job). A batched migration (``Spec.batched``: a split or
move of more tables than one rename fence takes, sized by
:mod:`.sizing`) is preflighted, copied, tailed and
verified once, and then cut over in batches. A step cuts over the batch that
is not done yet, if any (a catch-up pass of its own first, the same retries
and window as any cutover: :mod:`migrator.ops.cutover_retry`); else it hands
batches their shards one after another (:mod:`.handover`, each
sized by the budget and the freeze of the batch before it: :func:`.sizing.next_limit`) and cuts each
over in a thread of its own (:class:`Flight`), so that the next batch is
handed over and prepares its fences while the one before renames its tables
behind its freeze; a batch freezes only once the one before it has ended and
flipped. Right before every hand-over the batched migration drains its tail
to the source head and re-checks the rows changed since its last check, for
the shards it still holds (:func:`~.handover.refresh_parent`),
so a batch inherits a ``verified_gtid`` at its own start (its catch-up
checkpoint): its re-checks read only binlog written during its own life, and
each of the batched migration's re-checks only what came since the hand-over
before (one batch's life), however long the copy and the full check took. The
step asks to run again until every shard is handed over and every batch is
done, and then ends the batched migration (phase ``cleaned``:
its batches hold the tombstones; it releases any maintenance pause node that
still carries its id, the batches having taken theirs with their shards). A
batch that ended otherwise (aborted, failed, rolled back) stops it, saying
which.

A step holds one ZooKeeper session (the caller's) for its reads and writes;
the cutovers, catch-up passes and the verify it runs open their own.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from migrator.engine import cutover as cutover_mod
from migrator.engine.cutover import freeze_stats
from migrator.engine.cutover.attempt import record_next_try
from migrator.engine.cutover.budget import reserve_ms
from migrator.engine.cutover.errors import CutoverAborted, FreezeBudgetExceeded
from migrator.engine.cutover.hooks import CutoverHooks
from migrator.engine.migration import MigrationStore, Node, Phase, State
from migrator.engine.plan import release_maintenance_pause
from migrator.engine.records import FlipNode, HandoverNode
from migrator.errors import ExitCode, MigratorError, describe
from migrator.fleet.config import Config, Credentials
from migrator.fleet.mysql import connect as mysql_connect
from migrator.fleet.mysql import query
from migrator.fleet.shard_map import HostRegistry
from migrator.fleet.zk import ZK
from migrator.ops import command
from migrator.ops.batched import handover, sizing
from migrator.ops.cutover_retry import BACKOFF, DONE, CutoverRetriesOver, Next, cut_over, try_again

log = logging.getLogger(__name__)

#: phases a batch is finished in
BATCH_DONE = (Phase.DONE, Phase.CLEANED)
#: phases a batch cannot go on from by itself: the batched migration's pipeline stops and says so
BATCH_ENDED = (Phase.FAILED, Phase.ABORTED, Phase.ROLLED_BACK, Phase.ROLLING_BACK)
#: a batch whose cutover is being settled (its lease lost) or run by someone else is looked at again after this
BATCH_RECHECK_S = 2.0
#: a pipeline step of a batched migration cuts batches over for about this long, then asks for the next step
BATCH_STEP_S = 300.0


class BatchStopped(MigratorError):
    """A batch of a batched migration ended otherwise than flipped: the batches after it wait."""

    component = "pipeline"
    exit_code = ExitCode.REFUSED


class Flight:
    """One batch's cutover, run in a thread of the pipeline step, so that the batch after it is handed over,
    prepared and gated while this one freezes, renames its tables and finishes the passive member. One freeze
    at a time, each gate's triggers only around its own freeze:

    * the next batch installs its triggers once this one's freeze is done with the passive member
      (:meth:`hold_gates`: its own triggers then go on while this freeze runs on the master, so their
      installing is not on the way from one freeze to the next);
    * it freezes once this one has flipped, released its freeze and renamed its tables on the master
      (:meth:`hold_freeze`); this one's passive member is finished behind it.

    A batch before it that ended without flipping stops it where it waits (``held``): the next step of the
    pipeline tries that batch again first."""

    def __init__(self, cfg: Any, bid: str, before: Flight | None, *,
                 resize: Callable[[str, BaseException], str | None] | None = None):
        self.cfg, self.bid, self.before = cfg, bid, before
        #: asked when an attempt stopped on the freeze budget (refused by the prediction, or undone by the
        #: watchdog): gives part of the batch's shards to a new batch and returns its id (None: it cannot, one
        #: shard), and this flight tries its smaller batch again at once, in its place in the line
        self.resize = resize
        #: the batches this flight's batch gave shards to (cut over after it, by later flights)
        self.gave: list[str] = []
        #: the freeze is over (the release step is done), or the attempt ended
        self.released = threading.Event()
        #: the freeze is past the passive member (closed and synced), or the attempt ended
        self.passive_done = threading.Event()
        #: the master's tables are renamed (the first step behind the freeze), or the attempt ended
        self.renamed = threading.Event()
        #: the ranges flipped and the freeze was released (set before :attr:`released`)
        self.flipped = False
        #: how long this batch's clients waited (ms), once the freeze is over: it sizes a batch after it, which
        #: may be handed over before this one's record is written (its renames run first)
        self.freeze_ms: float | None = None
        #: the steps of that freeze (ms each): what of it grows with the tables (:class:`.sizing.Measured`)
        self.steps_ms: dict[str, float] = {}
        self.ended = threading.Event()
        self.error: BaseException | None = None
        self.result: dict[str, Any] | None = None
        self.seconds = 0.0
        self.thread = threading.Thread(target=self._run, name=f"cutover-{bid}", daemon=True)

    def start(self) -> Flight:
        self.thread.start()
        return self

    def _run(self) -> None:
        t0 = time.monotonic()
        hooks = CutoverHooks(at_step=self._at_step, before_freeze=self.hold_gates, after_gates=self.hold_freeze)
        try:
            while True:
                try:
                    self.result = cutover_mod.cutover(self.cfg, self.bid, hooks=hooks).to_dict()
                    break
                except FreezeBudgetExceeded as exc:
                    given = self.resize(self.bid, exc) if self.resize is not None else None
                    if given is None:
                        raise
                    self.gave.append(given)
        except BaseException as exc:  # noqa: BLE001 - the step reads it (and the batch's phase) after
            self.error = exc
        finally:
            self.seconds = time.monotonic() - t0
            for done in (self.passive_done, self.released, self.renamed, self.ended):
                done.set()

    def _at_step(self, run: Any, step: str) -> None:
        if step in ("passive_sync", "fence"):
            self.passive_done.set()
        elif step == "release":
            self.freeze_ms = run.record.freeze_ms()
            self.steps_ms = dict(run.record.steps)
            self.flipped = True
            self.released.set()
        elif step in ("renames", "active_finish"):
            self.renamed.set()

    def _refuse_behind(self) -> None:
        assert self.before is not None
        if self.before.error is not None and not self.before.flipped:
            raise CutoverAborted(f"batch {self.before.bid} before it ended with: {describe(self.before.error)}; "
                                 "not freezing behind it", phase="cutover")

    def hold_gates(self, _run: Any) -> None:
        """Before this batch installs its triggers: the freeze of the batch before it is past the passive
        member, or that batch ended (flipped, else this one stops here)."""
        if self.before is None:
            return
        self.before.passive_done.wait()
        self._refuse_behind()

    def hold_freeze(self, _run: Any) -> None:
        """Before this batch freezes: the batch before it flipped, released its freeze and renamed its tables
        on the master (else this one stops here)."""
        if self.before is None:
            return
        self.before.released.wait()
        self._refuse_behind()
        if not self.before.flipped:
            raise CutoverAborted(f"batch {self.before.bid} before it did not flip; not freezing behind it",
                                 phase="cutover")
        self.before.renamed.wait()


def step(cfg: Config, zk: ZK, creds: Credentials, migration_id: str, attempt: int, since: float | None,
         out: dict[str, Any], *, queue: str | None) -> Next:
    """One step of the converged batched migration ``migration_id``: cut over its unfinished batch (with the retries
    and window of any cutover), else hand batches their shards and cut them over one after another
    (:func:`_fly`), else (every shard handed over, every batch done) end it. ``attempt`` and ``since``: the
    cutover attempts of the open batch that stopped before the flip; ``queue``: where cleanups go."""
    store = MigrationStore(zk)
    spec, (st, _) = store.spec(migration_id), store.state(migration_id)
    batches = [(b, store.state(b)[0]) for b in st.batches]
    open_batch = next(((b, bst) for b, bst in batches if bst.phase not in BATCH_DONE), None)
    if open_batch is None and not spec.shards:
        worst = max((bst.freeze_ms or 0.0 for _, bst in batches), default=None)
        store.set_phase(migration_id, Phase.CLEANED, expect=Phase.CONVERGED, freeze_ms=worst)
        release_maintenance_pause(zk, spec)  # whatever pause node still carries its id
        out["done"] = {"batches": len(batches), "longest_freeze_ms": worst}
        return DONE
    if open_batch is None:
        if not st.batches:
            t0 = time.monotonic()
            out["verify"] = command.verify(cfg, migration_id)  # the one full check; each batch re-checks what changed
            out["verify_s"] = round(time.monotonic() - t0, 3)
        return _fly(cfg, zk, creds, migration_id, out, queue=queue)
    bid, bst = open_batch
    if bst.phase in BATCH_ENDED or bst.stopped:
        raise BatchStopped(f"batch {bid} of {migration_id} is {bst.phase.value}"
                           f"{': ' + str(bst.stopped.get('reason')) if bst.stopped else ''}; the batches after "
                           f"it wait: resume it (`migrator resume {bid}`) or roll the finished ones back, "
                           f"then `migrator resume {migration_id}`", phase="cutover")
    if bst.phase != Phase.CONVERGED:  # catching up after a stop, or a cutover (or its settler) holds it
        if bst.phase == Phase.CATCHING_UP:
            command.catchup(cfg, bid, passes=1)
        return Next(f"batch {bid} is {bst.phase.value}: looking again", delay=BATCH_RECHECK_S, attempt=attempt,
                    since=since)
    out["batch"] = bid
    t0 = time.monotonic()
    try:
        retry = cut_over(cfg, zk, bid, migration_id, attempt, since, out, queue=queue,
                         on_refused=lambda exc: _smaller(cfg, zk, creds, bid, exc, attempt, since))
        _record_steps(store, bid, {"cutover_s": time.monotonic() - t0})
    except CutoverRetriesOver:
        raise
    except Exception as exc:  # noqa: BLE001 - flipped, or left to the settler: the batch's phase says which
        phase = _settled_phase(cfg, zk, bid)
        if phase not in (*BATCH_DONE, Phase.CUTOVER):
            raise
        out["error"] = str(exc)
        if phase in BATCH_DONE:  # it flipped, then failed: the split goes on, and the batch gets its cleanup
            try:
                out["cleanup_job"] = command.schedule_cleanup(cfg, bid, queue=queue, zk=zk)
            except Exception as lost:  # noqa: BLE001 - bookkeeping; an overdue cleanup is run by any worker
                log.warning("batch %s: scheduling its cleanup failed: %s", bid, lost)
            return Next(f"batch {bid} flipped (then: {describe(exc)}): the next one")
        return Next(f"batch {bid} is {phase.value} after: {describe(exc)}", delay=BATCH_RECHECK_S,
                    attempt=attempt, since=since)
    if retry is not None:
        return retry.because(f"batch {bid}: ")
    return Next(f"batch {bid} flipped: the next one")


def _fly(cfg: Config, zk: ZK, creds: Credentials, migration_id: str, out: dict[str, Any], *, queue: str | None) -> Next:
    """Hand batches their shards and cut them over, one after another, for about :data:`BATCH_STEP_S`: each
    batch's re-check of the batched migration, hand-over, fences and gate run while the batch before it
    renames its tables and finishes the passive member behind its freeze (:class:`Flight`). Stops at the
    first batch that did not flip; the next step drives that one (its retries, its window). A batch whose
    cutover raised after its flip (:func:`_settled_phase`) flipped: it gets its cleanup, and is not tried again."""
    store = MigrationStore(zk)
    deadline = time.monotonic() + BATCH_STEP_S
    flights: list[Flight] = []
    steps: dict[str, dict[str, float]] = {}

    def resize(bid: str, exc: BaseException) -> str | None:
        return _halve(cfg, zk, creds, bid, exc)

    try:
        while time.monotonic() < deadline:
            if not store.spec(migration_id).shards and not any(b for f in flights for b in f.gave
                                                                  if b not in {g.bid for g in flights}):
                break
            # the shards still here are drained to the head and their check brought up to it, right before
            # the hand-over: the batch inherits a verified_gtid at its own start (its checkpoint), and this
            # re-check reads only the binlog since the hand-over before
            t0 = time.monotonic()
            refreshed = handover.refresh_parent(cfg, zk, creds, migration_id)
            took = {"parent_recheck_s": time.monotonic() - t0,
                    "parent_recheck_rows": float(sum(r["rows"] for r in refreshed.rounds)),
                    "parent_recheck_events": float(sum(r["events"] for r in refreshed.rounds)),
                    # of those seconds, the set-wise compare's (the rest: the drain and the key read)
                    "parent_recheck_compare_s": float(sum(r.get("compare_s", 0.0) for r in refreshed.rounds))}
            t0 = time.monotonic()
            given = [b for f in flights for b in f.gave if b not in {g.bid for g in flights}]
            if given:  # a batch made smaller gave these shards: they go next, and nothing new is handed over
                bid = given[0]
            else:
                bid = _hand_over_next(zk, creds, migration_id, _last_released(flights),
                                      in_flight=[f for f in flights if not f.ended.is_set()])
            took["hand_over_s"] = time.monotonic() - t0
            steps[bid] = took
            flights.append(Flight(cfg, bid, flights[-1] if flights else None, resize=resize).start())
            # three batches at a time: one freezing (then renaming and finishing its passive member behind its
            # freeze), the next prepared, gated and re-checked behind it, and one more handed over and
            # preparing; the one after is handed over once the batch two before it has released its freeze
            if len(flights) >= 2:
                flights[-2].released.wait()
            if any(f.released.is_set() and not f.flipped for f in flights):
                break
    finally:
        # also when a hand-over failed (the batched migration aborted meanwhile, ZooKeeper lost): the batches
        # in flight end, and the flipped ones get their cleanup
        for f in flights:
            f.ended.wait()
            try:
                _record_steps(store, f.bid, {**steps.get(f.bid, {}), "cutover_s": f.seconds})
                if f.error is not None and _settled_phase(cfg, zk, f.bid) in BATCH_DONE:
                    # it flipped: what failed after is no refusal (kept in the step's output)
                    out.setdefault("after_flip", {})[f.bid], f.error = describe(f.error), None
                if f.error is None:
                    out.setdefault("cleanup_jobs", {})[f.bid] = command.schedule_cleanup(cfg, f.bid, queue=queue,
                                                                                          zk=zk)
            except Exception as exc:  # noqa: BLE001 - bookkeeping; an overdue cleanup is run by any worker
                log.warning("batch %s: recording its steps or scheduling its cleanup failed: %s", f.bid, exc)
    out["batches"] = [f.bid for f in flights]
    stopped = next((f for f in flights if f.error is not None), None)
    if stopped is None:
        return Next(f"{len(flights)} batches flipped: the next ones")
    out["error"] = describe(stopped.error)
    if store.state(stopped.bid)[0].phase == Phase.CUTOVER:  # left to a settler (flipped or not): not retried yet
        return Next(f"batch {stopped.bid} is cutover after: {out['error']}; looking again", delay=BATCH_RECHECK_S)
    smaller = _smaller(cfg, zk, creds, stopped.bid, stopped.error, 0, None)
    if smaller is not None:
        return smaller
    # the first attempt of this batch that stopped before the flip: the next step tries it again (its window)
    return try_again(store, stopped.bid, migration_id, stopped.error, 0, None,
                     lambda delay: f"batch {stopped.bid} did not flip ({out['error']}); trying it again in {delay:g} s")


def _smaller(cfg: Config, zk: ZK, creds: Credentials, bid: str, exc: BaseException | None, attempt: int,
             since: float | None) -> Next | None:
    """A batch whose freeze ran over the budget (undone by the watchdog, or refused by the prediction) gives
    the later half of its tables to a new batch cut over right after it (:func:`.handover.split_batch`), and
    is tried again soon: the next try of a smaller batch, or None when it is one shard (tried again as any
    cutover, with its backoff) or stopped for another reason. The retry window goes on from ``since``."""
    shards = len(MigrationStore(zk).spec(bid).shards)
    new = _halve(cfg, zk, creds, bid, exc)
    if new is None:
        return None
    delay = BACKOFF.delay(0)
    record_next_try(MigrationStore(zk), bid, {"at": time.time() + delay, "attempt": attempt + 2, "delay_s": delay,
                                              "until": None})
    return Next(f"batch {bid}'s freeze ran over its budget ({describe(exc)}); batch {new} takes the later "
                f"half of its {shards} shards; trying the smaller batch in {delay:g} s",
                delay=delay, attempt=attempt, since=since if since is not None else time.time())


def _halve(cfg: Config, zk: ZK, creds: Credentials, bid: str, exc: BaseException | None) -> str | None:
    """Batch ``bid``'s freeze ran over the budget (``exc``: undone by the watchdog, or refused by the
    prediction): it gives the later half of its tables to a new batch (:func:`.handover.split_batch`); the new
    batch's id, or None when ``exc`` is another refusal or the batch is one shard."""
    if not isinstance(exc, FreezeBudgetExceeded):
        return None
    spec = MigrationStore(zk).spec(bid)
    if len(spec.shards) < 2:
        return None
    # what its undone attempt left on the shards it gives away (a trigger its gate could not drop) is removed
    # first: named for this batch's attempts, the new batch's settle would not know it as its own, and a table
    # that keeps another migration's trigger cannot be renamed to a tombstone
    cutover_mod.reconcile(cfg, bid, zk=zk, holder_died=False)
    with mysql_connect(HostRegistry(zk).get(spec.source_master), creds) as conn:
        tables = sizing.shard_tables(sizing.count_tables(conn, spec.shards))
    total = sizing.table_count(tables, spec.shards)
    kept = sizing.cut(spec.shards, tables, max(1, total // 2))[0]
    if len(kept) == len(spec.shards):
        kept = list(spec.shards)[:-1]
    given = [s for s in spec.shards if s not in set(kept)]
    new = handover.split_batch(zk, creds, bid, given, tables=sizing.table_count(tables, given))
    log.info("batch %s ran over its freeze budget with %d tables: %s takes %d of them", bid, total, new.id,
             sizing.table_count(tables, given))
    return new.id


def _settled_phase(cfg: Config, zk: ZK, bid: str) -> Phase:
    """The phase of batch ``bid`` once its cutover has raised and given its lease up. An error after the
    flip (the release, the renames, the passive member's finish, the flip's record) leaves the phase
    ``cutover`` for a settler (:func:`migrator.engine.cutover.attempt.drive`): it is settled here first, as a
    settler would (the map says whether the flip landed), so that a batch that flipped is ``done``, never
    taken for one that did not. Still ``cutover`` when it cannot be settled now (a settler at it, ZooKeeper
    lost): the next step looks again."""
    phase = MigrationStore(zk).state(bid)[0].phase
    if phase != Phase.CUTOVER:
        return phase
    try:
        return cutover_mod.reconcile(cfg, bid, zk=zk, holder_died=False)
    except Exception as exc:  # noqa: BLE001 - a worker's settler finishes it; the next step looks again
        log.warning("batch %s: settling its cutover after it raised failed: %s", bid, describe(exc))
        return Phase.CUTOVER


def _record_steps(store: MigrationStore, bid: str, took: dict[str, float]) -> None:
    """Keep what the pipeline spent around one attempt of the batch (its ``handover`` node)."""
    prior = HandoverNode.parse(store.get_progress(bid, Node.HANDOVER)[0])
    prior.attempts = [*prior.attempts, {k: round(v, 3) for k, v in took.items()}]
    store.put_progress(bid, Node.HANDOVER, prior.dump())


def _hand_over_next(zk: ZK, creds: Credentials, migration_id: str, measured: Flight | None, *,
                    in_flight: list[Flight]) -> str:
    """Hand the next batch its shards; its id. It is sized by the budget and the last freeze measured
    (``measured``: the last batch of this step that released its freeze, if any), and so that its rename fence's
    connections fit beside those of the batches still in flight (``in_flight``: their fences hold theirs until
    they end) on the source master (:func:`.sizing.connection_room`)."""
    store = MigrationStore(zk)
    spec, (st, _) = store.spec(migration_id), store.state(migration_id)
    source = HostRegistry(zk).get(spec.source_master)
    with mysql_connect(source, creds) as conn:
        tables = sizing.shard_tables(sizing.count_tables(conn, spec.shards))
        room = sizing.connection_room(int(query(conn, f"{sizing.TAG}SELECT @@max_connections")[0][0]),
                                      sum(st.batch_tables.get(f.bid, 0) for f in in_flight))
    undos, recent = freeze_stats.recent_undos(zk), freeze_stats.recent(zk)
    shards = sizing.next_batch(list(spec.shards), tables, spec.options.freeze_budget_ms,
                               _last_freeze(store, st, measured), room=room,
                               reserve=lambda n: reserve_ms([], undos, recent, fence="rename", tables=n)[0])
    return handover.hand_over(zk, creds, migration_id, shards, tables=sizing.table_count(tables, shards)).id


def _last_released(flights: list[Flight]) -> Flight | None:
    """The last of ``flights`` that released its freeze (the freshest measure of one)."""
    return next((f for f in reversed(flights) if f.freeze_ms is not None), None)


def _last_freeze(store: MigrationStore, st: State, before: Flight | None) -> sizing.Measured | None:
    """The last freeze measured: ``before``'s, a batch of this step whose freeze ended (its record is written
    after its renames, once this hand-over is under way), else the last recorded."""
    if before is not None and before.freeze_ms is not None:
        return sizing.Measured(st.batch_tables.get(before.bid, 0), before.freeze_ms, before.steps_ms)
    for b in reversed(st.batches):
        cut = FlipNode.parse(store.get_progress(b, Node.CUTOVER)[0])
        if cut.freeze_ms is not None:
            return sizing.Measured(st.batch_tables.get(b, 0), cut.freeze_ms, dict(cut.steps_ms))
    return None
