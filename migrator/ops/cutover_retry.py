"""A pipeline's cutover that stopped before the flip is tried again: the backoff, the window, the next step.

Runs in the RQ worker, inside a step of the pipeline (``jobs.pipeline.finish``,
and :mod:`migrator.ops.batched.run` for each batch of a batched migration). A
cutover that stops before the flip (a lock held on a moving table, a freeze
over its budget, a conflicting map edit) leaves the source serving; the step
then runs one more catch-up pass and says to try again after a backoff
(:data:`BACKOFF`: 2 s, doubling, at most 60 s) for as long as the migration's
``cutover_retry_s`` allows (600 s unless set at launch or with ``migrator set
ID --cutover-retry-s``): gh-ost retries its cut-over the same way, for as long
as the operator lets it, instead of giving up after a few attempts in seconds.
When the window is over the step fails with the last attempt's refusal (which
names its cause: the blocking connection, the step the freeze ran out in).

A step does not enqueue anything itself: it returns its next action
(:class:`Next`), which the RQ entry turns into the next job.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from migrator.engine.cutover.attempt import record_next_try
from migrator.engine.migration import MigrationStore, Phase
from migrator.errors import ExitCode, MigratorError, describe
from migrator.fleet.config import Config
from migrator.fleet.zk import ZK
from migrator.ops import command


@dataclass(frozen=True)
class Next:
    """What the pipeline does after a step: nothing (:attr:`done`), or run again after ``delay`` s as
    cutover attempt ``attempt`` (the attempts that stopped before the flip since ``since``), saying ``why``."""

    why: str | None = None
    delay: float = 0.0
    attempt: int = 0
    since: float | None = None

    @property
    def done(self) -> bool:
        return self.why is None

    def because(self, prefix: str) -> Next:
        """The same action, its reason prefixed (``batch X: ...``)."""
        return dataclasses.replace(self, why=f"{prefix}{self.why}")


#: the step is over and nothing follows it
DONE = Next()


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


def cut_over(cfg: Config, zk: ZK, migration_id: str, driver: str, attempt: int, since: float | None,
             out: dict[str, Any], *, queue: str | None,
             on_refused: Callable[[BaseException], Next | None] | None = None) -> Next | None:
    """Cut ``migration_id`` over (``driver``: the migration whose pipeline this is, ``migration_id`` or the batched
    migration ``migration_id`` is a batch of) and schedule its cleanup on ``queue``; None when it flipped, else the
    next try, after one more catch-up pass. Raises when the retry window is over, or when the attempt ended otherwise
    than before the flip. ``zk``: the step's session (the cutover opens its own). ``on_refused(exc)``: asked first
    when the attempt stopped before the flip; a :class:`Next` it returns is the next try instead (a batch that
    overran its budget is made smaller: :func:`migrator.ops.batched.run.step`)."""
    try:
        out["cutover"] = command.cutover(cfg, migration_id)
    except Exception as exc:  # noqa: BLE001 - the cutover stopped before the flip; the source serves
        store = MigrationStore(zk)
        st, _ = store.state(migration_id)
        if st.phase != Phase.CONVERGED:
            raise
        if on_refused is not None and (instead := on_refused(exc)) is not None:
            out["error"] = str(exc)
            return instead

        reason = str(exc)

        def one_pass(delay: float) -> None:
            out["error"], out["retry_in_s"] = reason, delay
            command.catchup(cfg, migration_id, passes=1)

        return try_again(store, migration_id, driver, exc, attempt, since,
                         lambda delay: f"cutover stopped before the flip; trying again in {delay:g} s", before=one_pass)
    record_next_try(MigrationStore(zk), migration_id, None)
    out["cleanup_job"] = command.schedule_cleanup(cfg, migration_id, queue=queue, zk=zk)
    return None


def try_again(store: MigrationStore, migration_id: str, driver: str, exc: BaseException, attempt: int,
              since: float | None, why: Callable[[float], str], *,
              before: Callable[[float], None] | None = None) -> Next:
    """The retry window, in one place: after ``migration_id``'s cutover stopped before the flip with ``exc``
    (``attempt`` attempts stopped so since ``since``, None: this is the first), the next try after
    :data:`BACKOFF`, recorded for ``migrator status`` (``next_try``), while ``driver``'s ``cutover_retry_s``
    lasts; else :class:`CutoverRetriesOver` with ``exc``'s reason. ``before(delay)`` runs right before the try
    is recorded (a catch-up pass); ``why(delay)`` is the reason the next step gives."""
    window = store.spec(driver).options.cutover_retry_s
    first = since if since is not None else time.time()
    elapsed, delay = time.time() - first, BACKOFF.delay(attempt)
    if elapsed + delay > window:
        record_next_try(store, migration_id, None)
        raise CutoverRetriesOver(
            f"{describe(exc)} (the pipeline tried the cutover {attempt + 1} times over {elapsed:.0f} s, its window "
            f"of {window:g} s: `migrator set {driver} --cutover-retry-s S` gives it longer)",
            phase="cutover") from exc
    if before is not None:
        before(delay)
    # when the job enqueued next (``delay`` from now) tries again; status shows it
    record_next_try(store, migration_id, {"at": time.time() + delay, "attempt": attempt + 2, "delay_s": delay,
                                          "until": first + window})
    return Next(why(delay), delay=delay, attempt=attempt + 1, since=first)
