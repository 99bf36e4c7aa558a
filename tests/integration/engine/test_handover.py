"""A batched migration hands a batch its shards (:mod:`migrator.ops.batched.handover`) on the sandbox.

The batched migration (shards 2 and 3) is converged and verified; shard 3 is handed to a batch.
From then on the batched migration's tail no longer applies shard 3, an older tail of it can no
longer write to the target at all (its fencing token was raised), the batch applies what was
written to shard 3 before and after the hand-over and cuts over alone (shard 2 stays on the
source), the batched migration refuses to cut over itself, and an abort of it drops only the
copy of the shard it still holds. Queue maintenance stays paused on each shard until the migration
holding it ends: the hand-over gives the batch the shard's pause node, the batch's flip releases it,
and nothing is left paused once the batched migration has ended.
"""

from __future__ import annotations

import time

import pytest

from migrator.engine.catch_up.lanes import _EPOCH, Epoch, StaleEpoch
from migrator.engine.cutover import cutover
from migrator.engine.cutover.errors import NotConverged
from migrator.engine.migration import Node, Options, Phase
from migrator.engine.names import tomb_db
from migrator.engine.plan import hold_maintenance_pause, maintenance_paused
from migrator.engine.verify.run import verify_migration
from migrator.fleet.ids import shard_db
from migrator.fleet.mysql import connect as mysql_connect
from migrator.fleet.shard_map import ShardMapStore
from migrator.ops import command
from migrator.ops.batched.handover import HandOverError, hand_over

from .cutover_setup import prepare_converged, source_pair_left_clean


def _insert(conn, shard: int, data: str) -> int:
    with conn.cursor() as cur:
        cur.execute(f"INSERT INTO `db{shard:05d}`.pins (data) VALUES (%s)", (data,))
        new = cur.lastrowid
    conn.commit()
    return new


def _has(conn, shard: int, pid: int) -> bool:
    conn.commit()  # a fresh snapshot
    with conn.cursor() as cur:
        cur.execute(f"SELECT COUNT(*) FROM `db{shard:05d}`.pins WHERE local_id = %s", (pid,))
        return bool(cur.fetchone()[0])


