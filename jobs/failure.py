"""RQ failure callback of every migration step: the failure lands in the migration record.

RQ runs it in the worker when a step's job raises (``on_failure``, set where
the step is enqueued: :func:`migrator.ops.steps.on_failure`). The record's
``stopped`` field then says which step gave up, why, and what to do next:
``migrator status`` shows it and ``migrator split --yes`` stops following and
exits non-zero at once.

A job whose worker died (kill -9, a lost machine) never raises: RQ finds it
abandoned once its heartbeat has lapsed (the job's registry entry expires, 60 to
90 s after the last heartbeat) and calls this callback with ``AbandonedJobError``
and no message, from the registry cleanup of any live worker. That is not a
verdict on the step, so the step is enqueued again, as it was (same entry point,
arguments and queue), up to :data:`ABANDONED_RETRIES` deaths in a row; the record's
``error`` says which step died, on which worker, and where its cutover attempt
was (the settler's record of that death, :mod:`migrator.engine.cutover.reconcile`).
The settler has settled that attempt long before (it acts seconds after the
holder's lease ends), and a new cutover attempt settles whatever is left before
it prepares (under the same settle lock), so the retry starts from a settled
migration. A migration already ended (aborted, cleaned) is left as it is. Only
after the last retry does the step stop, with that reason.

A step that failed because ZooKeeper went away under it (its connection lost, its
session expired, no connection within the connect timeout: :func:`migrator.fleet.zk.went_away`)
is not a verdict on the step either, and ZooKeeper may still be away: without
asking it, the step is scheduled again as it was, a few seconds later and then less
and less often (:data:`AWAY_RETRY_FIRST_S` doubling up to :data:`AWAY_RETRY_MAX_S`, on
the worker's scheduler), for as long as :data:`AWAY_RETRY_FOR_S`; after that it
stops with that reason. Every step is safe to run again (:mod:`migrator.ops.steps`).
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from typing import Any

from migrator.engine.cutover.lease import read_record, where_it_was
from migrator.engine.migration import MigrationStore, Node
from migrator.engine.records import AttemptsNode, CutoverHolder
from migrator.errors import ExitCode
from migrator.fleet import config as config_mod
from migrator.fleet import zk as zk_mod
from migrator.ops.steps import job_id, next_step, on_failure

log = logging.getLogger(__name__)

#: how many times in a row a step whose worker died is enqueued again before it stops
ABANDONED_RETRIES = 3
#: the Redis key that makes one worker (of several cleaning the registry at once) retry a dead job
CLAIM_KEY = "migrator:abandoned:{}"
#: a step that failed because ZooKeeper went away runs again this much later, then twice as late each time ...
AWAY_RETRY_FIRST_S = 2.0
#: ... at most this much later ...
AWAY_RETRY_MAX_S = 60.0
#: ... for this long since it first failed so; then it stops
AWAY_RETRY_FOR_S = 3600.0


def stop_exit_code(exc: BaseException | None) -> int:
    """The exit code of a command that follows the pipeline and sees it stop: the error's own where a
    script would act on it differently (not converging, unreachable, config), else REFUSED."""
    code = getattr(exc, "exit_code", None)
    kept = (ExitCode.NOT_CONVERGING, ExitCode.UNREACHABLE, ExitCode.CONFIG)
    return int(code) if code in kept else int(ExitCode.REFUSED)


def abandoned(exc_type: Any) -> bool:
    """RQ's verdict on a job whose worker died (by name: RQ's exception class carries no message)."""
    return getattr(exc_type, "__name__", "") == "AbandonedJobError"


def record(job: Any, connection: Any, type: Any, value: BaseException | None, traceback: Any) -> None:  # noqa: A002
    migration_id = (job.meta or {}).get("migration")
    step = (job.meta or {}).get("step") or "step"
    if not migration_id:
        return
    if zk_mod.went_away(value) and _again_when_back(job, connection, migration_id, step):
        return
    try:
        cfg = config_mod.load((job.kwargs or {}).get("config_path"))
        with zk_mod.connect(cfg, config_mod.load_credentials(cfg)) as zk:
            store = MigrationStore(zk)
            if abandoned(type):
                _abandoned(job, connection, store, migration_id, step)
                return
            reason = getattr(value, "message", None) or f"{getattr(type, '__name__', 'error')}: {value}"
            store.record_stop(migration_id, step, str(reason), next_step(step, value, migration_id),
                              exit_code=stop_exit_code(value))
    except Exception as exc:  # noqa: BLE001 - the job's own failure is what RQ reports
        log.warning("could not record the failure of %s in migration %s: %s", step, migration_id, exc)


def _abandoned(job: Any, connection: Any, store: MigrationStore, migration_id: str, step: str) -> None:
    """The worker running ``job`` died: enqueue the step again (or, after :data:`ABANDONED_RETRIES`, stop it),
    with the reason in the record."""
    if not connection.set(CLAIM_KEY.format(job.id), "1", nx=True, ex=24 * 3600):
        return  # another worker's registry cleanup has it
    st, _ = store.state(migration_id)
    reason = died_reason(store, job, migration_id, step)
    if st.phase.terminal:
        log.info("%s; migration %s is %s: not retried", reason, migration_id, st.phase.value)
        return
    deaths = int((job.meta or {}).get("abandoned", 0)) + 1
    if deaths > ABANDONED_RETRIES:
        store.record_stop(migration_id, step, f"{reason}; {deaths} times in a row, so it is not retried again",
                          next_step(step, None, migration_id), exit_code=int(ExitCode.REFUSED))
        return
    again = _enqueue_again(job, connection, migration_id, step, {**(job.meta or {}), "abandoned": deaths})
    text = f"{reason}; enqueued again as {again.id} ({deaths} of {ABANDONED_RETRIES})"
    log.warning("%s", text)

    def note(s: Any) -> Any:
        s.error = text[:2000]
        return s

    store.update(migration_id, note)


def _enqueue_again(job: Any, connection: Any, migration_id: str, step: str, meta: dict[str, Any], *,
                   delay: float = 0.0) -> Any:
    """The step of ``job`` enqueued again as it was (same entry point, arguments and queue), ``delay`` seconds
    from now (on the worker's scheduler)."""
    from rq import Queue

    queue = Queue(job.origin, connection=connection)
    again = queue.create_job(job.func_name, args=job.args, kwargs=job.kwargs, timeout=job.timeout,
                             description=job.description, job_id=job_id(step, migration_id), meta=meta,
                             on_failure=on_failure())
    if delay <= 0:
        return queue.enqueue_job(again)
    return queue.schedule_job(again, dt.datetime.now(dt.UTC) + dt.timedelta(seconds=delay))


def _again_when_back(job: Any, connection: Any, migration_id: str, step: str) -> bool:
    """ZooKeeper went away under the step: schedule it again without asking ZooKeeper (see the module doc);
    False once it has been failing so for :data:`AWAY_RETRY_FOR_S` (the step then stops)."""
    meta = dict(job.meta or {})
    tries = int(meta.get("zookeeper_away", 0))
    since = float(meta.get("zookeeper_away_since") or time.time())
    if time.time() - since > AWAY_RETRY_FOR_S:
        return False
    delay = min(AWAY_RETRY_FIRST_S * 2 ** tries, AWAY_RETRY_MAX_S)
    again = _enqueue_again(job, connection, migration_id, step,
                           {**meta, "zookeeper_away": tries + 1, "zookeeper_away_since": since}, delay=delay)
    log.warning("ZooKeeper went away under %s of migration %s: scheduled again in %.0fs as %s", step,
                migration_id, delay, again.id)
    return True


def died_reason(store: MigrationStore, job: Any, migration_id: str, step: str) -> str:
    """Which step died, on which worker, and where its cutover attempt was (if it had one): the holder's
    record while it waits for a settler, else the settler's record of the death."""
    text = (f"the worker running {step} ({job.id}{' on ' + job.worker_name if job.worker_name else ''}) died "
            "before it ended (killed, or its machine lost)")
    rec = read_record(store.zk, migration_id)
    if CutoverHolder.parse(rec).holder:
        return f"{text}; its cutover attempt was {where_it_was(rec)}, not settled yet"
    since = job.started_at.timestamp() if job.started_at else time.time() - 24 * 3600
    for key in (Node.CUTOVER_ATTEMPTS, Node.ROLLBACK_PASSES):
        attempts = AttemptsNode.parse(store.get_progress(migration_id, key)[0]).attempts
        deaths = [a for a in attempts if a.died_at and a.at >= since]
        if deaths:
            return f"{text}; its {'rollback' if key == Node.ROLLBACK_PASSES else 'cutover'} attempt: " \
                   f"{deaths[-1].outcome}"
    return text
