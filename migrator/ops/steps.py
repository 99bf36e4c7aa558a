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

Queues. Every job of a migration goes to the queue of its source pair,
``migrator.pair.<PAIR>`` (:func:`migration_queue`; a pair is named by its
member that sorts first, ``MySQL003A`` for MySQL003A/MySQL003B): the copy
reads there, catch-up decodes that host's whole binlog (the target only
receives the moving shards' rows), and the cutover's freeze and fence act
there within the freeze budget, so a worker next to the source pair is the
one that should run them. The first step is enqueued there and each job
enqueues its next step on its own queue (``job.origin``): copy slices,
catch-up passes, verify and cutover, the cleanup scheduled for the end of the
retention, the slices of a rollback, a resume, and the playbook advances of a run once it names its
migration. Jobs that belong to no one pair go to the general queue
``migrator``: rebalance advances (they start moves on many pairs) and
playbook runs before they name a migration; partition maintenance of the
queue service keeps its ``maintenance`` queue (it touches every shard).
``migrator worker --pairs A,B`` serves the queues of those pairs
(:func:`worker_queues`); ``migrator worker`` serves the general queue and
every registered pair's.

Redis only ever holds the next step. The migration record in ZooKeeper says
which phase a migration is in, and :func:`enqueue_current_step` re-enqueues
that phase's entry job from it (for a ``done`` migration whose rollback was
asked for and has not given up, the rollback's chain) (after a lost Redis, or a worker killed with
its job marked started forever). Enqueuing the same step twice is harmless:
duplicate copy jobs lose a compare-and-set and stop, and a second chain of
catch-up passes steps aside on its first checkpoint conflict.
"""

from __future__ import annotations

import datetime as dt
import math
import time
import uuid
from typing import Any

from redis import Redis
from rq import Callback, Queue, Repeat
from rq.job import Job

from migrator.engine.migration import MigrationStore, Phase, Spec
from migrator.errors import MigratorError
from migrator.fleet import config as config_mod
from migrator.fleet import redis_client
from migrator.fleet import zk as zk_mod
from migrator.fleet.config import Config
from migrator.fleet.model import Host

#: the general RQ queue: rebalance advances, playbook runs not (yet) tied to a migration
QUEUE = "migrator"
#: a pair's RQ queue is this prefix plus the pair's name (see the module doc)
PAIR_QUEUE_PREFIX = "migrator.pair."
#: how long one copy job copies a table before it re-enqueues itself
SLICE_S = 60.0
TABLE_TIMEOUT_S = 1800

# the entry points in jobs/, by the dotted path RQ stores
COPY_START_JOB = "jobs.copy.start"
COPY_GROUP_JOB = "jobs.copy.group_job"
CATCH_UP_JOB = "jobs.catch_up.run_passes"
FINISH_JOB = "jobs.pipeline.finish"
CLEANUP_JOB = "jobs.cutover.cleanup"
ROLLBACK_JOB = "jobs.rollback.run"
PLAYBOOK_JOB = "jobs.playbook.advance"
MAINTENANCE_JOB = "jobs.maintenance.run"
REBALANCE_JOB = "jobs.rebalance.advance"

#: the RQ queue of the queue service's partition maintenance
MAINTENANCE_QUEUE = "maintenance"
#: called by RQ when a migration step fails: the failure lands in the record (``status`` shows it)
FAILURE_CALLBACK = "jobs.failure.record"
#: what the failure callback could not record while ZooKeeper did not answer, tried again on the step's queue
RECORD_LATER_JOB = "jobs.failure.later"


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
    "rollback": "fix what the reason names (a reverse tail that does not keep up: lower the write load on the "
                "moved shards; a freeze over the budget: `migrator set ID --freeze-budget-ms N`), then "
                "`migrator rollback ID` again (the reverse tail resumes from its checkpoint); the new pair "
                "keeps serving meanwhile",
}
NOT_CONVERGING_NEXT = ("reduce the write load on the moving shards (or move fewer shards at once), then "
                       "`migrator resume ID`")


def next_step(step: str, exc: BaseException | None, migration_id: str) -> str:
    """What to do next after ``step`` failed with ``exc`` (the migration id filled in)."""
    if type(exc).__name__ == "NotConverging":
        text = NOT_CONVERGING_NEXT
    else:
        text = NEXT_STEPS.get(step, "fix what the reason names, then `migrator resume ID`")
    return text.replace("ID", migration_id)


class UnknownPair(MigratorError):
    component = "worker"
    exit_code = 2


# -- queue names -----------------------------------------------------------------------------------

def pair_name(host: str, partner: str) -> str:
    """A pair's name: its member that sorts first."""
    return min(host, partner)


