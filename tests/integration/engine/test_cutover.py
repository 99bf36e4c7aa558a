"""Cutover on the sandbox: fence + sentinel + one-CAS flip under a live writer, and the abort paths."""

from __future__ import annotations

import json
import time

import pytest

from migrator.engine.cutover import cutover
from migrator.engine.cutover.errors import CutoverAborted, FreezeBudgetExceeded, NotConverged
from migrator.engine.cutover.hooks import CutoverHooks
from migrator.engine.migration import MigrationStore, Options, Phase
from migrator.engine.names import tomb_db
from migrator.fleet.mysql import connect as mysql_connect
from migrator.fleet.router import ShardRouter
from migrator.fleet.shard_map import ShardMapStore

from .cutover_setup import Writer, prepare_converged, row_events_after

MOVING = (2, 3)


def _tables(conn, db: str) -> set[str]:
    with conn.cursor() as cur:
        cur.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s", (db,))
        return {r[0] for r in cur.fetchall()}


def _checksum(conn, db: str, tables: list[str]) -> dict[str, int]:
    with conn.cursor() as cur:
        cur.execute("CHECKSUM TABLE " + ", ".join(f"`{db}`.`{t}`" for t in tables))
        return {r[0].split(".", 1)[1]: r[1] for r in cur.fetchall()}


SEED_TABLES = ["pins", "boards", "users", "board_has_pins", "user_has_boards"]


def test_cutover_under_live_writes_loses_nothing(fleet):
    prep = prepare_converged(fleet, MOVING, options=Options(freeze_budget_ms=2000))
    spec = prep.spec
    epoch0 = ShardMapStore(fleet.zk).read().epoch
    router = ShardRouter(fleet.zk, fleet.credentials).start()
    writer = Writer(router, shards=(*MOVING, 1)).start()
    time.sleep(0.8)
    under_fence: dict[str, dict] = {}

    def compare_under_fence(run):
        # the source is fenced and drained: source (through the lock holder) == target
        for db in spec.databases:
            under_fence[db] = {"source": _checksum(run.writer, db, SEED_TABLES),
                               "target": _checksum(run.target_conn, db, SEED_TABLES)}

    result = cutover(fleet.config, spec.id, hooks=CutoverHooks(before_flip=compare_under_fence))
    time.sleep(0.8)
    writer.stop()

    assert not writer.errors, writer.errors[:5]
    assert writer.hosts_used.get(spec.target_master, 0) > 0, writer.hosts_used  # writes continued on the target
    for db, sums in under_fence.items():
        assert sums["source"] == sums["target"], db
    # the map flipped in one CAS after the freeze CAS
    smap = ShardMapStore(fleet.zk).read()
    assert result.flipped_epoch == epoch0 + 2 == smap.epoch
    for s in MOVING:
        assert smap.master_of(s) == spec.target_master and not smap.is_frozen(s)
    assert smap.master_of(1) == spec.source_master
    # every acknowledged write is where the map says, with its last acknowledged value
    by_host = {}
    for (shard, lid), data in writer.acks.items():
        host = fleet.hosts[smap.master_of(shard)]
        if host.name not in by_host:
            by_host[host.name] = mysql_connect(host, fleet.credentials)
        conn = by_host[host.name]
        with conn.cursor() as cur:
            cur.execute(f"SELECT data FROM db{shard:05d}.pins WHERE local_id = %s", (lid,))
            row = cur.fetchone()
        assert row is not None and row[0] == data, (shard, lid)
    for c in by_host.values():
        c.close()
    # nothing reached the tombstones or the moving dbs on the source after the fence
    tombs = [tomb_db(spec.id, db) for db in spec.databases]
    assert row_events_after(prep.source, fleet.credentials, result.fence_gtid, [*spec.databases, *tombs]) == []
    # the source tables are tombstones
    src = mysql_connect(prep.source, fleet.credentials)
    for db, tomb in zip(spec.databases, tombs):
        assert _tables(src, db) <= {"_migrator_sentinel"}
        assert set(SEED_TABLES) <= _tables(src, tomb)
    src.close()
    st, _ = prep.store.state(spec.id)
    assert st.phase == Phase.DONE and st.freeze_ms == result.freeze_ms and st.flipped_epoch == result.flipped_epoch
    assert st.cleanup_after == pytest.approx(time.time() + 24 * 3600, abs=120)
    assert 0 < result.freeze_ms < 2000
    assert result.keys_from == "drain" and result.rows_checked > 0  # the writer's rows were compared
    # the record says where the drain's and the release's time went: each table's RENAME after the UNLOCK
    node, _ = prep.store.get_progress(spec.id, "cutover_attempts")
    flipped = node["attempts"][-1]
    assert {f"{db}.{t}" for db in spec.databases for t in SEED_TABLES} <= set(flipped["released"])
    slowest = list(flipped["released"].values())
    # the renames run behind the freeze: from the UNLOCK (in the release) to the end of the renames step
    steps = flipped["steps_ms"]
    assert slowest == sorted(slowest, reverse=True) and 0 < slowest[0] <= steps["release"] + steps["renames"] + 1
    assert list(steps).index("renames") == list(steps).index("release") + 1, steps
    # its fixed part is kept for the fleet's next first attempts
    data, _ = fleet.zk.client.get(fleet.zk.path("stats/freeze_fixed"))
    kept = json.loads(data)["recent"]
    assert [(e["migration"], e["fence"], e["tables"]) for e in kept] == [(spec.id, "rename", len(flipped["released"]))]
    # where the drain's time went (the following tail may have applied the sentinel's round before the
    # drain began counting: a busy box does that, so the counts may be 0)
    assert {"events", "rounds", "reached_ms", "stopped_ms", "last_round_ms"} <= set(flipped["drained"])
    router_epoch = router.refresh().epoch
    assert router_epoch == smap.epoch


