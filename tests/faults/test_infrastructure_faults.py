"""Fault cells: servers restarted, a ZooKeeper session expired, Redis wiped."""

from __future__ import annotations

import time

import pytest

from migrator.engine.migration import Phase
from migrator.fleet import redis_client
from migrator.fleet.shard_map import ShardMapStore
from migrator.ops import command

from .harness import HOLD_CATCH_UP, FaultRun
from .harness import restart_host as _restart


def test_source_restarted_during_catch_up(fleet, tmp_path):
    run = FaultRun(fleet, tmp_path).start()
    try:
        spec = run.plan_split(**HOLD_CATCH_UP)
        run.launch()
        run.when(lambda st: st.phase == Phase.CATCHING_UP, lambda: _restart(fleet, spec.source_master, run),
                 what="catch-up")
        run.release_catch_up()
        if run.state().phase == Phase.CATCHING_UP:
            time.sleep(2)
            run.resume()  # re-enqueue the pass the restart failed (a duplicate is harmless)
        run.wait_phase(Phase.DONE)
        run.end_checks()
    finally:
        run.close()


def test_target_restarted_during_copy(fleet, tmp_path):
    run = FaultRun(fleet, tmp_path).start()
    try:
        spec = run.plan_split(chunk_rows=1, chunk_max_rows=1)
        run.launch()
        run.when(lambda st: st.phase == Phase.COPYING and run.copy_started(),
                 lambda: _restart(fleet, spec.target_master, run), what="the copy to be under way")
        st = run.state()
        assert st.phase == Phase.COPYING and st.error, st  # the copy noticed, and said so in the record
        run.resume()
        run.wait_phase(Phase.DONE)
        run.end_checks()
    finally:
        run.close()


@pytest.mark.parametrize("at", ["after_freeze", "before_flip", "after_flip"])
def test_zookeeper_session_expired_during_cutover(fleet, tmp_path, at):
    """The cutover's own ZooKeeper session expires (on the server) at a named point of the freeze:
    it either completes on a new session or stops cleanly before the flip; never half-flipped."""
    run = FaultRun(fleet, tmp_path).start()
    try:
        spec = run.plan_split()
        run.launch(postpone=True)
        run.wait_phase(Phase.CONVERGED)
        run.mark_target()
        job = run.enqueue("tests.faults.fault_jobs.cutover_with_fault", run.mid, str(fleet.config_path),
                          "expire_zk", at)
        run.wait(lambda: job.get_status(refresh=True) in ("finished", "failed"), 60, "the cutover job")
        smap = ShardMapStore(fleet.zk).read()
        assert not smap.frozen, smap.frozen  # never left frozen
        if job.get_status() == "failed" and at == "after_flip":
            # the flip landed (one CAS) and the fence was released; the session died before the phase
            # was recorded. Nothing is half-done: the other worker settles (finishes) it once the lease ends.
            assert all(smap.master_of(s) == spec.target_master for s in spec.shards)
            run.wait_phase(Phase.DONE, timeout=30)
            run.events.append("flipped; the record's phase was lost with the session; settled by a live worker")
        elif job.get_status() == "failed":
            # the flip was refused and undone: the source still serves; the operator retries
            exc = job.latest_result().exc_string
            assert "CutoverAborted" in exc or "ZooKeeper" in exc, exc
            assert all(smap.master_of(s) == spec.source_master for s in spec.shards)
            assert run.state().phase == Phase.CONVERGED
            run.events.append("cutover aborted by the expiry; retried")
            command.cutover(run.cfg, run.mid)
        else:
            run.events.append("cutover completed on a new session")
        run.wait_phase(Phase.DONE)
        run.end_checks()
    finally:
        run.close()


def test_redis_wiped_mid_migration(fleet, tmp_path):
    run = FaultRun(fleet, tmp_path).start()
    try:
        run.plan_split(**HOLD_CATCH_UP)
        run.launch()
        redis = redis_client.connect(run.cfg)
        run.when(lambda st: st.phase == Phase.CATCHING_UP, redis.flushdb, what="catch-up")
        # every RQ job, registry and worker record is gone; the ZooKeeper record is all that is left.
        # The workers keep running; a pass in flight may still enqueue its successor, so the resume
        # below can start a second chain of passes: that must be harmless.
        run.release_catch_up()
        run.resume()
        run.wait_phase(Phase.DONE)
        run.end_checks()
    finally:
        run.close()
