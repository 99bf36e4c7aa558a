"""Calls whose items span partitions, one partition frozen past the wait: the call says what it did, a
retry repeats nothing, and the metrics count what was committed (HTTP API and Python client, real fleet)."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient
from prometheus_client import REGISTRY

from migrator.fleet.shard_map import ShardMapStore
from migrator.queue.api import create_app
from migrator.queue.client import QueueClient
from migrator.queue.errors import PartiallyApplied, ShardUnavailable
from migrator.queue.model import AckItem, EnqueueJob, JobFilter, QueueConfig, partition_of_key
from migrator.queue.service import QueueService

TOKEN = "t0ken"


@pytest.fixture
def svc(fleet):
    """A service whose writes give up on a frozen shard after half a second (the wait, then the error)."""
    s = QueueService(fleet.config, fleet.credentials, frozen_wait=0.5)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def client(svc):
    with TestClient(create_app(svc, token=TOKEN)) as tc:
        yield QueueClient("http://testserver", token=TOKEN, http=tc)


def _key_in(partition: int, n: int, prefix: str) -> str:
    return next(f"{prefix}{i}" for i in range(10_000) if partition_of_key(f"{prefix}{i}", n) == partition)


class _Counters:
    """How much each of the queue's counters grew since this was made (the registry is the process's)."""

    def __init__(self, queue: str):
        self.queue = queue
        self.start = {k: self._read(k) for k in self.NAMES}

    NAMES = ("queue_enqueued_jobs_total", "queue_deduplicated_jobs_total", "queue_repeated_acks_total",
             "queue_stale_acks_total", "queue_acked_jobs_total/success", "queue_acked_jobs_total/failure")

    def _read(self, key: str) -> float:
        name, _, result = key.partition("/")
        labels = {"queue": self.queue, **({"result": result} if result else {})}
        return REGISTRY.get_sample_value(name, labels) or 0.0

    def __getitem__(self, key: str) -> float:
        return self._read(key) - self.start[key]


class _Frozen:
    """The shard of a partition frozen for a cutover (as the cutover's freeze marks it), until the block ends."""

    def __init__(self, fleet, svc: QueueService, shard: int):
        self.store, self.svc, self.shard = ShardMapStore(fleet.zk), svc, shard

    def __enter__(self) -> _Frozen:
        self.store.update(lambda m: m.with_frozen(self.shard, self.shard), reason="test freeze")
        assert self.svc.router.wait_for_epoch(self.store.read().epoch, 5)
        return self

    def __exit__(self, *exc: object) -> None:
        self.store.update(lambda m: m.without_frozen(self.shard, self.shard), reason="test unfreeze")
        assert self.svc.router.wait_for_epoch(self.store.read().epoch, 5)


def test_a_mixed_enqueue_retried_after_a_partition_stayed_frozen_makes_each_job_once(fleet, svc, client):
    """Unkeyed jobs and a keyed job whose partition stays frozen past the wait: the unkeyed are stored, the
    call fails with what it stored; retried after the freeze with the same idempotency key, every job exists
    exactly once and the stored ones come back as the same jobs. Without a key the error is
    PARTIALLY_APPLIED (not retryable) and names the stored jobs, so a retry of the rest makes each once."""
    rec = client.create_queue("mixq", QueueConfig(partitions=2))
    call = _key_in(0, 2, "call-")  # the unkeyed jobs of this call go to partition 0
    keyed = _key_in(1, 2, "k-")  # this job to partition 1, frozen
    jobs = [EnqueueJob(body="a"), EnqueueJob(body="keyed", dedupe_key=keyed), EnqueueJob(body="b")]
    grown = _Counters("mixq")
    with _Frozen(fleet, svc, rec.partition(1).shard):
        with pytest.raises(ShardUnavailable) as exc:
            client.enqueue("mixq", jobs, idempotency_key=call)
        assert exc.value.retryable and "2 of 3 jobs" in exc.value.message, exc.value.message
        first = exc.value.results
        assert [r is not None for r in first] == [True, False, True], first
        assert all(r.partition == 0 and not r.deduplicated for r in first if r is not None)
        # counted: the two stored, not the three asked for
        assert grown["queue_enqueued_jobs_total"] == 2
    again = client.enqueue("mixq", jobs, idempotency_key=call)
    assert [r.id for r in again][0::2] == [first[0].id, first[2].id]
    assert [r.deduplicated for r in again] == [True, False, True]
    assert client.enqueue("mixq", jobs, idempotency_key=call) == [r.model_copy(update={"deduplicated": True})
                                                                 for r in again]
    assert client.counts("mixq")["NEW"] == 3
    assert sorted(d.body for d in client.dequeue("mixq", limit=10)) == ["a", "b", "keyed"]
    assert grown["queue_enqueued_jobs_total"] == 3
    assert grown["queue_deduplicated_jobs_total"] == 5  # 2 in the first retry, 3 in the second

    # no idempotency key: a retry of the whole call would store "a" and "b" again, so it is refused as such
    rec = client.create_queue("mixr", QueueConfig(partitions=2))
    with _Frozen(fleet, svc, rec.partition(1).shard), pytest.raises(PartiallyApplied) as exc:
        client.enqueue("mixr", jobs)
    partial = exc.value
    assert not partial.retryable and partial.code == "PARTIALLY_APPLIED", partial.message
    assert "2 of 3 jobs" in partial.message and "positions 0, 2" in partial.message, partial.message
    assert [r is not None for r in partial.results] == [True, False, True], partial.results
    client.enqueue("mixr", [j for j, r in zip(jobs, partial.results) if r is None])
    assert client.counts("mixr")["NEW"] == 3
    assert sorted(d.body for d in client.dequeue("mixr", limit=10)) == ["a", "b", "keyed"]


def test_a_retried_ack_answers_per_item_what_is_true(fleet, svc, client):
    """An ack over two partitions, one frozen past the wait: the other's acks commit and the error says so;
    the retry answers ALREADY_ACKED for those (a failure ack too), OK for the rest; a claim that lost its job
    answers STALE_CLAIM and a job that is gone NOT_FOUND. The ack counters count each ack once."""
    rec = client.create_queue("ackq", QueueConfig(partitions=2, lease_seconds=30))
    keys = [_key_in(p, 2, f"j{i}-") for p in (0, 1) for i in range(2)]  # two jobs in each partition
    client.enqueue("ackq", [EnqueueJob(body=k, dedupe_key=k) for k in keys])
    got = sorted(client.dequeue("ackq", limit=10), key=lambda d: keys.index(d.body))
    assert [d.partition for d in got] == [0, 0, 1, 1]
    # the second job of partition 0 fails (back to NEW in a minute), the others succeed
    items = [AckItem(id=d.id, claim=d.claim, success=i != 1, retry_delay_seconds=60) for i, d in enumerate(got)]
    grown = _Counters("ackq")
    with _Frozen(fleet, svc, rec.partition(1).shard):
        with pytest.raises(ShardUnavailable) as exc:
            client.ack("ackq", items)
        assert exc.value.retryable and exc.value.results == ["OK", "OK", None, None], exc.value.results
        # counted: the two acks committed
        assert (grown["queue_acked_jobs_total/success"], grown["queue_acked_jobs_total/failure"]) == (1, 1)
    assert client.ack("ackq", items) == ["ALREADY_ACKED", "ALREADY_ACKED", "OK", "OK"]
    # each ack counted once: the retried two as repeated, none as stale
    assert (grown["queue_acked_jobs_total/success"], grown["queue_acked_jobs_total/failure"]) == (3, 1)
    assert grown["queue_repeated_acks_total"] == 2 and grown["queue_stale_acks_total"] == 0
    assert [client.lookup("ackq", d.id).state for d in got] == ["OK", "NEW", "OK", "OK"]

    # a claim whose lease expired and whose job was claimed again; a job deleted while claimed
    client.enqueue("ackq", [EnqueueJob(body="late", dedupe_key="late"), EnqueueJob(body="gone", dedupe_key="gone")])
    old = {d.body: d for d in client.dequeue("ackq", limit=10, lease_seconds=0.05)}
    assert set(old) == {"late", "gone"}
    time.sleep(0.1)
    svc.reap("ackq")
    again = {d.body: d for d in client.dequeue("ackq", limit=10)}
    assert again["late"].claim != old["late"].claim
    assert client.delete_jobs("ackq", "IPR", filter=JobFilter(ids=[again["gone"].id])) == 1
    assert client.ack("ackq", [AckItem(id=old["late"].id, claim=old["late"].claim),
                               AckItem(id=again["gone"].id, claim=again["gone"].claim),
                               AckItem(id=again["late"].id, claim=again["late"].claim)]) == \
        ["STALE_CLAIM", "NOT_FOUND", "OK"]
    assert grown["queue_stale_acks_total"] == 2
