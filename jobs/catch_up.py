"""RQ job: catch-up passes of one migration.

Runs in any ``rq worker`` (forking or not). Each job runs passes for a slice
of time with one tailer (:func:`migrator.engine.catch_up.passes.run_passes`: the
binlog reader process keeps reading ahead between passes) and, unless the
migration converged, is reported as not converging, or ran the requested
number of passes, enqueues the next slice as a new job on the same queue. Everything it needs
to resume lives in the migration record (ZooKeeper): a killed job is simply
enqueued again and continues from the checkpoint.

Connections (ZooKeeper, MySQL, the binlog) are opened inside the job, never
at import time. Job arguments are ids and paths only: no credentials.
"""

from __future__ import annotations

import uuid
from typing import Any

from migrator.engine import catch_up
from migrator.fleet import config as config_mod
from migrator.ops import command
from migrator.ops.steps import CATCH_UP_JOB, enqueue_finish, on_failure

#: how long one catch-up job runs passes (one tailer) before it hands over to the next job
SLICE_S = 120.0


def run_passes(
    migration_id: str,
    config_path: str | None = None,
    passes: int | None = None,
    done: int = 0,
) -> dict[str, Any]:
    """Run passes for a slice with one tailer; enqueue the next slice until converged (or
    ``passes`` ran)."""
    from rq import get_current_job

    cfg = config_mod.load(config_path)
    if _paused(cfg, migration_id):
        # `migrator pause ID`: stop here; `migrator resume ID` enqueues the passes again from the record
        return {"migration": migration_id, "paused": True}
    left = None if passes is None else max(1, passes - done)
    try:
        results = catch_up.run_passes(cfg, migration_id, left, slice_s=SLICE_S)
    except catch_up.CatchUpConflict:
        # another chain of passes wrote the checkpoint first (a resume after Redis was lost, or a
        # duplicate enqueue): it carries on; this one steps aside. Its applied rounds were idempotent.
        return {"migration": migration_id, "superseded": True}
    except catch_up.NotConverging:
        raise  # the failure callback records the verdict and the next step
    except catch_up.CatchUpError as exc:
        if _paused(cfg, migration_id):  # paused between the check and the pass
            return {"migration": migration_id, "paused": True}
        _record_error(cfg, migration_id, exc)
        raise
    except Exception as exc:
        _record_error(cfg, migration_id, exc)
        raise
    result = results[-1] if results else None
    summary: dict[str, Any] = {"migration": migration_id, "passes": len(results)}
    if result is not None:
        summary.update({"pass": result.number, "events": result.events, "apply_rate": result.apply_rate,
                        "write_rate": result.write_rate, "lag_s": result.lag_s, "converged": result.converged})
    job = get_current_job()
    if job is not None:
        job.meta["catchup"] = summary
        job.save_meta()
    done += len(results)
    converged = result is not None and result.converged
    finished = converged if passes is None else done >= passes
    if converged and job is not None and _autopilot(cfg, migration_id):
        summary["next_job"] = enqueue_finish(job.connection, migration_id, config_path, queue=job.origin).id
        return summary
    if not finished and job is not None and _paused(cfg, migration_id):
        summary["paused"] = True
        return summary
    if not finished and job is not None:
        from rq import Queue

        number = (result.number + 1) if result is not None else 1
        nxt = Queue(job.origin, connection=job.connection).enqueue(
            CATCH_UP_JOB, migration_id, config_path=config_path, passes=passes, done=done,
            job_id=f"catchup-{migration_id}-{number}-{uuid.uuid4().hex[:6]}", job_timeout=job.timeout,
            description=f"catch-up passes of migration {migration_id} from pass {number}",
            meta={"migration": migration_id, "step": "catch-up", "pass": number},
            on_failure=on_failure(),
        )
        summary["next_job"] = nxt.id
    return summary


def _record_error(cfg: config_mod.Config, migration_id: str, exc: BaseException) -> None:
    """Put the failure in the migration record, where `migrator status ID` shows it (the RQ job's
    traceback is only in Redis). Best effort: the original error is what the job raises."""
    message = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"

    def change(st: Any) -> Any:
        st.error = f"catch-up: {message}"[:2000]
        return st

    command.update_quietly(cfg, migration_id, change)


def _paused(cfg: config_mod.Config, migration_id: str) -> bool:
    """Whether an operator paused the migration (``migrator pause ID``)."""
    from migrator.engine.migration import MigrationStore
    from migrator.fleet import zk as zk_mod

    with zk_mod.connect(cfg, config_mod.load_credentials(cfg)) as zk:
        st, _ = MigrationStore(zk).state(migration_id)
    return st.paused


def _autopilot(cfg: config_mod.Config, migration_id: str) -> bool:
    """Whether the RQ pipeline drives this migration on to verify and cutover (``split --yes``)."""
    from migrator.engine.migration import MigrationStore
    from migrator.fleet import zk as zk_mod

    with zk_mod.connect(cfg, config_mod.load_credentials(cfg)) as zk:
        st, _ = MigrationStore(zk).state(migration_id)
    return st.autopilot
