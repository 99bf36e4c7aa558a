"""The passive member of the source pair is fenced too: a writer there through the freeze loses nothing.

In a master-master pair a client may write the standby (``MySQL001B``). Its
acknowledged writes must reach the new owner, and both directions of the old
pair must still replicate afterwards.
"""

from __future__ import annotations

import time

import pymysql
import pytest

from migrator.engine.cutover import cutover
from migrator.engine.cutover.errors import CutoverAborted, FreezeBudgetExceeded
from migrator.engine.cutover.hooks import CutoverHooks
from migrator.engine.migration import Options, Phase
from migrator.engine.names import tomb_db
from migrator.fleet.mysql import connect as mysql_connect
from migrator.fleet.router import ShardRouter
from migrator.fleet.shard_map import ShardMapStore

from .cutover_setup import PassiveWriter, Writer, missing_acks, prepare_converged, row_events_after
from .cutover_setup import gate_leftovers as _gate_leftovers
from .cutover_setup import pair_synced as _pair_synced
from .cutover_setup import replicating as _slave_ok

MOVING = (2, 3)
SEED_TABLES = ["pins", "boards", "users", "board_has_pins", "user_has_boards"]


@pytest.mark.parametrize("fence", ["rename", "gate"])
def test_writes_on_the_passive_member_reach_the_target(fleet, fence):
    prep = prepare_converged(fleet, MOVING, options=Options(freeze_budget_ms=3000, fence=fence))
    spec = prep.spec
    passive = fleet.hosts[spec.source_passive]
    assert passive.partner == spec.source_master
    router = ShardRouter(fleet.zk, fleet.credentials).start()
    # a stale client: the gate refuses it at once (1146), so it retries until the flip
    routed = Writer(router, shards=MOVING, patience_s=10.0).start()
    pw = PassiveWriter(passive, fleet.credentials, MOVING).start()
    time.sleep(1.0)
    before = len(pw.acks)
    result = cutover(fleet.config, spec.id)
    time.sleep(0.5)
    pw.stop()
    routed.stop()

    assert before > 0 and pw.refused > 0, (before, pw.refused)
    assert not pw.other_errors, pw.other_errors[:5]
    assert not routed.errors, routed.errors[:5]
    assert {"passive_close", "passive_sync", "passive_finish"} <= set(result.steps_ms)
    assert ("active_finish" in result.steps_ms) == (fence == "gate")
    # every write the passive member acknowledged is on the new owner, with its last value
    target = mysql_connect(prep.target, fleet.credentials)
    try:
        with target.cursor() as cur:
            for (shard, lid), data in pw.acks.items():
                cur.execute(f"SELECT data FROM db{shard:05d}.pins WHERE local_id = %s", (lid,))
                row = cur.fetchone()
                assert row is not None and row[0] == data, (shard, lid)
    finally:
        target.close()
    # both directions of the old pair replicate, both members hold the same tombstones, no gate is left
    a = mysql_connect(prep.source, fleet.credentials)
    b = mysql_connect(passive, fleet.credentials)
    try:
        _pair_synced(a, b)
        _slave_ok(a)
        _slave_ok(b)
        for db in spec.databases:
            tomb = tomb_db(spec.id, db)
            sums = []
            for c in (a, b):
                with c.cursor() as cur:
                    cur.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s", (db,))
                    assert {r[0] for r in cur.fetchall()} <= {"_migrator_sentinel"}
                    cur.execute("CHECKSUM TABLE " + ", ".join(f"`{tomb}`.`{t}`" for t in SEED_TABLES))
                    sums.append([r[1] for r in cur.fetchall()])
            assert sums[0] == sums[1], db
        assert _gate_leftovers(b, spec.databases) == []
        assert _gate_leftovers(a, spec.databases) == []
    finally:
        a.close()
        b.close()
    st, _ = prep.store.state(spec.id)
    assert st.phase == Phase.DONE
    # every write the routed writer saw acknowledged is on the master the map names now
    assert missing_acks(fleet, routed.acks) == []
    # nothing reached the tombstones or the moving dbs on the source after the fence
    tombs = [tomb_db(spec.id, db) for db in spec.databases]
    assert row_events_after(prep.source, fleet.credentials, result.fence_gtid, [*spec.databases, *tombs]) == []


