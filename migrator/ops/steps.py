"""The RQ steps of a migration: queue names, job ids, and how each step is enqueued.

Runs wherever a step is handed to the RQ workers: the command functions
(``migrator copy``, ``resume``, ``cleanup``), the CLI, and the jobs themselves
when one step enqueues the next (copy -> catch-up passes -> finish: verify and
cutover -> cleanup scheduled). Playbook runs and the queue service's
partition maintenance are enqueued here too.

Every job is enqueued by the dotted path of its entry point in ``jobs/``
(``"jobs.copy.start"``): RQ stores that string in Redis and the worker imports
it when it runs the job. So this module never imports ``jobs/``, which sits on
top of everything and imports this one. The paths are part of the stored
format: renaming an entry point strands the jobs already queued under the old
name.

Redis only ever holds the next step. The migration record in ZooKeeper says
which phase a migration is in, and :func:`enqueue_current_step` re-enqueues
that phase's entry job from it (after a lost Redis, or a worker killed with
its job marked started forever). Enqueuing the same step twice is harmless:
duplicate copy jobs lose a compare-and-set and stop, and a second chain of
catch-up passes steps aside on its first checkpoint conflict.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any

from redis import Redis
from rq import Callback, Queue, Repeat
from rq.job import Job

from migrator.engine.migration import MigrationStore, Phase
from migrator.fleet import config as config_mod
from migrator.fleet import zk as zk_mod
from migrator.fleet.config import Config

#: the RQ queue of migration and playbook jobs (``migrator worker`` serves it)
QUEUE = "migrator"
#: how long one copy job copies a table before it re-enqueues itself
SLICE_S = 60.0
TABLE_TIMEOUT_S = 1800

# the entry points in jobs/, by the dotted path RQ stores
COPY_START_JOB = "jobs.copy.start"
COPY_TABLE_JOB = "jobs.copy.table_job"
COPY_GROUP_JOB = "jobs.copy.group_job"
CATCH_UP_JOB = "jobs.catch_up.run_passes"
FINISH_JOB = "jobs.pipeline.finish"
CLEANUP_JOB = "jobs.cutover.cleanup"
RESUME_JOB = "jobs.resume.resume"
PLAYBOOK_JOB = "jobs.playbook.advance"
MAINTENANCE_JOB = "jobs.maintenance.run"

#: the RQ queue of the queue service's partition maintenance
MAINTENANCE_QUEUE = "maintenance"
#: called by RQ when a migration step fails: the failure lands in the record (``status`` shows it)
FAILURE_CALLBACK = "jobs.failure.record"


def on_failure() -> Callback:
    """The callback every migration step is enqueued with (RQ runs it in the worker)."""
    return Callback(FAILURE_CALLBACK)


#: what an operator does after a step gave up, by step (the reason itself says why)
NEXT_STEPS = {
    "copy-start": "fix what the reason names, then `migrator resume ID` (or `migrator abort ID`)",
    "copy": "fix what the reason names, then `migrator resume ID`; `migrator restart-copy ID` redoes the copy",
    "catch-up": "fix what the reason names, then `migrator resume ID` (or `migrator abort ID`)",
    "finish": "`migrator status ID`, then `migrator cutover ID` by hand or `migrator resume ID` to let the "
              "pipeline try again",
    "cleanup": "fix what the reason names, then `migrator cleanup ID`",
}
NOT_CONVERGING_NEXT = ("reduce the write load on the moving shards (or move fewer shards at once), then "
                       "`migrator resume ID`")


def next_step(step: str, exc: BaseException | None, mid: str) -> str:
    """What to do next after ``step`` failed with ``exc`` (the migration id filled in)."""
    if type(exc).__name__ == "NotConverging":
        text = NOT_CONVERGING_NEXT
    else:
        text = NEXT_STEPS.get(step, "fix what the reason names, then `migrator resume ID`")
    return text.replace("ID", mid)


def job_id(*parts: str) -> str:
    """An RQ-safe id: letters, digits, '_' and '-' only, plus a short nonce."""
    raw = "-".join([*parts, uuid.uuid4().hex[:6]])
    return "".join(ch if ch.isalnum() or ch in "_-" else "_" for ch in raw)


# -- copy ------------------------------------------------------------------------------------------

def enqueue_start(redis: Redis, mid: str, config_path: str | None = None, queue: str = QUEUE,
                  slice_s: float = SLICE_S) -> Job:
    """The copy's first job: preflight, schema, then one table job per table."""
    return Queue(queue, connection=redis).enqueue(
        COPY_START_JOB, mid, config_path=config_path, slice_s=slice_s, job_id=job_id("copy-start", mid),
        description=f"copy: preflight, schema and table jobs of migration {mid}", job_timeout=900,
        meta={"migration": mid, "step": "copy-start"}, on_failure=on_failure())


