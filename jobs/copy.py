"""RQ jobs of the copy phase.

``start`` runs preflight (first time), prepares schema and progress nodes, and
enqueues one ``table`` job per table still to copy. A ``table`` job copies for
at most a time slice, then re-enqueues itself: workers interleave tables, a
job never needs a long RQ timeout, and a pause takes effect between chunks.
The last table to finish moves the migration to CATCHING_UP and enqueues
``jobs.catch_up.run_passes`` by name.

Workers fork per job: every MySQL and ZooKeeper connection is opened inside
the job. Job meta holds progress only (rows, bytes, rates, ETA), never
credentials. Duplicate table jobs (after a resume) are harmless: the copy's
compare-and-set on the table's progress node lets only one advance it.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from redis import Redis
from rq import Queue, get_current_job
from rq.job import Job

from migrator.ops import command
from migrator.engine import copy as copy_mod
from migrator.engine.migration import MigrationStore

QUEUE = "migrator"
SLICE_S = 60.0
TABLE_TIMEOUT_S = 1800
CATCH_UP_JOB = "jobs.catch_up.run_passes"


def job_id(*parts: str) -> str:
    """An RQ-safe id: letters, digits, '_' and '-' only, plus a short nonce."""
    raw = "-".join([*parts, uuid.uuid4().hex[:6]])
    return "".join(ch if ch.isalnum() or ch in "_-" else "_" for ch in raw)


def enqueue_start(redis: Redis, mid: str, config_path: str | None = None, queue: str = QUEUE,
                  slice_s: float = SLICE_S) -> Job:
    return Queue(queue, connection=redis).enqueue(
        start, mid, config_path=config_path, slice_s=slice_s, job_id=job_id("copy-start", mid),
        description=f"copy: preflight, schema and table jobs of migration {mid}", job_timeout=900,
        meta={"migration": mid, "step": "copy-start"})


def enqueue_table(redis: Redis, mid: str, db: str, table: str, config_path: str | None = None,
                  queue: str = QUEUE, slice_s: float = SLICE_S) -> Job:
    return Queue(queue, connection=redis).enqueue(
        table_job, mid, db, table, config_path=config_path, slice_s=slice_s,
        job_id=job_id("copy", mid, db, table), description=f"copy {db}.{table} of migration {mid}",
        job_timeout=TABLE_TIMEOUT_S + int(slice_s), meta={"migration": mid, "step": "copy", "table": f"{db}.{table}"})


def enqueue_catch_up(redis: Redis, mid: str, config_path: str | None = None, queue: str = QUEUE) -> Job:
    """The next phase's job, by dotted name (its module may live elsewhere)."""
    return Queue(queue, connection=redis).enqueue(
        CATCH_UP_JOB, mid, config_path=config_path, job_id=job_id("catch_up", mid),
        description=f"catch-up passes of migration {mid}", job_timeout=24 * 3600,
        meta={"migration": mid, "step": "catch-up"})


def _queue_args() -> tuple[Redis, str]:
    job = get_current_job()
    if job is None:
        raise RuntimeError("this function runs as an RQ job")
    return job.connection, job.origin


def start(mid: str, config_path: str | None = None, slice_s: float = SLICE_S) -> dict[str, Any]:
    """Preflight + prepare, then one table job per pending table."""
    redis, queue = _queue_args()
    with command.session(command.load_config(config_path)) as (zk, creds):
        spec = command.spec_of(zk, mid)
        pending = copy_mod.begin(zk, spec, creds)
        ids = [enqueue_table(redis, mid, db, t, config_path, queue, slice_s).id for db, t in pending]
        caught_up = None
        if not pending and copy_mod.finish_if_complete(zk, mid):
            caught_up = enqueue_catch_up(redis, mid, config_path, queue).id
    job = get_current_job()
    if job is not None:
        job.meta.update({"tables": len(pending)})
        job.save_meta()
    return {"migration": mid, "table_jobs": ids, "catch_up_job": caught_up}


def table_job(mid: str, db: str, table: str, config_path: str | None = None, slice_s: float = SLICE_S) -> dict[str, Any]:
    """Copy one table for up to ``slice_s`` seconds from its checkpoint."""
    redis, queue = _queue_args()
    job = get_current_job()
    last_save = [0.0]

    def on_progress(view: dict[str, Any]) -> None:
        if job is None or time.monotonic() - last_save[0] < 1.0 and not view.get("done"):
            return
        last_save[0] = time.monotonic()
        job.meta.update(view)
        job.meta["status"] = "copying"
        job.save_meta()

    with command.session(command.load_config(config_path)) as (zk, creds):
        # the spec is read afresh for every slice: `migrator set ID ...` takes effect at the next slice
        spec = command.spec_of(zk, mid)
        if job is not None:
            o = spec.options
            job.meta["options"] = {"max_standby_lag_s": o.max_standby_lag_s,
                                   "max_threads_running": o.max_threads_running,
                                   "chunk_target_ms": o.chunk_target_ms, "chunk_max_rows": o.chunk_max_rows}
            job.save_meta()
        try:
            res = copy_mod.copy_table(zk, spec, db, table, creds, deadline=time.monotonic() + slice_s,
                                      on_progress=on_progress)
        except Exception as exc:
            # the record says what broke; `migrator resume ID` continues from the checkpoint
            MigrationStore(zk).update(mid, lambda st: _with_error(st, f"copy {db}.{table}: {exc}"))
            raise
        out: dict[str, Any] = {"migration": mid, "table": f"{db}.{table}", "status": res.status,
                               "rows": res.rows, "bytes": res.bytes, "seconds": round(res.seconds, 3)}
        if res.status == "sliced":
            out["next_job"] = enqueue_table(redis, mid, db, table, config_path, queue, slice_s).id
        elif res.status == "done" and copy_mod.finish_if_complete(zk, mid):
            out["catch_up_job"] = enqueue_catch_up(redis, mid, config_path, queue).id
    if job is not None:
        job.meta["status"] = res.status
        job.save_meta()
    return out


def _with_error(st: Any, message: str) -> Any:
    st.error = message[:2000]
    return st