def test_a_batch_is_handed_its_shards_and_cuts_over_alone(fleet):
    prep = prepare_converged(fleet, (2, 3), options=Options(freeze_budget_ms=3000), batched=True)
    pid, store, creds = prep.spec.id, prep.store, fleet.credentials
    hold_maintenance_pause(fleet.zk, prep.spec)  # as the plan does
    for db in prep.spec.databases:  # what the copy records of each table it made on the target
        store.put_progress(pid, f"copy/{db}.pins", {"db": db, "table": "pins", "done": True})
    verify_migration(fleet.config, pid, drainer=prep.drainer)
    prep.drainer.close()  # the batched migration's tail lets go of its applier lock
    src, dst = mysql_connect(prep.source, creds), mysql_connect(prep.target, creds)
    try:
        with dst.cursor() as cur:
            cur.execute(f"SELECT epoch FROM {_EPOCH} WHERE applier = %s", (pid,))
            old_token = int(cur.fetchone()[0])  # the token of the tail that just ran
        before = {2: _insert(src, 2, '{"w": "before"}'), 3: _insert(src, 3, '{"w": "before"}')}
        with pytest.raises(NotConverged, match="in batches"):
            cutover(fleet.config, pid)

        batch = hand_over(fleet.zk, creds, pid, [3], tables=5)

        assert batch.parent == pid and batch.shards == (3,) and not batch.batched
        assert store.spec(pid).shards == (2,)
        st, _ = store.state(pid)
        assert st.batches == [batch.id] and st.batch_tables == {batch.id: 5}
        assert store.holders([2, 3]) == {2: pid, 3: batch.id}
        # the handed-over shard's maintenance pause is the batch's now
        assert maintenance_paused(fleet.zk, 3) == batch.id and maintenance_paused(fleet.zk, 2) == pid
        bst, _ = store.state(batch.id)
        assert bst.phase == Phase.CONVERGED and bst.history[0]["handed_by"] == pid
        parent_ckpt, _ = store.get_progress(pid, Node.CATCHUP)
        assert store.get_progress(batch.id, Node.CATCHUP)[0]["gtid"] == parent_ckpt["gtid"]
        assert store.get_progress(batch.id, Node.VERIFY)[0]["verified_gtid"] == \
            store.get_progress(pid, Node.VERIFY)[0]["verified_gtid"]
        # a tail of the batched migration from before the hand-over can no longer write to the target
        with dst.cursor() as cur, pytest.raises(StaleEpoch):
            Epoch(pid, old_token).check(cur)
        dst.rollback()
        with pytest.raises(HandOverError, match="does not hold"):
            hand_over(fleet.zk, creds, pid, [3])

        after = {2: _insert(src, 2, '{"w": "after"}'), 3: _insert(src, 3, '{"w": "after"}')}
        command.catchup(fleet.config, pid, passes=1)
        assert _has(dst, 2, before[2]) and _has(dst, 2, after[2])
        # shard 3 is the batch's now: the batched migration's pass applied none of it
        assert not _has(dst, 3, before[3]) and not _has(dst, 3, after[3])

        cutover(fleet.config, batch.id)
        smap = ShardMapStore(fleet.zk).read()
        assert smap.master_of(3) == prep.spec.target_master and smap.master_of(2) == prep.spec.source_master
        assert _has(dst, 3, before[3]) and _has(dst, 3, after[3])  # the batch's own drain applied both
        assert store.state(batch.id)[0].phase == Phase.DONE
        assert maintenance_paused(fleet.zk, 3) is None and maintenance_paused(fleet.zk, 2) == pid

        # an abort of the batched migration drops the copy of the shard it still holds, not the batch's
        command.abort(fleet.config, pid)
        with dst.cursor() as cur:
            cur.execute("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME IN "
                        "('db00002', 'db00003')")
            assert {r[0] for r in cur.fetchall()} == {"db00003"}
        assert _has(dst, 3, after[3])
        assert store.holders([2, 3]) == {3: batch.id}
        assert maintenance_paused(fleet.zk, 2) is None and maintenance_paused(fleet.zk, 3) is None
    finally:
        src.close()
        dst.close()


def test_the_pipeline_cuts_over_a_batch_left_open_then_hands_over_the_rest(fleet):
    """The pipeline step that handed a batch its shards died before the batch's cutover: the next run of
    ``finish`` cuts that batch over (it hands nothing new meanwhile), the one after hands over and cuts
    over the rest, and the last ends the batched migration."""
    from jobs import pipeline

    prep = prepare_converged(fleet, (2, 3), options=Options(freeze_budget_ms=3000), batched=True)
    pid, store = prep.spec.id, prep.store
    cfg_path = str(fleet.config.path)
    hold_maintenance_pause(fleet.zk, prep.spec)  # as the plan does
    verify_migration(fleet.config, pid, drainer=prep.drainer)
    prep.drainer.close()
    first = hand_over(fleet.zk, fleet.credentials, pid, [2], tables=5)  # ... and the step died here
    assert maintenance_paused(fleet.zk, 2) == first.id and maintenance_paused(fleet.zk, 3) == pid

    out = pipeline.finish(pid, cfg_path)
    assert out["batch"] == first.id and "cutover" in out, out
    assert store.state(first.id)[0].phase == Phase.DONE and store.spec(pid).shards == (3,)
    assert store.state(pid)[0].batches == [first.id]
    assert maintenance_paused(fleet.zk, 2) is None and maintenance_paused(fleet.zk, 3) == pid

    out = pipeline.finish(pid, cfg_path)  # hands over and cuts over every batch left (here one)
    second = store.state(pid)[0].batches[-1]
    assert out["batches"] == [second] and second != first.id and store.spec(second).shards == (3,), out
    assert store.state(second)[0].phase == Phase.DONE
    timings = store.get_progress(second, Node.HANDOVER)[0]["attempts"][-1]
    assert {"parent_recheck_s", "parent_recheck_events", "hand_over_s", "cutover_s"} <= set(timings), timings
    assert maintenance_paused(fleet.zk, 3) is None
    # pause nodes that still carry the batched migration's id (as a hand-over that did not move them
    # left them) go when it ends
    hold_maintenance_pause(fleet.zk, prep.spec)

    out = pipeline.finish(pid, cfg_path)
    assert out["done"]["batches"] == 2, out
    st, _ = store.state(pid)
    assert st.phase == Phase.CLEANED and store.spec(pid).shards == ()
    assert maintenance_paused(fleet.zk, 2) is None and maintenance_paused(fleet.zk, 3) is None
    smap = ShardMapStore(fleet.zk).read()
    assert smap.master_of(2) == smap.master_of(3) == prep.spec.target_master
    with pytest.raises(command.CommandError, match="in batches"):
        command.start_rollback(fleet.config, pid)


