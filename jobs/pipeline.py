"""RQ job that takes a converged migration through verify and cutover.

``migrator split --yes`` marks a migration as driven by the pipeline
(``State.autopilot``). Copy jobs hand over to catch-up jobs; when a catch-up
pass converges it enqueues :func:`finish`, which verifies (re-copying what
differs), then runs the fenced cutover and schedules the cleanup. A cutover
that stops before the flip (a lock held on a moving table, a freeze over its
budget, a conflicting map edit) leaves the source serving; ``finish`` then
runs one more catch-up pass and tries again after a backoff (:data:`BACKOFF`:
2 s, doubling, at most 60 s) for as long as the migration's
``cutover_retry_s`` allows (600 s unless set at launch or with ``migrator
set ID --cutover-retry-s``): gh-ost retries its cut-over the same way, for as
long as the operator lets it, instead of giving up after a few attempts in
seconds. When the window is over the job fails with the last attempt's
refusal (which names its cause: the blocking connection, the step the freeze
ran out in) and the record says what to do next.

A batched migration (``Spec.batched``: a split of more tables than one rename
fence takes) is verified once and then cut over in batches. A run of
``finish`` cuts over the batch that is not done yet, if any (a catch-up pass
of its own first, the same retries and window); else it hands batches their
shards one after another (:mod:`migrator.engine.handover`, each sized by the
budget and the freezes of the batches before it) and cuts each over in a
thread of its own, so that the next batch is handed over and prepares its
fences while the one before renames its tables behind its freeze; a batch
freezes only once the one before it has ended and flipped. It enqueues itself
again until every shard is handed over and every batch is done, and then ends
the batched migration (phase ``cleaned``: its batches hold the tombstones). A
batch that ended otherwise (aborted, failed, rolled back) stops it, saying
which.

A run of ``finish`` whose worker died is enqueued again by the failure callback
(:mod:`jobs.failure`); one that finds the phase ``cutover`` (an attempt whose
holder died, not settled yet, or an operator's own) looks again every
:data:`BATCH_RECHECK_S` until it is settled.

``postpone_cutover`` (``migrator postpone ID``) holds the pipeline before the
cutover: ``finish`` re-enqueues itself until it is cleared, and runs a catch-up
pass each time so the target stays current (the freeze, when it comes, drains
seconds, not the whole postponement). Not while a cutover holds its lease (an
operator's own ``migrator cutover``): two tails would fight over the
checkpoint; a pass that loses that race steps aside.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from rq import get_current_job

from migrator.engine import cutover as cutover_mod
from migrator.engine import handover
from migrator.engine.catch_up.checkpoint import CatchUpConflict
from migrator.engine.cutover.errors import CutoverAborted
from migrator.engine.cutover.hooks import CutoverHooks
from migrator.engine.cutover.lease import leases
from migrator.engine.migration import MigrationStore, Node, Phase
from migrator.errors import ExitCode, MigratorError, describe
from migrator.fleet import config as config_mod
from migrator.fleet.mysql import connect as mysql_connect
from migrator.fleet.shard_map import HostRegistry
from migrator.ops import command
from migrator.ops.rebalance import batches as batch_mod
from migrator.ops.steps import enqueue_finish

log = logging.getLogger(__name__)

POSTPONE_RECHECK_S = 5


@dataclass(frozen=True)
class Backoff:
    """The wait before the next cutover attempt: ``first_s``, times ``factor`` per attempt, at most ``max_s``."""

    first_s: float = 2.0
    factor: float = 2.0
    max_s: float = 60.0

    def delay(self, attempt: int) -> float:
        return min(self.max_s, self.first_s * self.factor ** max(0, attempt))


#: between cutover attempts that stopped before the flip (a test may replace it)
BACKOFF = Backoff()


class CutoverRetriesOver(MigratorError):
    """The pipeline kept trying a cutover for its whole window; the last attempt's refusal says why."""

    component = "pipeline"
    exit_code = ExitCode.REFUSED


