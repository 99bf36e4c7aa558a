"""Fault cells: kill -9 of the RQ workers during copy, catch-up, cutover (before and after the flip, and in its
prepare step with the gate installed) and a rollback's reverse passes."""

from __future__ import annotations

import pytest

from migrator.engine.migration import Phase
from migrator.errors import MigratorError
from migrator.fleet.shard_map import ShardMapStore
from migrator.ops import command

from .harness import HOLD_CATCH_UP, FaultRun


def test_kill_worker_during_copy(fleet, tmp_path):
    run = FaultRun(fleet, tmp_path).start()
    try:
        run.plan_split()
        run.launch()
        fired = run.when(lambda st: st.phase == Phase.COPYING and run.copy_started(), run.kill_workers,
                         what="the copy to be under way")
        assert fired == Phase.COPYING
        assert run.state().phase == Phase.COPYING  # the dead workers cannot have moved it on
        run.start_workers()
        run.resume()
        run.wait_phase(Phase.DONE)
        run.end_checks()
    finally:
        run.close()


def test_kill_worker_during_catch_up(fleet, tmp_path):
    run = FaultRun(fleet, tmp_path).start()
    try:
        run.plan_split(**HOLD_CATCH_UP)
        run.launch()
        fired = run.when(lambda st: st.phase == Phase.CATCHING_UP, run.kill_workers, what="catch-up")
        assert fired == Phase.CATCHING_UP
        assert run.state().phase == Phase.CATCHING_UP
        run.start_workers()
        run.release_catch_up()
        run.resume()
        run.wait_phase(Phase.DONE)
        run.end_checks()
    finally:
        run.close()


def _cutover_fault(fleet, tmp_path, fault: str, at: str):
    """Converge with the cutover held back, then run the cutover in a worker with ``fault`` at hook ``at``."""
    run = FaultRun(fleet, tmp_path).start()
    run.plan_split()
    run.launch(postpone=True)
    run.wait_phase(Phase.CONVERGED)
    run.mark_target()
    job = run.enqueue("tests.faults.fault_jobs.cutover_with_fault", run.mid, str(fleet.config_path), fault, at)
    return run, job


def test_kill_worker_during_cutover_before_the_flip(fleet, tmp_path):
    run, _ = _cutover_fault(fleet, tmp_path, "kill", "before_flip")
    try:
        run.wait(run.a_worker_died, 60, "the worker to die at before_flip")
        # the other worker settles it: the fence undone, the ranges unfrozen, the source serves
        run.wait_settled(Phase.CONVERGED)
        smap = ShardMapStore(fleet.zk).read()
        assert run.spec.moving.served_by(smap, run.spec.source_master)  # it died before the flip
        assert _tombstoned(run) == 0
        run.start_workers(1)
        # the migration goes on: the cutover runs again and flips
        command.postpone(run.cfg, run.mid, on=False)
        command.cutover(run.cfg, run.mid)
        run.wait_phase(Phase.DONE)
        run.end_checks()
    finally:
        run.close()


def test_kill_worker_during_cutover_after_the_flip(fleet, tmp_path):
    run, _ = _cutover_fault(fleet, tmp_path, "kill", "after_flip")
    try:
        run.wait(run.a_worker_died, 60, "the worker to die at after_flip")
        # the other worker settles it: the flip landed, so it finishes (tombstones, unfreeze, done)
        run.wait_settled(Phase.DONE)
        smap = ShardMapStore(fleet.zk).read()
        assert run.spec.moving.served_by(smap, run.spec.target_master)  # it died after the flip
        with pytest.raises(MigratorError, match="is done"):  # nothing left for an operator to do
            command.cutover(run.cfg, run.mid)
        run.end_checks()
    finally:
        run.close()


def _tombstoned(run) -> int:
    """How many source tables the dead cutover's queued RENAME moved (it may run once the lock dies)."""
    from migrator.engine.names import tomb_db
    from migrator.fleet.mysql import connect as mysql_connect

    with mysql_connect(run.fleet.hosts[run.spec.source_master], run.creds) as c, c.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA IN %s",
                    ([tomb_db(run.mid, db) for db in run.spec.databases],))
        return int(cur.fetchone()[0])