def test_a_batch_handed_over_later_inherits_a_check_refreshed_since_and_re_checks_only_that(fleet):
    """Writes on the shard the batched migration still holds, between two hand-overs: before the second
    hand-over the pipeline refreshes the batched migration's own check (it re-checks those rows), so the
    second batch inherits a ``verified_gtid`` newer than the one full check, and its cutover's first
    re-check reads only the binlog since (none of those rows), not everything since the full check."""
    from jobs import pipeline

    prep = prepare_converged(fleet, (2, 3), options=Options(freeze_budget_ms=3000), batched=True)
    pid, store = prep.spec.id, prep.store
    cfg_path = str(fleet.config.path)
    verify_migration(fleet.config, pid, drainer=prep.drainer)
    prep.drainer.close()
    first_check = store.get_progress(pid, Node.VERIFY)[0]["verified_gtid"]
    first = hand_over(fleet.zk, fleet.credentials, pid, [2], tables=5)
    pipeline.finish(pid, cfg_path)  # cuts the first batch over
    assert store.state(first.id)[0].phase == Phase.DONE

    src = mysql_connect(prep.source, fleet.credentials)
    try:
        written = [_insert(src, 3, f'{{"w": {i}}}') for i in range(40)]  # the batched migration's shard
    finally:
        src.close()
    out = pipeline.finish(pid, cfg_path)  # a pass and a refresh of the check, then the hand-over of shard 3
    (second,) = out["batches"]
    assert store.state(second)[0].phase == Phase.DONE, out
    took = store.get_progress(second, Node.HANDOVER)[0]["attempts"][0]
    assert took["parent_recheck_rows"] >= len(written), took  # the batched migration re-checked them
    inherited = store.get_progress(second, Node.VERIFY)[0]
    assert inherited["handed_by"] == pid and inherited["verified_gtid"] != first_check
    attempts = store.get_progress(second, "cutover_attempts")[0]["attempts"]
    window = attempts[-1]["refresh_rounds"][0]
    # the batch's first re-check window starts where the batched migration's refresh ended: the 40 rows
    # written before it are not in it
    assert window["rows"] < len(written) and window["events"] < len(written), window
    with mysql_connect(prep.target, fleet.credentials) as dst:
        assert all(_has(dst, 3, w) for w in written)


