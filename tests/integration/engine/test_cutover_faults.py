"""Cutover faults on the sandbox: a cutover that died midway, and ZooKeeper lost during the flip.

Either way the system ends wholly before or wholly after the flip: the map and
the place of the source tables agree.
"""

from __future__ import annotations

import threading
import time

import pymysql
import pytest
from kazoo.exceptions import ConnectionLoss, KazooException

from migrator.engine.cutover import cutover
from migrator.engine.cutover.errors import CutoverAborted
from migrator.engine.cutover.hooks import CutoverHooks
from migrator.engine.cutover.reconcile import reconcile
from migrator.engine.cutover.trigger_gate import TriggerGate
from migrator.engine.migration import Options, Phase
from migrator.engine.names import tomb_db, tomb_suffix
from migrator.fleet.mysql import connect as mysql_connect
from migrator.fleet.router import ShardRouter
from migrator.fleet.shard_map import ShardMapStore
from tests.fleet import pause_zookeeper, with_session_timeout

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


def _acked_on(fleet, owner: str, acks: dict) -> None:
    """Every acknowledged write ``(shard, local_id) -> data`` is on ``owner`` with its last value."""
    with mysql_connect(fleet.hosts[owner], fleet.credentials) as c, c.cursor() as cur:
        for (shard, lid), data in acks.items():
            cur.execute(f"SELECT data FROM db{shard:05d}.pins WHERE local_id = %s", (lid,))
            row = cur.fetchone()
            assert row is not None and row[0] == data, (shard, lid, row, data)


def _pair_settled(fleet, first, second, spec, where: str) -> None:
    """Both members of a pair: replicating both ways, no gate left, the moving tables wholly live
    (``where == "before"``) or wholly in the tombstones (``"after"``)."""
    from .cutover_setup import gate_leftovers, pair_synced, replicating, tables_in

    with mysql_connect(first, fleet.credentials) as a, mysql_connect(second, fleet.credentials) as b:
        pair_synced(a, b)
        replicating(a)
        replicating(b)
        for c in (a, b):
            assert gate_leftovers(c) == []
            for db in spec.databases:
                live, dead = tables_in(c, db), tables_in(c, tomb_db(spec.id, db))
                if where == "after":
                    assert not (live & SEED_TABLES) and SEED_TABLES <= dead, (db, live, dead)
                else:
                    assert SEED_TABLES <= live and not (dead & SEED_TABLES), (db, live, dead)


def _intercept_map_commit(run, on_commit):
    """The next ZooKeeper transaction of ``run``'s client (a cutover run's, or its map edits') that writes the
    shard map (the freeze, the flip)
    commits through ``on_commit(commit_async)``; other transactions (a settle lock) go through as they are.
    Returns the client's own ``transaction``, to put back."""
    client = run.maps.zk.client
    plain = client.transaction

    def intercepted():
        tx = plain()
        commit_async = tx.commit_async

        def commit():
            if not any(getattr(op, "path", None) == run.maps.path for op in tx.operations):
                return commit_async()
            client.transaction = plain  # this one transaction only
            return on_commit(commit_async)

        tx.commit_async = commit
        return tx

    client.transaction = intercepted
    return plain


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
    passive = fleet.hosts[spec.source_passive]
    gate = TriggerGate(passive, fleet.credentials, [(db, t) for db in spec.databases for t in sorted(SEED_TABLES)],
                       tomb_suffix(spec.id), {db: tomb_db(spec.id, db) for db in spec.databases}).open()
    gate.install()
    gate.shut(5)
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


def _add_view(fleet, prep) -> None:
    """A view in a moving shard on the source pair (it stays where it is: only base tables move)."""
    with mysql_connect(prep.source, fleet.credentials) as src, src.cursor() as c:
        c.execute("CREATE VIEW db00002.v_pins AS SELECT local_id FROM db00002.pins")


@pytest.mark.parametrize("with_view", [False, True], ids=["tables", "and_a_view"])
def test_interrupted_after_the_flip_is_finished(fleet, with_view):
    prep = prepare_converged(fleet, MOVING, options=Options(freeze_budget_ms=2000))
    spec = prep.spec
    if with_view:  # a view is no table to rename (RENAME of a view across schemas is refused)
        _add_view(fleet, prep)
    maps = ShardMapStore(fleet.zk)
    cur = maps.read()
    flipped = cur
    for lo, hi in spec.ranges():
        flipped = flipped.reassign(lo, hi, spec.target_master, spec.target_passive)
    maps.cas(flipped, cur.epoch, reason="test: a cutover flipped and died before its RENAMEs ran")
    prep.store.set_phase(spec.id, Phase.CUTOVER)

    assert reconcile(fleet.config, spec.id) == Phase.DONE
    assert _where(fleet, prep) == "after"
    st, _ = prep.store.state(spec.id)
    assert st.phase == Phase.DONE and st.cleanup_after is not None and "after the flip" in st.error
    if with_view:
        with mysql_connect(prep.source, fleet.credentials) as src:
            assert "v_pins" in _tables(src, "db00002")  # left in place


