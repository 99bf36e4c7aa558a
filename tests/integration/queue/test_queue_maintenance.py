"""Partition maintenance on the real fleet: expired buckets are dropped (their
.ibd files leave the disk), FUTURE partitions are split ahead, pauses and
metadata-lock timeouts are respected, and the log-table policy works too."""

from __future__ import annotations

import time
from pathlib import Path

from migrator.fleet import redis_client
from migrator.fleet.ids import shard_db
from migrator.queue import maintenance as mt
from migrator.queue.model import AckItem, EnqueueJob, QueueConfig
from migrator.queue.partitioning import parse_bucket

DAY = 86400


def ibd_files(fleet, host: str, shard: int, table: str) -> dict[str, int]:
    d = Path(fleet.sandbox.dir) / host / "data" / shard_db(shard)
    return {p.name.split("#")[-1].removesuffix(".ibd"): p.stat().st_size
            for p in d.glob(f"{table}#[Pp]#*.ibd")}


def test_maintenance_drops_expired_buckets_and_files(qs, fleet):
    rec = qs.create_queue("mt", QueueConfig(default_attempts=1))
    part = rec.partitions[0]
    master = qs.router.master_for(part.shard).name
    qs.enqueue("mt", [EnqueueJob(body="x" * 2000) for _ in range(300)])
    got = qs.dequeue("mt", limit=300)
    qs.ack("mt", [AckItem(id=d.id, claim=d.claim, success=i % 3 != 0) for i, d in enumerate(got)])
    qs.enqueue("mt", [EnqueueJob(body="still pending") for _ in range(5)])
    assert qs.counts("mt") == {"NEW": 5, "IPR": 0, "OK": 200, "FAIL": 100}

    before = ibd_files(fleet, master, part.shard, part.table)
    ok_parts = {n for n in before if n.startswith("pOK_")}
    assert ok_parts and "pOK_FUTURE" in before

    # two days later: OK (kept 1 day) is expired; FAIL (7 days) and NEW (14 days) are not
    reports = mt.maintain(qs, advance_seconds=2 * DAY)
    [r] = [x for x in reports if x.table == part.table]
    assert r.skipped is None, r.to_text()
    assert r.dropped and all(n.startswith("pOK_") for n in r.dropped)
    assert r.added and any(n.startswith("pOK_") for n in r.added)
    assert qs.counts("mt") == {"NEW": 5, "IPR": 0, "OK": 0, "FAIL": 100}

    after = ibd_files(fleet, master, part.shard, part.table)
    for name in r.dropped:
        assert name in before and name not in after, f"{name}.ibd is still on disk"
    # new empty buckets ahead of the pretend-now
    horizon = max(parse_bucket(n)[1] for n in after if n.startswith("pOK_2"))
    latest_before = max(parse_bucket(n)[1] for n in ok_parts if n.startswith("pOK_2"))
    assert horizon > latest_before
    assert "pOK_FUTURE" in after and "p_CATCHALL" in after
    # the queue still works
    [d] = qs.dequeue("mt")
    assert qs.ack("mt", [AckItem(id=d.id, claim=d.claim)]) == ["OK"]
    # the slave follows the statement-based DDL
    fleet.sandbox.wait_pairs_converged()
    slave = qs.router.map.range_of(part.shard).passive
    slave_files = ibd_files(fleet, slave, part.shard, part.table)
    assert not set(r.dropped) & set(slave_files)

    # much later NEW has a TTL too: a forgotten queue empties itself
    mt.maintain(qs, advance_seconds=30 * DAY)
    assert qs.counts("mt") == {"NEW": 0, "IPR": 0, "OK": 0, "FAIL": 0}


def test_maintenance_pause_node(qs, fleet):
    rec = qs.create_queue("mtp")
    shard = rec.partitions[0].shard
    mt.pause_shard(fleet.zk, shard, reason="moving")
    assert fleet.zk.client.exists(f"{fleet.root}/maintenance/paused/{shard}")
    [r] = [x for x in mt.maintain(qs, advance_seconds=2 * DAY) if x.table == "jobs_mtp_p0"]
    assert r.skipped and "paused" in r.skipped and not r.dropped
    mt.resume_shard(fleet.zk, shard)
    [r] = [x for x in mt.maintain(qs, advance_seconds=2 * DAY) if x.table == "jobs_mtp_p0"]
    assert r.skipped is None and r.dropped


def test_maintenance_gives_up_quickly_on_a_metadata_lock(qs, fleet):
    rec = qs.create_queue("mtl")
    part = rec.partitions[0]
    qs.enqueue("mtl", [EnqueueJob(body="x")])
    holder = qs.router.connect(part.shard)
    with holder.cursor() as cur:  # an open transaction holds a shared metadata lock on the table
        cur.execute("BEGIN")
        cur.execute(f"SELECT COUNT(*) FROM {part.table}")
    try:
        t0 = time.monotonic()
        [r] = [x for x in mt.maintain(qs, advance_seconds=2 * DAY, lock_wait_timeout=1) if x.table == part.table]
        assert r.skipped and "metadata lock" in r.skipped
        assert time.monotonic() - t0 < 5
    finally:
        holder.rollback()
        holder.close()
    # once the lock is gone, the next run does the work
    [r] = [x for x in mt.maintain(qs, advance_seconds=2 * DAY) if x.table == part.table]
    assert r.skipped is None and r.dropped


def test_log_table_policy(qs, fleet):
    shard = 1
    with qs.router.connect(shard) as c:
        mt.create_log_table(c, shard)
        with c.cursor() as cur:
            cur.executemany("INSERT INTO logs (ts, source, message) VALUES (NOW(6) - INTERVAL %s HOUR, 'test', 'm')",
                            [(h,) for h in (0, 1, 2)])
    before = set(mt.partition_names(qs.router.connect(shard), shard_db(shard), "logs"))
    assert "pLOG_FUTURE" in before
    [r] = [x for x in mt.maintain(qs, advance_seconds=20 * DAY) if x.table == "logs"]
    assert r.kind == "log" and r.skipped is None
    assert set(r.dropped) == {n for n in before if n != "pLOG_FUTURE"}
    assert len(r.added) >= 1
    with qs.router.connect(shard) as c, c.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM logs")
        assert cur.fetchone()[0] == 0


def test_jobs_maintenance_rq_job(fleet):
    """The periodic RQ job runs the same maintenance (in-process worker)."""
    from rq import Queue

    from migrator.ops.steps import enqueue_maintenance
    from migrator.ops.worker import SimpleWorker

    r = redis_client.connect(fleet.config)
    q = Queue("maintenance-test", connection=r)
    job = enqueue_maintenance(r, config_path=str(fleet.config_path), queue=q.name)
    SimpleWorker([q], connection=r).work(burst=True)
    job.refresh()
    assert job.is_finished, job.latest_result()
    assert job.return_value()["tables"] >= 0
    assert "summary" in job.meta
