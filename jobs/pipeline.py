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

``postpone_cutover`` (``migrator postpone ID``) holds the pipeline before the
cutover: ``finish`` re-enqueues itself until it is cleared, and runs a catch-up
pass each time so the target stays current (the freeze, when it comes, drains
seconds, not the whole postponement). Not while a cutover holds its lease (an
operator's own ``migrator cutover``): two tails would fight over the
checkpoint; a pass that loses that race steps aside.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from rq import get_current_job

from migrator.engine.catch_up.checkpoint import CatchUpConflict
from migrator.engine.cutover.lease import leases
from migrator.engine.migration import MigrationStore, Phase
from migrator.errors import ExitCode, MigratorError, describe
from migrator.fleet import config as config_mod
from migrator.ops import command
from migrator.ops.steps import enqueue_finish

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
            store = MigrationStore(zk)
            st, _ = store.state(migration_id)
            window = store.spec(migration_id).options.cutover_retry_s
        if st.phase != Phase.CONVERGED:
            raise
        first = since if since is not None else time.time()
        elapsed, delay = time.time() - first, BACKOFF.delay(attempt)
        if elapsed + delay > window:
            reason = describe(exc)
            raise CutoverRetriesOver(
                f"{reason} (the pipeline tried the cutover {attempt + 1} times over {elapsed:.0f} s, its window "
                f"of {window:g} s: `migrator set {migration_id} --cutover-retry-s S` gives it longer)",
                phase="cutover") from exc
        out["error"], out["retry_in_s"] = str(exc), delay
        command.catchup(cfg, migration_id, passes=1)
        return _again(out, migration_id, config_path, attempt,
                      f"cutover stopped before the flip; trying again in {delay:g} s", delay=delay, since=first)
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
           delay: float = 0, count: bool = True, since: float | None = None) -> dict[str, Any]:
    out["next"] = why
    _meta(out)
    job = get_current_job()
    if job is None:
        return out
    enqueue_finish(job.connection, mid, config_path, queue=job.origin, attempt=attempt + (1 if count else 0),
                   delay=delay, since=since)
    return out
