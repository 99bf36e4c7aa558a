"""Rollback on the sandbox: reverse-tail into the tombstones, verify, flip back; no acknowledged write lost."""

from __future__ import annotations

import time

from migrator.engine.cutover import cutover
from migrator.engine.migration import Options, Phase
from migrator.engine.names import tomb_db
from migrator.engine.rollback import rollback
from migrator.fleet.mysql import connect as mysql_connect
from migrator.fleet.router import ShardRouter
from migrator.fleet.shard_map import ShardMapStore

from .cutover_setup import Writer, prepare_converged

MOVING = (2, 3)
SEED_TABLES = ["pins", "boards", "users", "board_has_pins", "user_has_boards"]


def _checksum(conn, db: str) -> dict[str, int]:
    with conn.cursor() as cur:
        cur.execute("CHECKSUM TABLE " + ", ".join(f"`{db}`.`{t}`" for t in SEED_TABLES))
        return {r[0].split(".", 1)[1]: r[1] for r in cur.fetchall()}


def _tables(conn, db: str) -> set[str]:
    with conn.cursor() as cur:
        cur.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s", (db,))
        return {r[0] for r in cur.fetchall()}


def test_rollback_flips_back_with_every_write(fleet):
    prep = prepare_converged(fleet, MOVING, options=Options(freeze_budget_ms=2000))
    spec = prep.spec
    maps = ShardMapStore(fleet.zk)
    router = ShardRouter(fleet.zk, fleet.credentials).start()
    writer = Writer(router, shards=MOVING).start()
    time.sleep(0.5)
    cutover(fleet.config, spec.id)
    time.sleep(0.5)
    # writes that only the new master has: updates, a delete, mapping rows
    new = mysql_connect(prep.target, fleet.credentials)
    with new.cursor() as cur:
        cur.execute("UPDATE db00002.users SET data = '{\"renamed\": true}' WHERE local_id = 1")
        cur.execute("DELETE FROM db00003.board_has_pins ORDER BY pin_id LIMIT 2")
        cur.execute("INSERT INTO db00003.user_has_boards VALUES (1, 2, 3), (4, 5, 6)")
    epoch_after_cutover = maps.read().epoch
    time.sleep(0.3)

    result = rollback(fleet.config, spec.id)
    time.sleep(0.5)
    writer.stop()

    assert not writer.errors, writer.errors[:5]
    smap = maps.read()
    assert result.flipped_epoch == epoch_after_cutover + 2 == smap.epoch
    assert result.keys_from == "drain"  # the reverse tail's own keys were compared under the fence
    for s in MOVING:
        assert smap.master_of(s) == spec.source_master and not smap.is_frozen(s)
    old = mysql_connect(prep.source, fleet.credentials)
    for db in spec.databases:
        tomb = tomb_db(spec.id, db)
        assert set(SEED_TABLES) <= _tables(old, db)             # the old tables are live again
        assert not (set(SEED_TABLES) & _tables(old, tomb))
        assert set(SEED_TABLES) <= _tables(new, tomb)           # the new master's became tombstones
        assert not (set(SEED_TABLES) & _tables(new, db))
    # data matches: the old master's live tables == the new master's tombstones, written after the flip back
    # only by the writer; compare while the writer is stopped, after the last writes
    with new.cursor() as cur:
        cur.execute(f"SELECT data FROM `{tomb_db(spec.id, 'db00002')}`.users WHERE local_id = 1")
        assert cur.fetchone()[0] == '{"renamed": true}'
    with old.cursor() as cur:
        cur.execute("SELECT data FROM db00002.users WHERE local_id = 1")
        assert cur.fetchone()[0] == '{"renamed": true}'
        cur.execute("SELECT COUNT(*) FROM db00003.user_has_boards WHERE (user_id, board_id) IN ((1, 2), (4, 5))")
        assert cur.fetchone()[0] == 2
    for (shard, lid), data in writer.acks.items():
        with old.cursor() as cur:
            cur.execute(f"SELECT data FROM db{shard:05d}.pins WHERE local_id = %s", (lid,))
            row = cur.fetchone()
        assert row is not None and row[0] == data, (shard, lid)
    # every table other than pins saw no writes after the flip back: equal checksums
    for db in spec.databases:
        a, b = _checksum(old, db), _checksum(new, tomb_db(spec.id, db))
        assert {k: v for k, v in a.items() if k != "pins"} == {k: v for k, v in b.items() if k != "pins"}
    old.close()
    new.close()
    st, _ = prep.store.state(spec.id)
    assert st.phase == Phase.ROLLED_BACK and st.freeze_ms == result.freeze_ms


