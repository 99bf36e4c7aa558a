"""QueueService: the queue API as plain Python methods.

The HTTP server (:mod:`migrator.queue.api`), the load generator, brokers and
tests all call these same methods. One instance per process: it owns a
ZooKeeper client (unless given one), a :class:`ShardRouter` watching the shard
map, a pooled :class:`ShardExecutor`, the queue catalog cache and the
per-queue rate limiters.

Dequeue goes to the partition's broker when brokers run (see
:mod:`migrator.queue.broker`); otherwise it claims from the jobs table itself.
Expired leases are reaped lazily by dequeue (at most once a second per
partition) and by :meth:`reap` (brokers and ``serve`` call it periodically).

The dequeue rate limit (``max_jobs_per_second``) is a token bucket in this
process: with several API servers, each enforces the full rate.

Partition choice on enqueue: a dedupe key hashes to a fixed partition (so the
side table sees every copy of the key), and so does a call's idempotency key
for the call's other jobs; other batches go round-robin, skipping partitions
whose shard is frozen for a cutover when another one is free.

A call whose jobs fall in several partitions (an enqueue with dedupe keys, an
ack, a lease extension, a checkpoint) writes each partition in its own
transaction, as it always did, but the partitions side by side
(:meth:`QueueService._per_partition`): the call takes as long as its slowest
partition, not their sum, so a partition frozen for a cutover holds the call
only until its flip, not its flip plus every other partition's statement. The
call answers once every partition's statement has ended (a client's retry never
races its own call).

Such a call is all or nothing to its caller, or says exactly what it did: when
one partition fails (frozen past the wait, its master down) after others
committed, the error carries per item what was done (``QueueError.results``:
an enqueue's result or an ack's answer, ``None`` where nothing was), the
metrics count what was committed and waiting dequeues are woken for it. A retry
of the whole call repeats nothing when every job it stored has a dedupe key or
the call carried an ``idempotency_key`` (its jobs without a dedupe key are
remembered in the dedupe side table under :func:`~migrator.queue.model.call_dedupe_key`,
all in the partition the key hashes to), and for acks (a retried ack answers
``ALREADY_ACKED``); otherwise the error is :class:`PartiallyApplied` (not
retryable): retry only the items without a result.

Lookups, counts, scans and the bulk state changes (retry-failed, cancel,
delete) are in :mod:`migrator.queue.admin`.
"""

from __future__ import annotations

import hashlib
import itertools
import random
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as wait_all
from typing import Any, Protocol, TypeVar

from migrator.errors import MigratorError
from migrator.fleet import zk as zk_mod
from migrator.fleet.config import Config, Credentials, load_credentials
from migrator.fleet.ids import shard_db
from migrator.fleet.router import ShardRouter
from migrator.fleet.zk import ZK
from migrator.queue import metrics, schema
from migrator.queue import storage as st
from migrator.queue.admin import QueueAdmin
from migrator.queue.catalog import QueueCatalog
from migrator.queue.errors import (
    InvalidArgument,
    PartiallyApplied,
    QueueError,
    QueuePaused,
    RateLimited,
    ShardUnavailable,
)
from migrator.queue.executor import ShardExecutor
from migrator.queue.model import (
    ACKED,
    MAX_BATCH,
    MAX_IDEMPOTENCY_KEY,
    AckItem,
    CheckpointItem,
    EnqueueJob,
    EnqueueResult,
    JobDescriptor,
    PartitionRecord,
    QueueConfig,
    QueueConfigUpdate,
    QueueRecord,
    call_dedupe_key,
    check_queue_name,
    job_id,
    partition_of_key,
    split_job_id,
)
from migrator.queue.pacing import TokenBucket, backoff_seconds
from migrator.queue.partitioning import jobs_policy

REAP_EVERY = 1.0
#: threads writing the partitions of calls side by side, per service (made as needed); a partition
#: frozen for a cutover holds one until its flip, so there are more than the HTTP server's 40
PARTITION_THREADS = 64

