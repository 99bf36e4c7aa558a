"""Queue workers: run a handler on jobs of one queue, with lease heartbeats.

``migrator queue worker --queue Q --handler module:function`` runs
:func:`run_worker`. Each of ``concurrency`` threads dequeues one job at a time
(long-poll), calls ``handler(job)`` and acks: success when it returns (a
returned string becomes the job's custom status), failure when it raises (the
queue's capped exponential backoff decides the retry delay, unless the
exception carries ``retry_delay_seconds``). A heartbeat thread extends the
lease of every running job every third of the lease, so long jobs are not
re-delivered. A job whose heartbeat answers STALE_CLAIM lost its lease (its
ack will say so too).

Graceful shutdown: SIGTERM/SIGINT (or ``stop_event``) stops dequeuing; jobs
already running finish and are acked; then the worker returns.

Works in-process with a :class:`QueueService` or remotely with a
:class:`QueueClient` (same methods).
"""

from __future__ import annotations

import importlib
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from migrator.queue.errors import InvalidArgument, QueueError
from migrator.queue.model import ACKED, AckItem, JobDescriptor

Handler = Callable[[JobDescriptor], Any]


def load_handler(spec: str) -> Handler:
    """Import ``module:function``."""
    mod_name, _, attr = spec.partition(":")
    if not mod_name or not attr:
        raise InvalidArgument(f"handler {spec!r} must look like package.module:function")
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as exc:
        raise InvalidArgument(f"cannot import handler module {mod_name!r}: {exc}") from None
    fn = getattr(mod, attr, None)
    if not callable(fn):
        raise InvalidArgument(f"{mod_name} has no function {attr!r}")
    return fn


@dataclass
class WorkerStats:
    succeeded: int = 0
    failed: int = 0
    stale: int = 0
    heartbeats: int = 0
    errors: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **kw: int) -> None:
        with self.lock:
            for k, v in kw.items():
                setattr(self, k, getattr(self, k) + v)


def run_worker(api: Any, queue: str, handler: Handler, *, concurrency: int = 1, lease_seconds: float | None = None,
               stop_event: threading.Event | None = None, max_jobs: int | None = None,
               install_signals: bool = False, poll_seconds: float = 1.0) -> WorkerStats:
    """Work until stopped (or ``max_jobs`` are done); returns counters."""
    stop = stop_event or threading.Event()
    stats = WorkerStats()
    running: dict[int, JobDescriptor] = {}
    running_lock = threading.Lock()
    rec = api.get_queue(queue)
    lease = lease_seconds if lease_seconds is not None else rec.config.lease_seconds

    if install_signals:
        def _graceful(signum: int, _frame: Any) -> None:
            stop.set()

        signal.signal(signal.SIGTERM, _graceful)
        signal.signal(signal.SIGINT, _graceful)

    finished = threading.Event()  # every work thread has returned

    def heartbeat() -> None:
        while not finished.wait(max(0.05, lease / 3)):
            with running_lock:
                jobs = list(running.values())
            if not jobs:
                continue
            try:
                res = api.extend_lease(queue, [(j.id, j.claim) for j in jobs], lease)
                stats.add(heartbeats=len(jobs))
            except QueueError:
                stats.add(errors=1)
                continue
            for _job, r in zip(jobs, res):
                if r != "OK":
                    stats.add(stale=1)

    def done_enough() -> bool:
        return max_jobs is not None and stats.succeeded + stats.failed >= max_jobs

    def work() -> None:
        while not stop.is_set() and not done_enough():
            try:
                got = api.dequeue(queue, limit=1, lease_seconds=lease, wait_seconds=poll_seconds)
            except QueueError as exc:
                stats.add(errors=1)
                stop.wait(0.5 if exc.retryable else 2.0)
                continue
            for job in got:
                with running_lock:
                    running[job.id] = job
                item: AckItem
                try:
                    out = handler(job)
                    item = AckItem(id=job.id, claim=job.claim, success=True,
                                   custom_status=out if isinstance(out, str) else None)
                except Exception as exc:  # noqa: BLE001 - a failing job is data, not a crash
                    delay = getattr(exc, "retry_delay_seconds", None)
                    item = AckItem(id=job.id, claim=job.claim, success=False, retry_delay_seconds=delay,
                                   custom_status=f"{type(exc).__name__}: {exc}"[:1000])
                finally:
                    with running_lock:
                        running.pop(job.id, None)
                for attempt in range(20):
                    try:
                        [res] = api.ack(queue, [item])
                        break
                    except QueueError as exc:
                        if not exc.retryable:
                            res = "ERROR"
                            break
                        time.sleep(min(2.0, 0.05 * 2 ** attempt))
                else:
                    res = "ERROR"
                if res in ACKED:  # ALREADY_ACKED: a retry after an answer was lost; the first try did it
                    stats.add(**({"succeeded": 1} if item.success else {"failed": 1}))
                elif res in ("STALE_CLAIM", "NOT_FOUND"):
                    stats.add(stale=1)
                else:
                    stats.add(errors=1)
            if done_enough():
                stop.set()

    hb = threading.Thread(target=heartbeat, name="worker-heartbeat", daemon=True)
    hb.start()
    threads = [threading.Thread(target=work, name=f"worker-{i}", daemon=True) for i in range(concurrency)]
    for t in threads:
        t.start()
    try:
        while any(t.is_alive() for t in threads):
            for t in threads:
                t.join(0.2)
    except KeyboardInterrupt:
        stop.set()
        for t in threads:
            t.join()
    stop.set()
    finished.set()
    hb.join(10)
    return stats
