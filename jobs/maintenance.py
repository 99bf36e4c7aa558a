"""RQ job: partition maintenance of the queue service's tables.

``run`` drops expired buckets and splits FUTURE partitions on every queue
partition and log table (see :mod:`migrator.queue.maintenance`, which also
documents the per-shard pause node the migration engine uses).
:func:`migrator.ops.steps.schedule_maintenance` enqueues it to repeat every
``interval`` seconds (rq ``Repeat``; a worker started with ``--with-scheduler``
runs the repeats).

Workers fork per job: the ZooKeeper and MySQL connections are opened inside
the job. Meta holds a one-line summary, never credentials.
"""

from __future__ import annotations

from typing import Any

from rq import get_current_job


def run(config_path: str | None = None, lock_wait_timeout: int = 2) -> dict[str, Any]:
    from migrator.fleet import config as config_mod
    from migrator.queue.maintenance import maintain
    from migrator.queue.service import QueueService

    cfg = config_mod.load(config_path)
    with QueueService(cfg) as svc:
        reports = maintain(svc, lock_wait_timeout=lock_wait_timeout)
    out = {
        "tables": len(reports),
        "dropped": sum(len(r.dropped) for r in reports),
        "added": sum(len(r.added) for r in reports),
        "skipped": [r.to_text() for r in reports if r.skipped],
    }
    job = get_current_job()
    if job is not None:
        job.meta["summary"] = (f"{out['tables']} tables, dropped {out['dropped']}, added {out['added']}, "
                               f"skipped {len(out['skipped'])}")
        job.save_meta()
    return out
