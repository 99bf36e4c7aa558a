"""RQ job that takes a converged migration through verify and cutover.

``migrator split --yes`` marks a migration as driven by the pipeline
(``State.autopilot``). Copy jobs hand over to catch-up jobs; when a catch-up
pass converges it enqueues :func:`finish`, which verifies (re-copying what
differs), then runs the fenced cutover and schedules the cleanup. A cutover
that stops before the flip (freeze budget, a conflicting map edit, a fence
timeout) leaves the source serving; ``finish`` then runs one more catch-up
pass and tries again, a bounded number of times, and otherwise leaves the
migration converged with the error for an operator.

``postpone_cutover`` (``migrator postpone ID``) holds the pipeline before the
cutover: ``finish`` re-enqueues itself until it is cleared, and runs a catch-up
pass each time so the target stays current (the freeze, when it comes, drains
seconds, not the whole postponement). Not while a cutover holds its lease (an
operator's own ``migrator cutover``): two tails would fight over the
checkpoint; a pass that loses that race steps aside.
"""

from __future__ import annotations

from typing import Any

from rq import get_current_job

from migrator.engine.catch_up.checkpoint import CatchUpConflict
from migrator.engine.cutover.lease import leases
from migrator.engine.migration import MigrationStore, Phase
from migrator.fleet import config as config_mod
from migrator.ops import command
from migrator.ops.steps import enqueue_finish

MAX_ATTEMPTS = 5
POSTPONE_RECHECK_S = 5


def finish(migration_id: str, config_path: str | None = None, attempt: int = 0) -> dict[str, Any]:
    cfg = config_mod.load(config_path)
    with command.session(cfg) as (zk, _):
        st, _ = MigrationStore(zk).state(migration_id)
    out: dict[str, Any] = {"migration": migration_id, "attempt": attempt, "phase": st.phase.value}
    if st.phase == Phase.CATCHING_UP:
        command.catchup(cfg, migration_id, passes=1)
        return _again(out, migration_id, config_path, attempt, "not converged yet: one more pass")
    if st.phase != Phase.CONVERGED:
        out["skipped"] = f"phase is {st.phase.value}"
        return out
    if st.postpone_cutover or st.paused:
        if st.postpone_cutover and not st.paused:
            out["pass"] = _pass_while_postponed(cfg, migration_id)
        return _again(out, migration_id, config_path, attempt, "cutover postponed", delay=POSTPONE_RECHECK_S,
                      count=False)
    out["verify"] = command.verify(cfg, migration_id)
    try:
        out["cutover"] = command.cutover(cfg, migration_id)
    except Exception as exc:  # noqa: BLE001 - the cutover stopped before the flip; the source serves
        with command.session(cfg) as (zk, _):
            st, _ = MigrationStore(zk).state(migration_id)
        if st.phase != Phase.CONVERGED or attempt + 1 >= MAX_ATTEMPTS:
            raise
        out["error"] = str(exc)
        command.catchup(cfg, migration_id, passes=1)
        return _again(out, migration_id, config_path, attempt, "cutover stopped before the flip; retrying")
    out["cleanup_job"] = command.schedule_cleanup(cfg, migration_id, queue=_queue_name())
    _meta(out)
    return out


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
           delay: float = 0, count: bool = True) -> dict[str, Any]:
    out["next"] = why
    _meta(out)
    job = get_current_job()
    if job is None:
        return out
    enqueue_finish(job.connection, mid, config_path, queue=job.origin, attempt=attempt + (1 if count else 0),
                   delay=delay)
    return out
