"""A queue-partition cutover: only the partition's table moves, by its own route in the shard map."""

from __future__ import annotations

from migrator.engine.cutover import cutover
from migrator.engine.cutover.hooks import CutoverHooks
from migrator.engine.migration import Options, Phase
from migrator.engine.names import tomb_db
from migrator.engine.rollback import rollback
from migrator.fleet.mysql import connect as mysql_connect
from migrator.fleet.shard_map import ShardMapStore

from .cutover_setup import prepare_converged

SHARD = 6
DB = f"db{SHARD:05d}"
JOBS_DDL = f"""CREATE TABLE `{DB}`.jobs_demo_p0 (
  local_id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT, state TINYINT NOT NULL DEFAULT 0,
  updated_at DATETIME(6) NOT NULL DEFAULT NOW(6), body VARCHAR(200) NOT NULL,
  PRIMARY KEY (local_id, state, updated_at))
  PARTITION BY RANGE COLUMNS(state, updated_at) (
    PARTITION p_new VALUES LESS THAN (1, MAXVALUE), PARTITION p_rest VALUES LESS THAN (MAXVALUE, MAXVALUE))"""
OTHERS = ("pins", "boards", "users", "board_has_pins", "user_has_boards")


def _source(fleet):
    return fleet.hosts[fleet.smap.master_of(SHARD)]


def _make_partition_shard(fleet, *, empty_others: bool) -> None:
    with mysql_connect(_source(fleet), fleet.credentials) as c, c.cursor() as cur:
        cur.execute(JOBS_DDL)
        cur.executemany(f"INSERT INTO `{DB}`.jobs_demo_p0 (body) VALUES (%s)", [(f"job {i}",) for i in range(50)])
        if empty_others:
            for t in OTHERS:
                cur.execute(f"DELETE FROM `{DB}`.`{t}`")


def _spec_kw():
    return dict(kind="queue_partition", tables=("jobs_demo_p0",), options=Options(freeze_budget_ms=2000))


def test_a_queue_partition_moves_on_its_own_route_and_comes_back(fleet):
    """The shard's other tables hold rows and are written during the freeze: the partition's table alone is
    frozen (its route, not the range), moves, and is served from the target; its shard's range never moves
    nor freezes. A rollback flips the route back and drops it."""
    _make_partition_shard(fleet, empty_others=False)
    prep = prepare_converged(fleet, (SHARD,), **_spec_kw())
    with mysql_connect(prep.source, fleet.credentials) as c, c.cursor() as cur:
        cur.execute(f"UPDATE `{DB}`.jobs_demo_p0 SET state = 1, updated_at = NOW(6) ORDER BY local_id LIMIT 10")
        cur.execute(f"INSERT INTO `{DB}`.jobs_demo_p0 (body) VALUES ('late')")
    epoch = ShardMapStore(fleet.zk).read().epoch
    seen = {}

    def sibling_write(_run):
        smap = ShardMapStore(fleet.zk).read()
        seen["frozen"] = (smap.is_frozen(SHARD), smap.is_table_frozen(SHARD, "jobs_demo_p0"),
                          smap.is_table_frozen(SHARD, "boards"))
        with mysql_connect(prep.source, fleet.credentials, read_timeout=5) as c, c.cursor() as cur:
            cur.execute(f"INSERT INTO `{DB}`.boards (data) VALUES ('{{}}')")  # not fenced: it does not move

    res = cutover(fleet.config, prep.spec.id, hooks=CutoverHooks(after_fence=sibling_write))
    assert seen["frozen"] == (False, True, False)
    smap = ShardMapStore(fleet.zk).read()
    assert res.flipped_epoch == epoch + 2
    assert smap.master_of(SHARD) == prep.spec.source_master and not smap.frozen  # the range stays
    assert smap.master_of_table(SHARD, "jobs_demo_p0") == prep.spec.target_master
    assert smap.master_of_table(SHARD, "boards") == prep.spec.source_master
    with mysql_connect(prep.source, fleet.credentials) as src, src.cursor() as cur:
        cur.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s", (DB,))
        left = {r[0] for r in cur.fetchall()}
        assert "jobs_demo_p0" not in left and set(OTHERS) <= left  # only the partition's table moved
        cur.execute(f"CHECKSUM TABLE `{tomb_db(prep.spec.id, DB)}`.jobs_demo_p0")
        before = cur.fetchone()[1]
    with mysql_connect(prep.target, fleet.credentials) as dst, dst.cursor() as cur:
        cur.execute(f"CHECKSUM TABLE `{DB}`.jobs_demo_p0")
        assert cur.fetchone()[1] == before
        cur.execute(f"SELECT COUNT(*), SUM(state = 1) FROM `{DB}`.jobs_demo_p0")
        assert tuple(int(x) for x in cur.fetchone()) == (51, 10)
        cur.execute(f"INSERT INTO `{DB}`.jobs_demo_p0 (body) VALUES ('on the target')")
    st, _ = prep.store.state(prep.spec.id)
    assert st.phase == Phase.DONE

    rollback(fleet.config, prep.spec.id)
    smap = ShardMapStore(fleet.zk).read()
    assert smap.routes == () and not smap.frozen, smap.to_wire()
    assert smap.master_of_table(SHARD, "jobs_demo_p0") == prep.spec.source_master
    with mysql_connect(prep.source, fleet.credentials) as c, c.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM `{DB}`.jobs_demo_p0 WHERE body = 'on the target'")
        assert cur.fetchone()[0] == 1  # the write made on the target came back with the table
        cur.execute(f"SELECT COUNT(*) FROM `{DB}`.boards WHERE data = '{{}}'")
        assert cur.fetchone()[0] >= 1
    st, _ = prep.store.state(prep.spec.id)
    assert st.phase == Phase.ROLLED_BACK