def pair_queue(pair: str) -> str:
    return PAIR_QUEUE_PREFIX + pair


def migration_queue(spec: Spec) -> str:
    """The queue every job of this migration goes to: its source pair's."""
    return pair_queue(pair_name(spec.source_master, spec.source_passive))


def queue_of(config: Config, migration_id: str) -> str:
    """:func:`migration_queue` of a stored migration."""
    with zk_mod.connect(config, config_mod.load_credentials(config)) as zk:
        return migration_queue(MigrationStore(zk).spec(migration_id))


def worker_queues(hosts: dict[str, Host], pairs: list[str] | None) -> list[str]:
    """The queues a worker serves: those of ``pairs`` (either member's name names the pair), or
    with no pairs the general queue and every registered pair's."""
    names = sorted({pair_name(h.name, h.partner) for h in hosts.values()})
    if not pairs:
        return [QUEUE] + [pair_queue(n) for n in names]
    out = []
    for given in pairs:
        host = hosts.get(given)
        if host is None:
            raise UnknownPair(f"no pair has a host named {given!r}: the registered pairs are "
                              f"{', '.join(names) or 'none'} (see `migrator topology show`)")
        q = pair_queue(pair_name(host.name, host.partner))
        if q not in out:
            out.append(q)
    return out


def job_id(*parts: str) -> str:
    """An RQ-safe id: letters, digits, '_' and '-' only, plus a short nonce."""
    return _safe("-".join([*parts, uuid.uuid4().hex[:6]]))


def _safe(raw: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "_-" else "_" for ch in raw)


def waiting_job(redis: Redis, queue: str, *parts: str) -> str | None:
    """A job made by :func:`job_id` with these ``parts`` that is still waiting or running on ``queue`` (queued,
    scheduled or started), if any: a step an earlier call enqueued and no worker has finished."""
    from rq.registry import ScheduledJobRegistry, StartedJobRegistry

    prefix = _safe("-".join(parts)) + "-"
    q = Queue(queue, connection=redis)
    ids = [*q.get_job_ids(), *ScheduledJobRegistry(queue=q).get_job_ids(), *StartedJobRegistry(queue=q).get_job_ids()]
    return next((i for i in ids if i.startswith(prefix) and len(i) == len(prefix) + 6), None)


# -- copy ------------------------------------------------------------------------------------------

def enqueue_start(redis: Redis, migration_id: str, config_path: str | None = None, queue: str = QUEUE,
                  slice_s: float = SLICE_S) -> Job:
    """The copy's first job: preflight, schema, then one table job per table."""
    return Queue(queue, connection=redis).enqueue(
        COPY_START_JOB,
        migration_id,
        config_path=config_path,
        slice_s=slice_s,
        job_id=job_id("copy-start", migration_id),
        description=f"copy: preflight, schema and table jobs of migration {migration_id}",
        job_timeout=900,
        meta={"migration": migration_id, "step": "copy-start"},
        on_failure=on_failure(),
    )


def enqueue_group(redis: Redis, migration_id: str, tables: list[tuple[str, str]], config_path: str | None = None,
                  queue: str = QUEUE, slice_s: float = SLICE_S) -> Job:
    """One slice of a group of tables copied one after another on one set of connections (the
    job re-enqueues itself with the tables left until all are done)."""
    names = [f"{db}.{t}" for db, t in tables]
    first = names[0] if len(names) == 1 else f"{names[0]}-and-{len(names) - 1}"
    return Queue(queue, connection=redis).enqueue(
        COPY_GROUP_JOB, migration_id, names, config_path=config_path, slice_s=slice_s,
        job_id=job_id("copy", migration_id, first), description=f"copy {first} of migration {migration_id}",
        job_timeout=TABLE_TIMEOUT_S + int(slice_s),
        meta={"migration": migration_id, "step": "copy", "table": first, "tables": len(names)}, on_failure=on_failure())