W = TypeVar("W")
R = TypeVar("R")


def policy_for(config: QueueConfig):  # -> TablePolicy
    r = config.retention
    return jobs_policy(r.new, r.ipr, r.ok, r.fail)


class DequeueSource(Protocol):
    """Where dequeues of a partition are served from (a broker), if not the table."""

    def dequeue(self, record: QueueRecord, part: PartitionRecord, limit: int,
                lease_s: float) -> list[JobDescriptor] | None: ...


class QueueService(QueueAdmin):
    """The queue API; the operator reads and bulk changes come from :class:`~migrator.queue.admin.QueueAdmin`."""

    def __init__(self, config: Config, credentials: Credentials | None = None, *, zk: ZK | None = None,
                 router: ShardRouter | None = None, frozen_wait: float = 10.0, catalog_ttl: float = 1.0):
        self.config = config
        self.credentials = credentials or load_credentials(config)
        self._own_zk = zk is None
        self.zk = zk or zk_mod.connect(config, self.credentials)
        self.router = router or ShardRouter(self.zk, self.credentials).start()
        self.executor = ShardExecutor(self.router, self.credentials, frozen_wait=frozen_wait)
        self.catalog = QueueCatalog(self.zk, ttl=catalog_ttl)
        self._limiters: dict[str, TokenBucket] = {}
        self._rr = itertools.count(random.randrange(1 << 16))
        self._last_reap: dict[tuple[str, int], float] = {}
        self._lock = threading.Lock()
        self._enqueued = threading.Condition()
        self.dequeue_source: DequeueSource | None = None
        self._partition_threads = ThreadPoolExecutor(PARTITION_THREADS, thread_name_prefix="queue-partition")

    def close(self) -> None:
        self._partition_threads.shutdown(wait=True)
        self.executor.close()
        if self._own_zk:
            self.zk.close()

    def __enter__(self) -> QueueService:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- queues ---------------------------------------------------------------------
    def create_queue(self, name: str, config: QueueConfig | None = None) -> QueueRecord:
        check_queue_name(name)
        config = config or QueueConfig()
        if self.catalog.exists(name):
            from migrator.queue.errors import QueueExists

            raise QueueExists(f"queue {name} already exists; pick another name or delete it first")
        shards = self._place(name, config.partitions)
        parts = []
        for i, shard in enumerate(shards):
            table = schema.jobs_table_name(name, i)
            from migrator.fleet.mysql import ident

            ident(table)  # the name must make a valid identifier (64 chars)
            parts.append(PartitionRecord(index=i, shard=shard, table=table,
                                         tables=[table, schema.dedupe_table_name(table)]))
        policy = policy_for(config)
        for p in parts:
            self.executor.run(p.shard,
                              lambda c, p=p: schema.create_partition_tables(c, shard_db(p.shard), p.table, policy),
                              what=f"create {p.table}", table=p.table)
        rec = QueueRecord(name=name, config=config, partitions=parts, created_at=time.time())
        return self.catalog.create(rec)

    def _place(self, name: str, n: int) -> list[int]:
        smap = self.router.map
        if n > smap.num_shards:
            raise InvalidArgument(
                f"{n} partitions need {n} distinct shards; the fleet has {smap.num_shards}"
            )
        load = {s: 0 for s in range(smap.num_shards)}
        for rec in self.catalog.all():
            for p in rec.partitions:
                if p.shard in load:
                    load[p.shard] += 1
        salt = int.from_bytes(hashlib.md5(name.encode()).digest()[:4], "big")
        order = sorted(load, key=lambda s: (load[s], (s * 2654435761 + salt) % (1 << 32)))
        return sorted(order[:n])

    def get_queue(self, name: str) -> QueueRecord:
        return self.catalog.get(name, fresh=True)

    def placement(self, name: str) -> list[dict[str, Any]]:
        """Where each partition lives now: the master serving its tables (its own table route in the shard
        map, after a ``move-partition``, else its shard's range)."""
        rec = self.catalog.get(name, fresh=True)
        smap = self.router.refresh()
        return [{"partition": p.index, "shard": p.shard, "tables": list(p.tables or [p.table]),
                 "master": smap.master_of_table(p.shard, p.table),
                 "routed": smap.route_of(p.shard, p.table) is not None} for p in rec.partitions]

    def list_queues(self) -> list[QueueRecord]:
        return self.catalog.all()

    def update_queue(self, name: str, update: QueueConfigUpdate) -> QueueRecord:
        changes = update.model_dump(exclude_none=True)

        def change(rec: QueueRecord) -> QueueRecord:
            cfg = rec.config.model_copy(update=changes)
            return rec.model_copy(update={"config": QueueConfig.model_validate(cfg.model_dump())})

        return self.catalog.update(name, change)

    def pause(self, name: str) -> QueueRecord:
        return self._set_paused(name, True)

    def resume(self, name: str) -> QueueRecord:
        return self._set_paused(name, False)

    def _set_paused(self, name: str, paused: bool) -> QueueRecord:
        return self.catalog.update(
            name, lambda rec: rec.model_copy(update={"config": rec.config.model_copy(update={"paused": paused})})
        )

    def delete_queue(self, name: str) -> None:
        rec = self.catalog.get(name, fresh=True)
        self.catalog.delete(name)
        for p in rec.partitions:
            tables = p.tables or [p.table]
            self.executor.run(p.shard,
                              lambda c, p=p, tables=tables: schema.drop_partition_tables(c, shard_db(p.shard), tables),
                              what=f"drop {p.table}", table=p.table)

    # -- enqueue --------------------------------------------------------------------
    def enqueue(self, queue: str, jobs: list[EnqueueJob], *,
                idempotency_key: str | None = None) -> list[EnqueueResult]:
        """Store ``jobs``; per job its id (an existing job's, deduplicated, when its dedupe key or this call's
        ``idempotency_key`` was seen). The same call sent again with the same ``idempotency_key`` (the same
        jobs in the same order) makes no job twice. A failure after part of the call was stored raises with
        ``results`` (see the module docstring)."""
        if not jobs:
            return []
        if len(jobs) > MAX_BATCH:
            raise InvalidArgument(f"at most {MAX_BATCH} jobs per enqueue, got {len(jobs)}")
        if idempotency_key is not None and not 1 <= len(idempotency_key) <= MAX_IDEMPOTENCY_KEY:
            raise InvalidArgument(f"idempotency_key must be 1..{MAX_IDEMPOTENCY_KEY} characters")
        rec = self.catalog.get(queue)
        n = len(rec.partitions)
        groups: dict[int, list[int]] = {}
        # an idempotency key pins the call's other jobs to one partition, frozen or not: a retry must find them
        rest = partition_of_key(idempotency_key, n) if idempotency_key is not None else self._pick_partition(rec)
        for i, j in enumerate(jobs):
            idx = partition_of_key(j.dedupe_key, n) if j.dedupe_key is not None else rest
            groups.setdefault(idx, []).append(i)
        now = time.time()

        def new_job(i: int) -> st.NewJob:
            call_key = None
            if idempotency_key is not None and jobs[i].dedupe_key is None:
                call_key = call_dedupe_key(idempotency_key, i)
            return self._new_job(rec, jobs[i], now, call_key)

        work = {idx: [new_job(i) for i in members] for idx, members in groups.items()}
        inserted, error = self._per_partition(
            rec, work, lambda c, part, new: st.insert_jobs(c, shard_db(part.shard), part.table, new), "enqueue into")
        out: list[EnqueueResult | None] = [None] * len(jobs)
        for idx, done in inserted.items():
            shard = rec.partition(idx).shard
            for i, (local, dup) in zip(groups[idx], done):
                out[i] = EnqueueResult(id=job_id(shard, local), partition=idx, deduplicated=dup)
        made = [r for r in out if r is not None and not r.deduplicated]
        metrics.ENQUEUED.labels(queue).inc(len(made))
        metrics.DEDUPLICATED.labels(queue).inc(sum(1 for r in out if r is not None and r.deduplicated))
        if made:
            with self._enqueued:
                self._enqueued.notify_all()
        if error is not None:
            raise _enqueue_error(error, out, jobs, idempotency_key)
        return out  # type: ignore[return-value]

    def _pick_partition(self, rec: QueueRecord) -> int:
        n = len(rec.partitions)
        if n == 1:
            return 0
        start = next(self._rr) % n
        for k in range(n):  # prefer a partition whose shard is not frozen for a cutover
            idx = (start + k) % n
            if not self.router.is_frozen(rec.partition(idx).shard, rec.partition(idx).table):
                return idx
        return start

    @staticmethod
    def _new_job(rec: QueueRecord, j: EnqueueJob, now: float, call_key: str | None = None) -> st.NewJob:
        run_after = None
        delay_us = 0
        if j.run_after is not None:
            run_after = schema.from_epoch(j.run_after)
        elif j.delay_seconds:
            delay_us = int(j.delay_seconds * 1e6)
        return st.NewJob(body=j.body, priority=j.priority, attempts=j.attempts or rec.config.default_attempts,
                         custom_status=j.custom_status, run_after=run_after, delay_us=delay_us,
                         dedupe_key=j.dedupe_key, call_key=call_key)

    # -- dequeue --------------------------------------------------------------------
    def dequeue(self, queue: str, limit: int = 1, lease_seconds: float | None = None,
                wait_seconds: float = 0.0, partitions: Iterable[int] | None = None) -> list[JobDescriptor]:
        if not 1 <= limit <= MAX_BATCH:
            raise InvalidArgument(f"limit must be 1..{MAX_BATCH}, got {limit}")
        if wait_seconds < 0 or wait_seconds > 60:
            raise InvalidArgument("wait_seconds must be 0..60")
        deadline = time.monotonic() + wait_seconds
        while True:
            got = self._dequeue_once(queue, limit, lease_seconds, partitions)
            if got or time.monotonic() >= deadline:
                if not got:
                    metrics.EMPTY_DEQUEUES.labels(queue).inc()
                return got
            with self._enqueued:
                self._enqueued.wait(min(0.2, max(0.0, deadline - time.monotonic())))

    def _dequeue_once(self, queue: str, limit: int, lease_seconds: float | None,
                      partitions: Iterable[int] | None) -> list[JobDescriptor]:
        rec = self.catalog.get(queue)
        if rec.config.paused:
            raise QueuePaused(f"queue {queue} is paused; `migrator queue resume {queue}` to continue")
        lease = lease_seconds if lease_seconds is not None else rec.config.lease_seconds
        if lease <= 0 or lease > 86400:
            raise InvalidArgument("lease_seconds must be in (0, 86400]")
        bucket = self._limiter(rec)
        allowed = bucket.take(limit)
        if allowed == 0:
            raise RateLimited(
                f"queue {queue} allows {rec.config.max_jobs_per_second:g} dequeues/s; slow down and retry"
            )
        parts = [rec.partition(i) for i in partitions] if partitions is not None else list(rec.partitions)
        if len(parts) > 1:
            k = next(self._rr) % len(parts)
            parts = parts[k:] + parts[:k]
            # a partition whose shard is frozen for a cutover would make the claim wait; serve from the others
            free = [p for p in parts if not self.router.is_frozen(p.shard, p.table)]
            parts = free or parts
        out: list[JobDescriptor] = []
        for part in parts:
            want = allowed - len(out)
            if want <= 0:
                break
            got = None
            if self.dequeue_source is not None:
                got = self.dequeue_source.dequeue(rec, part, want, lease)
            if got is None:
                got = self.claim_from_table(rec, part, want, lease)
            out.extend(got)
        bucket.give_back(allowed - len(out))
        if out:
            metrics.DEQUEUED.labels(queue).inc(len(out))
        return out

    def claim_from_table(self, rec: QueueRecord, part: PartitionRecord, limit: int,
                         lease_seconds: float) -> list[JobDescriptor]:
        """Claim straight from the jobs table (no broker), reaping expired leases first."""
        key = (rec.name, part.index)
        now = time.monotonic()
        if now - self._last_reap.get(key, 0.0) >= REAP_EVERY:
            self._last_reap[key] = now
            self.reap_partition(rec, part)
        rows = self._run(
            rec, part,
            lambda c: st.claim_jobs(c, shard_db(part.shard), part.table, limit, int(lease_seconds * 1e6),
                                    fifo=rec.config.fifo),
            what=f"dequeue from {part.table}",
        )
        return [self.descriptor(rec, part, r) for r in rows]

    @staticmethod
    def descriptor(rec: QueueRecord, part: PartitionRecord, r: st.ClaimedRow) -> JobDescriptor:
        return JobDescriptor(
            queue=rec.name, id=job_id(part.shard, r.local_id), partition=part.index, body=r.body,
            priority=r.priority, claim=r.claim.encode(), attempt=r.claim.attempt,
            attempts_allowed=r.attempts_allowed, attempts_left=r.attempts_left, custom_status=r.custom_status,
            lease_until=schema.to_epoch(r.lease_until) or 0.0, created_at=schema.to_epoch(r.created_at) or 0.0,
        )

    def _run(self, rec: QueueRecord, part: PartitionRecord, fn: Callable[[Any], Any], **kw: Any) -> Any:
        """Run on the master serving a partition's jobs table (its route, else its shard's range); a "table
        moved" error first checks the queue still exists."""
        return self.executor.run(part.shard, fn, guard=lambda: self.catalog.get(rec.name, fresh=True),
                                 table=part.table, **kw)

    def _per_partition(self, rec: QueueRecord, work: dict[int, W], fn: Callable[[Any, PartitionRecord, W], R],
                       what: str) -> tuple[dict[int, R], BaseException | None]:
        """``fn(conn, partition, its work)`` for each partition index of ``work``, each in its own call of
        :meth:`_run` (its own transaction, following moves), the partitions side by side. Returns the result
        of every partition that committed and the first error of the others (in ``work``'s order), or
        ``None``; every partition's call has ended when this returns. The caller answers for both."""

        def one(idx: int) -> R:
            part = rec.partition(idx)
            return self._run(rec, part, lambda c: fn(c, part, work[idx]), what=f"{what} {part.table}")

        if not work:
            return {}, None
        first, *rest = work
        futures = {idx: self._partition_threads.submit(one, idx) for idx in rest}
        done: dict[int, R] = {}
        error: BaseException | None = None
        try:
            done[first] = one(first)
        except Exception as exc:  # noqa: BLE001 - answered with what the other partitions did
            error = exc
        finally:
            wait_all(futures.values())
        for idx, f in futures.items():
            if (exc := f.exception()) is None:
                done[idx] = f.result()
            elif error is None:
                error = exc
        return done, error

    def _limiter(self, rec: QueueRecord) -> TokenBucket:
        with self._lock:
            b = self._limiters.get(rec.name)
            if b is None:
                b = self._limiters[rec.name] = TokenBucket(rec.config.max_jobs_per_second)
            else:
                b.configure(rec.config.max_jobs_per_second)
            return b

    # -- acks and other fenced updates -------------------------------------------------
    def _by_partition(self, rec: QueueRecord, ids: list[int]) -> dict[int, list[int]]:
        """Group item positions by partition index (a job id's shard names its partition)."""
        groups: dict[int, list[int]] = {}
        for pos, value in enumerate(ids):
            shard, _local = split_job_id(value)
            parts = rec.partitions_for_shard(shard)
            if not parts:
                raise InvalidArgument(f"job {value} (shard {shard}) does not belong to queue {rec.name}")
            groups.setdefault(parts[0].index, []).append(pos)
        return groups

    def ack(self, queue: str, items: list[AckItem]) -> list[str]:
        """Finish claimed jobs; per job an :data:`~migrator.queue.model.AckResult` (``OK``, ``ALREADY_ACKED``,
        ``STALE_CLAIM``, ``NOT_FOUND``). A failure after part of the call was committed raises with
        ``results`` (``None`` for the items of the partitions that failed); a retry answers them all."""
        if len(items) > MAX_BATCH:
            raise InvalidArgument(f"at most {MAX_BATCH} acks per call")
        rec = self.catalog.get(queue)
        groups = self._by_partition(rec, [it.id for it in items])

        def finish_of(it: AckItem) -> st.Finish:
            claim = st.Claim.parse(it.claim)
            delay = it.retry_delay_seconds if it.retry_delay_seconds is not None else backoff_seconds(claim.attempt)
            return st.Finish(split_job_id(it.id)[1], claim, it.success, int(delay * 1e6), it.custom_status)

        work = {idx: [finish_of(items[pos]) for pos in positions] for idx, positions in groups.items()}
        done, error = self._per_partition(
            rec, work, lambda c, part, fin: st.finish_jobs(c, shard_db(part.shard), part.table, fin), "ack in")
        out = _answers(len(items), groups, done)
        metrics.ACKED.labels(queue, "success").inc(sum(1 for it, x in zip(items, out) if x == "OK" and it.success))
        metrics.ACKED.labels(queue, "failure").inc(sum(1 for it, x in zip(items, out) if x == "OK" and not it.success))
        metrics.REPEATED_ACKS.labels(queue).inc(sum(1 for x in out if x == "ALREADY_ACKED"))
        metrics.STALE_ACKS.labels(queue).inc(sum(1 for x in out if x is not None and x not in ACKED))
        if any(x == "OK" and not it.success for it, x in zip(items, out)):
            with self._enqueued:  # a failure ack may have made a job ready again
                self._enqueued.notify_all()
        if error is not None:
            raise _partial_error(error, out, "acks", "a retry of the call answers ALREADY_ACKED for those")
        return out  # type: ignore[return-value]

    def extend_lease(self, queue: str, items: list[tuple[int, str]], lease_seconds: float | None = None) -> list[str]:
        rec = self.catalog.get(queue)
        lease = lease_seconds if lease_seconds is not None else rec.config.lease_seconds
        if lease <= 0 or lease > 86400:
            raise InvalidArgument("lease_seconds must be in (0, 86400]")
        groups = self._by_partition(rec, [i for i, _ in items])
        work = {idx: [(split_job_id(items[p][0])[1], st.Claim.parse(items[p][1])) for p in positions]
                for idx, positions in groups.items()}
        done, error = self._per_partition(
            rec, work, lambda c, part, args: st.extend_leases(c, shard_db(part.shard), part.table, args,
                                                              int(lease * 1e6)), "extend lease in")
        out = _answers(len(items), groups, done)
        if error is not None:
            raise _partial_error(error, out, "lease extensions", "a retry of the call extends them again")
        return out  # type: ignore[return-value]

    def checkpoint(self, queue: str, items: list[CheckpointItem]) -> list[str]:
        rec = self.catalog.get(queue)
        groups = self._by_partition(rec, [it.id for it in items])

        def checkpoint_of(it: CheckpointItem) -> st.Checkpoint:
            return st.Checkpoint(split_job_id(it.id)[1], st.Claim.parse(it.claim), it.body, it.to_pending,
                                 schema.from_epoch(it.run_after) if it.run_after is not None else None,
                                 int((it.delay_seconds or 0) * 1e6), it.attempts, it.custom_status)

        work = {idx: [checkpoint_of(items[pos]) for pos in positions] for idx, positions in groups.items()}
        done, error = self._per_partition(
            rec, work, lambda c, part, cps: st.checkpoint_jobs(c, shard_db(part.shard), part.table, cps),
            "checkpoint in")
        out = _answers(len(items), groups, done)
        if any(x == "OK" for x in out):
            with self._enqueued:
                self._enqueued.notify_all()
        if error is not None:
            raise _partial_error(error, out, "checkpoints", "a retry of the call writes them again (the same values)")
        return out  # type: ignore[return-value]

    # -- reaper ---------------------------------------------------------------------------
    def reap_partition(self, rec: QueueRecord, part: PartitionRecord) -> tuple[int, int]:
        pending, failed = self._run(rec, part, lambda c: st.reap_expired(c, shard_db(part.shard), part.table),
                                            what=f"reap {part.table}")
        if pending or failed:
            metrics.LEASE_EXPIRED.labels(rec.name).inc(pending + failed)
            with self._enqueued:
                self._enqueued.notify_all()
        return pending, failed

    def reap(self, queue: str | None = None,
             owned: Callable[[QueueRecord, PartitionRecord], bool] | None = None) -> dict[str, tuple[int, int]]:
        """Return expired leases to NEW (or FAIL) on every partition (or those ``owned``)."""
        out = {}
        recs = [self.catalog.get(queue, fresh=True)] if queue else self.catalog.all()
        for rec in recs:
            for part in rec.partitions:
                if owned is not None and not owned(rec, part):
                    continue
                out[f"{rec.name}/{part.index}"] = self.reap_partition(rec, part)
        return out