def test_each_batch_re_checks_only_binlog_of_its_own_life(fleet, monkeypatch):
    """Two batches handed over in one pipeline step, right after the full check, with writes on the shard
    the batched migration still holds during the first batch's life: the second batch's check starts at its
    own start (the checkpoint it was handed), so its first re-check reads none of those writes; the batched
    migration's re-check right before the second hand-over covered them, and each re-check's window is
    recorded in events. Before, the batches handed over within 15 s of the full check inherited the full
    check's position and re-read everything written since it (the whole host's binlog, at host scale)."""
    from jobs import pipeline
    from migrator.ops.batched import handover
    from migrator.ops.batched import run as batched

    prep = prepare_converged(fleet, (2, 3), options=Options(freeze_budget_ms=3000), batched=True)
    pid, store = prep.spec.id, prep.store
    prep.drainer.close()
    monkeypatch.setattr(batched, "PARENT_PASS_EVERY_S", 3600.0, raising=False)  # (the old refresh timer)
    # one shard per batch: shard 2 first, then shard 3
    monkeypatch.setattr(batched.sizing, "next_batch", lambda shards, *_a, **_k: sorted(shards)[:1])
    written: list[int] = []
    real_hand_over = handover.hand_over

    def hand_over(zk, creds, mid, shards, **kw):
        spec = real_hand_over(zk, creds, mid, shards, **kw)
        if list(shards) == [2]:  # during the first batch's life, on the shard the batched migration holds
            with mysql_connect(prep.source, fleet.credentials) as src:
                written.extend(_insert(src, 3, f'{{"w": {i}}}') for i in range(40))
        return spec

    monkeypatch.setattr(handover, "hand_over", hand_over)
    out = pipeline.finish(pid, str(fleet.config.path))  # the full check, then both batches
    first, second = store.state(pid)[0].batches
    assert out["batches"] == [first, second] and store.spec(second).shards == (3,), out
    assert store.state(second)[0].phase == Phase.DONE, out
    for b in (first, second):
        inherited = store.get_progress(b, Node.VERIFY)[0]
        assert inherited["from_start"] is True, inherited  # its windows start at its own start
        took = store.get_progress(b, Node.HANDOVER)[0]["attempts"][0]
        assert "parent_recheck_events" in took, took
    took = store.get_progress(second, Node.HANDOVER)[0]["attempts"][0]
    assert took["parent_recheck_rows"] >= len(written), took  # the batched migration re-checked them
    window = store.get_progress(second, "cutover_attempts")[0]["attempts"][-1]["refresh_rounds"][0]
    assert window["events"] < len(written) and window["rows"] < len(written), window
    with mysql_connect(prep.target, fleet.credentials) as dst:
        assert all(_has(dst, 3, w) for w in written)


def test_the_re_check_before_a_hand_over_starts_where_the_last_hand_over_s_check_ended(fleet, monkeypatch):
    """The batched migration's re-check right before each hand-over (``refresh_parent``, one round) starts at
    the position the re-check before the last hand-over stored, the one that batch was handed: never at the
    full check's or any older one. 30 rows written before the first re-check are in its window only; the 10
    written before the second are all the second one reads."""
    from jobs import pipeline
    from migrator.engine.cutover import recheck
    from migrator.engine.records import VerifyNode
    from migrator.fleet.gtid import GtidState
    from migrator.ops.batched import run as batched

    prep = prepare_converged(fleet, (2, 3), options=Options(freeze_budget_ms=3000), batched=True)
    pid, store = prep.spec.id, prep.store
    prep.drainer.close()
    # one shard per batch: shard 2 first, then shard 3
    monkeypatch.setattr(batched.sizing, "next_batch", lambda shards, *_a, **_k: sorted(shards)[:1])
    starts: list[str] = []
    real_refresh = recheck.refresh_verified_gtid

    def refresh(config, st, m, **kw):
        if m.spec.id == pid:  # the batched migration's (each batch's cutover re-checks too)
            starts.append(VerifyNode.parse(st.get_progress(pid, Node.VERIFY)[0]).verified_gtid)
            with mysql_connect(prep.source, fleet.credentials) as src:
                for i in range(30 if len(starts) == 1 else 10):  # on the shard it still holds after both
                    _insert(src, 3, f'{{"r": {len(starts)}, "i": {i}}}')
        return real_refresh(config, st, m, **kw)

    monkeypatch.setattr(recheck, "refresh_verified_gtid", refresh)
    out = pipeline.finish(pid, str(fleet.config.path))  # the full check, then both batches
    first, second = store.state(pid)[0].batches
    assert out["batches"] == [first, second] and store.state(second)[0].phase == Phase.DONE, out
    handed = [store.get_progress(b, Node.VERIFY)[0]["window_from"] for b in (first, second)]
    assert len(starts) == 2, starts
    # the second re-check started at what the first stored and handed to the first batch, past the full check
    assert GtidState.parse(starts[1]) == GtidState.parse(handed[0]), (starts, handed)
    assert GtidState.parse(starts[1]).reaches(GtidState.parse(starts[0])) and starts[1] != starts[0], starts
    took = [store.get_progress(b, Node.HANDOVER)[0]["attempts"][0] for b in (first, second)]
    assert took[0]["parent_recheck_rows"] >= 30, took
    assert 10 <= took[1]["parent_recheck_rows"] < 30 and took[1]["parent_recheck_events"] < 30, took