def enqueue_table(redis: Redis, mid: str, db: str, table: str, config_path: str | None = None,
                  queue: str = QUEUE, slice_s: float = SLICE_S) -> Job:
    """One slice of one table's copy (the job re-enqueues itself until the table is done)."""
    return Queue(queue, connection=redis).enqueue(
        COPY_TABLE_JOB, mid, db, table, config_path=config_path, slice_s=slice_s,
        job_id=job_id("copy", mid, db, table), description=f"copy {db}.{table} of migration {mid}",
        job_timeout=TABLE_TIMEOUT_S + int(slice_s), meta={"migration": mid, "step": "copy", "table": f"{db}.{table}"},
        on_failure=on_failure())


def enqueue_group(redis: Redis, mid: str, tables: list[tuple[str, str]], config_path: str | None = None,
                  queue: str = QUEUE, slice_s: float = SLICE_S) -> Job:
    """One slice of a group of tables copied one after another on one set of connections (the
    job re-enqueues itself with the tables left until all are done)."""
    names = [f"{db}.{t}" for db, t in tables]
    first = names[0] if len(names) == 1 else f"{names[0]}-and-{len(names) - 1}"
    return Queue(queue, connection=redis).enqueue(
        COPY_GROUP_JOB, mid, names, config_path=config_path, slice_s=slice_s,
        job_id=job_id("copy", mid, first), description=f"copy {first} of migration {mid}",
        job_timeout=TABLE_TIMEOUT_S + int(slice_s),
        meta={"migration": mid, "step": "copy", "table": first, "tables": len(names)}, on_failure=on_failure())


# -- catch-up ----------------------------------------------------------------------------------------

def enqueue_catch_up(redis: Redis, mid: str, config_path: str | None = None, queue: str = QUEUE) -> Job:
    """The catch-up passes after the copy (each pass job enqueues the next until converged)."""
    return Queue(queue, connection=redis).enqueue(
        CATCH_UP_JOB, mid, config_path=config_path, job_id=job_id("catch_up", mid),
        description=f"catch-up passes of migration {mid}", job_timeout=24 * 3600,
        meta={"migration": mid, "step": "catch-up"}, on_failure=on_failure())


def enqueue_passes(config: Config, migration_id: str, passes: int | None = None, *,
                   queue: str = QUEUE) -> str:
    """``migrator catchup ID --enqueue``: catch-up passes as RQ jobs (each job runs
    one pass and enqueues the next until converged). Returns the job id."""
    conn = Redis.from_url(config.redis.url)
    job = Queue(queue, connection=conn).enqueue(
        CATCH_UP_JOB, migration_id,
        config_path=str(config.path) if config.path else None, passes=passes,
        job_id=f"catchup-{migration_id}-{uuid.uuid4().hex[:8]}", job_timeout=6 * 3600,
        description=f"catch-up passes of migration {migration_id}",
        meta={"migration": migration_id, "step": "catch-up"}, on_failure=on_failure(),
    )
    return job.id


# -- verify and cutover, cleanup ---------------------------------------------------------------------

def enqueue_finish(redis: Any, mid: str, config_path: str | None, *, queue: str = QUEUE, attempt: int = 0,
                   delay: float = 0) -> Any:
    """Verify and cut over a converged migration driven by the pipeline (``split --yes``)."""
    q = Queue(queue, connection=redis)
    kwargs = dict(config_path=config_path, attempt=attempt, job_id=job_id("finish", mid), job_timeout=3600,
                  description=f"verify and cut over migration {mid}", meta={"migration": mid, "step": "finish"},
                  on_failure=on_failure())
    if delay:
        return q.enqueue_in(dt.timedelta(seconds=delay), FINISH_JOB, mid, **kwargs)
    return q.enqueue(FINISH_JOB, mid, **kwargs)