# -- catch-up ----------------------------------------------------------------------------------------

def enqueue_catch_up(redis: Redis, migration_id: str, config_path: str | None = None, queue: str = QUEUE) -> Job:
    """The catch-up passes after the copy (each pass job enqueues the next until converged)."""
    return Queue(queue, connection=redis).enqueue(
        CATCH_UP_JOB, migration_id, config_path=config_path, job_id=job_id("catch_up", migration_id),
        description=f"catch-up passes of migration {migration_id}", job_timeout=24 * 3600,
        meta={"migration": migration_id, "step": "catch-up"}, on_failure=on_failure())


def enqueue_passes(config: Config, migration_id: str, passes: int | None = None, *,
                   queue: str | None = None) -> str:
    """``migrator catchup ID --enqueue``: catch-up passes as RQ jobs (each job runs
    one pass and enqueues the next until converged) on the migration's queue unless
    ``queue`` names another. Returns the job id."""
    conn = redis_client.connect(config)
    job = Queue(queue or queue_of(config, migration_id), connection=conn).enqueue(
        CATCH_UP_JOB, migration_id,
        config_path=str(config.path) if config.path else None, passes=passes,
        job_id=f"catchup-{migration_id}-{uuid.uuid4().hex[:8]}", job_timeout=6 * 3600,
        description=f"catch-up passes of migration {migration_id}",
        meta={"migration": migration_id, "step": "catch-up"}, on_failure=on_failure(),
    )
    return job.id


# -- verify and cutover, cleanup ---------------------------------------------------------------------

def enqueue_finish(redis: Any, migration_id: str, config_path: str | None, *, queue: str = QUEUE, attempt: int = 0,
                   delay: float = 0, since: float | None = None) -> Any:
    """Verify and cut over a converged migration driven by the pipeline (``split --yes``); ``attempt`` and
    ``since`` carry the cutover's retries (``jobs.pipeline.finish``)."""
    q = Queue(queue, connection=redis)
    kwargs = dict(
        config_path=config_path,
        attempt=attempt,
        since=since,
        job_id=job_id("finish", migration_id),
        job_timeout=3600,
        description=f"verify and cut over migration {migration_id}",
        meta={"migration": migration_id, "step": "finish"},
        on_failure=on_failure(),
    )
    if delay:
        return q.enqueue_in(dt.timedelta(seconds=delay), FINISH_JOB, migration_id, **kwargs)
    return q.enqueue(FINISH_JOB, migration_id, **kwargs)


def enqueue_cleanup_at(redis: Redis, migration_id: str, when: float, config_path: str | None = None,
                       queue: str = QUEUE) -> Job:
    """Drop the tombstones at ``when`` (epoch seconds; needs a worker with the scheduler). RQ keeps
    whole seconds and drops the fraction, so the job is scheduled at the next whole second: never
    before the retention ends, when the cleanup would refuse."""
    at = dt.datetime.fromtimestamp(math.ceil(when), tz=dt.UTC)
    return Queue(queue, connection=redis).enqueue_at(
        at,
        CLEANUP_JOB,
        migration_id,
        config_path=config_path,
        job_id=job_id("cleanup", migration_id),
        description=f"drop the tombstones of migration {migration_id}",
        meta={"migration": migration_id, "step": "cleanup"},
        on_failure=on_failure(),
    )


# -- rollback ------------------------------------------------------------------------------------------------

#: job timeout of one rollback slice: its reverse passes (one may take up to an hour) and a fenced flip back
ROLLBACK_TIMEOUT_S = 2 * 3600


def enqueue_rollback(redis: Redis, migration_id: str, config_path: str | None = None, queue: str = QUEUE, *,
                     chain: float | None = None, attempts: int = 0, since_attempt: int = 0,
                     head_at: float | None = None, waits: int = 0) -> Job:
    """One slice of a rollback: reverse passes, then the flip back once one converges (the job
    re-enqueues itself on its own queue with the counters until flipped back or given up).
    ``chain``: the record's ``rollback_requested`` when the chain was started; a slice whose chain
    is no longer the requested one steps aside."""
    return Queue(queue, connection=redis).enqueue(
        ROLLBACK_JOB,
        migration_id,
        config_path=config_path,
        chain=chain,
        attempts=attempts,
        since_attempt=since_attempt,
        head_at=head_at,
        waits=waits,
        job_id=job_id("rollback", migration_id),
        job_timeout=ROLLBACK_TIMEOUT_S,
        description=f"rollback of migration {migration_id}: reverse passes and the flip back",
        meta={"migration": migration_id, "step": "rollback"},
        on_failure=on_failure(),
    )