def test_a_batch_that_flipped_and_then_failed_is_done_gets_its_cleanup_and_the_split_goes_on(fleet, monkeypatch):
    """Every batch's cutover raises after its flip and its release (its renames done, the members' finish not):
    a batch left open by a step that died (cut over by the next step on its own) and a batch handed over and
    cut over in a flight. Each time the pipeline settles the batch from the map, as a settler would, finds
    it flipped (``done``), schedules its cleanup and goes on with the split; it never reports such a batch
    as one that "did not flip", and never tries it again. Before, the step looked at a batch in ``cutover``
    again and again (left to a worker's settler), a flight's batch was retried as a cutover, and neither got
    its cleanup."""
    import dataclasses

    from jobs import pipeline
    from migrator.engine import cutover as cutover_mod
    from migrator.engine.cutover.hooks import CutoverHooks

    prep = prepare_converged(fleet, (2, 3), options=Options(freeze_budget_ms=3000), batched=True)
    pid, store = prep.spec.id, prep.store
    cfg_path = str(fleet.config.path)
    verify_migration(fleet.config, pid, drainer=prep.drainer)
    prep.drainer.close()
    failed: list[str] = []
    real_cutover = cutover_mod.cutover

    def cutover_failing_after_its_release(config, mid, *, hooks=None, **kw):
        hooks = hooks or CutoverHooks()
        inner = hooks.at_step

        def at_step(view, step):
            if inner is not None:
                inner(view, step)
            if step == "renames" and mid not in failed:
                failed.append(mid)
                raise RuntimeError("lost after the release")

        return real_cutover(config, mid, hooks=dataclasses.replace(hooks, at_step=at_step), **kw)

    monkeypatch.setattr(cutover_mod, "cutover", cutover_failing_after_its_release)
    first = hand_over(fleet.zk, fleet.credentials, pid, [2], tables=5)  # ... and the step died here

    out = pipeline.finish(pid, cfg_path)  # cuts the open batch over: it flips, then fails
    assert failed == [first.id] and store.state(first.id)[0].phase == Phase.DONE, out
    assert out.get("cleanup_job") and "flipped" in out["next"] and "did not flip" not in out["next"], out

    out = pipeline.finish(pid, cfg_path)  # hands shard 3 to a batch and cuts it over in a flight
    second = store.state(pid)[0].batches[-1]
    assert failed == [first.id, second] and out["batches"] == [second], out
    assert store.state(second)[0].phase == Phase.DONE
    assert "lost after the release" in out["after_flip"][second] and out["cleanup_jobs"][second], out
    assert "did not flip" not in out["next"], out
    for b in (first.id, second):
        attempts = store.get_progress(b, "cutover_attempts")[0] or {}
        assert not attempts.get("next_try"), attempts  # never scheduled to be tried again

    out = pipeline.finish(pid, cfg_path)
    assert out["done"]["batches"] == 2, out
    smap = ShardMapStore(fleet.zk).read()
    assert smap.master_of(2) == smap.master_of(3) == prep.spec.target_master and not smap.frozen