def _assert_source_serving(fleet, prep) -> None:
    spec = prep.spec
    smap = ShardMapStore(fleet.zk).read()
    for s in MOVING:
        assert smap.master_of(s) == spec.source_master and not smap.is_frozen(s)
    src = mysql_connect(prep.source, fleet.credentials)
    for db in spec.databases:
        assert set(SEED_TABLES) <= _tables(src, db)
        assert not _tables(src, tomb_db(spec.id, db))
        with src.cursor() as cur:
            cur.execute(f"INSERT INTO `{db}`.pins (data) VALUES ('{{}}')")
    src.close()
    st, _ = prep.store.state(spec.id)
    assert st.phase == Phase.CONVERGED and st.error and "cutover aborted" in st.error


def test_map_conflict_at_flip_aborts_cleanly(fleet):
    prep = prepare_converged(fleet, MOVING, options=Options(freeze_budget_ms=3000))
    maps = ShardMapStore(fleet.zk)
    router = ShardRouter(fleet.zk, fleet.credentials).start()
    writer = Writer(router, shards=MOVING).start()
    time.sleep(0.3)

    def concurrent_edit(run):  # an operator unfreezes the moving ranges by hand
        cur = maps.read()
        new = cur
        for lo, hi in run.ranges:
            new = new.without_frozen(lo, hi)
        maps.cas(new, cur.epoch, reason="a concurrent operator edit")

    with pytest.raises(CutoverAborted, match="shard map changed during the freeze"):
        cutover(fleet.config, prep.spec.id, hooks=CutoverHooks(before_flip=concurrent_edit))
    time.sleep(0.3)
    writer.stop()
    assert not writer.errors, writer.errors[:5]
    assert set(writer.hosts_used) == {prep.spec.source_master}
    _assert_source_serving(fleet, prep)


def test_a_map_change_elsewhere_during_the_freeze_does_not_stop_the_flip(fleet):
    """Another move's freeze or flip of other ranges (a rebalance's concurrent moves) lands while
    we are frozen: the flip is made on the new map, our ranges being exactly as we froze them."""
    prep = prepare_converged(fleet, (5,), options=Options(freeze_budget_ms=3000))
    maps = ShardMapStore(fleet.zk)

    def elsewhere(run):
        cur = maps.read()
        maps.cas(cur.with_frozen(6, 6), cur.epoch, reason="another move freezes shard 6")

    epoch0 = maps.read().epoch
    result = cutover(fleet.config, prep.spec.id, hooks=CutoverHooks(before_flip=elsewhere))
    smap = maps.read()
    assert result.flipped_epoch == epoch0 + 3 == smap.epoch  # freeze, the other edit, our flip
    assert smap.master_of(5) == prep.spec.target_master and not smap.is_frozen(5)
    assert smap.is_frozen(6) and smap.master_of(6) == prep.spec.source_master  # the other change kept
    maps.cas(smap.without_frozen(6, 6), smap.epoch, reason="the other move is done")