@pytest.mark.parametrize("answer", ["lost", "never_sent"])
def test_an_unanswered_freeze_ends_wholly_before_or_after(fleet, monkeypatch, answer):
    """The freeze CAS gets no answer: ``lost``, it committed and only its answer is lost (the map read back
    shows the ranges frozen: the freeze goes on and the cutover flips); ``never_sent``, it never reached
    ZooKeeper (the map shows nothing frozen, and an unanswered request may still commit): the decision goes
    to the settler, which gives the lease up (the freeze is guarded by it) and unfreezes from the map. Never
    ranges left frozen with no one to unfreeze them; every routed write on the final owner."""
    from migrator.engine.cutover.maps import MapEdits

    prep = prepare_converged(fleet, MOVING, options=Options(freeze_budget_ms=2000))
    spec = prep.spec
    plain_freeze = MapEdits._freeze_once

    def unanswered_freeze(edits):
        def unanswered(commit_async):
            if answer == "lost":
                commit_async().get()
            raise ConnectionLoss()

        plain = _intercept_map_commit(edits, unanswered)
        try:
            return plain_freeze(edits)
        finally:
            edits.maps.zk.client.transaction = plain

    monkeypatch.setattr(MapEdits, "_freeze_once", unanswered_freeze)
    router = ShardRouter(fleet.zk, fleet.credentials).start()
    writer = Writer(router, shards=MOVING).start()
    time.sleep(0.3)
    outcome = "after"
    try:
        cutover(fleet.config, spec.id, drainer=prep.drainer)
    except CutoverAborted as exc:
        assert "during the freeze" in exc.message and "undone" in exc.message, exc.message
        outcome = "before"
    time.sleep(0.3)
    writer.stop()
    assert outcome == ("after" if answer == "lost" else "before")
    assert _where(fleet, prep) == outcome
    assert prep.store.state(spec.id)[0].phase == (Phase.DONE if outcome == "after" else Phase.CONVERGED)
    assert not fleet.zk.client.exists(fleet.zk.path("cutovers", spec.id))
    assert not writer.errors, writer.errors[:5]
    if outcome == "before":  # and the next attempt, answered, flips
        monkeypatch.setattr(MapEdits, "_freeze_once", plain_freeze)
        cutover(fleet.config, spec.id, drainer=prep.drainer)
        assert _where(fleet, prep) == "after"
    prep.drainer.close()
    _acked_on(fleet, ShardMapStore(fleet.zk).read().master_of(MOVING[0]), writer.acks)


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


# -- ZooKeeper paused at the flip CAS: an unknown outcome keeps the fences closed -------------------

#: the ZooKeeper sessions of the tests that pause the server at the flip (the cutover's, the workers'): as short
#: as a cutover's lease (4 s) and a second longer
SESSION_S = 5.0
#: past both session timeouts of the cutover (:data:`SESSION_S`, its lease's 4 s) by more than the server's tick
PAUSE_S = 8.0


def _pause_at_the_flip_cas(sb, reread: str, resumer: list[threading.Thread]):
    """A ``before_flip`` hook: pause the server the moment the flip's transaction is committed, so
    the request goes out to a server that holds it, unanswered, until it resumes (``PAUSE_S``).
    ``no_answer``/``lost_answer``: the run gives up reading the map back while the server is still
    paused; ``lost_answer``: the transaction commits first and only its answer is lost."""

    def at_flip(run) -> None:
        if reread in ("no_answer", "lost_answer"):
            run.edits.reread_s = 3.0

        def paused(commit_async):
            if reread == "lost_answer":
                commit_async().get()
                resumer.append(pause_zookeeper(sb, PAUSE_S))
                raise ConnectionLoss()
            resumer.append(pause_zookeeper(sb, PAUSE_S))
            return commit_async()

        _intercept_map_commit(run, paused)

    return at_flip


