"""The queue service's core on the real sandbox: state machine, leases, fencing,
priorities, run_after, rate limit, dedupe, FIFO, reads and bulk operations."""

from __future__ import annotations

import time

import pytest

from migrator.fleet.ids import TYPE_JOB, decode, shard_db
from migrator.queue.errors import InvalidArgument, JobNotFound, QueueExists, QueuePaused, RateLimited, UnknownQueue
from migrator.queue.model import AckItem, CheckpointItem, EnqueueJob, JobFilter, QueueConfig, QueueConfigUpdate


def jobs(n, **kw):
    return [EnqueueJob(body=f"b{i}", **kw) for i in range(n)]


def test_state_machine_success_and_failure(qs, fleet):
    rec = qs.create_queue("sm", QueueConfig(partitions=2, default_attempts=2))
    assert [p.table for p in rec.partitions] == ["jobs_sm_p0", "jobs_sm_p1"]
    assert len({p.shard for p in rec.partitions}) == 2
    res = qs.enqueue("sm", jobs(4))
    for r in res:
        oid = decode(r.id)
        assert oid.type == TYPE_JOB and rec.partition(r.partition).shard == oid.shard
    assert qs.counts("sm") == {"NEW": 4, "IPR": 0, "OK": 0, "FAIL": 0}

    got = qs.dequeue("sm", limit=10)
    assert len(got) == 4
    assert all(d.attempt == 1 and d.attempts_left == 1 for d in got)
    assert qs.counts("sm")["IPR"] == 4
    # two succeed, one fails with retry, one fails with no delay
    out = qs.ack("sm", [AckItem(id=got[0].id, claim=got[0].claim),
                        AckItem(id=got[1].id, claim=got[1].claim),
                        AckItem(id=got[2].id, claim=got[2].claim, success=False, retry_delay_seconds=0),
                        AckItem(id=got[3].id, claim=got[3].claim, success=False, retry_delay_seconds=60)])
    assert out == ["OK"] * 4
    assert qs.counts("sm") == {"NEW": 2, "IPR": 0, "OK": 2, "FAIL": 0}
    again = qs.dequeue("sm", limit=10)
    assert [d.id for d in again] == [got[2].id]  # the other waits 60 s
    assert again[0].attempt == 2 and again[0].attempts_left == 0
    # last attempt fails -> FAIL
    assert qs.ack("sm", [AckItem(id=again[0].id, claim=again[0].claim, success=False)]) == ["OK"]
    info = qs.lookup("sm", again[0].id)
    assert info.state == "FAIL" and info.body == "b2"
    # a second ack of the same claim is a retry: the first did it (not a stale claim)
    assert qs.ack("sm", [AckItem(id=got[0].id, claim=got[0].claim)]) == ["ALREADY_ACKED"]


def test_lease_expiry_and_stale_ack(qs):
    qs.create_queue("lease", QueueConfig(lease_seconds=0.3, default_attempts=2))
    [r] = qs.enqueue("lease", jobs(1))
    [d1] = qs.dequeue("lease")
    time.sleep(0.45)
    assert qs.reap("lease") == {"lease/0": (1, 0)}
    assert qs.lookup("lease", r.id).state == "NEW"
    [d2] = qs.dequeue("lease", lease_seconds=5)
    assert d2.id == d1.id and d2.attempt == 2 and d2.claim != d1.claim
    # the first worker comes back late: its claim is fenced off
    assert qs.ack("lease", [AckItem(id=d1.id, claim=d1.claim)]) == ["STALE_CLAIM"]
    assert qs.extend_lease("lease", [(d1.id, d1.claim)]) == ["STALE_CLAIM"]
    assert qs.extend_lease("lease", [(d2.id, d2.claim)], lease_seconds=60) == ["OK"]
    assert qs.lookup("lease", r.id).lease_until > time.time() + 50
    assert qs.ack("lease", [AckItem(id=d2.id, claim=d2.claim)]) == ["OK"]
    assert qs.lookup("lease", r.id).state == "OK"


def test_lease_expiry_with_no_attempts_left_fails(qs):
    qs.create_queue("lease1", QueueConfig(lease_seconds=0.2, default_attempts=1))
    [r] = qs.enqueue("lease1", jobs(1))
    assert len(qs.dequeue("lease1")) == 1
    time.sleep(0.3)
    assert qs.reap("lease1")["lease1/0"] == (0, 1)
    assert qs.lookup("lease1", r.id).state == "FAIL"
    assert qs.dequeue("lease1") == []