def finish(migration_id: str, config_path: str | None = None, attempt: int = 0,
           since: float | None = None) -> dict[str, Any]:
    """Verify and cut over; ``attempt`` counts the cutover attempts that stopped before the flip since
    ``since`` (when the first of them stopped)."""
    cfg = config_mod.load(config_path)
    with command.session(cfg) as (zk, _):
        st, _ = MigrationStore(zk).state(migration_id)
    out: dict[str, Any] = {"migration": migration_id, "attempt": attempt, "phase": st.phase.value}
    if st.phase == Phase.CATCHING_UP:
        command.catchup(cfg, migration_id, passes=1)
        return _again(out, migration_id, config_path, attempt, "not converged yet: one more pass", count=False,
                      since=since)
    if st.phase == Phase.CUTOVER:
        # an attempt holds it (an operator's), or its holder died and a worker's settler is at it: once it is
        # settled the phase says what is next (converged: try again; done: nothing)
        return _again(out, migration_id, config_path, attempt, "a cutover attempt is under way or being settled: "
                      "looking again", delay=BATCH_RECHECK_S, count=False, since=since)
    if st.phase != Phase.CONVERGED:
        out["skipped"] = f"phase is {st.phase.value}"
        return out
    if st.postpone_cutover or st.paused:
        if st.postpone_cutover and not st.paused:
            out["pass"] = _pass_while_postponed(cfg, migration_id)
        return _again(out, migration_id, config_path, attempt, "cutover postponed", delay=POSTPONE_RECHECK_S,
                      count=False)
    with command.session(cfg) as (zk, _):
        batched = MigrationStore(zk).spec(migration_id).batched
    if batched:
        return _finish_batch(cfg, migration_id, config_path, attempt, since, out)
    out["verify"] = command.verify(cfg, migration_id)
    retry = _cut_over(cfg, migration_id, migration_id, attempt, since, out)
    if retry is not None:
        return _again(out, migration_id, config_path, attempt, retry[0], delay=retry[1], since=retry[2])
    _meta(out)
    return out


def _cut_over(cfg: Any, mid: str, driver: str, attempt: int, since: float | None,
              out: dict[str, Any]) -> tuple[str, float, float] | None:
    """Cut ``mid`` over (``driver``: the migration whose pipeline this is, ``mid`` or the batched migration
    ``mid`` is a batch of) and schedule its cleanup; None when it flipped, else ``(why, delay, since)`` for
    the next try, after one more catch-up pass. Raises when the retry window is over, or when the attempt
    ended otherwise than before the flip."""
    try:
        out["cutover"] = command.cutover(cfg, mid)
    except Exception as exc:  # noqa: BLE001 - the cutover stopped before the flip; the source serves
        with command.session(cfg) as (zk, _):
            store = MigrationStore(zk)
            st, _ = store.state(mid)
            window = store.spec(driver).options.cutover_retry_s
        if st.phase != Phase.CONVERGED:
            raise
        first = since if since is not None else time.time()
        elapsed, delay = time.time() - first, BACKOFF.delay(attempt)
        if elapsed + delay > window:
            reason = describe(exc)
            raise CutoverRetriesOver(
                f"{reason} (the pipeline tried the cutover {attempt + 1} times over {elapsed:.0f} s, its window "
                f"of {window:g} s: `migrator set {driver} --cutover-retry-s S` gives it longer)",
                phase="cutover") from exc
        out["error"], out["retry_in_s"] = str(exc), delay
        command.catchup(cfg, mid, passes=1)
        return f"cutover stopped before the flip; trying again in {delay:g} s", delay, first
    out["cleanup_job"] = command.schedule_cleanup(cfg, mid, queue=_queue_name())
    return None