@pytest.mark.parametrize("reread", ["answers", "no_answer", "lost_answer"])
def test_zookeeper_paused_at_the_flip_keeps_the_fences_closed_until_settled(fleet, tmp_path, reread):
    """ZooKeeper is paused (SIGSTOP) right as the flip CAS goes out and resumed after every
    session timeout (the cutover's 5 s and its lease's 4 s) has passed, while a client writes on the
    source pair's passive member and another through the map. Whether the held CAS commits when the
    server resumes is a race the cutover cannot see: with ``answers`` the map can be read back once
    the server is back, with ``no_answer`` the cutover stops waiting for it first, and with
    ``lost_answer`` the CAS commits and only its answer is lost (then the server pauses). Either way
    the fences stay closed until a settler decides from the map, and the cutover ends wholly before
    or wholly after the flip with every acknowledged write on the final owner."""
    from migrator.engine.cutover.errors import FlipUnknown

    from .cutover_setup import PassiveWriter, Workers

    with_session_timeout(fleet, SESSION_S)
    prep = prepare_converged(fleet, MOVING, options=Options(freeze_budget_ms=20000))
    spec = prep.spec
    sb = fleet.sandbox
    passive = fleet.hosts[spec.source_passive]
    router = ShardRouter(fleet.zk, fleet.credentials).start()
    routed = Writer(router, shards=MOVING, patience_s=120).start()
    pw = PassiveWriter(passive, fleet.credentials, MOVING).start()
    workers = Workers(fleet.config_path, tmp_path).start(1)  # a settler, should the cutover not settle it
    resumer: list[threading.Thread] = []

    at_flip = _pause_at_the_flip_cas(sb, reread, resumer)
    outcome = "after"
    try:
        time.sleep(1.0)
        try:
            cutover(fleet.config, spec.id, drainer=prep.drainer, hooks=CutoverHooks(before_flip=at_flip))
        except CutoverAborted as exc:
            assert "ZooKeeper" in exc.message and "had not landed" in exc.message, exc.message
            outcome = "before"
        except FlipUnknown as exc:  # not settled in-process: the worker's settler settles it
            print(f"left to the settler: {exc.message}")
            outcome = "settler"
        for t in resumer:
            t.join(60)
        deadline = time.monotonic() + 60
        while True:  # settled: unfrozen, phase out of cutover, record gone
            try:
                smap = ShardMapStore(fleet.zk).read()
                phase = prep.store.state(spec.id)[0].phase
                if not smap.frozen and phase != Phase.CUTOVER and \
                        not fleet.zk.client.exists(fleet.zk.path("cutovers", spec.id)):
                    break
            except KazooException:  # this test's own session expired in the pause too: it comes back
                phase, smap = None, None
            assert time.monotonic() < deadline, f"not settled: {phase}, {smap}\n{workers.logs()}"
            time.sleep(0.2)
        time.sleep(1.0)  # both writers go on where the map (and the gates) say
    finally:
        for t in resumer:
            t.join(60)
        pw.stop()
        routed.stop()
        workers.stop()
        prep.drainer.close()
    where = _where(fleet, prep)
    assert outcome == "settler" or where == outcome, (outcome, where)
    if reread == "lost_answer":
        assert where == "after"
    assert prep.store.state(spec.id)[0].phase == (Phase.DONE if where == "after" else Phase.CONVERGED)
    print(f"ZooKeeper paused at the flip ({reread}): ended {where} the flip (settled by "
          f"{'a worker' if outcome == 'settler' else 'the cutover'}); passive writes refused: {pw.refused}")
    # every acknowledged write, routed or on the passive member, is on the final owner with its last value
    assert not routed.errors, routed.errors[:5]
    assert not pw.other_errors, pw.other_errors[:5]
    _acked_on(fleet, ShardMapStore(fleet.zk).read().master_of(MOVING[0]), {**pw.acks, **routed.acks})
    # both members of the old pair: replicating both ways, tables wholly on one side, no gate left
    _pair_settled(fleet, prep.source, passive, spec, where)


