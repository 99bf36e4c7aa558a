"""``rebalance --objective writes`` measures queue partitions where they live and proposes moving hot
ones on their own where that beats moving shards."""

from __future__ import annotations

import threading

from migrator.engine.migration import MigrationStore
from migrator.fleet.ids import shard_db
from migrator.fleet.mysql import connect as mysql_connect
from migrator.fleet.shard_map import ShardMapStore
from migrator.ops.rebalance import command as rebalance
from migrator.ops.rebalance.record import migration_id
from migrator.queue.model import EnqueueJob, QueueConfig


def test_a_plan_by_writes_moves_a_hot_partition_instead_of_its_shard(qs, fleet):
    smap = ShardMapStore(fleet.zk).read()
    rec = qs.create_queue("hot", QueueConfig(partitions=smap.num_shards))  # one partition per shard
    for i in range(2 * smap.num_shards):  # one enqueue call goes to one partition, round robin
        qs.enqueue("hot", [EnqueueJob(body=f"j{i}-{k}") for k in range(2)])
    first = smap.masters()[0]
    hot = [p for p in rec.partitions if smap.master_of(p.shard) == first][:2]
    assert len(hot) == 2
    stop = threading.Event()
    failed: list[BaseException] = []

    def churn() -> None:  # row changes in the two hot partitions' jobs tables only
        try:
            _churn()
        except BaseException as exc:  # noqa: BLE001 - asserted below
            failed.append(exc)

    def _churn() -> None:
        with mysql_connect(fleet.hosts[first], fleet.credentials, autocommit=True) as c, c.cursor() as cur:
            n = 0
            while not stop.is_set():
                n += 1
                for p in hot:
                    cur.execute(f"UPDATE `{shard_db(p.shard)}`.`{p.table}` SET custom_status = %s WHERE state = 0",
                                (f"churn {n}",))

    t = threading.Thread(target=churn, daemon=True)
    t.start()
    try:
        live = rebalance.plan_live(fleet.config, objective="writes", threshold=0.2, window_s=1.5)
    finally:
        stop.set()
        t.join(10)
    assert not failed, failed
    moves = live.plan.moves
    assert [(m.queue, m.source) for m in moves] == [("hot", first)], live.plan.as_dict()
    assert moves[0].partition in {p.index for p in hot} and moves[0].target != first
    assert moves[0].tables == tuple(rec.partition(moves[0].partition).tables)
    assert live.plan.ranges_after == live.plan.ranges_before  # no shard moves
    assert live.as_dict()["moves"][0]["queue"] == "hot"

    # started, the move is stored as a partition move of exactly those tables (then aborted: no workers here)
    rid = rebalance.start(fleet.config, live, queue="rb-partition-test")
    try:
        spec = MigrationStore(fleet.zk).spec(migration_id(rid, 0))
        assert (spec.kind, spec.queue, spec.partition) == ("queue_partition", "hot", moves[0].partition)
        assert spec.tables == moves[0].tables and spec.target_master == moves[0].target
        assert spec.source_master == first and spec.shards == (rec.partition(moves[0].partition).shard,)
    finally:
        out = rebalance.abort(fleet.config, rid)
    assert out["aborted"] == [spec.id], out