# -- resume from the record ----------------------------------------------------------------------------

def _enqueue_finish_step(redis: Redis, migration_id: str, config_path: str | None = None, queue: str = QUEUE) -> Job:
    return enqueue_finish(redis, migration_id, config_path, queue=queue)


#: phase -> how to enqueue its entry step (redis, migration_id, config_path, queue) -> Job
STEPS: dict[Phase, Any] = {
    Phase.PLANNED: enqueue_start,
    Phase.PREFLIGHT: enqueue_start,
    Phase.COPYING: enqueue_start,
    Phase.CATCHING_UP: enqueue_catch_up,
    Phase.CONVERGED: _enqueue_finish_step,
}


def enqueue_current_step(redis: Redis, config: Config, migration_id: str, *, queue: str | None = None) -> Job | None:
    """The job now queued for ``migration_id``'s current phase (on the migration's queue unless ``queue``
    names another), or None when the phase has no queued step (terminal, paused, or driven by an
    operator command)."""
    with zk_mod.connect(config, config_mod.load_credentials(config)) as zk:
        store = MigrationStore(zk)
        st, _ = store.state(migration_id)
        queue = queue or migration_queue(store.spec(migration_id))
        if st.phase == Phase.DONE and st.rollback_requested:
            # a rollback chain whose worker died goes on from its checkpoint: a new chain, so that the
            # old one, should it still run, steps aside at its next slice
            chain = time.time()
            store.update(migration_id, lambda s: setattr(s, "rollback_requested", chain) or s)
            return enqueue_rollback(redis, migration_id, str(config.path) if config.path else None, queue, chain=chain)
    config_path = str(config.path) if config.path else None
    if st.paused or st.phase not in STEPS:
        return None
    if st.phase == Phase.CONVERGED and not st.autopilot:
        return None  # an operator (or a playbook) decides when to cut over
    return STEPS[st.phase](redis, migration_id, config_path, queue)



# -- playbooks -------------------------------------------------------------------------------------------

def enqueue_playbook(run_id: str, config_path: str | None, *, connection: Any, playbook_name: str | None = None,
                     migration: str | None = None, step: str | None = None, queue: str = QUEUE) -> Any:
    """Queue the next advance of a playbook run (on its migration's queue once it has one: see
    :func:`playbook_queue`); the description says which playbook, migration and step."""
    what = f"playbook {playbook_name or ''} run {run_id}".replace("  ", " ")
    if migration:
        what += f" (migration {migration})"
    if step:
        what += f": waiting at {step}"
    q = Queue(queue, connection=connection)
    return q.enqueue(PLAYBOOK_JOB, run_id, config_path, job_timeout=-1, description=what,
                     meta={"run": run_id, "playbook": playbook_name, "migration": migration, "step": step})


def playbook_queue(zk: zk_mod.ZK, migration: str | None) -> str:
    """Where a playbook run's advances go: its migration's queue, or the general one while it names
    none (or the migration is not stored yet)."""
    if not migration:
        return QUEUE
    try:
        return migration_queue(MigrationStore(zk).spec(migration))
    except MigratorError:
        return QUEUE


# -- rebalances ----------------------------------------------------------------------------------------

def enqueue_rebalance_advance(redis: Redis, rid: str, jid: str, config_path: str | None, *, delay: float = 0.0,
                              queue: str = QUEUE) -> Job:
    """The next advance of a rebalance, on the general queue (it starts moves on many pairs)."""
    q = Queue(queue, connection=redis)
    kwargs: dict[str, Any] = dict(config_path=config_path, job_id=jid, job_timeout=600,
                                  description=f"advance rebalance {rid}", meta={"rebalance": rid, "step": "rebalance"})
    if delay:
        return q.enqueue_in(dt.timedelta(seconds=delay), REBALANCE_JOB, rid, **kwargs)
    return q.enqueue(REBALANCE_JOB, rid, **kwargs)


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
