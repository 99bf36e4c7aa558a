"""Shard-map awareness: frozen shards wait, a moved table (1146 behind the
write fence) is followed to its new master, nothing acknowledged is lost, and
the old table is never re-created."""

from __future__ import annotations

import re
import threading
import time

import pytest

from migrator.fleet.ids import shard_db
from migrator.fleet.shard_map import ShardMapStore
from migrator.queue.errors import ShardUnavailable
from migrator.queue.model import AckItem, EnqueueJob, QueueConfig
from migrator.queue.service import QueueService


def _move_partition_with_fence(fleet, shard: int, tables: list[str], target: tuple[str, str]) -> None:
    """What a cutover does to one shard's queue tables, per the checked write fence:
    lock, copy under the lock, RENAME away (waiting writers then get 1146), flip the map."""
    smap = ShardMapStore(fleet.zk).read()
    source = smap.master_of(shard)
    db = shard_db(shard)
    sb = fleet.sandbox
    lock = sb.root_conn(source)
    mover = sb.root_conn(source)
    dest = sb.root_conn(target[0])
    with dest.cursor() as cur:
        cur.execute(f"CREATE DATABASE IF NOT EXISTS {db}")
    with mover.cursor() as cur:
        cur.execute("CREATE DATABASE IF NOT EXISTS tomb_q")
    with lock.cursor() as lc:
        lc.execute("LOCK TABLES " + ", ".join(f"{db}.{t} WRITE" for t in tables))
        for t in tables:
            lc.execute(f"SHOW CREATE TABLE {db}.{t}")
            ddl = lc.fetchone()[1]
            lc.execute(f"SELECT * FROM {db}.{t}")
            rows = lc.fetchall()
            with dest.cursor() as dc:
                dc.execute(f"USE {db}")
                dc.execute(ddl)
                if rows:
                    marks = ",".join(["%s"] * len(rows[0]))
                    dc.executemany(f"INSERT INTO {db}.{t} VALUES ({marks})", rows)
        renamer = threading.Thread(target=lambda: mover.cursor().execute(
            "RENAME TABLE " + ", ".join(f"{db}.{t} TO tomb_q.{t}" for t in tables)))
        renamer.start()
        time.sleep(0.3)  # writers and the RENAME queue up behind the lock
        lc.execute("UNLOCK TABLES")
    renamer.join(10)
    time.sleep(0.3)  # waiting writers now get 1146 and wait for the map
    ShardMapStore(fleet.zk).update(lambda m: m.reassign(shard, shard, target[0], target[1]),
                                   reason="test: move queue partition")
    for c in (lock, mover, dest):
        c.close()


def test_enqueue_dequeue_ack_across_a_move(qs, fleet):
    rec = qs.create_queue("mv", QueueConfig(partitions=1, lease_seconds=30))
    part = rec.partitions[0]
    spare = fleet.sandbox.pairs(spare=True)[0]
    acked: list[int] = []
    done: list[int] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def producer():
        i = 0
        while not stop.is_set():
            try:
                res = qs.enqueue("mv", [EnqueueJob(body=f"j{i}-{k}") for k in range(5)])
                acked.extend(r.id for r in res)
                i += 1
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)
                return

    def consumer():
        while not stop.is_set():
            try:
                got = qs.dequeue("mv", limit=10, wait_seconds=0.2)
                if got:
                    res = qs.ack("mv", [AckItem(id=d.id, claim=d.claim) for d in got])
                    done.extend(d.id for d, r in zip(got, res) if r == "OK")
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)
                return

    threads = [threading.Thread(target=producer), threading.Thread(target=consumer)]
    for t in threads:
        t.start()
    time.sleep(0.8)
    before = len(acked)
    _move_partition_with_fence(fleet, part.shard, part.tables, spare)
    time.sleep(0.8)
    stop.set()
    for t in threads:
        t.join(15)
    assert not errors, errors
    assert before > 0 and len(acked) > before, "writes went on after the move"
    assert qs.executor.moved_retries >= 1, "the fence's 1146 was seen and followed"
    assert qs.router.master_for(part.shard).name == spare[0]
    counts = qs.counts("mv")
    assert sum(counts.values()) == len(set(acked))
    for jid in acked:  # every acknowledged enqueue is on the new master
        assert qs.lookup("mv", jid).state in ("NEW", "IPR", "OK")
    assert set(done) <= set(acked)
    # the table was not re-created on the old master
    old = fleet.smap.master_of(part.shard)
    with fleet.sandbox.root_conn(old) as c, c.cursor() as cur:
        cur.execute(f"SHOW TABLES FROM {shard_db(part.shard)} LIKE 'jobs_mv%%'")
        assert cur.fetchall() == ()


def test_frozen_shard_waits_then_proceeds(qs, fleet):
    rec = qs.create_queue("fz")
    shard = rec.partitions[0].shard
    store = ShardMapStore(fleet.zk)
    store.update(lambda m: m.with_frozen(shard, shard), reason="test freeze")
    assert qs.router.wait_for_epoch(store.read().epoch, 5)
    result: list = []
    t = threading.Thread(target=lambda: result.append(qs.enqueue("fz", [EnqueueJob(body="x")])))
    t.start()
    time.sleep(0.5)
    assert t.is_alive(), "a write to a frozen shard waits"
    store.update(lambda m: m.without_frozen(shard, shard), reason="test unfreeze")
    t.join(5)
    assert result and qs.counts("fz")["NEW"] == 1
    assert qs.executor.frozen_waits >= 1


