"""The load generator: enqueue, dequeue and ack at a target rate, and write a ledger.

This is the live workload that shard-migration tests and ``migrator demo`` run
in a background thread or process while shards move; afterwards
:func:`migrator.queue.ledger.check_ledger` proves nothing acknowledged was lost.

    result = run_load(config, "load", rate=200, duration=30, ledger_path="ledger.db",
                      stop_event=stop)

Producers enqueue batches paced to ``rate`` jobs/s (``rate=0``: as fast as they
can); every job body carries a unique key and the same key is the job's dedupe
key, so an enqueue retried after an ambiguous failure cannot create a second
job. Consumers dequeue, "run" the job (a no-op unless ``handler`` is given),
and ack; every acknowledged enqueue and every execution with its ack answer go
to the ledger. Retryable errors (a frozen or moving shard, rate limit) are
retried with a short pause; others are counted. A call that gives up after it
was partly done still tells the ledger what was: the jobs its error's
``results`` name as stored are acknowledged enqueues, and the acks it names
answered are recorded with their answers. After the run, consumers keep
draining for up to ``drain_seconds``.

Runs in-process against a :class:`QueueService` by default, or against a
running server when ``url`` is given.
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from migrator.fleet.config import Config
from migrator.queue.errors import QueueError, UnknownQueue
from migrator.queue.ledger import Ledger
from migrator.queue.model import ACKED, AckItem, EnqueueJob, JobDescriptor, QueueConfig


@dataclass
class LoadResult:
    queue: str
    ledger_path: str
    duration: float = 0.0
    enqueued: int = 0
    executed: int = 0
    acked_ok: int = 0
    stale_acks: int = 0
    errors: Counter = field(default_factory=Counter)

    def to_text(self) -> str:
        errs = ", ".join(f"{k}={v}" for k, v in sorted(self.errors.items())) or "none"
        return (f"load on {self.queue}: {self.enqueued} enqueued ({self.enqueued / max(self.duration, 1e-9):.0f}/s), "
                f"{self.executed} executed, {self.acked_ok} acked OK, {self.stale_acks} stale acks "
                f"in {self.duration:.1f}s; errors: {errs}; ledger {self.ledger_path}")


class _Run:
    def __init__(self, api: Any, queue: str, ledger: Ledger, result: LoadResult,
                 handler: Callable[[JobDescriptor], None] | None):
        self.api = api
        self.queue = queue
        self.ledger = ledger
        self.result = result
        self.handler = handler
        self.lock = threading.Lock()
        self.stop_producing = threading.Event()
        self.stop_consuming = threading.Event()
        #: acknowledged enqueues not yet seen done, and jobs done before their enqueue's answer was noted
        self.outstanding: set[str] = set()
        self.done_early: set[str] = set()

    def count_error(self, exc: BaseException) -> None:
        code = exc.code if isinstance(exc, QueueError) else type(exc).__name__
        with self.lock:
            self.result.errors[code] += 1

    def produce(self, rate: float, batch: int, deadline: float) -> None:
        start = time.monotonic()
        sent = 0
        while not self.stop_producing.is_set() and time.monotonic() < deadline:
            if rate > 0:
                due = start + sent / rate
                delay = due - time.monotonic()
                if delay > 0:
                    self.stop_producing.wait(min(delay, 0.5))
                    continue
            keys = [uuid.uuid4().hex for _ in range(batch)]
            jobs = [EnqueueJob(body=json.dumps({"k": k}), dedupe_key=k) for k in keys]
            t_call = time.time()
            res, err = self._with_retry(lambda jobs=jobs: self.api.enqueue(self.queue, jobs), until=deadline + 10)
            if res is None:  # given up: what the last try stored is acknowledged all the same
                res = err.results if isinstance(err, QueueError) and err.results else None
                if res is None:
                    continue
            t_ack = time.time()
            stored = [(k, r) for k, r in zip(keys, res) if r is not None]
            self.ledger.enqueued([(k, r.id, t_call, t_ack) for k, r in stored])
            with self.lock:
                self.result.enqueued += len(stored)
                for k, _r in stored:
                    if k in self.done_early:
                        self.done_early.discard(k)
                    else:
                        self.outstanding.add(k)
            sent += len(keys)

    def consume(self, limit: int) -> None:
        while not self.stop_consuming.is_set():
            got, _err = self._with_retry(lambda: self.api.dequeue(self.queue, limit=limit, wait_seconds=0.2),
                                         until=time.monotonic() + 5)
            if not got:
                continue
            t_deq = time.time()
            for d in got:
                if self.handler is not None:
                    self.handler(d)
            items = [AckItem(id=d.id, claim=d.claim) for d in got]
            answers, err = self._with_retry(lambda items=items: self.api.ack(self.queue, items),
                                            until=time.monotonic() + 30)
            if answers is None and isinstance(err, QueueError) and err.results:
                answers = err.results  # given up: the answers of the partitions that did answer
            t_done = time.time()
            rows = []
            for i, d in enumerate(got):
                ans = answers[i] if answers else None
                rows.append((_key(d), d.id, d.claim, d.attempt, t_deq, t_done, ans))
            self.ledger.executed(rows)
            with self.lock:
                self.result.executed += len(got)
                self.result.acked_ok += sum(1 for r in rows if r[6] in ACKED)
                self.result.stale_acks += sum(1 for r in rows if r[6] is not None and r[6] not in ACKED)
                for r in rows:
                    if r[6] in ACKED:
                        if r[0] in self.outstanding:
                            self.outstanding.discard(r[0])
                        else:
                            self.done_early.add(r[0])

    def _with_retry(self, fn: Callable[[], Any], until: float) -> tuple[Any, BaseException | None]:
        """``(fn's answer, None)``, retrying retryable errors until ``until``; or ``(None, the last error)``."""
        while True:
            try:
                return fn(), None
            except QueueError as exc:
                self.count_error(exc)
                if not exc.retryable or time.monotonic() > until:
                    return None, exc
                time.sleep(0.02 + random.random() * 0.1)
            except Exception as exc:  # noqa: BLE001 - a load run reports errors, it does not die of them
                self.count_error(exc)
                if time.monotonic() > until:
                    return None, exc
                time.sleep(0.1)


def _key(d: JobDescriptor) -> str:
    try:
        return str(json.loads(d.body)["k"])
    except (ValueError, KeyError, TypeError):
        return f"id:{d.id}"


def run_load(config: Config, queue: str, rate: float, duration: float, ledger_path: str | Path,
             stop_event: threading.Event | None = None, *, service: Any = None, url: str | None = None,
             token: str | None = None, batch: int | None = None, producers: int = 1, consumers: int = 2,
             dequeue_limit: int = 20, partitions: int = 2, lease_seconds: float = 30.0,
             drain_seconds: float = 5.0, create: bool = True,
             handler: Callable[[JobDescriptor], None] | None = None) -> LoadResult:
    """Run the load for ``duration`` seconds (or until ``stop_event``); see the module docstring."""
    own = None
    if service is not None:
        api = service
    elif url is not None:
        from migrator.queue.client import QueueClient

        api = own = QueueClient(url, token=token)
    else:
        from migrator.queue.service import QueueService

        api = own = QueueService(config)
    result = LoadResult(queue=queue, ledger_path=str(ledger_path))
    ledger: Ledger | None = None
    try:
        try:
            api.get_queue(queue)
        except UnknownQueue:
            if not create:
                raise
            api.create_queue(queue, QueueConfig(partitions=partitions, lease_seconds=lease_seconds))
        ledger = Ledger(ledger_path)  # written only once the queue answered: a refused run leaves no ledger
        if batch is None:
            batch = 20 if rate <= 0 else max(1, min(50, int(rate / 20)))
        run = _Run(api, queue, ledger, result, handler)
        t0 = time.time()
        ledger.set_meta(queue=queue, rate=rate, duration=duration, started=t0)
        deadline = time.monotonic() + duration
        per_producer = rate / producers if rate > 0 else 0
        ps = [threading.Thread(target=run.produce, args=(per_producer, batch, deadline), daemon=True,
                               name=f"load-producer-{i}") for i in range(producers)]
        cs = [threading.Thread(target=run.consume, args=(dequeue_limit,), daemon=True,
                               name=f"load-consumer-{i}") for i in range(consumers)]
        for t in ps + cs:
            t.start()
        while time.monotonic() < deadline and not (stop_event is not None and stop_event.is_set()):
            time.sleep(0.05)
        run.stop_producing.set()
        for t in ps:
            t.join(30)
        ended = time.time()
        drain_until = time.monotonic() + drain_seconds
        while time.monotonic() < drain_until:
            with run.lock:
                if not run.outstanding:
                    break
            time.sleep(0.05)
        run.stop_consuming.set()
        for t in cs:
            t.join(30)
        result.duration = ended - t0
        ledger.set_meta(ended=ended)
    finally:
        if ledger is not None:
            ledger.close()
        if own is not None:
            own.close()
    return result