def test_an_abort_that_races_a_hand_over_leaves_the_new_batch_its_copy(fleet, monkeypatch):
    """A hand-over commits while ``migrator abort`` of the batched migration runs, right before the abort sets its
    phase: the abort drops the copy of the shard the batched migration still holds and leaves the batch's
    (its copy on the target, its shard lock, its maintenance pause). Before, the abort read the spec first and
    dropped the copies of both shards, the new batch's included."""
    from migrator.engine.migration import MigrationStore

    prep = prepare_converged(fleet, (2, 3), options=Options(freeze_budget_ms=3000), batched=True)
    pid, store, creds = prep.spec.id, prep.store, fleet.credentials
    hold_maintenance_pause(fleet.zk, prep.spec)  # as the plan does
    for db in prep.spec.databases:  # what the copy records of each table it made on the target
        store.put_progress(pid, f"copy/{db}.pins", {"db": db, "table": "pins", "done": True})
    verify_migration(fleet.config, pid, drainer=prep.drainer)
    prep.drainer.close()
    handed = []
    real_set_phase = MigrationStore.set_phase

    def set_phase(self, migration_id, phase, **kw):
        if migration_id == pid and phase == Phase.ABORTED and not handed:  # the hand-over lands first
            handed.append(hand_over(fleet.zk, creds, pid, [3], tables=5))
        return real_set_phase(self, migration_id, phase, **kw)

    monkeypatch.setattr(MigrationStore, "set_phase", set_phase)
    out = command.abort(fleet.config, pid)
    (batch,) = handed
    assert out["dropped"] == ["db00002"], out
    with mysql_connect(prep.target, creds) as dst, dst.cursor() as cur:
        cur.execute("SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME IN ('db00002', 'db00003')")
        assert {r[0] for r in cur.fetchall()} == {"db00003"}
        cur.execute("SELECT COUNT(*) FROM db00003.pins")
        assert cur.fetchone()[0] > 0
    assert store.holders([2, 3]) == {3: batch.id}
    assert maintenance_paused(fleet.zk, 3) == batch.id and maintenance_paused(fleet.zk, 2) is None
    assert store.state(batch.id)[0].phase == Phase.CONVERGED and store.state(pid)[0].phase == Phase.ABORTED


def _cutover_logging(monkeypatch, events: list[tuple[float, str, str]], *, slow_freeze_s: float = 0.0):
    """Wrap the cutover the pipeline's batches run: log ``(time, batch, step)`` of each freeze step and of the
    moment its gates are installed (``gated``); a batch of more than one shard sleeps ``slow_freeze_s`` inside
    its freeze (after the fence), as a busier moment would make it."""
    import dataclasses

    from migrator.engine import cutover as cutover_mod
    from migrator.engine.cutover.hooks import CutoverHooks

    real_cutover = cutover_mod.cutover

    def cutover(config, mid, *, hooks=None, **kw):
        hooks = hooks or CutoverHooks()
        inner_step, inner_gates = hooks.at_step, getattr(hooks, "after_gates", None)

        def at_step(view, step):
            events.append((time.time(), mid, step))
            if inner_step is not None:
                inner_step(view, step)

        def after_gates(view):
            events.append((time.time(), mid, "gated"))
            if inner_gates is not None:
                inner_gates(view)

        def after_fence(view):
            if slow_freeze_s and len(view.spec.shards) > 1:
                time.sleep(slow_freeze_s)

        gated = {"after_gates": after_gates} if hasattr(hooks, "after_gates") else {}
        return real_cutover(config, mid, hooks=dataclasses.replace(hooks, at_step=at_step, after_fence=after_fence,
                                                                   **gated), **kw)

    monkeypatch.setattr(cutover_mod, "cutover", cutover)


