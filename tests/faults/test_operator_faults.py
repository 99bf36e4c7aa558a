"""Fault cells an operator (or an application) causes: a concurrent shard-map edit, DDL on a
moving table, and the binlog catch-up needs purged on the source."""

from __future__ import annotations

import time

from migrator.engine.migration import MigrationStore, Phase
from migrator.fleet.shard_map import ShardMapStore
from migrator.ops import command
from tests.integration.cli_helpers import run_cli

from .harness import HOLD_CATCH_UP, FaultRun


def test_concurrent_shard_map_edit_during_the_freeze(fleet, tmp_path):
    run = FaultRun(fleet, tmp_path).start()
    try:
        spec = run.plan_split()
        run.launch(postpone=True)
        run.wait_phase(Phase.CONVERGED)
        run.mark_target()
        job = run.enqueue("tests.faults.fault_jobs.cutover_with_fault", run.mid, str(fleet.config_path),
                          "edit_map", "after_freeze")
        run.wait(lambda: job.get_status(refresh=True) in ("finished", "failed"), 60, "the cutover job")
        assert job.get_status() == "failed"
        exc = job.latest_result().exc_string
        assert "shard map changed during the freeze" in exc, exc  # aborted, never retried blindly
        smap = ShardMapStore(fleet.zk).read()
        assert not smap.frozen and all(smap.master_of(s) == spec.source_master for s in spec.shards)
        st = run.state()
        assert st.phase == Phase.CONVERGED and "shard map changed" in (st.error or ""), st
        command.cutover(run.cfg, run.mid)  # the operator looked at the history and retries
        run.end_checks()
    finally:
        run.close()


def test_ddl_on_a_moving_table_during_catch_up(fleet, tmp_path):
    run = FaultRun(fleet, tmp_path).start()
    try:
        spec = run.plan_split(**HOLD_CATCH_UP)
        run.launch()
        db = spec.databases[0]

        def alter() -> None:
            with fleet.sandbox.root_conn(spec.source_master) as c, c.cursor() as cur:
                cur.execute(f"ALTER TABLE `{db}`.`pins` ADD COLUMN fault_extra INT NULL")

        run.when(lambda st: st.phase == Phase.CATCHING_UP, alter, what="catch-up")
        st = run.wait(lambda: (lambda s: s if s.phase == Phase.FAILED else None)(run.state()), 60,
                      "catch-up to stop on the DDL")
        assert "pins" in st.error and db in st.error, st.error  # a clear stop naming what happened
        time.sleep(2)  # the source keeps serving the load meanwhile (the ledger check below proves it)
        out = command.abort(run.cfg, run.mid)
        assert out["phase"] == "aborted"
        assert not MigrationStore(fleet.zk).holders(spec.shards)
        ledger = run.no_flip_checks()
        print(f"{run.mid}: stopped with {st.error!r}; {ledger.enqueued} acknowledged enqueues, lost {ledger.lost}")
    finally:
        run.close()


def test_purged_binlog_is_a_clear_error_and_restart_copy_recovers(fleet, tmp_path):
    run = FaultRun(fleet, tmp_path).start()
    try:
        spec = run.plan_split(**HOLD_CATCH_UP)
        run.launch()
        run.when(lambda st: st.phase == Phase.CATCHING_UP, lambda: command.pause(run.cfg, run.mid),
                 what="catch-up")
        time.sleep(3)  # the pass in flight ends; the load keeps writing the moving shards
        with fleet.sandbox.root_conn(spec.source_master) as c, c.cursor() as cur:
            cur.execute("FLUSH BINARY LOGS")
            time.sleep(0.5)
            cur.execute("FLUSH BINARY LOGS")
            cur.execute("SHOW MASTER STATUS")
            newest = cur.fetchone()[0]
            cur.execute(f"PURGE BINARY LOGS TO '{newest}'")
        run.events.append(f"binlogs purged up to {newest}")
        run.resume()
        st = run.wait(lambda: (lambda s: s if s.error else None)(run.state()), 60, "catch-up to report the purge")
        assert "purged" in st.error and "copy has to be redone" in st.error, st.error
        assert st.phase == Phase.CATCHING_UP  # nothing diverged silently: it stopped
        run.release_catch_up()
        res = run_cli("restart-copy", run.mid, "--yes", config=fleet.config_path)  # as the operator types it
        assert res.returncode == 0 and "copy restarted" in res.stdout, res.stdout + res.stderr
        assert all(db in res.stdout for db in spec.databases) and "enqueued" in res.stdout, res.stdout
        run.wait_phase(Phase.DONE, timeout=120)
        run.end_checks()
    finally:
        run.close()