@pytest.mark.parametrize("fence", ["rename", "gate"])
def test_an_undone_freeze_reopens_the_passive_member(fleet, fence):
    prep = prepare_converged(fleet, MOVING, options=Options(freeze_budget_ms=800, fence=fence))
    prep.store.set_phase(prep.spec.id, Phase.CONVERGED, predicted_freeze_ms=10.0)
    spec = prep.spec
    passive = fleet.hosts[spec.source_passive]
    seen: dict[str, object] = {}

    def stall(run):
        # the passive member is closed now (and, with the gate, the master too)
        for name, host in (("closed", passive), ("master closed", prep.source)):
            if name == "master closed" and fence != "gate":
                continue  # the rename fence's lock would make this insert wait, not fail
            with mysql_connect(host, fleet.credentials, read_timeout=5) as c, c.cursor() as cur:
                try:
                    cur.execute("INSERT INTO db00002.pins (data) VALUES ('{\"closed\": 1}')")
                    seen[name] = False
                except pymysql.err.MySQLError as exc:
                    seen[name] = exc.args[0] == 1146
        time.sleep(2.0)  # the watchdog undoes the freeze meanwhile

    with pytest.raises(FreezeBudgetExceeded):
        cutover(fleet.config, spec.id, hooks=CutoverHooks(after_fence=stall))
    assert seen == ({"closed": True, "master closed": True} if fence == "gate" else {"closed": True})
    b = mysql_connect(passive, fleet.credentials)
    a = mysql_connect(prep.source, fleet.credentials)
    try:
        with b.cursor() as cur:
            cur.execute("INSERT INTO db00002.pins (data) VALUES ('{\"open again\": 1}')")
            lid = cur.lastrowid
        assert _gate_leftovers(b, spec.databases) == []
        assert _gate_leftovers(a, spec.databases) == []
        with a.cursor() as cur:
            cur.execute("INSERT INTO db00002.pins (data) VALUES ('{\"master open again\": 1}')")
        _pair_synced(a, b)
        _slave_ok(a)
        _slave_ok(b)
        with a.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM db00002.pins WHERE local_id = %s", (lid,))
            assert cur.fetchone()[0] == 1
    finally:
        a.close()
        b.close()
    st, _ = prep.store.state(spec.id)
    assert st.phase == Phase.CONVERGED


def test_a_lagging_link_inside_the_source_pair_refuses_the_cutover_and_loses_nothing(fleet):
    """The source master applies its partner's writes 2 s late (``MASTER_DELAY``) while a client writes on the
    partner: in any GTID layout (one domain shared by both members included), the gate refuses the cutover
    naming the lag, a freeze that meets the lag is undone by its watchdog in ``passive_sync``, and once the
    link catches up the cutover carries every write the partner acknowledged and both links still replicate
    (before, a shared domain made the wait for the partner's writes wait for nothing: they arrived after the
    rename, stopped the master's SQL thread with 1146 and never reached the new owner)."""
    prep = prepare_converged(fleet, MOVING, options=Options(freeze_budget_ms=800))
    spec = prep.spec
    passive = fleet.hosts[spec.source_passive]
    pw = PassiveWriter(passive, fleet.credentials, MOVING).start()
    sb = fleet.sandbox
    try:
        sb.set_link_delay(spec.source_master, 2)
        time.sleep(1.0)
        # 1. the gate sees the lag: refused before anything is frozen
        with pytest.raises(FreezeBudgetExceeded, match=f"{spec.source_passive}'s writes|the source pair lags"):
            cutover(fleet.config, spec.id)
        assert prep.store.state(spec.id)[0].phase == Phase.CONVERGED
        smap = ShardMapStore(fleet.zk).read()
        assert all(smap.master_of(s) == spec.source_master and not smap.is_frozen(s) for s in MOVING)
        # 2. a freeze that meets the lag (it starts after the gate looked) is undone by its watchdog
        sb.set_link_delay(spec.source_master, 0)

        def lag_now(_run):
            sb.set_link_delay(spec.source_master, 2)
            time.sleep(0.05)  # the partner's client writes meanwhile: they arrive 2 s late

        # (the wait for the partner's writes, or the watchdog, ends it when the budget runs out)
        with pytest.raises((CutoverAborted, FreezeBudgetExceeded), match="lag inside the source pair"):
            cutover(fleet.config, spec.id, hooks=CutoverHooks(after_freeze=lag_now))
        assert prep.store.state(spec.id)[0].phase == Phase.CONVERGED
        acked_while_refused = len(pw.acks)
        time.sleep(0.5)
        assert len(pw.acks) > acked_while_refused, "the partner must take writes again after the undo"
        # 3. the link catches up: the cutover carries everything
        sb.set_link_delay(spec.source_master, 0)
        result = cutover(fleet.config, spec.id)
        time.sleep(0.5)
    finally:
        pw.stop()
        sb.set_link_delay(spec.source_master, 0)
    assert not pw.other_errors, pw.other_errors[:5]
    assert {"passive_close", "passive_sync", "passive_finish"} <= set(result.steps_ms)
    with mysql_connect(prep.target, fleet.credentials) as target, target.cursor() as cur:
        for (shard, lid), data in pw.acks.items():
            cur.execute(f"SELECT data FROM db{shard:05d}.pins WHERE local_id = %s", (lid,))
            row = cur.fetchone()
            assert row is not None and row[0] == data, (shard, lid)
    a = mysql_connect(prep.source, fleet.credentials)
    b = mysql_connect(passive, fleet.credentials)
    try:
        _pair_synced(a, b)
        _slave_ok(a)
        _slave_ok(b)
        assert _gate_leftovers(a, spec.databases) == [] and _gate_leftovers(b, spec.databases) == []
    finally:
        a.close()
        b.close()
    assert prep.store.state(spec.id)[0].phase == Phase.DONE
    tombs = [tomb_db(spec.id, db) for db in spec.databases]
    assert row_events_after(prep.source, fleet.credentials, result.fence_gtid, [*spec.databases, *tombs]) == []