def _answers(n: int, groups: dict[int, list[int]], done: dict[int, list[bool] | list[str]]) -> list[str | None]:
    """Per item of a call, its partition's answer (``True``/``False`` read as "OK"/"STALE_CLAIM"), or ``None``
    for the items of a partition that did not commit."""
    out: list[str | None] = [None] * n
    for idx, positions in groups.items():
        for pos, ans in zip(positions, done.get(idx, ())):
            out[pos] = ans if isinstance(ans, str) else ("OK" if ans else "STALE_CLAIM")
    return out


def _partial_error(error: BaseException, results: list[Any], items: str, retry: str) -> BaseException:
    """The error a call answers with when ``error`` ended some of its partitions: ``error`` itself when nothing
    was done; else a :class:`QueueError` of the same code (a migrator error answers as ``SHARD_UNAVAILABLE``,
    which is how the HTTP API answers those) that says how many items were done and carries ``results``."""
    done = sum(1 for r in results if r is not None)
    if done == 0:
        return error
    cause = error.message if isinstance(error, MigratorError) else f"{type(error).__name__}: {error}"
    message = f"{done} of {len(results)} {items} were done before this failed ({retry}): {cause}"
    if isinstance(error, QueueError):
        exc: QueueError = type(error)(message)
    elif isinstance(error, MigratorError):
        exc = ShardUnavailable(message)
    else:
        exc = QueueError(message)
    exc.results = results
    exc.__cause__ = error
    return exc


