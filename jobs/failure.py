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

The callback's ZooKeeper work (the phase and the attempts it reads, the stop or the note it writes) often
meets the same incident that ended the step: ZooKeeper away. RQ calls the callback once per death, so
what it could not do then is not left undone: it is handed to a job on the step's queue (:func:`later`,
run by any worker with the scheduler, as every ``migrator worker`` is) that tries again after
:data:`LATER_BACKOFF` for as long as :data:`LATER_FOR_S` allows, and then enqueues the step again, or
records its stop, as the callback would have. The claim that makes one of several workers' registry
cleanups handle a death (:data:`CLAIM_KEY`, taken before anything else) stays with that handling, so two
cleanups racing still enqueue the step once; the step is enqueued (Redis) only after the reads, and the
note written after it is bookkeeping, never a reason to enqueue it twice.

A step that failed because ZooKeeper went away under it (its connection lost, its
session expired, no connection within the connect timeout: :func:`migrator.fleet.zk.went_away`)
is not a verdict on the step either, and ZooKeeper may still be away: without
asking it, the step is scheduled again as it was, a few seconds later and then less
and less often (:data:`AWAY_BACKOFF`, on the worker's scheduler), for as long as :data:`AWAY_RETRY_FOR_S`; after that it
stops with that reason. Every step is safe to run again (:mod:`migrator.ops.steps`).
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from typing import Any

from kazoo.handlers.threading import KazooTimeoutError

from migrator.engine.cutover.errors import ZK_LOST
from migrator.engine.cutover.lease import read_record, where_it_was
from migrator.engine.migration import MigrationNotFound, MigrationStore, Node
from migrator.engine.records import AttemptsNode, CutoverHolder
from migrator.errors import ExitCode, ZooKeeperUnavailable
from migrator.fleet import config as config_mod
from migrator.fleet import zk as zk_mod
from migrator.ops.cutover_retry import Backoff
from migrator.ops.steps import RECORD_LATER_JOB, job_id, next_step, on_failure

log = logging.getLogger(__name__)

#: how many times in a row a step whose worker died is enqueued again before it stops
ABANDONED_RETRIES = 3
#: the Redis key that makes one worker (of several cleaning the registry at once) handle a dead job
CLAIM_KEY = "migrator:abandoned:{}"
#: how long that claim lives (s): longer than any handling of the death, :func:`later`'s included
CLAIM_S = 24 * 3600
#: how long the callback waits for ZooKeeper before it hands its work to :func:`later`, and its session's timeout
#: (a variable: tests shorten it)
CONNECT_S = 5.0
#: between :func:`later`'s tries while ZooKeeper does not answer (a test may replace it)
LATER_BACKOFF = Backoff(first_s=5.0, factor=2.0, max_s=60.0)
#: :func:`later` stops trying this long after the failure (s), and says what to run instead
LATER_FOR_S = float(CLAIM_S)
#: what ZooKeeper not answering looks like: the callback's work is tried again later
UNREACHABLE = (ZooKeeperUnavailable, KazooTimeoutError, *ZK_LOST)
#: a step that failed because ZooKeeper went away runs again this much later, then twice as late each time, at
#: most a minute later (a test may replace it) ...
AWAY_BACKOFF = Backoff(first_s=2.0, factor=2.0, max_s=60.0)
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
    if abandoned(type):
        if not connection.set(CLAIM_KEY.format(job.id), "1", nx=True, ex=CLAIM_S):
            return  # another worker's registry cleanup has it
        verdict: dict[str, Any] = {"died": True}
    else:
        reason = getattr(value, "message", None) or f"{getattr(type, '__name__', 'error')}: {value}"
        verdict = {"reason": str(reason), "next": next_step(step, value, migration_id),
                   "exit_code": stop_exit_code(value)}
    _settle(job, connection, verdict, tries=0, since=time.time())


def later(dead_id: str, verdict: dict[str, Any], tries: int, since: float) -> None:
    """The RQ job that does what the failure callback of job ``dead_id`` could not while ZooKeeper did not
    answer (``verdict``: the step died, or its stop's reason, next step and exit code); ``tries``: how many
    times it did not since the failure at ``since``."""
    from rq import get_current_job
    from rq.exceptions import NoSuchJobError
    from rq.job import Job

    connection = get_current_job().connection
    try:
        dead = Job.fetch(dead_id, connection=connection)
    except NoSuchJobError:
        log.error("the failed job %s is gone from Redis: its migration's record may not say it stopped; "
                  "`migrator status` shows the phase and `migrator resume ID` enqueues its step", dead_id)
        return
    _settle(dead, connection, verdict, tries=tries, since=since)


def _settle(job: Any, connection: Any, verdict: dict[str, Any], *, tries: int, since: float) -> None:
    """The failure's ZooKeeper work (:func:`_abandoned`, or the stop); handed to :func:`later` while ZooKeeper
    does not answer."""
    migration_id = job.meta["migration"]
    step = job.meta.get("step") or "step"
    try:
        cfg = config_mod.load((job.kwargs or {}).get("config_path"))
        # a session as short as the wait: a few reads and writes need no more, and a handshake that gets no
        # answer is given up (and its connection closed) after it, not after the configured session timeout
        with zk_mod.connect(cfg, config_mod.load_credentials(cfg), timeout=CONNECT_S,
                            session_timeout=CONNECT_S) as zk:
            store = MigrationStore(zk)
            if verdict.get("died"):
                _abandoned(job, connection, store, migration_id, step)
            else:
                store.record_stop(migration_id, step, verdict["reason"], verdict["next"],
                                  exit_code=verdict["exit_code"])
    except UNREACHABLE as exc:
        try:
            _again(job, connection, verdict, tries, since, exc)
        except Exception as lost:  # noqa: BLE001 - Redis gone too: nothing here can keep it
            log.error("the end of %s of migration %s could not be recorded (ZooKeeper: %s) nor tried again later "
                      "(Redis: %s): `migrator status %s` shows the phase and `migrator resume %s` enqueues its step",
                      step, migration_id, exc, lost, migration_id, migration_id)
    except MigrationNotFound:
        log.info("migration %s is gone: the failure of %s is not recorded", migration_id, step)
    except Exception as exc:  # noqa: BLE001 - the job's own failure is what RQ reports
        log.warning("could not record the failure of %s in migration %s: %s", step, migration_id, exc)


def _again(job: Any, connection: Any, verdict: dict[str, Any], tries: int, since: float, exc: BaseException) -> None:
    """Hand the failure's ZooKeeper work to :func:`later`, after :data:`LATER_BACKOFF`, on the failed step's
    queue; after :data:`LATER_FOR_S`, say what to run instead."""
    from rq import Queue

    migration_id, step = job.meta["migration"], job.meta.get("step") or "step"
    what = "enqueue it again" if verdict.get("died") else "record its stop"
    if time.time() - since > LATER_FOR_S:
        log.error("ZooKeeper has not answered for %.0f s since %s of migration %s ended (%s): not trying to %s "
                  "again; `migrator status %s` shows the phase and `migrator resume %s` enqueues its step",
                  time.time() - since, step, migration_id, exc, what, migration_id, migration_id)
        return
    delay = LATER_BACKOFF.delay(tries)
    Queue(job.origin, connection=connection).enqueue_in(
        dt.timedelta(seconds=delay), RECORD_LATER_JOB, job.id, verdict, tries + 1, since,
        job_id=job_id("failure", migration_id), job_timeout=300,
        description=f"record the end of {step} ({job.id}) of migration {migration_id}",
        # a worker that dies running it is handled as any step's: this job is enqueued again
        meta={"migration": migration_id, "step": step, "failed": job.id, "tries": tries + 1}, on_failure=on_failure())
    log.warning("ZooKeeper did not answer (%s) when %s of migration %s ended: trying to %s again in %g s",
                exc, step, migration_id, what, delay)


def _abandoned(job: Any, connection: Any, store: MigrationStore, migration_id: str, step: str) -> None:
    """The worker running ``job`` died: enqueue the step again (or, after :data:`ABANDONED_RETRIES`, stop it),
    with the reason in the record. Everything it reads comes first: a read that fails has enqueued nothing."""
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

    try:
        store.update(migration_id, note)
    except Exception as exc:  # noqa: BLE001 - the step is enqueued; the note is bookkeeping, never a second enqueue
        log.warning("%s; the note in migration %s's record was not written: %s", text, migration_id, exc)


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
    delay = AWAY_BACKOFF.delay(tries)
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
