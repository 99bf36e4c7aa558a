"""Rollback under load: sysbench keeps writing the new master at 300 tps and routed writers keep
writing through the map; ``migrator rollback`` hands the rollback to a ``migrator worker``,
whose chain of RQ jobs converges in reverse passes and flips back.

End checks, as for a split: every routed write acknowledged is on the old master; the old
master's live tables equal the new master's tombstones once the writers stopped (sysbench
wrote only the new master, so anything it had acknowledged before the fence is on the old
master too); both pairs still replicate.
"""

from __future__ import annotations

import time

import pytest

from bench import sysbench
from migrator.engine.cutover import cutover
from migrator.engine.migration import Options, Phase
from migrator.engine.names import tomb_db
from migrator.engine.rollback import PASSES_NODE
from migrator.fleet.mysql import connect as mysql_connect
from migrator.fleet.router import ShardRouter
from migrator.fleet.shard_map import ShardMapStore
from migrator.ops import watch
from migrator.ops.command import set_options, start_rollback

from .cutover_setup import Workers, Writer, prepare_converged

MOVING = (2,)
SB_TABLES = 2
SB_ROWS = 2000


def _checksums(conn, db: str, tables: list[str]) -> dict[str, int]:
    with conn.cursor() as cur:
        cur.execute("CHECKSUM TABLE " + ", ".join(f"`{db}`.`{t}`" for t in tables))
        return {r[0].split(".", 1)[1]: r[1] for r in cur.fetchall()}


def _tables(conn, db: str) -> list[str]:
    with conn.cursor() as cur:
        cur.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
                    "AND TABLE_NAME <> '_migrator_sentinel' ORDER BY TABLE_NAME", (db,))
        return [r[0] for r in cur.fetchall()]


@pytest.mark.timeout(600)
def test_rollback_converges_and_flips_back_under_sysbench(fleet, tmp_path):
    source = fleet.sandbox.hosts()[fleet.smap.master_of(MOVING[0])]
    sysbench.prepare(source, fleet.credentials, "db00002", tables=SB_TABLES, table_size=SB_ROWS)
    fleet.sandbox.wait_pairs_converged()
    # the forward cutover is not what is measured here: a roomy budget for it, the default for the rollback
    prep = prepare_converged(fleet, MOVING, options=Options(freeze_budget_ms=3000))
    spec = prep.spec
    maps = ShardMapStore(fleet.zk)
    router = ShardRouter(fleet.zk, fleet.credentials).start()
    writer = Writer(router, shards=MOVING).start()
    cutover(fleet.config, spec.id)
    assert maps.read().master_of(2) == spec.target_master
    set_options(fleet.config, spec.id, freeze_budget_ms=Options().freeze_budget_ms)

    workers = Workers(fleet.config_path, tmp_path).start(1)
    load = sysbench.Background(prep.target, fleet.credentials, "db00002", threads=4, rate=300,
                               tables=SB_TABLES, table_size=SB_ROWS)
    try:
        time.sleep(4)  # a backlog on the new master before the rollback starts
        t0 = time.monotonic()
        started = start_rollback(fleet.config, spec.id, queue=workers.queue)
        events = list(watch.rollback_events(fleet.config, spec.id, started["requested_at"], every=0.2, timeout=400))
        passes = [ev for kind, ev in events if kind == "pass"]
        kind, result = events[-1]
        print(f"rollback under load on RQ: {time.monotonic() - t0:.1f}s, passes (events, s, predicted ms): "
              f"{[(p['events'], p['duration_s'], p['predicted_freeze_ms']) for p in passes]}, {kind} {result}")
        assert kind == "rolled_back", (events[-3:], workers.logs())
    finally:
        time.sleep(0.5)
        sb = load.stop()
        writer.stop()
        workers.stop()
    assert sb.transactions > 300, sb  # the load really ran through the rollback
    assert not writer.errors, writer.errors[:5]
    smap = maps.read()
    assert smap.master_of(2) == spec.source_master and not smap.is_frozen(2)
    assert result["freeze_ms"] < 5000
    assert passes and passes[-1]["converged"]
    assert "freeze" in [kind for kind, _ in events]
    node, _ = prep.store.get_progress(spec.id, PASSES_NODE)
    assert node["passes"] and node["attempts"][-1]["outcome"] == "flipped back"
    st, _ = prep.store.state(spec.id)
    assert st.phase == Phase.ROLLED_BACK

    fleet.sandbox.wait_pairs_converged()
    old = mysql_connect(prep.source, fleet.credentials)
    new = mysql_connect(prep.target, fleet.credentials)
    try:
        tables = _tables(old, "db00002")
        assert {f"sbtest{i}" for i in range(1, SB_TABLES + 1)} <= set(tables)
        assert _tables(new, "db00002") == []  # the new master's tables are its tombstones now
        # pins: the routed writer kept writing the old master after the flip back; its acks are checked below
        tables = [t for t in tables if t != "pins"]
        assert _checksums(old, "db00002", tables) == _checksums(new, tomb_db(spec.id, "db00002"), tables)
        for (shard, lid), data in writer.acks.items():
            with old.cursor() as cur:
                cur.execute(f"SELECT data FROM db{shard:05d}.pins WHERE local_id = %s", (lid,))
                row = cur.fetchone()
            assert row is not None and row[0] == data, (shard, lid)
    finally:
        old.close()
        new.close()
    assert not fleet.sandbox.problems()