def test_a_batch_whose_freeze_overruns_gives_half_its_shards_to_a_new_batch_and_the_split_goes_on(fleet, monkeypatch):
    """The first batch (shards 1 and 2) overruns its freeze budget (a busier moment than its size was made for):
    the watchdog undoes it, and its flight gives its later shard to a new batch listed right after it (with
    its shard lock, its maintenance pause, the checkpoint and the check) and tries the smaller batch again at
    once, in its place; the new batch is cut over next, before anything more is handed over, and the
    batched migration ends. A batch left open by a step that died (cut over on its own by the next step) is
    made smaller the same way, and tried again after the first backoff. Before, a batch kept its shards,
    overran at every try until its retry window was over, and the split stopped."""
    from jobs import pipeline

    prep = prepare_converged(fleet, (1, 2, 3), options=Options(freeze_budget_ms=1000), batched=True)
    pid, store = prep.spec.id, prep.store
    cfg_path = str(fleet.config.path)
    hold_maintenance_pause(fleet.zk, prep.spec)  # as the plan does
    verify_migration(fleet.config, pid, drainer=prep.drainer)
    prep.drainer.close()
    events: list[tuple[float, str, str]] = []
    _cutover_logging(monkeypatch, events, slow_freeze_s=1.3)
    from migrator.ops.batched import run as batched

    real_next_batch = batched.sizing.next_batch
    monkeypatch.setattr(batched.sizing, "next_batch", lambda shards, *a, **k: [s for s in shards if s in (1, 2)]
                        or real_next_batch(shards, *a, **k))

    out = pipeline.finish(pid, cfg_path)  # the first batch takes shards 1 and 2, overruns, and is made smaller
    # listed in the order of their shards: the given batch right after the one that gave it its shard; flown in
    # the order they were ready (shard 3 was handed over while the first batch prepared)
    first, given, last = store.state(pid)[0].batches
    assert out["batches"] == [first, last, given], out
    assert store.spec(first).shards == (1,) and store.spec(given).shards == (2,) and store.spec(last).shards == (3,)
    assert all(store.state(b)[0].phase == Phase.DONE for b in (first, given, last)), out
    attempts = store.get_progress(first, "cutover_attempts")[0]["attempts"]
    assert "overran" in attempts[0]["outcome"] and attempts[-1]["outcome"] == "flipped", attempts
    handed = store.get_progress(given, Node.VERIFY)[0]
    assert handed["handed_by"] == first and handed["verified_gtid"]
    assert store.state(given)[0].history[0]["handed_by"] == first
    st, _ = store.state(pid)
    assert st.batch_tables[given] == 5 and st.batch_tables[first] == 5, st.batch_tables
    # the first batch tried again at once, in its place: before the batch behind it froze
    freezes = [b for _, b, step in sorted(events) if step == "freeze_cas"]
    assert freezes == [first, first, last, given], freezes
    out = pipeline.finish(pid, cfg_path)
    assert out["done"]["batches"] == 3, out
    smap = ShardMapStore(fleet.zk).read()
    assert all(smap.master_of(s) == prep.spec.target_master for s in (1, 2, 3)) and not smap.frozen
    assert all(maintenance_paused(fleet.zk, s) is None for s in (1, 2, 3))
    with mysql_connect(prep.source, fleet.credentials) as src, mysql_connect(prep.target, fleet.credentials) as dst:
        for shard, batch in ((1, first), (2, given), (3, last)):
            with src.cursor() as a, dst.cursor() as b:
                a.execute(f"CHECKSUM TABLE `{tomb_db(batch, shard_db(shard))}`.pins")
                b.execute(f"CHECKSUM TABLE `{shard_db(shard)}`.pins")
                assert a.fetchone()[1] == b.fetchone()[1]
    # no trigger of the undone attempt is left on the tables the first batch gave away (nor any other)
    source_pair_left_clean(fleet.credentials, prep.source, fleet.hosts[prep.spec.source_passive])