def test_a_frozen_partition_holds_only_its_own_part_of_a_call(qs, fleet):
    """An enqueue whose jobs fall in four partitions, the first of them frozen for a cutover: the other
    three partitions' jobs are written while the frozen one waits (the partitions side by side, not one
    after the other), and the call answers, every job written, once the freeze ends. Acks of those jobs
    across the four partitions are answered the same way."""
    import hashlib

    rec = qs.create_queue("fz4", QueueConfig(partitions=4))

    def partition_of(key: str) -> int:
        return int.from_bytes(hashlib.md5(key.encode()).digest()[:8], "big") % 4

    keys: dict[int, str] = {}
    n = 0
    while len(keys) < 4:
        keys.setdefault(partition_of(f"k{n}"), f"k{n}")
        n += 1
    order = [keys[i] for i in sorted(keys)]  # the first job's partition is the first written in a call
    frozen = rec.partition(partition_of(order[0])).shard
    store = ShardMapStore(fleet.zk)
    store.update(lambda m: m.with_frozen(frozen, frozen), reason="test freeze")
    assert qs.router.wait_for_epoch(store.read().epoch, 5)
    result: list = []
    t = threading.Thread(target=lambda: result.append(
        qs.enqueue("fz4", [EnqueueJob(body=k, dedupe_key=k) for k in order])))
    t.start()
    try:
        others = [rec.partition(partition_of(k)) for k in order[1:]]
        deadline = time.monotonic() + 5
        while True:
            written = []
            for part in others:
                master = store.read().master_of(part.shard)
                with fleet.sandbox.root_conn(master) as c, c.cursor() as cur:
                    cur.execute(f"SELECT COUNT(*) FROM {shard_db(part.shard)}.{part.table}")
                    written.append(cur.fetchone()[0])
            if written == [1, 1, 1]:
                break
            assert time.monotonic() < deadline, f"the unfrozen partitions hold {written} jobs while one is frozen"
            time.sleep(0.05)
        assert t.is_alive(), "the call waits for its frozen partition"
    finally:
        store.update(lambda m: m.without_frozen(frozen, frozen), reason="test unfreeze")
        t.join(10)
    assert result and len(result[0]) == 4 and qs.counts("fz4")["NEW"] == 4
    got = qs.dequeue("fz4", limit=10)
    assert len(got) == 4
    assert qs.ack("fz4", [AckItem(id=d.id, claim=d.claim) for d in got]) == ["OK"] * 4
    assert qs.ack("fz4", [AckItem(id=d.id, claim=d.claim) for d in got]) == ["ALREADY_ACKED"] * 4


def test_frozen_too_long_is_a_retryable_error(fleet):
    svc = QueueService(fleet.config, fleet.credentials, frozen_wait=0.5)
    try:
        rec = svc.create_queue("fz2")
        shard = rec.partitions[0].shard
        ShardMapStore(fleet.zk).update(lambda m: m.with_frozen(shard, shard), reason="test freeze")
        svc.router.refresh()
        t0 = time.monotonic()
        with pytest.raises(ShardUnavailable) as exc:
            svc.enqueue("fz2", [EnqueueJob(body="x")])
        assert exc.value.retryable and exc.value.code == "SHARD_UNAVAILABLE"
        assert re.search("frozen", exc.value.message)
        assert time.monotonic() - t0 < 3
        # reads are not blocked by a freeze
        assert svc.counts("fz2")["NEW"] == 0
    finally:
        svc.close()


def test_load_and_ledger_across_a_move(qs, fleet, tmp_path):
    """The demo's shape: the load runs in a thread while a partition moves; the ledger proves no loss."""
    from migrator.queue.ledger import check_ledger
    from migrator.queue.load import run_load

    rec = qs.create_queue("lm", QueueConfig(partitions=2, lease_seconds=30))
    ledger = tmp_path / "ledger.db"
    stop = threading.Event()
    out: dict = {}
    t = threading.Thread(target=lambda: out.update(r=run_load(
        fleet.config, "lm", rate=200, duration=30, ledger_path=ledger, stop_event=stop, drain_seconds=3)))
    t.start()
    time.sleep(1.0)
    part = rec.partitions[1]
    t_move = time.time()
    _move_partition_with_fence(fleet, part.shard, part.tables, fleet.sandbox.pairs(spare=True)[0])
    t_flip = time.time()
    time.sleep(1.0)
    stop.set()
    t.join(30)
    res = out["r"]
    assert res.enqueued > 200 and res.acked_ok > 200, res.to_text()
    assert not res.errors, res.to_text()
    import sqlite3

    from migrator.fleet.ids import decode

    db = sqlite3.connect(ledger)
    acks = [(decode(j).shard, ta) for j, ta in db.execute("SELECT job_id, t_ack FROM enqueued")]
    db.close()
    assert any(s == part.shard and ta < t_move for s, ta in acks), "the moved partition took writes before"
    assert any(s == part.shard and ta > t_flip for s, ta in acks), "and after the move"
    rep = check_ledger(fleet.config, ledger)
    assert rep.ok and rep.lost == 0 and rep.double_bug == 0, rep.to_text()
    assert rep.enqueued == res.enqueued


def test_dequeue_skips_a_frozen_partition(qs, fleet):
    rec = qs.create_queue("fzd", QueueConfig(partitions=2))
    for _ in range(4):
        qs.enqueue("fzd", [EnqueueJob(body="x") for _ in range(3)])
    frozen = rec.partitions[0].shard
    store = ShardMapStore(fleet.zk)
    store.update(lambda m: m.with_frozen(frozen, frozen), reason="test freeze")
    qs.router.refresh()
    try:
        t0 = time.monotonic()
        got = qs.dequeue("fzd", limit=20)
        assert time.monotonic() - t0 < 1.0, "no wait on the frozen shard"
        assert len(got) == 6 and all(d.partition == 1 for d in got)
    finally:
        store.update(lambda m: m.without_frozen(frozen, frozen), reason="test unfreeze")
