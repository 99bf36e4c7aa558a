"""A cutover is never orphaned: kill -9 of the worker at each step of the freeze, a live worker settles it.

Two real ``migrator worker`` processes; one runs the cutover (an RQ job) and
kills itself and its worker with SIGKILL right after a named step. The other
worker's settler must, within the bound, leave the migration wholly before the
flip (fence undone on both members, ranges unfrozen, phase converged: and a
retried cutover then succeeds) or wholly after it (tables in the tombstones on
both members, unfrozen, phase done). A writer routes through the shard map the
whole time: every write it saw acknowledged is on the final owner.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from migrator.engine.cutover import CutoverAborted, CutoverHooks, cutover
from migrator.engine.cutover.lease import CUTOVERS, CutoverLease, CutoverRunning, SettleLock
from migrator.engine.cutover.reconcile import reconcile
from migrator.engine.migration import Options, Phase
from migrator.engine.names import tomb_db
from migrator.fleet import zk as zk_mod
from migrator.fleet.mysql import connect as mysql_connect
from migrator.fleet.router import ShardRouter
from migrator.fleet.shard_map import ShardMapStore

from .cutover_setup import Workers, Writer, gate_leftovers, pair_synced, prepare_converged, replicating, tables_in

MOVING = (2, 3)
SEED_TABLES = {"pins", "boards", "users", "board_has_pins", "user_has_boards"}
BEFORE_FLIP = ["freeze_cas", "passive_close", "passive_sync", "fence", "sentinel", "drain", "compare"]
AFTER_FLIP = ["flip_cas", "release", "renames", "passive_finish"]
#: from the death of the holder to a settled cutover (lease timeout 4 s + the settle), on a busy box
BOUND_S = 15.0


def _settled(fleet, mid: str) -> bool:
    smap = ShardMapStore(fleet.zk).read()
    st_node = fleet.zk.client.exists(fleet.zk.path(CUTOVERS, mid))
    from migrator.engine.migration import MigrationStore

    phase = MigrationStore(fleet.zk).state(mid)[0].phase
    return not smap.frozen and st_node is None and phase != Phase.CUTOVER


def _sides(fleet, spec) -> str:
    """'before' or 'after': the map, the source master and the passive member all agree."""
    smap = ShardMapStore(fleet.zk).read()
    assert not smap.frozen, smap.frozen
    masters = {smap.master_of(s) for s in MOVING}
    assert len(masters) == 1, masters
    where = "after" if masters == {spec.target_master} else "before"
    assert where == "after" or masters == {spec.source_master}
    for name in (spec.source_master, spec.source_passive):
        with mysql_connect(fleet.hosts[name], fleet.credentials) as c:
            for db in spec.databases:
                live, dead = tables_in(c, db), tables_in(c, tomb_db(spec.id, db))
                if where == "after":
                    assert not (live & SEED_TABLES) and SEED_TABLES <= dead, (name, db, live, dead)
                else:
                    assert SEED_TABLES <= live and not (dead & SEED_TABLES), (name, db, live, dead)
            assert gate_leftovers(c) == [], name  # no trigger nor gate left on either member
    with mysql_connect(fleet.hosts[spec.target_master], fleet.credentials) as t:
        for db in spec.databases:
            assert SEED_TABLES <= tables_in(t, db)
    return where


class KillRun:
    """A converged migration, a routed writer, and two ``migrator worker`` processes."""

    def __init__(self, fleet, tmp_path):
        self.fleet = fleet
        self.prep = prepare_converged(fleet, MOVING, options=Options(freeze_budget_ms=20000))
        self.prep.drainer.close()  # the worker's cutover drains with its own tailer
        self.spec = self.prep.spec
        self.writer = Writer(ShardRouter(fleet.zk, fleet.credentials).start(), shards=MOVING, patience_s=60).start()
        self.workers = Workers(fleet.config_path, tmp_path).start(2)
        self.took: dict[str, float] = {}

    def kill_at(self, step: str) -> str:
        """Run the cutover in a worker that dies with SIGKILL right after ``step``; wait until settled.

        Returns 'before' or 'after' (the flip), checked against the map and both members."""
        fleet, spec, workers = self.fleet, self.spec, self.workers
        took = self.took[step] = self.die_and_settle("cutover_with_fault", step, lambda: _settled(fleet, spec.id))
        print(f"{spec.id}: killed after {step}, settled {took} s later")
        assert took < BOUND_S, f"{step}: settled after {took} s (bound {BOUND_S} s)\n{workers.logs()}"
        where = _sides(fleet, spec)
        assert where == ("after" if step in AFTER_FLIP else "before"), (step, where)
        phase = self.prep.store.state(spec.id)[0].phase
        assert phase == (Phase.DONE if where == "after" else Phase.CONVERGED), (step, phase)
        time.sleep(0.3)  # the writer goes on where the map says
        return where

    def die_and_settle(self, job: str, step: str, settled: Any) -> float:
        """Enqueue the fault job ``job`` (its worker dies after ``step``), start a worker in its place,
        wait until ``settled()``; returns the seconds from the death to the settle."""
        workers = self.workers
        dead = len(workers.dead())
        workers.enqueue(self.fleet.config, f"tests.faults.fault_jobs.{job}", self.spec.id,
                        str(self.fleet.config_path), "kill", f"step:{step}")
        deadline = time.monotonic() + 240
        while len(workers.dead()) == dead:
            assert time.monotonic() < deadline, f"no worker died at {step}\n{workers.logs()}"
            time.sleep(0.05)
        t_dead = time.monotonic()
        assert len(workers.dead()) == dead + 1
        workers.start(1)  # two live workers again for the next round
        while not settled():
            assert time.monotonic() - t_dead < 60, f"{job} {step}: not settled after 60 s\n{workers.logs()}"
            time.sleep(0.1)
        return round(time.monotonic() - t_dead, 1)

    def end(self) -> None:
        """Stop everything; every acknowledged write is on the target, the old pair replicates."""
        fleet, spec, writer = self.fleet, self.spec, self.writer
        self.stop()
        assert not writer.errors, writer.errors[:5]  # each write waited out a settle, then went through
        assert writer.hosts_used.get(spec.target_master), writer.hosts_used
        with mysql_connect(self.prep.target, fleet.credentials) as t, t.cursor() as cur:
            for (shard, lid), data in writer.acks.items():
                cur.execute(f"SELECT data FROM db{shard:05d}.pins WHERE local_id = %s", (lid,))
                row = cur.fetchone()
                assert row is not None and row[0] == data, (shard, lid, row, data)
        with mysql_connect(self.prep.source, fleet.credentials) as a, \
                mysql_connect(fleet.hosts[spec.source_passive], fleet.credentials) as b:
            pair_synced(a, b)
            replicating(a)
            replicating(b)
        print(f"{spec.id}: settle seconds by step {self.took}; {len(writer.acks)} acknowledged writes")

    def stop(self) -> None:
        self.writer.stop()
        self.workers.stop()


def test_killed_at_each_step_before_the_flip_is_undone_and_the_retry_goes_on(fleet, tmp_path):
    """One migration; its cutover dies at each step before the flip in turn (each retry gets one step
    further), then right after the flip CAS: undone each time, finished the last."""
    run = KillRun(fleet, tmp_path)
    try:
        for step in BEFORE_FLIP:
            assert run.kill_at(step) == "before"
        assert run.kill_at("flip_cas") == "after"
        run.end()
    finally:
        run.stop()


@pytest.mark.parametrize("step", ["release", "renames", "passive_finish"])
def test_killed_after_the_flip_is_finished(fleet, tmp_path, step):
    run = KillRun(fleet, tmp_path)
    try:
        assert run.kill_at(step) == "after"
        run.end()
    finally:
        run.stop()


def test_a_live_lease_is_never_settled(fleet):
    """While a holder's lease lives, neither a settler nor a second cutover touches the cutover;
    while one settler holds the settle lock, no other acts."""
    prep = prepare_converged(fleet, MOVING)
    prep.drainer.close()
    spec = prep.spec
    lease = CutoverLease(fleet.config, fleet.credentials, spec.id).acquire()
    try:
        prep.store.set_phase(spec.id, Phase.CUTOVER)
        with pytest.raises(CutoverRunning, match="running in"):
            reconcile(fleet.config, spec.id)
        with pytest.raises(CutoverRunning, match="already running"):
            cutover(fleet.config, spec.id)
        assert prep.store.state(spec.id)[0].phase == Phase.CUTOVER
    finally:
        lease.release()  # the holder goes away with the phase still "cutover": an orphan now
    other = zk_mod.connect(fleet.config, fleet.credentials)  # another settler, already at it
    try:
        lock = SettleLock(other, spec.id)
        assert lock.acquire(blocking=False)
        assert not SettleLock(fleet.zk, spec.id).acquire(blocking=False)
        with pytest.raises(CutoverRunning, match="another process is settling"):
            reconcile(fleet.config, spec.id, blocking=False)
        assert prep.store.state(spec.id)[0].phase == Phase.CUTOVER
    finally:
        other.close()  # a settler that dies frees the lock with its session
    assert reconcile(fleet.config, spec.id) == Phase.CONVERGED
    assert not fleet.zk.client.exists(fleet.zk.path(CUTOVERS, spec.id))


def test_a_holder_that_lost_its_lease_does_not_flip(fleet):
    """The flip CAS is guarded by the lease: once it is gone (a settler may be at work) the flip is
    refused. The holder undoes what is its own (its fence, its gates); the unfreeze and the phase,
    guarded by the lease as well, are left to the settler, which then settles it before the flip."""
    prep = prepare_converged(fleet, MOVING, options=Options(freeze_budget_ms=20000))
    spec = prep.spec

    def lose_lease(run):  # as a session expiry would: the ephemeral node goes
        run.lease.zk.client.delete(run.lease.path)

    with pytest.raises(CutoverAborted, match="lost the cutover's lease") as err:
        cutover(fleet.config, spec.id, drainer=prep.drainer, hooks=CutoverHooks(before_flip=lose_lease))
    prep.drainer.close()
    assert "left the unfreeze and the phase to the worker" in err.value.message
    smap = ShardMapStore(fleet.zk).read()
    assert all(smap.is_frozen(s) for s in MOVING) and prep.store.state(spec.id)[0].phase == Phase.CUTOVER
    with mysql_connect(fleet.hosts[spec.source_passive], fleet.credentials) as b:
        assert gate_leftovers(b) == []  # its own gate: reopened and removed
    assert reconcile(fleet.config, spec.id) == Phase.CONVERGED  # the settler
    assert _sides(fleet, spec) == "before"
    assert prep.store.state(spec.id)[0].phase == Phase.CONVERGED


@pytest.mark.parametrize("step,where", [("fence", "before"), ("flip_cas", "after")])
def test_a_rollback_killed_in_its_flip_back_is_settled(fleet, tmp_path, step, where):
    """The rollback's flip back holds the same lease: killed inside its freeze, a live worker settles
    it within the bound, wholly before the flip back (phase done, the new master serves; a second
    rollback then goes through) or wholly after it (phase rolled_back, the old master serves)."""
    run = KillRun(fleet, tmp_path)
    spec = run.spec
    try:
        assert run.kill_at("release") == "after"  # the forward cutover, finished by a settler
        took = run.die_and_settle("rollback_with_fault", step, lambda: _settled(fleet, spec.id) and
                                  run.prep.store.state(spec.id)[0].phase != Phase.ROLLING_BACK)
        assert took < BOUND_S, f"rollback killed after {step}: settled after {took:.1f} s\n{run.workers.logs()}"
        smap = ShardMapStore(fleet.zk).read()
        owner = spec.source_master if where == "after" else spec.target_master
        assert not smap.frozen and {smap.master_of(s) for s in MOVING} == {owner}
        phase = run.prep.store.state(spec.id)[0].phase
        assert phase == (Phase.ROLLED_BACK if where == "after" else Phase.DONE), phase
        fenced = (spec.target_master, spec.target_passive)
        for name in fenced:  # the rollback's fenced pair: no gate left, tables wholly on one side
            with mysql_connect(fleet.hosts[name], fleet.credentials) as c:
                assert gate_leftovers(c) == [], name
                for db in spec.databases:
                    live, dead_t = tables_in(c, db), tables_in(c, tomb_db(spec.id, db))
                    if where == "after":
                        assert not (live & SEED_TABLES) and SEED_TABLES <= dead_t, (name, db, live, dead_t)
                    else:
                        assert SEED_TABLES <= live and not (dead_t & SEED_TABLES), (name, db, live, dead_t)
        with mysql_connect(fleet.hosts[spec.source_master], fleet.credentials) as c:
            for db in spec.databases:
                live, dead_t = tables_in(c, db), tables_in(c, tomb_db(spec.id, db))
                assert (SEED_TABLES <= live) == (where == "after") and (SEED_TABLES <= dead_t) == (where == "before")
        if where == "before":  # undone: a rollback now goes through
            from migrator.engine.rollback import rollback

            rollback(fleet.config, spec.id)
            assert run.prep.store.state(spec.id)[0].phase == Phase.ROLLED_BACK
        time.sleep(0.3)
        run.writer.stop()
        assert not run.writer.errors, run.writer.errors[:5]
        # every acknowledged write is on the final owner
        final = ShardMapStore(fleet.zk).read().master_of(MOVING[0])
        with mysql_connect(fleet.hosts[final], fleet.credentials) as t, t.cursor() as cur:
            for (shard, lid), data in run.writer.acks.items():
                cur.execute(f"SELECT data FROM db{shard:05d}.pins WHERE local_id = %s", (lid,))
                row = cur.fetchone()
                assert row is not None and row[0] == data, (shard, lid, row, data)
    finally:
        run.stop()


def test_stopping_the_workers_ends_their_work_horses(fleet, tmp_path):
    """The test workers' stop reaches the RQ work-horse of a running job (a process group of its own)."""
    import os

    workers = Workers(fleet.config_path, tmp_path).start(1)
    try:
        sid = workers.procs[0].pid
        workers.enqueue(fleet.config, "time.sleep", 120)
        deadline = time.monotonic() + 60

        def horses():
            out = []
            for proc in Workers.session(sid):
                try:
                    if os.getpgid(proc.pid) != sid:  # the worker's own forks stay in its group
                        out.append(proc)
                except ProcessLookupError:
                    pass
            return out

        while not horses():
            assert time.monotonic() < deadline, workers.logs()
            time.sleep(0.1)
        horse = horses()
    finally:
        workers.stop()
    assert not [proc for proc in horse if proc.is_running() and proc.status() != "zombie"]