class _Busy:
    """Row changes every few ms in a moving table on the new master (straight, not through the map):
    what keeps a reverse pass from converging. Stopped before anything may flip back."""

    def __init__(self, fleet, spec):
        import threading

        self.host, self.creds, self.db = fleet.hosts[spec.target_master], fleet.credentials, spec.databases[0]
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self.thread.start()
        return self

    def _run(self) -> None:
        import time

        from migrator.fleet.mysql import connect as mysql_connect

        with mysql_connect(self.host, self.creds) as c, c.cursor() as cur:
            n = 0
            while not self.stop_event.is_set():
                n += 1
                cur.execute(f"UPDATE `{self.db}`.`users` SET data = %s ORDER BY local_id LIMIT 1",
                            (f'{{"busy": {n}}}',))
                time.sleep(0.005)

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(10)


def _reverse_state(run) -> tuple[list[dict], str | None]:
    """The reverse passes recorded so far and the reverse tail's checkpoint."""
    from migrator.engine.rollback import PASSES_NODE, TAIL_NODE

    node, _ = run.store.get_progress(run.mid, PASSES_NODE)
    tail, _ = run.store.get_progress(run.mid, TAIL_NODE)
    return list((node or {}).get("passes") or []), (tail or {}).get("gtid")


def test_kill_worker_during_a_reverse_pass(fleet, tmp_path):
    """The rollback's chain of RQ jobs is killed (kill -9, worker and work-horse) while it runs reverse
    passes under the queue load; after ``migrator resume ID`` the chain goes on from its checkpoint on
    another worker, and the rollback ends with the three end checks."""
    from migrator.fleet.gtid import GtidPos

    run = FaultRun(fleet, tmp_path).start()
    try:
        run.plan_split()
        run.launch()
        run.wait_phase(Phase.DONE)
        # no reverse pass converges while written (a pass must see no event): the chain stays in passes. A
        # writer of its own on the new master keeps every pass busy, whatever pauses the queue load has
        command.set_options(run.cfg, run.mid, **HOLD_CATCH_UP)
        busy = _Busy(fleet, run.spec).start()
        started = command.start_rollback(run.cfg, run.mid)
        run.wait(lambda: len([p for p in _reverse_state(run)[0] if p["started_at"] >= started["requested_at"]]) >= 3,
                 90, "three reverse passes")
        run.kill_workers()
        busy.stop()
        passes, tail = _reverse_state(run)
        assert tail is not None
        st = run.state()
        assert st.phase == Phase.DONE and st.rollback_requested, st  # killed in its passes, not in a flip
        smap = ShardMapStore(fleet.zk).read()
        assert all(smap.master_of(s) == run.spec.target_master for s in run.spec.shards) and not smap.frozen
        run.start_workers()
        run.release_catch_up()
        out = run.resume()  # the record asks for a rollback: its chain is enqueued again
        assert out["job"], out
        run.wait_phase(Phase.ROLLED_BACK, timeout=120)
        after, tail_after = _reverse_state(run)
        resumed = [p for p in after if p["number"] > passes[-1]["number"]]
        assert resumed, after
        # it went on from the checkpoint the dead chain left: the first pass after the kill started there
        assert GtidPos.parse(resumed[0]["from_gtid"]).contains(GtidPos.parse(tail)), (resumed[0], tail)
        run.events.append(f"killed after pass {passes[-1]['number']}, resumed at pass {resumed[0]['number']}")
        run.rollback_end_checks()
    finally:
        run.close()


