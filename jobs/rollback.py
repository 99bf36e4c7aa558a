"""RQ job: a rollback, one slice at a time.

``migrator rollback ID`` enqueues the first slice (:func:`migrator.ops.command.start_rollback`)
on the migration's queue. Each job runs reverse passes for a slice of time with one reverse
tail (:func:`migrator.engine.rollback.rollback_slice`) and, once a pass converges with a
predicted freeze inside the budget, the fenced flip back under the cutover's lease (phase
``rolling_back``). A slice that ran out of time, or whose attempt was stopped before the flip
(budget overrun, drain timeout), enqueues the next slice on its own queue with the counters
(stopped attempts, passes since the last one, when the last pass read the head).

Everything a slice resumes from lives in the migration record: the reverse tail's checkpoint
(``rollback_tail``), the passes and attempts (``rollback_passes``). A job killed with its
worker (kill -9) is re-enqueued by ``migrator resume ID`` (the record's
``rollback_requested``) or ``migrator rollback ID``. Each of those starts a new chain (the
record's ``rollback_requested`` names it): a slice of an older chain steps aside, and a slice
that finds the older one's reverse tail still holding the applier lock (or its flip back the
lease) tries again. The applier lock keeps two reverse tails from applying at once; a flip back
the killed job was in is settled by a live worker. A verdict (not converging, every attempt stopped) fails the
job: the failure callback puts it in the record (``stopped``, ``error``) with the next step,
where ``migrator status ID`` and the following ``migrator rollback`` show it.

Connections are opened inside the job; arguments are ids, paths and counters only.
"""

from __future__ import annotations

import time
from typing import Any

from migrator.engine import rollback as rollback_mod
from migrator.engine.catch_up.checkpoint import CatchUpConflict
from migrator.engine.cutover.lease import CutoverRunning
from migrator.engine.migration import MigrationStore, Phase, State
from migrator.fleet import config as config_mod
from migrator.fleet import zk as zk_mod
from migrator.ops import command
from migrator.ops.steps import enqueue_rollback

#: how long one rollback job runs reverse passes (one reverse tail) before it hands over to the next job
SLICE_S = 120.0
#: slices in a row that found the reverse tail's lock (or the flip back's lease) held before the chain gives up
MAX_WAITS = 20
#: the pause before a slice that found the flip back's lease held tries again
WAIT_LEASE_S = 3.0


def run(migration_id: str, config_path: str | None = None, chain: float | None = None, attempts: int = 0,
        since_attempt: int = 0, head_at: float | None = None, waits: int = 0,
        slice_s: float = SLICE_S) -> dict[str, Any]:
    """One slice of the rollback of ``migration_id``; enqueues the next until flipped back."""
    from rq import get_current_job

    cfg = config_mod.load(config_path)
    st = _state(cfg, migration_id)
    if st.phase not in (Phase.DONE, Phase.ROLLING_BACK):
        # rolled back already (a second chain after a resume), or no longer a finished migration
        return {"migration": migration_id, "skipped": f"phase is {st.phase.value}"}
    if chain is not None and st.rollback_requested != chain:
        # a later `migrator rollback` or `resume` started another chain (or a verdict ended this one)
        return {"migration": migration_id, "superseded": True}
    job = get_current_job()
    summary: dict[str, Any] = {"migration": migration_id, "attempts": attempts}

    def again(**counters: Any) -> str:
        assert job is not None
        return enqueue_rollback(job.connection, migration_id, config_path, queue=job.origin, chain=chain,
                                **counters).id

    def on_pass(res: Any) -> None:
        summary["pass"] = {"number": res.number, "events": res.events, "apply_rate": res.apply_rate,
                           "write_rate": res.write_rate, "predicted_freeze_ms": res.predicted_freeze_ms,
                           "converged": res.converged}
        if job is not None:
            job.meta["rollback"] = summary
            job.save_meta()

    try:
        out = rollback_mod.rollback_slice(cfg, migration_id, slice_s=slice_s, attempts=attempts,
                                          since_attempt=since_attempt, prev_head_at=head_at, on_pass=on_pass)
    except (CatchUpConflict, CutoverRunning) as exc:
        # another reverse tail holds the applier lock, or another flip back the lease: a chain this
        # one superseded, in its last slice (it steps aside at its next one), or a dead one's lock
        # not yet expired. Try again, a bounded number of times (each waited for the lock).
        if job is None or waits + 1 >= MAX_WAITS:
            _end_request(cfg, migration_id, chain)
            raise
        if isinstance(exc, CutoverRunning):
            time.sleep(WAIT_LEASE_S)  # a lease is not waited for where it is taken
        summary.update(waited=exc.message, next_job=again(attempts=attempts, since_attempt=since_attempt,
                                                           head_at=head_at, waits=waits + 1))
        return summary
    except Exception:
        _end_request(cfg, migration_id, chain)
        raise  # the failure callback records the verdict and the next step
    summary.update(passes=len(out.passes), attempts=out.attempts, stopped=out.stopped)
    if out.result is not None:
        summary["result"] = out.result.to_dict()
    elif job is not None:
        summary["next_job"] = again(attempts=out.attempts, since_attempt=out.since_attempt, head_at=out.head_at)
    if job is not None:
        job.meta["rollback"] = summary
        job.save_meta()
    return summary


def _state(cfg: config_mod.Config, migration_id: str) -> State:
    with zk_mod.connect(cfg, config_mod.load_credentials(cfg)) as zk:
        return MigrationStore(zk).state(migration_id)[0]


def _end_request(cfg: config_mod.Config, migration_id: str, chain: float | None) -> None:
    """The chain gives up: ``migrator resume ID`` no longer restarts it (``migrator rollback ID`` does).
    Not when a later chain is the requested one. Best effort: the original error is what the job raises."""

    def change(st: Any) -> Any:
        if chain is None or st.rollback_requested == chain:
            st.rollback_requested = None
        return st

    command.update_quietly(cfg, migration_id, change)
