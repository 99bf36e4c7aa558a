"""Fault cells: kill -9 of the RQ workers during copy, catch-up and cutover (before and after the flip)."""

from __future__ import annotations

import pytest

from migrator.engine.migration import Phase
from migrator.fleet.shard_map import ShardMapStore
from migrator.ops import command
from migrator.ops.command import CommandError

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
        smap = ShardMapStore(fleet.zk).read()
        assert all(smap.master_of(s) == run.spec.source_master for s in run.spec.shards)  # it died before the flip
        assert run.state().phase == Phase.CUTOVER
        assert smap.frozen  # nothing unfroze the ranges: clients wait (then retry) until the operator acts
        run.events.append(f"tables in the tombstones after the kill: {_tombstoned(run)}")
        with pytest.raises(CommandError, match="migrator cutover"):  # resume points at the right command
            run.resume()
        run.start_workers(1)
        # the operator's recovery: `migrator cutover ID` settles the dead attempt (undo) and cuts over again
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
        smap = ShardMapStore(fleet.zk).read()
        assert all(smap.master_of(s) == run.spec.target_master for s in run.spec.shards)  # it died after the flip
        assert run.state().phase == Phase.CUTOVER
        run.start_workers(1)
        # `migrator cutover ID` reconciles: the flip landed, so it finishes (tombstones, unfreeze, done)
        try:
            command.cutover(run.cfg, run.mid)
        except Exception as exc:  # noqa: BLE001 - "had already flipped; it is done" is the expected answer
            assert "already flipped" in str(exc), exc
        run.wait_phase(Phase.DONE)
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
