"""Queue service vs RQ throughput, and disk after purging by DROP PARTITION vs DELETE.

Run with ``python -m bench.queue`` (not a test). In one run on one sandbox:

* **throughput, the headline** (:mod:`bench.queue_http`): N no-op jobs
  enqueued over HTTP to ``migrator queue serve --broker``, then dequeued and
  acknowledged by ``--workers`` separate worker processes, vs the same N no-op
  RQ jobs enqueued on the sandbox's Redis and run by the same number of RQ
  ``SimpleWorker`` processes. jobs/s = N / (first enqueue to last worker exit).
  Medians of ``--repeat`` runs each, interleaved.
* **throughput in process**: the same through an in-process
  :class:`QueueService` (batches of ``--batch``, and one at a time), vs one RQ
  burst ``SimpleWorker`` in the bench process.
* **disk**: one jobs table (the queue's partitioned layout) goes through
  ``--cycles`` fill-and-purge cycles (``--fill`` rows of ~1 KB each, written as
  succeeded jobs): purged by maintenance (``DROP PARTITION`` of the expired OK
  bucket, the clock advanced two days per cycle) vs the same table purged with
  ``DELETE``. Disk is the bytes allocated to the table's ``.ibd`` files after
  the last purge.

Prints a table and ends with ``queue_vs_rq=... queue_http_jobs_per_s=...
queue_batched_jobs_per_s=... disk_vs_delete=...`` (``queue_vs_rq`` > 1: the queue
over HTTP is faster than RQ with as many workers; ``disk_vs_delete`` < 1: dropping
partitions leaves less on disk).
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from bench import queue_http as qh
from migrator.fleet import config as config_mod
from migrator.fleet import zk as zk_mod
from migrator.fleet.ids import shard_db
from migrator.fleet.model import even_layout
from migrator.fleet.mysql import qualified
from migrator.fleet.shard_map import HostRegistry, ShardMapStore
from migrator.queue import maintenance as mt
from migrator.queue import schema
from migrator.queue.model import AckItem, EnqueueJob, QueueConfig
from migrator.queue.partitioning import jobs_policy
from migrator.queue.service import QueueService
from migrator.sandbox import Sandbox, find_base_port, reset_fleet

DAY = 86400


def noop() -> None:
    """The RQ job: does nothing."""


# -- throughput ---------------------------------------------------------------------------

def bench_queue(svc: QueueService, n: int, batch: int, partitions: int) -> float:
    name = f"bench_{uuid.uuid4().hex[:6]}"
    svc.create_queue(name, QueueConfig(partitions=partitions))
    try:
        t0 = time.perf_counter()
        for i in range(0, n, batch):
            svc.enqueue(name, [EnqueueJob(body="{}") for _ in range(min(batch, n - i))])
        done = 0
        while done < n:
            got = svc.dequeue(name, limit=batch)
            if not got:
                continue
            res = svc.ack(name, [AckItem(id=d.id, claim=d.claim) for d in got])
            done += sum(1 for r in res if r == "OK")
        took = time.perf_counter() - t0
        assert svc.counts(name)["OK"] == n
        return took
    finally:
        svc.delete_queue(name)


# -- disk -------------------------------------------------------------------------------------

def table_bytes(conn: Any, db: str, table: str) -> tuple[int, int]:
    """(files, bytes allocated) of a table's .ibd files, read from the server's datadir."""
    with conn.cursor() as cur:
        cur.execute("SELECT @@datadir")
        datadir = Path(cur.fetchone()[0])
    files = list((datadir / db).glob(f"{table}.ibd")) + list((datadir / db).glob(f"{table}#[Pp]#*.ibd"))
    return len(files), sum(f.stat().st_blocks * 512 for f in files)


def fill(conn: Any, db: str, table: str, rows: int, at: Any) -> None:
    """``rows`` succeeded jobs with ~1 KB bodies whose last change is at ``at``."""
    with conn.cursor() as cur:
        cur.execute(
            f"INSERT INTO {qualified(db, table)} (state, updated_at, created_at, run_after, priority, "
            "attempts_allowed, attempts_left, custom_status, body) "
            f"SELECT 2, %s, %s, %s, 2, 1, 0, '', REPEAT(MD5(seq), 32) FROM {qualified(db, 'seq_1_to_' + str(rows))}",
            (at, at, at),
        )


def bench_disk(svc: QueueService, shard: int, cycles: int, rows: int) -> tuple[tuple[int, int], tuple[int, int]]:
    import datetime as dt

    db = shard_db(shard)
    policy = jobs_policy()
    drop_t, del_t = f"bench_drop_{uuid.uuid4().hex[:6]}", f"bench_del_{uuid.uuid4().hex[:6]}"
    conn = svc.router.connect(shard)
    try:
        for t in (drop_t, del_t):
            schema.create_partition_tables(conn, db, t, policy)
        now = schema.db_now(conn)
        for c in range(cycles):
            # DROP PARTITION: each cycle's rows land in the current OK bucket of a clock two days on;
            # maintenance splits FUTURE ahead, and drops the bucket once it is past the OK retention
            later = c * 2 * DAY
            mt.maintain_table(conn, shard, drop_t, policy, advance_seconds=later)
            fill(conn, db, drop_t, rows, now + dt.timedelta(seconds=later))
            mt.maintain_table(conn, shard, drop_t, policy, advance_seconds=later + 2 * DAY)
            # DELETE: same rows, same table layout, purged row by row
            fill(conn, db, del_t, rows, now)
            with conn.cursor() as cur:
                cur.execute(f"DELETE FROM {qualified(db, del_t)} WHERE state = 2")
            print(f"  cycle {c + 1}/{cycles}: drop {table_bytes(conn, db, drop_t)[1] / 1e6:.1f} MB, "
                  f"delete {table_bytes(conn, db, del_t)[1] / 1e6:.1f} MB", flush=True)
        with conn.cursor() as cur:
            for t in (drop_t, del_t):
                cur.execute(f"SELECT COUNT(*) FROM {qualified(db, t)}")
                assert cur.fetchone()[0] == 0
        return table_bytes(conn, db, drop_t), table_bytes(conn, db, del_t)
    finally:
        schema.drop_partition_tables(conn, db,
                                     [drop_t, schema.dedupe_table_name(drop_t), del_t, schema.dedupe_table_name(del_t)])
        conn.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=5000, help="jobs per throughput run")
    ap.add_argument("--batch", type=int, default=100, help="enqueue/dequeue/ack batch size")
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--cycles", type=int, default=10, help="fill-and-purge cycles")
    ap.add_argument("--fill", type=int, default=20000, help="rows per fill")
    ap.add_argument("--redis-db", type=int, default=13, help="Redis db number for RQ")
    ap.add_argument("--workers", type=int, default=3, help="worker processes on each side (HTTP and RQ)")
    ap.add_argument("--repeat", type=int, default=3, help="HTTP and RQ runs each (medians)")
    ap.add_argument("--sandbox", help="reuse a running sandbox directory (its shard data is reset)")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="bench-queue-"))
    own = args.sandbox is None
    sb = Sandbox(args.sandbox or tmp / "sandbox")
    try:
        if own or not sb.running():
            sb.up(pairs=2, spare_pairs=1, shards=8, rows=20, base_port=find_base_port(100), log=lambda *_: None)
        cfg = sb.config().with_root(f"/bench{uuid.uuid4().hex[:8]}")
        cfg.credentials.file = str(sb.secrets_file)
        cfg_path = tmp / "migrator.toml"
        cfg_path.write_text(config_mod.dump(cfg))
        cfg = config_mod.load(cfg_path)
        creds = config_mod.load_credentials(cfg)
        hosts = sb.hosts()
        smap = even_layout(sb.state.shards, sb.pairs(spare=False))  # type: ignore[union-attr]
        reset_fleet(sb, smap, rows=20)
        with zk_mod.connect(cfg, creds) as zk:
            for h in hosts.values():
                HostRegistry(zk).register(h)
            ShardMapStore(zk).init(smap, hosts, reason="bench")
        server = qh.Server(cfg_path, creds.queue_token)
        try:
            qh.bench_http(server, 500, args.batch, args.workers, args.partitions)  # warm up
            qh.bench_rq(cfg, 500, args.batch, args.workers, args.redis_db)
            http_s, rq_http_s = [], []
            for i in range(args.repeat):
                http_s.append(qh.bench_http(server, args.jobs, args.batch, args.workers, args.partitions))
                rq_http_s.append(qh.bench_rq(cfg, args.jobs, args.batch, args.workers, args.redis_db))
                print(f"  run {i + 1}/{args.repeat}: HTTP {args.jobs / http_s[-1]:,.0f} jobs/s, "
                      f"RQ {args.jobs / rq_http_s[-1]:,.0f} jobs/s", flush=True)
        finally:
            server.stop()
        http_med, rq_med = statistics.median(http_s), statistics.median(rq_http_s)
        svc = QueueService(cfg, creds)
        try:
            bench_queue(svc, 500, args.batch, args.partitions)  # warm up
            q_batch = bench_queue(svc, args.jobs, args.batch, args.partitions)
            single_n = max(200, args.jobs // 10)
            q_single = bench_queue(svc, single_n, 1, args.partitions)
            qh.bench_rq(cfg, 500, 500, 0, args.redis_db)  # warm up
            rq_s = qh.bench_rq(cfg, args.jobs, 500, 0, args.redis_db)
            print(f"disk: {args.cycles} cycles of {args.fill} rows ...", flush=True)
            (drop_files, drop_b), (del_files, del_b) = bench_disk(svc, 1, args.cycles, args.fill)
        finally:
            svc.close()
        rows = [
            (f"HTTP, {args.workers} worker procs, batches of {args.batch}", args.jobs, http_med),
            (f"RQ, {args.workers} SimpleWorker procs", args.jobs, rq_med),
            (f"in process, batches of {args.batch}", args.jobs, q_batch),
            ("in process, one job at a time", single_n, q_single),
            ("RQ, one SimpleWorker in process", args.jobs, rq_s),
        ]
        print(f"\n{'enqueue+dequeue+ack of no-op jobs':<40} {'jobs':>7} {'seconds':>9} {'jobs/s':>10}")
        for name, n, s in rows:
            print(f"{name:<40} {n:>7} {s:>9.2f} {n / s:>10,.0f}")
        after = f"jobs table after {args.cycles} fill+purge cycles"
        print(f"\n{after:<40} {'.ibd files':>10} {'MB on disk':>11}")
        print(f"{'purged by DROP PARTITION (maintenance)':<40} {drop_files:>10} {drop_b / 1e6:>11.2f}")
        print(f"{'purged by DELETE':<40} {del_files:>10} {del_b / 1e6:>11.2f}")
        qps, rqps = args.jobs / q_batch, args.jobs / rq_s
        hps, rq_hps = args.jobs / http_med, args.jobs / rq_med
        print(f"\nqueue_vs_rq={hps / rq_hps:.2f} queue_http_jobs_per_s={hps:.0f} rq_jobs_per_s={rq_hps:.0f} "
              f"queue_batched_jobs_per_s={qps:.0f} queue_batched_vs_rq={qps / rqps:.2f} "
              f"queue_single_vs_rq={(single_n / q_single) / rqps:.2f} disk_vs_delete={drop_b / del_b:.3f} "
              f"drop_mb={drop_b / 1e6:.2f} delete_mb={del_b / 1e6:.2f}")
    finally:
        if own:
            sb.down()
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
