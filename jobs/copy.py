"""RQ jobs of the copy phase.

``start`` runs preflight (first time), prepares schema and progress nodes, and
enqueues one ``group`` job per group of tables still to copy (a large table is
a group of its own, small tables share one: see
:mod:`migrator.engine.copy_groups`). A group job copies its tables one after
another for at most a time slice, then re-enqueues itself with the tables
left: workers interleave, a job never needs a long RQ timeout, and a pause
takes effect between chunks.
The last table to finish moves the migration to CATCHING_UP and enqueues
``jobs.catch_up.run_passes`` by name (:mod:`migrator.ops.steps` enqueues every step).

Workers fork per job: every MySQL and ZooKeeper connection is opened inside
the job. Job meta holds progress only (rows, bytes, rates, ETA), never
credentials. Duplicate table jobs (after a resume) are harmless: the copy's
compare-and-set on the table's progress node lets only one advance it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from redis import Redis
from rq import get_current_job

from migrator.engine import copy as copy_mod
from migrator.engine.copy_groups import copy_tables, plan_groups, remaining
from migrator.engine.migration import MigrationStore
from migrator.ops import command
from migrator.ops.steps import SLICE_S, enqueue_catch_up, enqueue_group


def _queue_args() -> tuple[Redis, str]:
    job = get_current_job()
    if job is None:
        raise RuntimeError("this function runs as an RQ job")
    return job.connection, job.origin


def start(migration_id: str, config_path: str | None = None, slice_s: float = SLICE_S) -> dict[str, Any]:
    """Preflight + prepare, then one group job per group of pending tables."""
    redis, queue = _queue_args()
    with command.session(command.load_config(config_path)) as (zk, creds):
        spec = command.spec_of(zk, migration_id)
        pending = copy_mod.begin(zk, spec, creds)
        want = set(pending)
        groups = plan_groups([p for p in copy_mod.table_progress(zk, migration_id) if (p["db"], p["table"]) in want],
                             spec.options.copy_workers)
        ids = [enqueue_group(redis, migration_id, g, config_path, queue, slice_s).id for g in groups]
        caught_up = None
        if not pending and copy_mod.finish_if_complete(zk, migration_id):
            caught_up = enqueue_catch_up(redis, migration_id, config_path, queue).id
    job = get_current_job()
    if job is not None:
        job.meta.update({"tables": len(pending)})
        job.save_meta()
    return {"migration": migration_id, "group_jobs": ids, "catch_up_job": caught_up}


def group_job(migration_id: str, tables: list[str], config_path: str | None = None,
              slice_s: float = SLICE_S) -> dict[str, Any]:
    """Copy a group of tables, one after another from their checkpoints, for up to ``slice_s``."""
    redis, queue = _queue_args()
    job = get_current_job()
    group = [(name.split(".", 1)[0], name.split(".", 1)[1]) for name in tables]
    on_progress = _progress_saver(job)

    with command.session(command.load_config(config_path)) as (zk, creds):
        spec = command.spec_of(zk, migration_id)  # afresh for every slice: `migrator set ID ...` applies at the next
        if job is not None:
            _show_options(job, spec)
        try:
            results = copy_tables(zk, spec, group, creds, deadline=time.monotonic() + slice_s,
                                  on_progress=on_progress)
        except Exception as exc:
            message = f"copy of {len(group)} table(s) from {tables[0]}: {exc}"
            MigrationStore(zk).update(migration_id, lambda st: _with_error(st, message))
            raise
        left = remaining(group, results)
        status = results[-1].status if results else "done"
        out: dict[str, Any] = {"migration": migration_id, "tables": len(group), "status": status,
                               "done": sum(1 for r in results if r.status == "done"),
                               "rows": sum(r.rows for r in results), "bytes": sum(r.bytes for r in results),
                               "seconds": round(sum(r.seconds for r in results), 3)}
        if left and status not in ("paused", "stopped"):
            out["next_job"] = enqueue_group(redis, migration_id, left, config_path, queue, slice_s).id
        elif not left and copy_mod.finish_if_complete(zk, migration_id):
            out["catch_up_job"] = enqueue_catch_up(redis, migration_id, config_path, queue).id
    if job is not None:
        job.meta["status"] = status
        job.save_meta()
    return out


def _show_options(job: Any, spec: Any) -> None:
    """The throttle and chunk options this slice runs with, in the job's meta."""
    o = spec.options
    job.meta["options"] = {"max_standby_lag_s": o.max_passive_lag_s, "max_threads_running": o.max_threads_running,
                           "chunk_target_ms": o.chunk_target_ms, "chunk_max_rows": o.chunk_max_rows}
    job.save_meta()


def _with_error(st: Any, message: str) -> Any:
    st.error = message[:2000]
    return st


def _progress_saver(job: Any) -> Callable[[dict[str, Any]], None]:
    """A copy's progress callback: the view into the job's meta, at most once a second."""
    last_save = [0.0]

    def on_progress(view: dict[str, Any]) -> None:
        if job is None:
            return
        if time.monotonic() - last_save[0] < 1.0:
            return
        last_save[0] = time.monotonic()
        job.meta.update(view)
        job.meta["status"] = "copying"
        job.save_meta()

    return on_progress