def test_priorities_and_run_after(qs):
    qs.create_queue("prio")
    low = qs.enqueue("prio", [EnqueueJob(body="low", priority=3)])
    high = qs.enqueue("prio", [EnqueueJob(body="high", priority=1)])
    mid = qs.enqueue("prio", [EnqueueJob(body="mid", priority=2)])
    later = qs.enqueue("prio", [EnqueueJob(body="later", priority=1, delay_seconds=0.6)])
    at = qs.enqueue("prio", [EnqueueJob(body="at", priority=1, run_after=time.time() + 0.6)])
    got = qs.dequeue("prio", limit=10)
    assert [d.body for d in got] == ["high", "mid", "low"]
    assert [d.id for d in got] == [high[0].id, mid[0].id, low[0].id]
    assert qs.dequeue("prio") == []
    t0 = time.monotonic()
    got = qs.dequeue("prio", limit=10, wait_seconds=3)
    assert {d.body for d in got} <= {"later", "at"} and got
    assert time.monotonic() - t0 > 0.3
    rest = qs.dequeue("prio", limit=10, wait_seconds=1)
    assert {d.id for d in got + rest} == {later[0].id, at[0].id}


def test_rate_limit(qs):
    qs.create_queue("rl", QueueConfig(max_jobs_per_second=5))
    qs.enqueue("rl", jobs(20))
    got = qs.dequeue("rl", limit=20)
    assert len(got) == 5  # the burst is one second's worth
    with pytest.raises(RateLimited) as exc:
        qs.dequeue("rl", limit=5)
    assert exc.value.retryable and exc.value.code == "RATE_LIMITED"
    time.sleep(0.45)
    assert 1 <= len(qs.dequeue("rl", limit=20)) <= 3


def test_dedupe(qs):
    qs.create_queue("dd", QueueConfig(partitions=3))
    a = qs.enqueue("dd", [EnqueueJob(body="x", dedupe_key="k1"), EnqueueJob(body="y", dedupe_key="k2"),
                          EnqueueJob(body="x2", dedupe_key="k1")])
    assert not a[0].deduplicated and not a[1].deduplicated
    assert a[2].deduplicated and a[2].id == a[0].id
    b = qs.enqueue("dd", [EnqueueJob(body="again", dedupe_key="k1")])
    assert b[0].deduplicated and b[0].id == a[0].id
    assert sum(qs.counts("dd").values()) == 2
    assert qs.lookup("dd", a[0].id).dedupe_key == "k1"


def test_fifo_order(qs):
    qs.create_queue("ff", QueueConfig(fifo=True))
    ids = []
    for i in range(5):  # priorities must not reorder a fifo queue
        ids += [r.id for r in qs.enqueue("ff", [EnqueueJob(body=str(i), priority=3 - i % 3)])]
    ids += [r.id for r in qs.enqueue("ff", jobs(10))]
    seen = []
    while True:
        got = qs.dequeue("ff", limit=3)
        if not got:
            break
        seen += [d.id for d in got]
        qs.ack("ff", [AckItem(id=d.id, claim=d.claim) for d in got])
    assert seen == ids
    with pytest.raises(ValueError):
        QueueConfig(fifo=True, partitions=2)


def test_checkpoint(qs):
    qs.create_queue("cp", QueueConfig(default_attempts=1))
    [r] = qs.enqueue("cp", jobs(1))
    [d] = qs.dequeue("cp")
    assert qs.checkpoint("cp", [CheckpointItem(id=d.id, claim=d.claim, body="step1", custom_status="half")]) == ["OK"]
    info = qs.lookup("cp", r.id)
    assert (info.state, info.body, info.custom_status) == ("IPR", "step1", "half")
    # back to pending with more attempts, later
    assert qs.checkpoint("cp", [CheckpointItem(id=d.id, claim=d.claim, body="step2", to_pending=True,
                                               delay_seconds=0.2, attempts=3)]) == ["OK"]
    info = qs.lookup("cp", r.id)
    assert (info.state, info.body, info.attempts_left) == ("NEW", "step2", 3)
    assert qs.ack("cp", [AckItem(id=d.id, claim=d.claim)]) == ["STALE_CLAIM"]
    [d2] = qs.dequeue("cp", wait_seconds=2)
    assert d2.body == "step2" and d2.attempts_left == 2


def test_scan_retry_cancel_delete(qs):
    qs.create_queue("bulk", QueueConfig(partitions=2, default_attempts=1))
    made = qs.enqueue("bulk", [EnqueueJob(body=f"{i}", priority=1 + i % 3) for i in range(12)])
    made += qs.enqueue("bulk", [EnqueueJob(body="z") for _ in range(6)])
    # keyset pagination walks every NEW job exactly once
    seen, cursor = [], None
    while True:
        page, cursor = qs.scan("bulk", "NEW", limit=5, cursor=cursor)
        seen += [j.id for j in page]
        if cursor is None:
            break
    assert sorted(seen) == sorted(r.id for r in made)
    page, _ = qs.scan("bulk", "NEW", limit=100, filter=JobFilter(priority=1))
    assert len(page) == 4 + 0 and all(j.priority == 1 for j in page)
    # fail some, retry them
    got = qs.dequeue("bulk", limit=5)
    qs.ack("bulk", [AckItem(id=d.id, claim=d.claim, success=False) for d in got])
    assert qs.counts("bulk")["FAIL"] == 5
    assert qs.retry_failed("bulk", attempts=2, filter=JobFilter(ids=[got[0].id])) == 1
    assert qs.lookup("bulk", got[0].id).state == "NEW"
    assert qs.retry_failed("bulk") == 4
    # cancel by filter; the filter is bound, never interpolated
    evil = "x' OR '1'='1"
    assert qs.cancel("bulk", filter=JobFilter(custom_status=evil)) == 0
    n = qs.cancel("bulk", filter=JobFilter(priority=3))
    assert n >= 1
    cancelled, _ = qs.scan("bulk", "FAIL", limit=100)
    assert len(cancelled) == n and all(j.custom_status == "cancelled" for j in cancelled)
    assert qs.delete_jobs("bulk", "FAIL", filter=JobFilter(custom_status=evil)) == 0
    assert qs.delete_jobs("bulk", "FAIL") == n
    with pytest.raises(JobNotFound):
        qs.lookup("bulk", cancelled[0].id)
    with pytest.raises(InvalidArgument):
        qs.lookup("bulk", 12345)  # not a job id


