"""RQ job that takes a converged migration through verify and cutover.

``migrator split --yes`` marks a migration as driven by the pipeline
(``State.autopilot``). Copy jobs hand over to catch-up jobs; when a catch-up
pass converges it enqueues :func:`finish`, which verifies (re-copying what
differs), then runs the fenced cutover and schedules the cleanup. A cutover
that stops before the flip leaves the source serving; ``finish`` then runs one
more catch-up pass and tries again after a backoff, for as long as the
migration's ``cutover_retry_s`` allows (:mod:`migrator.ops.cutover_retry`).
When the window is over the job fails with the last attempt's refusal and the
record says what to do next.

A batched migration (``Spec.batched``: a split of more tables than one rename
fence takes) is verified once and then cut over in batches, each run of
``finish`` one step of :mod:`migrator.ops.batched.run`.

A run of ``finish`` whose worker died is enqueued again by the failure callback
(:mod:`jobs.failure`); one that finds the phase ``cutover`` (an attempt whose
holder died, not settled yet, or an operator's own) looks again every
:data:`migrator.ops.batched.run.BATCH_RECHECK_S` until it is settled.

``postpone_cutover`` (``migrator postpone ID``) holds the pipeline before the
cutover: ``finish`` re-enqueues itself until it is cleared, and runs a catch-up
pass each time so the target stays current (the freeze, when it comes, drains
seconds, not the whole postponement). Not while a cutover holds its lease (an
operator's own ``migrator cutover``): two tails would fight over the
checkpoint; a pass that loses that race steps aside.

Each step returns its next action (:class:`~migrator.ops.cutover_retry.Next`);
this module turns it into the job's meta and the next ``finish`` job. A step
holds one ZooKeeper session for its own reads and writes.
"""

from __future__ import annotations

from typing import Any

from rq import get_current_job

from migrator.engine.catch_up.checkpoint import CatchUpConflict
from migrator.engine.cutover.lease import leases
from migrator.engine.migration import MigrationStore, Phase
from migrator.fleet import config as config_mod
from migrator.fleet.zk import ZK
from migrator.ops import command
from migrator.ops.batched import run as batched
from migrator.ops.cutover_retry import BACKOFF, DONE, CutoverRetriesOver, Next, cut_over
from migrator.ops.steps import enqueue_finish

#: the job, and the names callers read here since before the steps moved to :mod:`migrator.ops`
__all__ = ["BACKOFF", "CutoverRetriesOver", "finish"]

POSTPONE_RECHECK_S = 5


def finish(migration_id: str, config_path: str | None = None, attempt: int = 0,
           since: float | None = None) -> dict[str, Any]:
    """Verify and cut over; ``attempt`` counts the cutover attempts that stopped before the flip since
    ``since`` (when the first of them stopped)."""
    cfg = config_mod.load(config_path)
    with command.session(cfg) as (zk, creds):
        store = MigrationStore(zk)
        st, _ = store.state(migration_id)
        out: dict[str, Any] = {"migration": migration_id, "attempt": attempt, "phase": st.phase.value}
        if st.phase == Phase.CUTOVER:
            # an attempt holds it (an operator's), or its holder died and a worker's settler is at it: once it
            # is settled the phase says what is next (converged: try again; done: nothing)
            return _act(out, Next("a cutover attempt is under way or being settled: looking again",
                                  delay=batched.BATCH_RECHECK_S, attempt=attempt, since=since), migration_id,
                        config_path)
        if st.phase not in (Phase.CATCHING_UP, Phase.CONVERGED):
            out["skipped"] = f"phase is {st.phase.value}"
            return out
        nxt = _step(cfg, zk, creds, store, migration_id, st, attempt, since, out)
    return _act(out, nxt, migration_id, config_path)


def _step(cfg: Any, zk: ZK, creds: Any, store: MigrationStore, migration_id: str, st: Any, attempt: int,
          since: float | None, out: dict[str, Any]) -> Next:
    if st.phase == Phase.CATCHING_UP:
        command.catchup(cfg, migration_id, passes=1)
        return Next("not converged yet: one more pass", attempt=attempt, since=since)
    if st.postpone_cutover or st.paused:
        if st.postpone_cutover and not st.paused:
            out["pass"] = _pass_while_postponed(cfg, zk, migration_id)
        return Next("cutover postponed", delay=POSTPONE_RECHECK_S, attempt=attempt)
    if store.spec(migration_id).batched:
        return batched.step(cfg, zk, creds, migration_id, attempt, since, out, queue=_queue_name())
    out["verify"] = command.verify(cfg, migration_id)
    return cut_over(cfg, zk, migration_id, migration_id, attempt, since, out, queue=_queue_name()) or DONE


def _pass_while_postponed(cfg: Any, zk: ZK, migration_id: str) -> str:
    """One catch-up pass, unless a cutover of the migration is running (it owns the tail then)."""
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


def _act(out: dict[str, Any], nxt: Next, migration_id: str, config_path: str | None) -> dict[str, Any]:
    """Record the step in the job's meta and, unless it is done, enqueue the next one."""
    if not nxt.done:
        out["next"] = nxt.why
    job = get_current_job()
    if job is None:
        return out
    job.meta["pipeline"] = {k: v for k, v in out.items() if k in ("phase", "attempt", "error", "skipped", "next")}
    job.save_meta()
    if not nxt.done:
        enqueue_finish(
            job.connection,
            migration_id,
            config_path,
            queue=job.origin,
            attempt=nxt.attempt,
            delay=nxt.delay,
            since=nxt.since,
        )
    return out