def test_an_open_batch_whose_freeze_overruns_is_made_smaller_by_the_next_step(fleet, monkeypatch):
    """A batch of shards 2 and 3 was handed over by a step that died: the next step cuts it over on its own; it
    overruns, gives shard 3 to a new batch (its lock and maintenance pause too) and is tried again after the
    first backoff, not after a doubling one; both then flip."""
    from jobs import pipeline

    prep = prepare_converged(fleet, (2, 3), options=Options(freeze_budget_ms=1000), batched=True)
    pid, store = prep.spec.id, prep.store
    cfg_path = str(fleet.config.path)
    hold_maintenance_pause(fleet.zk, prep.spec)
    verify_migration(fleet.config, pid, drainer=prep.drainer)
    prep.drainer.close()
    _cutover_logging(monkeypatch, [], slow_freeze_s=1.3)
    first = hand_over(fleet.zk, fleet.credentials, pid, [2, 3], tables=10)  # ... and the step died here

    out = pipeline.finish(pid, cfg_path)
    _, given = store.state(pid)[0].batches
    assert "ran over its budget" in out["next"] and given in out["next"] and "in 2 s" in out["next"], out
    assert store.spec(first.id).shards == (2,) and store.spec(given).shards == (3,)
    assert store.holders([2, 3]) == {2: first.id, 3: given} and maintenance_paused(fleet.zk, 3) == given
    for done in (first.id, given):
        out = pipeline.finish(pid, cfg_path)
        assert out["batch"] == done and store.state(done)[0].phase == Phase.DONE, out


def test_the_next_batch_is_handed_over_while_the_one_before_freezes_and_freezes_only_after_it(fleet, monkeypatch):
    """Three one-shard batches in one pipeline step: each batch after the first is handed over (the batched
    migration's re-check, the hand-over) while the one before it prepares, so its fences, gate and re-check
    are ready when that one's freeze ends; still one freeze at a time: a batch freezes only once the one
    before it has released its freeze and renamed its tables on the master. Before, the next batch was
    handed over only once the one before had released its freeze."""
    from jobs import pipeline
    from migrator.ops.batched import run as batched

    prep = prepare_converged(fleet, (1, 2, 3), options=Options(freeze_budget_ms=3000), batched=True)
    pid, store = prep.spec.id, prep.store
    verify_migration(fleet.config, pid, drainer=prep.drainer)
    prep.drainer.close()
    monkeypatch.setattr(batched.sizing, "next_batch", lambda shards, *_a, **_k: sorted(shards)[:1])
    events: list[tuple[float, str, str]] = []
    _cutover_logging(monkeypatch, events)

    out = pipeline.finish(pid, str(fleet.config.path))
    batches = store.state(pid)[0].batches
    assert out["batches"] == batches and len(batches) == 3, out
    assert all(store.state(b)[0].phase == Phase.DONE for b in batches), out

    def at(batch: str, step: str) -> float:
        (t,) = [t for t, b, s in events if b == batch and s == step]
        return t

    # the second batch is handed over while the first prepares (the first's prepare, gate and re-check take
    # longer than the batched migration's re-check and the hand-over)
    assert store.state(batches[1])[0].history[0]["when"] < at(batches[0], "release")
    for before, after in zip(batches, batches[1:]):
        assert at(after, "freeze_cas") > at(before, "renames"), (before, after)  # one freeze at a time
    # the third, handed over once the first had released its freeze, predicts its freeze from that one's
    tries = store.get_progress(batches[2], "cutover_attempts")[0]["attempts"]
    assert tries[0]["predicted"]["fixed_from"] == "fleet", tries[0]
