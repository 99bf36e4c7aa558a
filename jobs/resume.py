"""Re-enqueue the current step of a migration from its ZooKeeper record.

Redis can be lost (or a worker killed with its job marked started forever):
the record in ZooKeeper says which phase a migration is in, and each phase's
entry job resumes from the checkpoints it finds there. Enqueuing the same step
twice is harmless (duplicate copy jobs lose a compare-and-set and stop).

Later phases register their entry job in :data:`STEPS` by dotted name.
"""

from __future__ import annotations

from typing import Any

from redis import Redis
from rq import Queue
from rq.job import Job

from migrator.ops import command
from migrator.fleet.config import Config
from migrator.engine.migration import MigrationStore, Phase

from jobs.copy import QUEUE, enqueue_catch_up, enqueue_start


def enqueue_finish(redis: Redis, mid: str, config_path: str | None = None, queue: str = QUEUE) -> Job:
    from jobs import pipeline

    return pipeline.enqueue(redis, mid, config_path, queue=queue)


#: phase -> how to enqueue its entry step (redis, mid, config_path, queue) -> Job
STEPS: dict[Phase, Any] = {
    Phase.PLANNED: enqueue_start,
    Phase.PREFLIGHT: enqueue_start,
    Phase.COPYING: enqueue_start,
    Phase.CATCHING_UP: enqueue_catch_up,
    Phase.CONVERGED: enqueue_finish,
}


def enqueue_current_step(redis: Redis, config: Config, mid: str, *, queue: str = QUEUE) -> Job | None:
    """The job now queued for ``mid``'s current phase, or None when the phase
    has no queued step (terminal, paused, or driven by an operator command)."""
    with command.session(config) as (zk, _):
        st, _ = MigrationStore(zk).state(mid)
    if st.paused or st.phase not in STEPS:
        return None
    if st.phase == Phase.CONVERGED and not st.autopilot:
        return None  # an operator (or a playbook) decides when to cut over
    return STEPS[st.phase](redis, mid, str(config.path) if config.path else None, queue)


def resume(mid: str, config_path: str | None = None) -> dict[str, Any]:
    """RQ job form: re-enqueue ``mid``'s current step on this job's queue."""
    from rq import get_current_job

    job = get_current_job()
    redis = job.connection if job else Redis()
    queue = job.origin if job else QUEUE
    nxt = enqueue_current_step(redis, command.load_config(config_path), mid, queue=queue)
    return {"migration": mid, "job": nxt.id if nxt else None}


def enqueue_resume(redis: Redis, mid: str, config_path: str | None = None, queue: str = QUEUE) -> Job:
    from jobs.copy import job_id

    return Queue(queue, connection=redis).enqueue(
        resume, mid, config_path=config_path, job_id=job_id("resume", mid),
        description=f"re-enqueue the current step of migration {mid}", meta={"migration": mid, "step": "resume"})
