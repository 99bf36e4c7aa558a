"""A queue-partition cutover: only the partition's table moves; its shard must be its own."""

from __future__ import annotations

import pytest

from migrator.engine.cutover import cutover
from migrator.engine.cutover.errors import CutoverAborted, CutoverError
from migrator.engine.cutover.hooks import CutoverHooks
from migrator.engine.migration import Options, Phase
from migrator.engine.names import tomb_db
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


def test_queue_partition_moves_its_table_and_flips_its_shard(fleet):
    _make_partition_shard(fleet, empty_others=True)
    prep = prepare_converged(fleet, (SHARD,), **_spec_kw())
    with mysql_connect(prep.source, fleet.credentials) as c, c.cursor() as cur:
        cur.execute(f"UPDATE `{DB}`.jobs_demo_p0 SET state = 1, updated_at = NOW(6) ORDER BY local_id LIMIT 10")
        cur.execute(f"INSERT INTO `{DB}`.jobs_demo_p0 (body) VALUES ('late')")
    epoch = ShardMapStore(fleet.zk).read().epoch
    res = cutover(fleet.config, prep.spec.id)
    smap = ShardMapStore(fleet.zk).read()
    assert smap.master_of(SHARD) == prep.spec.target_master and res.flipped_epoch == epoch + 2
    assert smap.master_of(SHARD - 1) == prep.spec.source_master  # the neighbour stays
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
    st, _ = prep.store.state(prep.spec.id)
    assert st.phase == Phase.DONE


def test_queue_partition_refuses_a_shared_shard(fleet):
    _make_partition_shard(fleet, empty_others=False)
    prep = prepare_converged(fleet, (SHARD,), **_spec_kw())
    epoch = ShardMapStore(fleet.zk).read().epoch
    with pytest.raises(CutoverError, match="does not own shard"):
        cutover(fleet.config, prep.spec.id)
    assert ShardMapStore(fleet.zk).read().epoch == epoch


def test_a_sibling_table_written_after_prepare_is_seen_under_the_fence_and_the_freeze_undone(fleet):
    """The shard was the partition's alone when the cutover was prepared; a row lands in another of its tables
    before the flip: refused under the fence, undone, nothing renamed, the source still serves both tables."""
    _make_partition_shard(fleet, empty_others=True)
    prep = prepare_converged(fleet, (SHARD,), **_spec_kw())
    epoch = ShardMapStore(fleet.zk).read().epoch

    def sibling_write(_run):
        with mysql_connect(prep.source, fleet.credentials) as c, c.cursor() as cur:
            cur.execute(f"INSERT INTO `{DB}`.boards (data) VALUES ('{{}}')")

    with pytest.raises(CutoverAborted, match=r"no longer owns shard .*\['boards'\]"):
        cutover(fleet.config, prep.spec.id, hooks=CutoverHooks(after_fence=sibling_write))
    smap = ShardMapStore(fleet.zk).read()
    assert smap.master_of(SHARD) == prep.spec.source_master
    assert not smap.frozen
    assert smap.epoch >= epoch
    with mysql_connect(prep.source, fleet.credentials) as c, c.cursor() as cur:
        cur.execute(f"INSERT INTO `{DB}`.jobs_demo_p0 (body) VALUES ('after the refusal')")  # writable again
        cur.execute(f"SELECT COUNT(*) FROM `{DB}`.boards")
        assert cur.fetchone()[0] == 1