def _gate_objects(fleet) -> list[tuple[str, str]]:
    """(host, name) of every gate trigger (``_mgate_%``) and gate table on every member of the sandbox."""
    from migrator.engine.cutover.trigger_gate import GATE_SCHEMA
    from migrator.fleet.mysql import connect as mysql_connect

    out = []
    for name, host in fleet.hosts.items():
        with mysql_connect(host, fleet.credentials) as c, c.cursor() as cur:
            cur.execute("SELECT TRIGGER_NAME FROM information_schema.TRIGGERS WHERE TRIGGER_NAME LIKE '\\_mgate\\_%'")
            out += [(name, r[0]) for r in cur.fetchall()]
            cur.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s", (GATE_SCHEMA,))
            out += [(name, f"{GATE_SCHEMA}.{r[0]}") for r in cur.fetchall()]
    return out


def _kill_between_gate_and_freeze(fleet, tmp_path) -> FaultRun:
    """The pipeline's own cutover (``split --yes``'s finish job) killed with every worker (kill -9, process
    trees) while the passive gate is being installed on the source's passive member, before the freeze: a
    report holds a read transaction on the last moving table there, so the install waits in its tries with
    the gate table (and the triggers of the tables before it) made. The gates are installed right before the
    freeze, after every wait that can last: this is the one window where they exist with nothing frozen."""
    from migrator.fleet.mysql import connect as mysql_connect

    run = FaultRun(fleet, tmp_path).start()
    run.plan_split()
    run.launch(postpone=True)
    run.wait_phase(Phase.CONVERGED)
    run.mark_target()
    passive = run.spec.source_passive
    report = mysql_connect(fleet.hosts[passive], fleet.credentials)
    try:
        with report.cursor() as cur:
            db = run.spec.databases[-1]
            cur.execute("SELECT MAX(TABLE_NAME) FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
                        "AND TABLE_NAME NOT LIKE '\\_migrator%%'", (db,))
            table = cur.fetchone()[0]
            cur.execute("BEGIN")
            cur.execute(f"SELECT COUNT(*) FROM `{db}`.`{table}`")
        command.postpone(run.cfg, run.mid, on=False)
        run.wait(lambda: any(h == passive for h, _ in _gate_objects(fleet)), 120,
                 f"the gate's install on {passive}", every=0.05)
        run.kill_workers()
    finally:
        report.rollback()
        report.close()
    assert run.state().phase == Phase.CONVERGED  # killed before the freeze
    assert _gate_objects(fleet), "the dead attempt left no gate: the kill came too late"
    return run


def test_workers_killed_between_the_gate_and_the_freeze_end_done_without_an_operator(fleet, tmp_path):
    """New workers only: the settler removes the dead attempt's gate and records where it died, RQ finds the
    finish job abandoned and the failure callback enqueues it again, and the retry cuts over."""
    run = _kill_between_gate_and_freeze(fleet, tmp_path)
    try:
        run.start_workers()
        # RQ declares the dead job abandoned 60-90 s after its last heartbeat
        st = run.wait(lambda: (lambda s: s if s.phase == Phase.DONE or s.stopped else None)(run.state()), 240,
                      "the pipeline to retry the dead cutover and flip", every=0.5)
        assert not st.stopped, st.stopped
        node, _ = run.store.get_progress(run.mid, "cutover_attempts")
        died = [a for a in (node or {}).get("attempts", []) if a.get("died_at")]
        assert died and died[0]["before_freeze"], node  # the settler recorded where the holder died
        assert not _gate_objects(fleet)
        run.events.append(f"died: {died[0]['outcome']}")
        run.end_checks()
    finally:
        run.close()


def test_workers_killed_between_the_gate_and_the_freeze_then_abort_leaves_no_gate(fleet, tmp_path):
    """No worker comes back; `migrator abort --yes` removes every attempt's gate objects itself (once the dead
    holder's lease has ended) and the source pair serves as before."""
    run = _kill_between_gate_and_freeze(fleet, tmp_path)
    try:
        out = command.abort(run.cfg, run.mid)
        assert run.state().phase == Phase.ABORTED
        assert not _gate_objects(fleet), out["gates"]
        run.no_flip_checks()
    finally:
        run.close()
