"""RQ job: re-enqueue the current step of a migration from its ZooKeeper record.

Redis can be lost (or a worker killed with its job marked started forever):
the record in ZooKeeper says which phase a migration is in, and each phase's
entry job resumes from the checkpoints it finds there
(:func:`migrator.ops.steps.enqueue_current_step`, which also holds the table
of entry steps).
"""

from __future__ import annotations

from typing import Any

from migrator.fleet import redis_client
from migrator.ops import command
from migrator.ops.steps import enqueue_current_step


def resume(mid: str, config_path: str | None = None) -> dict[str, Any]:
    """RQ job form: re-enqueue ``mid``'s current step on this job's queue."""
    from rq import get_current_job

    job = get_current_job()
    config = command.load_config(config_path)
    redis = job.connection if job else redis_client.connect(config)
    nxt = enqueue_current_step(redis, config, mid, queue=job.origin if job else None)
    return {"migration": mid, "job": nxt.id if nxt else None}