#: phases a batch is finished in
BATCH_DONE = (Phase.DONE, Phase.CLEANED)
#: phases a batch cannot go on from by itself: the batched migration's pipeline stops and says so
BATCH_ENDED = (Phase.FAILED, Phase.ABORTED, Phase.ROLLED_BACK, Phase.ROLLING_BACK)
#: a batch whose cutover is being settled (its lease lost) or run by someone else is looked at again after this
BATCH_RECHECK_S = 2.0


class BatchStopped(MigratorError):
    """A batch of a batched migration ended otherwise than flipped: the batches after it wait."""

    component = "pipeline"
    exit_code = ExitCode.REFUSED


#: a pipeline step of a batched migration cuts batches over for about this long, then enqueues the next step
BATCH_STEP_S = 300.0
#: the batched migration runs a catch-up pass before a hand-over when its last one is older than this. A batch
#: starts from its checkpoint and its own tail applies what came since (before its freeze, untimed), so a pass
#: only bounds how much binlog each batch reads again; its fixed cost (a reader process, ZooKeeper writes)
#: is not paid for every batch
PARENT_PASS_EVERY_S = 15.0


class _Flight:
    """One batch's cutover, run in a thread of the pipeline step so that the next batch is handed over and
    prepared while this one renames its tables and finishes the passive member behind its freeze. The next
    batch freezes only once this one has ended (:meth:`hold_freeze`), flipped or not: one freeze at a time."""

    def __init__(self, cfg: Any, bid: str, before: _Flight | None):
        self.cfg, self.bid, self.before = cfg, bid, before
        #: the freeze is over (the release step is done), or the attempt ended
        self.released = threading.Event()
        self.ended = threading.Event()
        self.error: BaseException | None = None
        self.result: dict[str, Any] | None = None
        self.seconds = 0.0
        self.thread = threading.Thread(target=self._run, name=f"cutover-{bid}", daemon=True)

    def start(self) -> _Flight:
        self.thread.start()
        return self

    def _run(self) -> None:
        t0 = time.monotonic()
        hooks = CutoverHooks(at_step=self._at_step, before_freeze=self.hold_freeze)
        try:
            self.result = cutover_mod.cutover(self.cfg, self.bid, hooks=hooks).to_dict()
        except BaseException as exc:  # noqa: BLE001 - the step reads it (and the batch's phase) after
            self.error = exc
        finally:
            self.seconds = time.monotonic() - t0
            self.released.set()
            self.ended.set()

    def _at_step(self, _run: Any, step: str) -> None:
        if step == "release":
            self.released.set()

    def hold_freeze(self, _run: Any) -> None:
        """Before this batch freezes: the batch before it has ended, and flipped."""
        if self.before is None:
            return
        self.before.ended.wait()
        if self.before.error is not None:
            raise CutoverAborted(f"batch {self.before.bid} before it ended with: {describe(self.before.error)}; "
                                 "not freezing behind it", phase="cutover")