def _enqueue_error(error: BaseException, results: list[EnqueueResult | None], jobs: list[EnqueueJob],
                   idempotency_key: str | None) -> BaseException:
    """:func:`_partial_error` for an enqueue: :class:`PartiallyApplied` when a retry of the call as it was sent
    would store a job twice (no idempotency key, and a new job without a dedupe key among the stored)."""
    repeats = idempotency_key is None and any(
        r is not None and not r.deduplicated and j.dedupe_key is None for r, j in zip(results, jobs))
    if not repeats:
        how = "the same call with the same idempotency_key" if idempotency_key is not None else "their dedupe keys"
        return _partial_error(error, results, "jobs", f"a retry of the whole call stores none twice: {how}")
    stored = [i for i, r in enumerate(results) if r is not None]
    which = ", ".join(map(str, stored[:20])) + (", ..." if len(stored) > 20 else "")
    cause = error.message if isinstance(error, MigratorError) else f"{type(error).__name__}: {error}"
    exc = PartiallyApplied(
        f"{len(stored)} of {len(results)} jobs were enqueued before this failed (at positions {which}, from 0), "
        f"and a retry of the whole call would enqueue them again: retry only the jobs without a result "
        f"(error.results), or send an idempotency key with the call (the same on every retry) to make retries "
        f"safe: {cause}")
    exc.results = list(results)
    exc.__cause__ = error
    return exc
