"""Prometheus metrics of the queue service (prometheus-client, default registry).

Every queue process (API server, broker) exposes them, and they are of two kinds:

- counted by the process itself (enqueues, dequeues, acks, lease expiries it reaped, the jobs its
  broker buffers): each process counts only its own, so a query adds the processes up
  (``sum by (queue) (rate(queue_enqueued_jobs_total[1m]))``). A call counts what it committed, also
  when it then fails in another partition; a retried call does not count again what it finds done
  (``queue_deduplicated_jobs``, ``queue_repeated_acks``);
- read from the tables when ``/metrics`` is scraped (:data:`READ_AT_SCRAPE`: job depth per state,
  per queue and per partition, :func:`refresh_depth`): every process reads the same rows, so a query
  takes one copy (``max by (queue, state) (queue_depth)``), never their sum.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import Counter, Gauge

if TYPE_CHECKING:
    from migrator.queue.service import QueueService

ENQUEUED = Counter("queue_enqueued_jobs", "Jobs enqueued (new jobs committed; not the deduplicated)", ["queue"])
DEDUPLICATED = Counter("queue_deduplicated_jobs",
                       "Enqueued jobs answered with an existing job (its dedupe key, or a retried call's "
                       "idempotency key)", ["queue"])
DEQUEUED = Counter("queue_dequeued_jobs", "Jobs handed out by dequeue", ["queue"])
ACKED = Counter("queue_acked_jobs", "Jobs acknowledged with a valid claim (committed)", ["queue", "result"])
REPEATED_ACKS = Counter("queue_repeated_acks", "Acks answered ALREADY_ACKED (a retried ack: counted once, in "
                                               "queue_acked_jobs)", ["queue"])
STALE_ACKS = Counter("queue_stale_acks", "Acks refused as STALE_CLAIM or NOT_FOUND", ["queue"])
EMPTY_DEQUEUES = Counter("queue_empty_dequeues", "Dequeue calls that returned no job", ["queue"])
LEASE_EXPIRED = Counter("queue_lease_expirations", "Claimed jobs whose lease expired (reaped)", ["queue"])
DEPTH = Gauge("queue_depth", "Jobs per state (read from the jobs tables at scrape time)", ["queue", "state"])
PARTITION_DEPTH = Gauge("queue_partition_depth", "Jobs per state in each partition (read at scrape time)",
                        ["queue", "partition", "state"])
BROKER_BUFFERED = Gauge("queue_broker_buffered_jobs", "Jobs claimed into a broker's buffer", ["queue", "partition"])

#: the families every queue process reads from the same tables at scrape time (one copy counts, not their sum)
READ_AT_SCRAPE = (DEPTH, PARTITION_DEPTH)


def refresh_depth(service: QueueService) -> None:
    for rec in service.list_queues():
        try:
            per_partition = service.partition_counts(rec.name)
        except Exception:  # a moving shard must not break the scrape
            continue
        total: dict[str, int] = {}
        for index, counts in per_partition.items():
            for state, n in counts.items():
                PARTITION_DEPTH.labels(rec.name, str(index), state).set(n)
                total[state] = total.get(state, 0) + n
        for state, n in total.items():
            DEPTH.labels(rec.name, state).set(n)
