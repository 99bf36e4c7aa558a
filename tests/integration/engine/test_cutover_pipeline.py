"""The whole engine on the sandbox through the library's own phases, with a writer
going through the router all along: plan -> copy -> catch-up -> verify -> cutover ->
rollback -> cleanup."""

from __future__ import annotations

import time

from migrator.engine import catch_up
from migrator.engine.cleanup import cleanup
from migrator.engine.cutover import cutover
from migrator.engine.migration import MigrationStore, Options, Phase
from migrator.engine.rollback import rollback
from migrator.engine.verify.run import verify_migration
from migrator.fleet.mysql import connect as mysql_connect
from migrator.fleet.router import ShardRouter
from migrator.fleet.shard_map import ShardMapStore
from migrator.ops import command

from .cutover_setup import Writer

MOVING = [2, 3]


def test_plan_copy_catch_up_verify_cutover_rollback_cleanup(fleet):
    spare = fleet.sandbox.pairs(spare=True)[0][0]
    router = ShardRouter(fleet.zk, fleet.credentials).start()
    writer = Writer(router, shards=tuple(MOVING)).start()
    try:
        _run(fleet, spare, writer)
    finally:
        writer.stop()


def _run(fleet, spare, writer):
    plan = command.plan_move(fleet.config, MOVING, spare, options=Options(freeze_budget_ms=2000))
    mid = plan.spec.id
    command.run_copy(fleet.config, mid)
    catch_up.run_passes(fleet.config, mid)
    store = MigrationStore(fleet.zk)
    assert store.state(mid)[0].phase == Phase.CONVERGED
    rep = verify_migration(fleet.config, mid)
    assert rep.ok and rep.chunks >= 10, rep.to_dict()
    res = cutover(fleet.config, mid)
    assert ShardMapStore(fleet.zk).read().master_of(2) == spare
    time.sleep(0.5)
    back = rollback(fleet.config, mid)
    assert back.flipped_epoch == res.flipped_epoch + 2
    time.sleep(0.3)
    writer.stop()
    assert not writer.errors, writer.errors[:5]
    assert writer.hosts_used.get(spare, 0) > 0 and len(writer.hosts_used) == 2
    smap = ShardMapStore(fleet.zk).read()
    with mysql_connect(fleet.hosts[smap.master_of(2)], fleet.credentials) as c, c.cursor() as cur:
        for (shard, lid), data in writer.acks.items():
            cur.execute(f"SELECT data FROM db{shard:05d}.pins WHERE local_id = %s", (lid,))
            assert cur.fetchone()[0] == data, (shard, lid)
    out = cleanup(fleet.config, mid, now=True)
    assert out.dropped and store.state(mid)[0].phase == Phase.CLEANED