def test_rollback_map_conflict_keeps_the_new_master_serving(fleet):
    from migrator.engine.cutover.errors import CutoverAborted
    from migrator.engine.cutover.hooks import CutoverHooks

    prep = prepare_converged(fleet, (4,), options=Options(freeze_budget_ms=2000))
    spec = prep.spec
    maps = ShardMapStore(fleet.zk)
    cutover(fleet.config, spec.id)

    def concurrent_edit(run):  # an operator unfreezes the moving range by hand
        cur = maps.read()
        maps.cas(cur.without_frozen(4, 4), cur.epoch, reason="a concurrent operator edit")

    try:
        rollback(fleet.config, spec.id, hooks=CutoverHooks(before_flip=concurrent_edit))
        raise AssertionError("the rollback should have aborted")
    except CutoverAborted as exc:
        assert "shard map changed" in str(exc)
    smap = maps.read()
    assert smap.master_of(4) == spec.target_master and not smap.is_frozen(4)
    tomb = tomb_db(spec.id, "db00004")
    with mysql_connect(prep.target, fleet.credentials) as new, new.cursor() as cur:
        assert set(SEED_TABLES) <= _tables(new, "db00004") and not (set(SEED_TABLES) & _tables(new, tomb))
        cur.execute("INSERT INTO db00004.pins (data) VALUES ('{}')")  # the new master still takes writes
    with mysql_connect(prep.source, fleet.credentials) as old:
        assert set(SEED_TABLES) <= _tables(old, tomb) and not (set(SEED_TABLES) & _tables(old, "db00004"))
    st, _ = prep.store.state(spec.id)
    assert st.phase == Phase.DONE and "rollback aborted" in st.error
    # and a second attempt, without the interference, rolls back
    rollback(fleet.config, spec.id)
    assert maps.read().master_of(4) == spec.source_master


def test_rollback_command_runs_on_workers_and_stops_with_the_verdict(fleet, tmp_path):
    """``migrator rollback ID`` enqueues and follows: a rollback that gives up exits non-zero at once with the
    reason and the next step (also in ``migrator status``); run again once fixed, it prints each reverse
    pass, the freeze and the result."""
    import json

    from tests.integration.cli_helpers import run_cli

    from .cutover_setup import Workers

    prep = prepare_converged(fleet, (4,), options=Options(freeze_budget_ms=2000))
    spec = prep.spec
    cutover(fleet.config, spec.id)
    tomb = tomb_db(spec.id, "db00004")
    hide = "_hidden_tombstones"
    workers = Workers(fleet.config_path, tmp_path).start(1)
    try:
        with mysql_connect(prep.source, fleet.credentials) as old, old.cursor() as cur:
            cur.execute(f"CREATE DATABASE `{hide}`")
            cur.execute("RENAME TABLE " + ", ".join(f"`{tomb}`.`{t}` TO `{hide}`.`{t}`" for t in SEED_TABLES))
        res = run_cli("rollback", spec.id, "--queue", workers.queue, "--yes", config=fleet.config_path, timeout=120)
        assert res.returncode == 3, (res.stdout, res.stderr, workers.logs())
        assert "no tombstones" in res.stderr and "next: " in res.stderr, res.stderr
        st = json.loads(run_cli("status", spec.id, "--json", config=fleet.config_path).stdout)
        assert st["phase"] == "done" and st["stopped"]["step"] == "rollback", st["stopped"]
        assert "rollback ID" not in st["stopped"]["next"] and f"rollback {spec.id}" in st["stopped"]["next"]
        assert prep.store.state(spec.id)[0].rollback_requested is None  # `resume` does not restart it

        with mysql_connect(prep.source, fleet.credentials) as old, old.cursor() as cur:
            cur.execute("RENAME TABLE " + ", ".join(f"`{hide}`.`{t}` TO `{tomb}`.`{t}`" for t in SEED_TABLES))
            cur.execute(f"DROP DATABASE `{hide}`")
        res = run_cli("rollback", spec.id, "--queue", workers.queue, "--yes", config=fleet.config_path, timeout=180)
        assert res.returncode == 0, (res.stdout, res.stderr, workers.logs())
        lines = res.stdout.splitlines()
        # one line per event, each with its time and the migration
        assert any(ln[9:].startswith(f"{spec.id}: reverse pass ") for ln in lines), res.stdout
        assert any(ln.endswith(f" {spec.id}: freeze: fenced flip back under way") for ln in lines), res.stdout
        assert lines[-1].startswith(f"rolled back {spec.id} at epoch "), res.stdout
    finally:
        workers.stop()
    assert ShardMapStore(fleet.zk).read().master_of(4) == spec.source_master
    st, _ = prep.store.state(spec.id)
    assert st.phase == Phase.ROLLED_BACK and st.stopped is None


