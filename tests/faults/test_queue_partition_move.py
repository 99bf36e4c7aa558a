"""Fault cell on a queue-partition move: one partition's jobs table moves to the spare pair
under load, and the RQ worker is killed during its catch-up."""

from __future__ import annotations

from migrator.engine.migration import Phase
from migrator.fleet.ids import shard_db
from migrator.fleet.mysql import connect as mysql_connect

from .harness import HOLD_CATCH_UP, FaultRun

SHARD = 3
SEED_TABLES = ("pins", "boards", "users", "board_has_pins", "user_has_boards")


def test_partition_move_with_worker_killed_during_catch_up(fleet, tmp_path):
    # a partition moves by moving its shard, so the shard must hold nothing but the partition
    source = fleet.smap.master_of(SHARD)
    with mysql_connect(fleet.hosts[source], fleet.credentials) as c, c.cursor() as cur:
        for t in SEED_TABLES:
            cur.execute(f"DELETE FROM `{shard_db(SHARD)}`.`{t}`")
    run = FaultRun(fleet, tmp_path).start()
    try:
        target = fleet.sandbox.pairs(spare=True)[0][0]
        spec = run.plan_move_partition(run.partition_on(SHARD), target, **HOLD_CATCH_UP)
        assert spec.kind == "queue_partition" and spec.shards == (SHARD,)
        run.launch()
        run.when(lambda st: st.phase == Phase.CATCHING_UP, run.kill_workers, what="catch-up")
        assert run.state().phase == Phase.CATCHING_UP
        run.start_workers()
        run.release_catch_up()
        run.resume()
        run.wait_phase(Phase.DONE)
        out = run.end_checks()
        assert set(out["tables"]) == {f"{shard_db(SHARD)}.{t}" for t in spec.tables}
    finally:
        run.close()
