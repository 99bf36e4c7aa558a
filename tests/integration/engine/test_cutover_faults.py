"""Cutover faults on the sandbox: a cutover that died midway, and ZooKeeper lost during the flip.

Either way the system ends wholly before or wholly after the flip: the map and
the place of the source tables agree.
"""

from __future__ import annotations

import threading
import time

from migrator.engine.cutover import cutover
from migrator.engine.cutover.errors import CutoverAborted
from migrator.engine.cutover.hooks import CutoverHooks
from migrator.engine.cutover.passive_gate import TriggerGate
from migrator.engine.cutover.reconcile import reconcile
from migrator.engine.migration import Options, Phase
from migrator.engine.names import tomb_db, tomb_suffix
from migrator.fleet.mysql import connect as mysql_connect
from migrator.fleet.router import ShardRouter
from migrator.fleet.shard_map import ShardMapStore

from .cutover_setup import Writer, prepare_converged

MOVING = (2, 3)
SEED_TABLES = {"pins", "boards", "users", "board_has_pins", "user_has_boards"}


def _tables(conn, db: str) -> set[str]:
    with conn.cursor() as cur:
        cur.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s", (db,))
        return {r[0] for r in cur.fetchall()}


def _rename(conn, pairs: list[tuple[str, str]]) -> None:
    """As the fence renames: on this member only (not binlogged)."""
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute("RENAME TABLE " + ", ".join(f"{a} TO {b}" for a, b in pairs))
        cur.execute("SET SESSION sql_log_bin = 1")


def _where(fleet, prep) -> str:
    """'before' or 'after' the flip, asserting map and tables agree."""
    spec = prep.spec
    smap = ShardMapStore(fleet.zk).read()
    assert not any(smap.is_frozen(s) for s in MOVING)
    masters = {smap.master_of(s) for s in MOVING}
    assert len(masters) == 1
    with mysql_connect(prep.source, fleet.credentials) as src:
        live = [SEED_TABLES <= _tables(src, db) for db in spec.databases]
        dead = [SEED_TABLES <= _tables(src, tomb_db(spec.id, db)) for db in spec.databases]
    if masters == {spec.target_master}:
        assert not any(live) and all(dead)
        return "after"
    assert masters == {spec.source_master} and all(live) and not any(dead)
    return "before"


def test_interrupted_before_the_flip_is_undone_then_cut_over(fleet):
    prep = prepare_converged(fleet, MOVING, options=Options(freeze_budget_ms=2000))
    spec = prep.spec
    maps = ShardMapStore(fleet.zk)
    # the state a crash leaves: ranges frozen, phase cutover, the passive member's gate closed,
    # the fence's RENAMEs ran on the master when its connections died
    passive = fleet.hosts[spec.source_slave]
    gate = TriggerGate(passive, fleet.credentials, [(db, t) for db in spec.databases for t in sorted(SEED_TABLES)],
                       tomb_suffix(spec.id), {db: tomb_db(spec.id, db) for db in spec.databases}).open()
    gate.install()
    gate.close(5)
    gate.close_connection()
    cur = maps.read()
    frozen = cur
    for lo, hi in spec.ranges():
        frozen = frozen.with_frozen(lo, hi)
    maps.cas(frozen, cur.epoch, reason="test: a cutover froze and died")
    prep.store.set_phase(spec.id, Phase.CUTOVER)
    with mysql_connect(prep.source, fleet.credentials) as src:
        for db in spec.databases:
            with src.cursor() as c:
                c.execute(f"CREATE DATABASE `{tomb_db(spec.id, db)}`")
            _rename(src, [(f"`{db}`.`{t}`", f"`{tomb_db(spec.id, db)}`.`{t}`") for t in sorted(SEED_TABLES)])

    assert reconcile(fleet.config, spec.id) == Phase.CONVERGED
    assert _where(fleet, prep) == "before"
    st, _ = prep.store.state(spec.id)
    assert "interrupted before the flip" in st.error
    with mysql_connect(passive, fleet.credentials) as b, b.cursor() as c:  # the passive member is open again
        c.execute("SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE TRIGGER_SCHEMA IN ('db00002', 'db00003')")
        assert c.fetchone()[0] == 0
        c.execute("INSERT INTO db00002.pins (data) VALUES ('{}')")

    result = cutover(fleet.config, spec.id)  # and a cutover from there works
    assert _where(fleet, prep) == "after" and result.flipped_epoch == maps.read().epoch


def test_interrupted_after_the_flip_is_finished(fleet):
    prep = prepare_converged(fleet, MOVING, options=Options(freeze_budget_ms=2000))
    spec = prep.spec
    maps = ShardMapStore(fleet.zk)
    cur = maps.read()
    flipped = cur
    for lo, hi in spec.ranges():
        flipped = flipped.reassign(lo, hi, spec.target_master, spec.target_slave)
    maps.cas(flipped, cur.epoch, reason="test: a cutover flipped and died before its RENAMEs ran")
    prep.store.set_phase(spec.id, Phase.CUTOVER)

    assert reconcile(fleet.config, spec.id) == Phase.DONE
    assert _where(fleet, prep) == "after"
    st, _ = prep.store.state(spec.id)
    assert st.phase == Phase.DONE and st.cleanup_after is not None and "after the flip" in st.error


def test_zookeeper_lost_during_the_flip_ends_wholly_before_or_after(fleet):
    """ZooKeeper is stopped just before the flip CAS and restarted 1.5 s later."""
    prep = prepare_converged(fleet, MOVING, options=Options(freeze_budget_ms=2000))
    spec = prep.spec
    router = ShardRouter(fleet.zk, fleet.credentials).start()
    writer = Writer(router, shards=MOVING).start()
    time.sleep(0.3)
    sb = fleet.sandbox
    restarter: list[threading.Thread] = []

    def lose_zookeeper(run):
        sb.stop_host("zookeeper")

        def back() -> None:
            time.sleep(1.5)
            sb.start_host("zookeeper")

        t = threading.Thread(target=back, daemon=True)
        t.start()
        restarter.append(t)

    outcome = "after"
    try:
        cutover(fleet.config, spec.id, hooks=CutoverHooks(before_flip=lose_zookeeper))
    except CutoverAborted as exc:
        assert "ZooKeeper" in str(exc)
        outcome = "before"
    finally:
        for t in restarter:
            t.join(30)
        if not sb.state.procs["zookeeper"].alive():
            sb.start_host("zookeeper")
    time.sleep(0.5)
    writer.stop()
    assert _where(fleet, prep) == outcome
    st, _ = prep.store.state(spec.id)
    assert st.phase == (Phase.DONE if outcome == "after" else Phase.CONVERGED)
    assert not writer.errors, writer.errors[:5]
    smap = ShardMapStore(fleet.zk).read()
    with mysql_connect(fleet.hosts[smap.master_of(MOVING[0])], fleet.credentials) as c, c.cursor() as cur:
        for (shard, lid), data in writer.acks.items():
            cur.execute(f"SELECT data FROM db{shard:05d}.pins WHERE local_id = %s", (lid,))
            assert cur.fetchone()[0] == data
    print(f"ZooKeeper loss during the flip ended {outcome} the flip")