def test_a_rollback_that_lost_its_lease_leaves_the_old_master_to_the_settler(fleet):
    """The flip back renames the old master's tombstones to the live names just before its CAS, on
    tables no attempt owns: only under the settle lock, with the lease checked under it. A rollback
    whose lease is gone there renames nothing and does not flip; its unfreeze and phase writes
    (guarded by the lease) are refused, so the settler settles it (the new master serves, phase
    done), and the next rollback goes through."""
    import pytest

    from migrator.engine.cutover.errors import CutoverAborted
    from migrator.engine.cutover.hooks import CutoverHooks
    from migrator.engine.cutover.reconcile import reconcile

    prep = prepare_converged(fleet, MOVING, options=Options(freeze_budget_ms=20000))
    spec = prep.spec
    maps = ShardMapStore(fleet.zk)
    cutover(fleet.config, spec.id)

    def lose_lease(run):  # as a session expiry would: the ephemeral node goes
        run.lease.zk.client.delete(run.lease.path)

    with pytest.raises(CutoverAborted) as err:
        rollback(fleet.config, spec.id, hooks=CutoverHooks(before_flip=lose_lease))
    assert prep.store.state(spec.id)[0].phase == Phase.ROLLING_BACK  # left to the settler
    assert "lost the rollback's lease" in err.value.message and "nothing was renamed" in err.value.message
    with mysql_connect(prep.source, fleet.credentials) as old:
        for db in spec.databases:  # the old master's tables stayed in the tombstones
            assert not (set(SEED_TABLES) & _tables(old, db))
            assert set(SEED_TABLES) <= _tables(old, tomb_db(spec.id, db))
    smap = maps.read()
    assert all(smap.is_frozen(s) and smap.master_of(s) == spec.target_master for s in MOVING)
    assert reconcile(fleet.config, spec.id) == Phase.DONE
    smap = maps.read()
    assert not smap.frozen and all(smap.master_of(s) == spec.target_master for s in MOVING)
    with mysql_connect(prep.target, fleet.credentials) as new:
        for db in spec.databases:  # the new master serves again
            assert set(SEED_TABLES) <= _tables(new, db)
    rollback(fleet.config, spec.id)
    assert prep.store.state(spec.id)[0].phase == Phase.ROLLED_BACK


def test_rollback_timeout_exits_7_while_the_rollback_waits_its_turn(fleet):
    """Exit 7 (stopped following; the work goes on) through ``migrator rollback --timeout``: the rollback is
    queued where no worker serves yet, so it cannot end within the timeout; the map is untouched."""
    from rq import Queue

    from migrator.errors import ExitCode
    from migrator.fleet import redis_client
    from tests.integration.cli_helpers import assert_one_line_error, run_cli

    prep = prepare_converged(fleet, (4,), options=Options(freeze_budget_ms=2000))
    spec = prep.spec
    cutover(fleet.config, spec.id)
    queue = f"exit7-{spec.id}"
    try:
        started = time.monotonic()
        res = run_cli("rollback", spec.id, "--queue", queue, "--yes", "--timeout", "1", config=fleet.config_path,
                      timeout=120)
        assert_one_line_error(res, "still running after 1s", f"migrator status {spec.id}")
        assert res.returncode == ExitCode.STILL_RUNNING, (res.returncode, res.stdout, res.stderr)
        assert time.monotonic() - started < 60
    finally:
        Queue(queue, connection=redis_client.connect(fleet.config)).empty()  # nobody runs it after this test
    assert ShardMapStore(fleet.zk).read().master_of(4) == spec.target_master
