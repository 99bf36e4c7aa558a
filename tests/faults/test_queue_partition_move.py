"""Fault cell on a queue-partition move: one partition of a 16-partition queue created with the defaults (a
partition on every shard of a 16-shard fleet, beside the app's tables) moves to the spare pair on its own (its
shard's other tables hold rows and stay), under load from an independent HTTP client on every partition, and the
worker running its cutover is killed inside it. The fleet is this module's own: a queue has at most one partition
per shard, and the shared fleet has 8."""

from __future__ import annotations

import pytest

from migrator.engine.migration import Phase
from migrator.fleet.ids import shard_db
from migrator.fleet.mysql import connect as mysql_connect
from migrator.fleet.shard_map import ShardMapStore
from migrator.ops import command
from migrator.queue.catalog import QueueCatalog
from migrator.queue.service import QueueService
from tests.conftest import own_sandbox

from .harness import QUEUE, FaultRun

PARTITION = 5
PARTITIONS = 16
SEED_TABLES = ("pins", "boards", "users", "board_has_pins", "user_has_boards")


def _rows(fleet, host: str, db: str) -> dict[str, int]:
    with mysql_connect(fleet.hosts[host], fleet.credentials) as c, c.cursor() as cur:
        out = {}
        for t in SEED_TABLES:
            cur.execute(f"SELECT COUNT(*) FROM `{db}`.`{t}`")
            out[t] = int(cur.fetchone()[0])
        return out


@pytest.fixture(scope="module")
def sandbox16():
    with own_sandbox("migrator-partitions-", pairs=2, spare_pairs=1, shards=PARTITIONS, rows=20) as sb:
        yield sb


@pytest.fixture
def fleet16(sandbox16, tmp_path):
    from tests.fleet import open_fleet, reset_shards

    reset_shards(sandbox16, 20)
    with open_fleet(sandbox16, tmp_path) as f:
        yield f


def test_a_partition_moves_alone_under_http_load_with_its_cutover_worker_killed(fleet16, tmp_path):
    fleet = fleet16
    run = FaultRun(fleet, tmp_path, partitions=PARTITIONS, http=True, producers=3, consumers=3, rate=60).start()
    try:
        part = QueueCatalog(fleet.zk).get(QUEUE, fresh=True).partition(PARTITION)
        shard, db = part.shard, shard_db(part.shard)
        home = ShardMapStore(fleet.zk).read().range_of(shard)
        siblings = _rows(fleet, home.master, db)
        assert any(siblings.values()), "the partition's shard holds other tables with rows"
        target = fleet.sandbox.pairs(spare=True)[0]
        spec = run.plan_move_partition(PARTITION, target[0])  # refused before any copy, before routes
        assert spec.kind == "queue_partition" and spec.shards == (shard,)
        assert set(spec.tables) == set(part.tables)
        run.launch(postpone=True)
        run.wait_phase(Phase.CONVERGED)
        run.mark_target()
        run.enqueue("tests.faults.fault_jobs.cutover_with_fault", run.mid, str(fleet.config_path), "kill",
                    "before_flip")
        run.wait(run.a_worker_died, 60, "the worker to die inside the partition's cutover")
        # the live worker settles it: the route's freeze undone, the source serves the partition again
        run.wait_settled(Phase.CONVERGED)
        smap = ShardMapStore(fleet.zk).read()
        assert smap.routes == () and smap.master_of_table(shard, part.table) == home.master, smap.to_wire()
        run.start_workers(1)
        command.postpone(run.cfg, run.mid, on=False)
        command.cutover(run.cfg, run.mid)
        run.wait_phase(Phase.DONE)
        out = run.end_checks()  # ledger: 0 lost, 0 double OK; the moved tables equal their tombstones
        assert set(out["tables"]) == {f"{db}.{t}" for t in spec.tables}
        smap = ShardMapStore(fleet.zk).read()
        # only the partition's route moved: the shard's range (and its other tables) never moved nor froze
        assert smap.range_of(shard) == home
        assert [(rt.shard, set(rt.tables), rt.master, rt.frozen) for rt in smap.routes] == \
            [(shard, set(part.tables), target[0], False)]
        for rec in ShardMapStore(fleet.zk).history(limit=200):
            if (rec.get("details") or {}).get("migration") == run.mid:
                frozen = (rec.get("map") or {}).get("frozen") or []
                assert not any(lo <= shard <= hi for lo, hi in frozen), rec
        assert _rows(fleet, home.master, db) == siblings
        with mysql_connect(fleet.hosts[target[0]], fleet.credentials) as c, c.cursor() as cur:
            cur.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s AND TABLE_NAME "
                        "IN %s", (db, SEED_TABLES))
            assert cur.fetchall() == ()  # the siblings were not copied
        with QueueService(fleet.config, fleet.credentials) as svc:  # what `migrator queue show` prints
            placed = {p["partition"]: (p["master"], p["routed"]) for p in svc.placement(QUEUE)}
        assert placed.pop(PARTITION) == (target[0], True)
        assert all(not routed for _, routed in placed.values()), placed
        assert out["ledger"].enqueued > 0 and not out["load"].errors.get("SHARD_UNAVAILABLE"), out["load"].to_text()
    finally:
        run.close()