def _triggers_of(conn, attempt: str) -> int:
    with conn.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE TRIGGER_NAME LIKE %s",
                    (f"\\_mgate\\_%\\_{attempt}\\_%",))
        return int(cur.fetchone()[0])


def _write_refused(host, creds) -> bool:
    """A client write on a moving table of ``host`` fails with 1146 (a closed gate or a renamed table)."""
    import pymysql

    with mysql_connect(host, creds, read_timeout=10) as c, c.cursor() as cur:
        try:
            cur.execute("INSERT INTO db00002.pins (data) VALUES ('{\"probe\": 1}')")
        except pymysql.err.MySQLError as exc:
            return exc.args[0] == 1146
    return False


@pytest.mark.parametrize("fence", ["rename", "gate"])
def test_a_holder_that_lost_its_lease_cannot_undo_a_second_attempt(fleet, fence):
    """A cutover process loses only its lease (its lease session expires; its main session stays) in
    the freeze; a settler settles its attempt; a second attempt of the same migration starts and
    closes its own fence. Then the first process goes on: whatever it does (its drain, its undo, its
    close) leaves the second attempt's gates closed, its triggers in place, its ranges frozen and its
    phase, and the second attempt flips with every write: nothing lost, both directions replicate."""
    import threading

    from tests.faults.fault_jobs import expire_session

    from .cutover_setup import PassiveWriter, missing_acks

    prep = prepare_converged(fleet, MOVING, options=Options(freeze_budget_ms=60000, fence=fence))
    spec, store = prep.spec, prep.store
    passive = fleet.hosts[spec.source_passive]
    router = ShardRouter(fleet.zk, fleet.credentials).start()
    routed = Writer(router, shards=MOVING, patience_s=60).start()
    pw = PassiveWriter(passive, fleet.credentials, MOVING).start()
    runs: dict[str, Any] = {}
    paused = {k: threading.Event() for k in ("first", "second")}
    go = {k: threading.Event() for k in ("first", "second")}
    outcome: dict[str, Any] = {}

    def pause_at(name: str):
        def hook(run, step: str) -> None:
            if step == "passive_sync":  # the passive member closed (and with fence=gate, the master)
                runs[name] = run
                paused[name].set()
                assert go[name].wait(180), f"{name} attempt never released"
        return hook

    def attempt(name: str, **kw: Any) -> None:
        try:
            outcome[name] = cutover(fleet.config, spec.id, hooks=CutoverHooks(at_step=pause_at(name)), **kw)
        except BaseException as exc:  # noqa: BLE001 - looked at below
            outcome[name] = exc

    first = threading.Thread(target=attempt, args=("first",), kwargs={"drainer": prep.drainer}, daemon=True)
    second = threading.Thread(target=attempt, args=("second",), daemon=True)
    try:
        time.sleep(0.5)
        first.start()
        assert paused["first"].wait(120), outcome
        one = runs["first"]
        # the first process loses its lease's session, and the tail its drainer holds the applier lock with;
        # its main session (the one it writes the map and the phase with) stays
        expire_session(one.lease.zk.client)
        expire_session(prep.drainer._tailer.checkpoint_node.store.zk.client)
        assert not one.lease.alive
        assert reconcile(fleet.config, spec.id) == Phase.CONVERGED  # a settler: the first attempt is undone
        second.start()
        assert paused["second"].wait(120), outcome
        two = runs["second"]
        go["first"].set()  # the first process goes on: it cannot flip, and it undoes what it can
        first.join(120)
        assert not first.is_alive()
        assert isinstance(outcome["first"], Exception), outcome["first"]
        print(f"the first attempt ended with: {outcome['first']}")
        # the second attempt's fence is as it closed it: gates shut, ranges frozen, phase cutover
        assert _write_refused(passive, fleet.credentials)
        if fence == "gate":
            assert _write_refused(prep.source, fleet.credentials)
        smap = ShardMapStore(fleet.zk).read()
        assert all(smap.is_frozen(s) for s in MOVING), smap.frozen
        assert store.state(spec.id)[0].phase == Phase.CUTOVER
        assert two.attempt_id != one.attempt_id
        with mysql_connect(passive, fleet.credentials) as b:
            assert _triggers_of(b, two.attempt_id) > 0
            assert _triggers_of(b, one.attempt_id) == 0
        go["second"].set()
        second.join(120)
        assert not isinstance(outcome.get("second"), BaseException), outcome.get("second")
        time.sleep(0.5)
    finally:
        for e in go.values():
            e.set()
        first.join(60)
        second.join(60)
        pw.stop()
        routed.stop()
        prep.drainer.close()
    assert _sides(fleet, spec) == "after"
    assert store.state(spec.id)[0].phase == Phase.DONE
    assert not routed.errors, routed.errors[:5]
    assert not pw.other_errors, pw.other_errors[:5]
    assert missing_acks(fleet, routed.acks) == []
    with mysql_connect(prep.target, fleet.credentials) as t, t.cursor() as cur:
        for (shard, lid), data in pw.acks.items():  # every write the passive member took reached the target
            cur.execute(f"SELECT data FROM db{shard:05d}.pins WHERE local_id = %s", (lid,))
            row = cur.fetchone()
            assert row is not None and row[0] == data, (shard, lid, row, data)
    with mysql_connect(prep.source, fleet.credentials) as a, mysql_connect(passive, fleet.credentials) as b:
        pair_synced(a, b)
        replicating(a)
        replicating(b)