def _finish_batch(cfg: Any, mid: str, config_path: str | None, attempt: int, since: float | None,
                  out: dict[str, Any]) -> dict[str, Any]:
    """One step of a batched migration (:mod:`migrator.engine.handover`): cut over its unfinished batch (with
    the retries and window of any cutover), else hand batches their shards and cut them over one after
    another (:func:`_fly_batches`), else (every shard handed over, every batch done) end it. Re-enqueues
    itself until the last batch is done."""
    with command.session(cfg) as (zk, creds):
        store = MigrationStore(zk)
        spec, (st, _) = store.spec(mid), store.state(mid)
        batches = [(b, store.state(b)[0]) for b in st.batches]
        open_batch = next(((b, bst) for b, bst in batches if bst.phase not in BATCH_DONE), None)
        if open_batch is None and not spec.shards:
            worst = max((bst.freeze_ms or 0.0 for _, bst in batches), default=None)
            store.set_phase(mid, Phase.CLEANED, expect=Phase.CONVERGED, freeze_ms=worst)
            out["done"] = {"batches": len(batches), "longest_freeze_ms": worst}
            _meta(out)
            return out
    if open_batch is None:
        if not st.batches:
            t0 = time.monotonic()
            out["verify"] = command.verify(cfg, mid)  # the one full check; each batch re-checks what changed
            out["verify_s"] = round(time.monotonic() - t0, 3)
        return _fly_batches(cfg, mid, config_path, out, pass_first=bool(st.batches))
    bid, bst = open_batch
    if bst.phase in BATCH_ENDED or bst.stopped:
        raise BatchStopped(f"batch {bid} of {mid} is {bst.phase.value}"
                           f"{': ' + str(bst.stopped.get('reason')) if bst.stopped else ''}; the batches after "
                           f"it wait: resume it (`migrator resume {bid}`) or roll the finished ones back, "
                           f"then `migrator resume {mid}`", phase="cutover")
    if bst.phase != Phase.CONVERGED:  # catching up after a stop, or a cutover (or its settler) holds it
        if bst.phase == Phase.CATCHING_UP:
            command.catchup(cfg, bid, passes=1)
        return _again(out, mid, config_path, attempt, f"batch {bid} is {bst.phase.value}: looking again",
                      delay=BATCH_RECHECK_S, count=False, since=since)
    out["batch"] = bid
    took: dict[str, float] = {}
    t0 = time.monotonic()
    try:
        retry = _cut_over(cfg, bid, mid, attempt, since, out)
        took["cutover_s"] = time.monotonic() - t0
        _record_steps(cfg, bid, took)
    except CutoverRetriesOver:
        raise
    except Exception as exc:  # noqa: BLE001 - flipped, or left to the settler: the batch's phase says which
        with command.session(cfg) as (zk, _):
            phase = MigrationStore(zk).state(bid)[0].phase
        if phase not in (*BATCH_DONE, Phase.CUTOVER):
            raise
        out["error"] = str(exc)
        return _again(out, mid, config_path, attempt, f"batch {bid} is {phase.value} after: {describe(exc)}",
                      delay=BATCH_RECHECK_S, count=False, since=since)
    if retry is not None:
        return _again(out, mid, config_path, attempt, f"batch {bid}: {retry[0]}", delay=retry[1], since=retry[2])
    return _again(out, mid, config_path, 0, f"batch {bid} flipped: the next one", count=False)


def _fly_batches(cfg: Any, mid: str, config_path: str | None, out: dict[str, Any], *,
                 pass_first: bool) -> dict[str, Any]:
    """Hand batches their shards and cut them over, one after another, for about :data:`BATCH_STEP_S`: each
    batch's catch-up pass of the batched migration, hand-over, fences and gate run while the batch before it
    renames its tables and finishes the passive member behind its freeze (:class:`_Flight`). Stops at the
    first batch that did not flip; the next step drives that one (its retries, its window)."""
    deadline = time.monotonic() + BATCH_STEP_S
    passed_at: float | None = None if pass_first else time.monotonic()  # a verify just drained it
    flights: list[_Flight] = []
    steps: dict[str, dict[str, float]] = {}
    before: _Flight | None = None
    try:
        while time.monotonic() < deadline:
            with command.session(cfg) as (zk, _):
                if not MigrationStore(zk).spec(mid).shards:
                    break
            took: dict[str, float] = {}
            if passed_at is None or time.monotonic() - passed_at >= PARENT_PASS_EVERY_S:
                t0 = time.monotonic()
                command.catchup(cfg, mid, passes=1)  # the shards still here stay current
                passed_at = time.monotonic()
                took["parent_pass_s"] = passed_at - t0
            t0 = time.monotonic()
            bid = _hand_over_next(cfg, mid)
            took["hand_over_s"] = time.monotonic() - t0
            steps[bid] = took
            flight = _Flight(cfg, bid, before).start()
            flights.append(flight)
            flight.released.wait()
            if flight.error is not None:
                break
            before = flight
    finally:
        # also when a hand-over failed (the batched migration aborted meanwhile, ZooKeeper lost): the batches
        # in flight end, and the flipped ones get their cleanup
        for f in flights:
            f.ended.wait()
            try:
                _record_steps(cfg, f.bid, {**steps.get(f.bid, {}), "cutover_s": f.seconds})
                if f.error is None:
                    out.setdefault("cleanup_jobs", {})[f.bid] = command.schedule_cleanup(cfg, f.bid,
                                                                                          queue=_queue_name())
            except Exception as exc:  # noqa: BLE001 - bookkeeping; an overdue cleanup is run by any worker
                log.warning("batch %s: recording its steps or scheduling its cleanup failed: %s", f.bid, exc)
    out["batches"] = [f.bid for f in flights]
    stopped = next((f for f in flights if f.error is not None), None)
    if stopped is None:
        return _again(out, mid, config_path, 0, f"{len(flights)} batches flipped: the next ones", count=False)
    out["error"] = describe(stopped.error)
    delay = BACKOFF.delay(0)
    return _again(out, mid, config_path, 0, f"batch {stopped.bid} did not flip ({out['error']}); trying it again in "
                  f"{delay:g} s", delay=delay, since=time.time())