def enqueue_cleanup_at(redis: Redis, mid: str, when: float, config_path: str | None = None,
                       queue: str = QUEUE) -> Job:
    """Drop the tombstones at ``when`` (epoch seconds; needs a worker with the scheduler)."""
    at = dt.datetime.fromtimestamp(when, tz=dt.UTC)
    return Queue(queue, connection=redis).enqueue_at(
        at, CLEANUP_JOB, mid, config_path=config_path, job_id=job_id("cleanup", mid),
        description=f"drop the tombstones of migration {mid}", meta={"migration": mid, "step": "cleanup"},
        on_failure=on_failure())


# -- resume from the record ----------------------------------------------------------------------------

def _enqueue_finish_step(redis: Redis, mid: str, config_path: str | None = None, queue: str = QUEUE) -> Job:
    return enqueue_finish(redis, mid, config_path, queue=queue)


#: phase -> how to enqueue its entry step (redis, mid, config_path, queue) -> Job
STEPS: dict[Phase, Any] = {
    Phase.PLANNED: enqueue_start,
    Phase.PREFLIGHT: enqueue_start,
    Phase.COPYING: enqueue_start,
    Phase.CATCHING_UP: enqueue_catch_up,
    Phase.CONVERGED: _enqueue_finish_step,
}


def enqueue_current_step(redis: Redis, config: Config, mid: str, *, queue: str = QUEUE) -> Job | None:
    """The job now queued for ``mid``'s current phase, or None when the phase
    has no queued step (terminal, paused, or driven by an operator command)."""
    with zk_mod.connect(config, config_mod.load_credentials(config)) as zk:
        st, _ = MigrationStore(zk).state(mid)
    if st.paused or st.phase not in STEPS:
        return None
    if st.phase == Phase.CONVERGED and not st.autopilot:
        return None  # an operator (or a playbook) decides when to cut over
    return STEPS[st.phase](redis, mid, str(config.path) if config.path else None, queue)


def enqueue_resume(redis: Redis, mid: str, config_path: str | None = None, queue: str = QUEUE) -> Job:
    """The resume itself as a job: it re-enqueues ``mid``'s current step on its own queue."""
    return Queue(queue, connection=redis).enqueue(
        RESUME_JOB, mid, config_path=config_path, job_id=job_id("resume", mid),
        description=f"re-enqueue the current step of migration {mid}", meta={"migration": mid, "step": "resume"})


# -- playbooks -------------------------------------------------------------------------------------------

def enqueue_playbook(run_id: str, config_path: str | None, *, connection: Any, playbook_name: str | None = None,
                     migration: str | None = None, step: str | None = None) -> Any:
    """Queue the next advance of a playbook run; the description says which playbook, migration and step."""
    what = f"playbook {playbook_name or ''} run {run_id}".replace("  ", " ")
    if migration:
        what += f" (migration {migration})"
    if step:
        what += f": waiting at {step}"
    q = Queue(QUEUE, connection=connection)
    return q.enqueue(PLAYBOOK_JOB, run_id, config_path, job_timeout=-1, description=what,
                     meta={"run": run_id, "playbook": playbook_name, "migration": migration, "step": step})


# -- partition maintenance of the queue service ------------------------------------------------------

def enqueue_maintenance(redis: Redis, config_path: str | None = None, queue: str = MAINTENANCE_QUEUE) -> Job:
    """One run of the queue service's partition maintenance."""
    return Queue(queue, connection=redis).enqueue(
        MAINTENANCE_JOB, config_path=config_path, description="queue partition maintenance", job_timeout=600)


def schedule_maintenance(redis: Redis, interval: int = 3600, times: int = 24 * 365, config_path: str | None = None,
                         queue: str = MAINTENANCE_QUEUE) -> Job:
    """Run now, then every ``interval`` seconds (needs a worker ``--with-scheduler``)."""
    return Queue(queue, connection=redis).enqueue(
        MAINTENANCE_JOB, config_path=config_path, description="queue partition maintenance (periodic)",
        job_timeout=600, repeat=Repeat(times=times, interval=interval))