@pytest.mark.parametrize("reread", ["no_answer", "lost_answer"])
def test_zookeeper_paused_at_the_flip_back_keeps_the_fences_closed_until_settled(fleet, tmp_path, reread):
    """The same fault at a rollback's flip back: the new pair is fenced (its passive member written
    to throughout), the old master's tables were renamed live just before the CAS. The fences stay
    closed until the settle from the map: wholly flipped back (the new pair's tables tombstoned on
    both members, the old master's live) or wholly not (the new pair serves, the old master's tables
    back in the tombstones), every acknowledged write on the final owner, both directions of the new
    pair replicating, no gate left."""
    from migrator.engine.cutover.errors import FlipUnknown
    from migrator.engine.rollback import RollbackError, rollback

    from .cutover_setup import PassiveWriter, Workers, tables_in

    with_session_timeout(fleet, SESSION_S)
    prep = prepare_converged(fleet, MOVING, options=Options(freeze_budget_ms=20000))
    spec = prep.spec
    sb = fleet.sandbox
    cutover(fleet.config, spec.id, drainer=prep.drainer)
    prep.drainer.close()
    passive = fleet.hosts[spec.target_passive]  # the new pair's passive member: gated by the flip back
    router = ShardRouter(fleet.zk, fleet.credentials).start()
    routed = Writer(router, shards=MOVING, patience_s=120).start()
    pw = PassiveWriter(passive, fleet.credentials, MOVING).start()
    workers = Workers(fleet.config_path, tmp_path).start(1)
    resumer: list[threading.Thread] = []

    at_flip = _pause_at_the_flip_cas(sb, reread, resumer)
    outcome = "after"
    try:
        time.sleep(1.0)
        try:
            rollback(fleet.config, spec.id, hooks=CutoverHooks(before_flip=at_flip))
        except RollbackError as exc:
            assert "had not landed" in exc.message, exc.message
            outcome = "before"
        except FlipUnknown as exc:
            print(f"left to the settler: {exc.message}")
            outcome = "settler"
        for t in resumer:
            t.join(60)
        deadline = time.monotonic() + 60
        while True:
            try:
                smap = ShardMapStore(fleet.zk).read()
                phase = prep.store.state(spec.id)[0].phase
                if not smap.frozen and phase != Phase.ROLLING_BACK and \
                        not fleet.zk.client.exists(fleet.zk.path("cutovers", spec.id)):
                    break
            except KazooException:
                phase, smap = None, None
            assert time.monotonic() < deadline, f"not settled: {phase}, {smap}\n{workers.logs()}"
            time.sleep(0.2)
        time.sleep(1.0)
    finally:
        for t in resumer:
            t.join(60)
        pw.stop()
        routed.stop()
        workers.stop()
    smap = ShardMapStore(fleet.zk).read()
    owners = {smap.master_of(s) for s in MOVING}
    assert len(owners) == 1
    where = "after" if owners == {spec.source_master} else "before"
    assert outcome == "settler" or where == outcome, (outcome, where)
    if reread == "lost_answer":
        assert where == "after"
    assert prep.store.state(spec.id)[0].phase == (Phase.ROLLED_BACK if where == "after" else Phase.DONE)
    print(f"ZooKeeper paused at the flip back ({reread}): ended {where} it; passive writes refused: {pw.refused}")
    assert not routed.errors, routed.errors[:5]
    assert not pw.other_errors, pw.other_errors[:5]
    _acked_on(fleet, owners.pop(), {**pw.acks, **routed.acks})
    _pair_settled(fleet, prep.target, passive, spec, where)
    with mysql_connect(prep.source, fleet.credentials) as old:
        for db in spec.databases:
            live, dead = tables_in(old, db), tables_in(old, tomb_db(spec.id, db))
            assert (SEED_TABLES <= live) == (where == "after") and (SEED_TABLES <= dead) == (where == "before")


def test_a_failed_rename_batch_of_a_gated_member_keeps_its_tables_closed(fleet, monkeypatch):
    """With the gate fence the master's triggers are dropped under the rename fence's lock just before its
    RENAMEs are queued; when the batch fails there (here: the queueing raises), the tables must not be left
    live without their triggers, open to a stale writer after the flip: the triggers are put back before the
    lock is let go, the writer is refused (1146), and the settle finishes the move."""
    from migrator.engine.cutover import rename_fence as fence_mod
    from migrator.engine.cutover.errors import CutoverError

    prep = prepare_converged(fleet, MOVING, options=Options(freeze_budget_ms=3000, fence="gate"))
    spec = prep.spec
    real = fence_mod.Fence.queue_rename
    calls = {"n": 0}

    def failing(self, *a, **kw):
        if self.host.name == spec.source_master and calls["n"] == 0:
            calls["n"] += 1
            raise fence_mod.FenceError("test: the batch's RENAMEs could not be queued", phase="cutover")
        return real(self, *a, **kw)

    monkeypatch.setattr(fence_mod.Fence, "queue_rename", failing)
    with pytest.raises(CutoverError, match="flipped"):
        cutover(fleet.config, spec.id)
    assert calls["n"] == 1
    # the flip stands; the master's tables are still live there, and still closed to a stale writer
    with mysql_connect(prep.source, fleet.credentials) as src, src.cursor() as c:
        assert SEED_TABLES <= _tables(src, "db00002")
        with pytest.raises(pymysql.err.ProgrammingError) as refused:
            c.execute("INSERT INTO db00002.pins (data) VALUES ('{\"stale\": 1}')")
        assert refused.value.args[0] == 1146
    monkeypatch.setattr(fence_mod.Fence, "queue_rename", real)
    assert reconcile(fleet.config, spec.id) == Phase.DONE
    assert _where(fleet, prep) == "after"