def test_freeze_budget_overrun_aborts_by_itself(fleet):
    prep = prepare_converged(fleet, MOVING, options=Options(freeze_budget_ms=800))
    # the gate lets it in (a measured prediction on a busy machine might not): the stall comes later
    prep.store.set_phase(prep.spec.id, Phase.CONVERGED, predicted_freeze_ms=10.0)
    maps = ShardMapStore(fleet.zk)
    seen: dict[str, object] = {}

    def stall(run):
        time.sleep(2.0)  # the freeze is stuck here; the watchdog must undo it meanwhile
        smap = maps.read()
        seen["frozen"] = any(smap.is_frozen(s) for s in MOVING)
        with mysql_connect(prep.source, fleet.credentials, read_timeout=5) as c, c.cursor() as cur:
            cur.execute("INSERT INTO db00002.pins (data) VALUES ('{\"during\": 1}')")
            seen["wrote"] = cur.rowcount

    t0 = time.monotonic()
    with pytest.raises(FreezeBudgetExceeded, match="overran its budget"):
        cutover(fleet.config, prep.spec.id, hooks=CutoverHooks(after_fence=stall))
    assert time.monotonic() - t0 < 15
    assert seen == {"frozen": False, "wrote": 1}
    _assert_source_serving(fleet, prep)


def test_cutover_refuses_unless_converged(fleet):
    prep = prepare_converged(fleet, (5,))
    prep.store.set_phase(prep.spec.id, Phase.CATCHING_UP)
    epoch = ShardMapStore(fleet.zk).read().epoch
    with pytest.raises(NotConverged, match="not converged"):
        cutover(fleet.config, prep.spec.id)
    assert ShardMapStore(fleet.zk).read().epoch == epoch


def test_predicted_freeze_over_budget_refuses(fleet):
    # the prediction is timed before the freeze (a drain to the head plus the fixed cost of a freeze),
    # and no freeze fits in 1 ms
    prep = prepare_converged(fleet, (5,), options=Options(freeze_budget_ms=1))
    epoch = ShardMapStore(fleet.zk).read().epoch
    with pytest.raises(FreezeBudgetExceeded, match=r"predicted freeze \d+ ms \(a drain of \d+ ms"):
        cutover(fleet.config, prep.spec.id)
    assert ShardMapStore(fleet.zk).read().epoch == epoch
    # the refusal is in the record with what the prediction was made of (no freeze: nothing was frozen)
    node, _ = MigrationStore(fleet.zk).get_progress(prep.spec.id, "cutover_attempts")
    refused = node["attempts"][-1]
    assert refused["outcome"].startswith("refused: predicted freeze") and refused["freeze_ms"] is None
    p = refused["predicted"]
    assert len(p["drain_samples_ms"]) == 3 and p["drain_ms"] == sorted(p["drain_samples_ms"])[1]
    assert p["timed_ms"] == pytest.approx(p["drain_ms"] + p["fixed_ms"] + (p.get("pair_lag_ms") or 0), abs=0.2)
    with mysql_connect(prep.source, fleet.credentials) as c, c.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM db00005.pins")
        assert cur.fetchone()[0] > 0


def test_a_target_standby_that_does_not_replicate_refuses_the_cutover(fleet):
    prep = prepare_converged(fleet, (5,))
    spec = prep.spec
    epoch = ShardMapStore(fleet.zk).read().epoch
    with fleet.sandbox.root_conn(spec.target_passive) as root, root.cursor() as cur:
        cur.execute("STOP SLAVE")
        try:
            with pytest.raises(CutoverAborted, match=f"standby {spec.target_passive}.*not running"):
                cutover(fleet.config, spec.id)
        finally:
            cur.execute("START SLAVE")
    # nothing was frozen or flipped; the migration can cut over once the standby replicates again
    assert ShardMapStore(fleet.zk).read().epoch == epoch
    assert prep.store.state(spec.id)[0].phase == Phase.CONVERGED
    cutover(fleet.config, spec.id)
    assert ShardMapStore(fleet.zk).read().master_of(5) == spec.target_master