def test_queue_admin(qs):
    qs.create_queue("adm", QueueConfig(partitions=2))
    with pytest.raises(QueueExists):
        qs.create_queue("adm")
    with pytest.raises(InvalidArgument):
        qs.create_queue("bad-name")
    assert [q.name for q in qs.list_queues()] == ["adm"]
    rec = qs.update_queue("adm", QueueConfigUpdate(lease_seconds=5, max_jobs_per_second=100))
    assert rec.config.lease_seconds == 5 and rec.config.partitions == 2
    qs.enqueue("adm", jobs(1))
    qs.pause("adm")
    with pytest.raises(QueuePaused):
        qs.dequeue("adm")
    qs.resume("adm")
    assert len(qs.dequeue("adm")) == 1
    qs.delete_queue("adm")
    with pytest.raises(UnknownQueue):
        qs.enqueue("adm", jobs(1))
    for p in rec.partitions:
        with qs.router.connect(p.shard) as c, c.cursor() as cur:
            cur.execute("SHOW TABLES LIKE 'jobs_adm%%'")
            assert cur.fetchall() == ()


def test_zookeeper_record_contract(qs, fleet):
    import json

    qs.create_queue("rec", QueueConfig(partitions=2))
    data, stat = fleet.zk.client.get(fleet.zk.path("queues", "rec"))
    doc = json.loads(data)
    assert doc["name"] == "rec"
    assert doc["config"]["partitions"] == 2
    for p in doc["partitions"]:
        assert p["table"] == f"jobs_rec_p{p['index']}"
        with qs.router.connect(p["shard"]) as c, c.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM information_schema.tables WHERE table_schema=%s AND table_name=%s",
                        (shard_db(p["shard"]), p["table"]))
            assert cur.fetchone()[0] == 1
    acl, _ = fleet.zk.client.get_acls(fleet.zk.path("queues", "rec"))
    assert any(a.id.scheme == "digest" for a in acl)


def test_queries_prune_partitions(qs):
    """EXPLAIN PARTITIONS: the dequeue scan reads only NEW buckets, an ack only one partition."""
    rec = qs.create_queue("prune")
    qs.enqueue("prune", jobs(3))
    [d] = qs.dequeue("prune")
    part = rec.partitions[0]
    from migrator.queue.storage import Claim

    claim = Claim.parse(d.claim)
    with qs.router.connect(part.shard) as c, c.cursor() as cur:
        cur.execute("SELECT PARTITION_NAME FROM information_schema.PARTITIONS WHERE TABLE_SCHEMA=%s AND TABLE_NAME=%s",
                    (shard_db(part.shard), part.table))
        all_parts = [r[0] for r in cur.fetchall()]
        cur.execute(f"EXPLAIN PARTITIONS SELECT local_id FROM {part.table} WHERE state = 0 AND run_after <= NOW(6) "
                    "ORDER BY priority, run_after, local_id LIMIT 10")
        cols = [x[0] for x in cur.description]
        parts = cur.fetchone()[cols.index("partitions")].split(",")
        assert parts and all(p.startswith("pNEW_") for p in parts), parts
        assert len(parts) < len(all_parts)
        cur.execute(f"EXPLAIN PARTITIONS UPDATE {part.table} SET state = 2 WHERE local_id = %s AND state = 1 "
                    "AND updated_at = %s AND claim_token = %s", (decode(d.id).local, claim.claimed_at, claim.token))
        cols = [x[0] for x in cur.description]
        parts = cur.fetchone()[cols.index("partitions")].split(",")
        assert len(parts) == 1 and parts[0].startswith("pIPR_"), parts


def test_queue_deleted_elsewhere_fails_fast(qs, fleet):
    from migrator.queue.service import QueueService

    qs.create_queue("gone")
    qs.enqueue("gone", jobs(1))  # cached here now
    other = QueueService(fleet.config, fleet.credentials)
    try:
        other.delete_queue("gone")
    finally:
        other.close()
    t0 = time.monotonic()
    with pytest.raises(UnknownQueue):
        qs.enqueue("gone", jobs(1))
    assert time.monotonic() - t0 < 3