def test_the_next_attempt_removes_the_gate_a_dead_one_left(fleet):
    """An attempt whose holder died in its prepare step (phase still converged) left its gate's triggers and
    gate table on the passive member, and no record for a settler: the next cutover removes every attempt's
    before it installs its own, and flips with no gate object left on either member of the source pair."""
    from migrator.engine.cutover.trigger_gate import TriggerGate
    from migrator.engine.names import SENTINEL_TABLE, tomb_suffix

    prep = prepare_converged(fleet, MOVING)
    spec = prep.spec
    passive = fleet.hosts[spec.source_passive]
    with mysql_connect(passive, fleet.credentials) as c:
        tables = [(db, t) for db in spec.databases for t in sorted(tables_in(c, db)) if t != SENTINEL_TABLE]
    dead = TriggerGate(passive, fleet.credentials, tables, tomb_suffix(spec.id),
                       {db: tomb_db(spec.id, db) for db in spec.databases}, attempt="dead01").open()
    try:
        dead.install()
    finally:
        dead.close_connection()
    with mysql_connect(passive, fleet.credentials) as c:
        assert _triggers_of(c, "dead01") == 3 * len(tables)
    cutover(fleet.config, spec.id, drainer=prep.drainer)
    assert prep.store.state(spec.id)[0].phase == Phase.DONE
    for name in (spec.source_master, spec.source_passive):
        with mysql_connect(fleet.hosts[name], fleet.credentials) as c:
            assert gate_leftovers(c) == [], name