def _record_steps(cfg: Any, bid: str, took: dict[str, float]) -> None:
    """Keep what the pipeline spent around one attempt of the batch (its ``handover`` node)."""
    with command.session(cfg) as (zk, _):
        store = MigrationStore(zk)
        prior = store.get_progress(bid, Node.HANDOVER)[0] or {}
        store.put_progress(bid, Node.HANDOVER, {**prior, "attempts": [*prior.get("attempts", []),
                                                                     {k: round(v, 3) for k, v in took.items()}]})


def _hand_over_next(cfg: Any, mid: str) -> str:
    """Hand the next batch (sized by the budget and the batches measured so far) its shards; its id."""
    with command.session(cfg) as (zk, creds):
        store = MigrationStore(zk)
        spec, (st, _) = store.spec(mid), store.state(mid)
        done = []
        for b in st.batches:
            cut, _ = store.get_progress(b, Node.CUTOVER)
            if cut and cut.get("freeze_ms") is not None:
                done.append({"freeze_ms": cut["freeze_ms"], "steps_ms": cut.get("steps_ms") or {},
                             "tables": st.batch_tables.get(b, 0)})
        source = HostRegistry(zk).get(spec.source_master)
        with mysql_connect(source, creds) as conn:
            tables = {s: n for s, (n, _) in batch_mod.count_tables(conn, spec.shards).items()}
        shards = batch_mod.next_batch(list(spec.shards), tables, spec.options.freeze_budget_ms, done)
        child = handover.hand_over(zk, creds, mid, shards, tables=sum(tables.get(s, 0) for s in shards))
    return child.id


def _pass_while_postponed(cfg: Any, migration_id: str) -> str:
    """One catch-up pass, unless a cutover of the migration is running (it owns the tail then)."""
    with command.session(cfg) as (zk, _):
        if leases(zk, migration_id):
            return "skipped: a cutover is running"
    try:
        command.catchup(cfg, migration_id, passes=1)
    except CatchUpConflict:
        return "stepped aside: another tail wrote the checkpoint"
    return "ran"


def _queue_name() -> str | None:
    job = get_current_job()
    return job.origin if job else None


def _meta(out: dict[str, Any]) -> None:
    job = get_current_job()
    if job is not None:
        job.meta["pipeline"] = {k: v for k, v in out.items() if k in ("phase", "attempt", "error", "skipped", "next")}
        job.save_meta()


def _again(out: dict[str, Any], mid: str, config_path: str | None, attempt: int, why: str, *,
           delay: float = 0, count: bool = True, since: float | None = None) -> dict[str, Any]:
    out["next"] = why
    _meta(out)
    job = get_current_job()
    if job is None:
        return out
    enqueue_finish(job.connection, mid, config_path, queue=job.origin, attempt=attempt + (1 if count else 0),
                   delay=delay, since=since)
    return out
