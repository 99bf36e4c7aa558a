"""Operator control of running migrations on the real fleet: pause and resume of
the copy and of catch-up (RQ jobs), throttle changes picked up at the next copy
slice, a postponed cutover, and abort back to the source serving."""

from __future__ import annotations

from jobs import pipeline
from migrator.engine import plan as plan_mod
from migrator.engine.cutover.lease import CutoverLease
from migrator.engine.migration import MigrationStore
from migrator.fleet.shard_map import ShardMapStore
from migrator.ops import command
from tests.integration.cli_helpers import run_cli

from .operator_support import copied, count, finished_jobs, insert_pins, phase, planned, queued, redis_of, work


def catchup_passes(fleet, mid: str) -> list[dict]:
    node, _ = MigrationStore(fleet.zk).get_progress(mid, "catchup")
    return list((node or {}).get("passes") or [])


def test_pause_and_resume_copy_on_rq_workers(fleet):
    mid = planned(fleet, chunk_rows=4, chunk_max_rows=4)
    command.start_copy(fleet.config, mid)
    work(fleet, max_jobs=3)  # copy-start and two table slices
    res = run_cli("pause", mid, config=fleet.config_path)
    assert res.returncode == 0 and "paused" in res.stdout, res.stderr
    work(fleet)  # the queued slices see the pause and stop without re-enqueuing
    assert queued(fleet) == 0
    assert phase(fleet, mid) == "copying"
    st = command.status(fleet.config, mid)
    assert st["paused"] and st["copy"]["done"] < st["copy"]["tables"]
    assert any(j.return_value() and j.return_value().get("status") == "paused" for j in finished_jobs(fleet))

    res = run_cli("resume", mid, config=fleet.config_path)
    assert res.returncode == 0 and "enqueued" in res.stdout, res.stderr
    work(fleet)  # copy to the end, then catch-up passes until converged
    assert phase(fleet, mid) == "converged"
    for db in ("db00002", "db00003"):
        for table in ("pins", "boards", "users", "board_has_pins", "user_has_boards"):
            assert count(fleet, "MySQL003A", db, table) == count(fleet, "MySQL001A", db, table)


def test_catch_up_jobs_honour_pause_and_resume_from_the_record(fleet):
    mid = copied(fleet, converge_events=0)  # only an empty pass converges
    assert phase(fleet, mid) == "catching_up"
    insert_pins(fleet, "MySQL001A", "db00002", 30)
    r = redis_of(fleet)
    from rq import Queue

    q = Queue("migrator", connection=r)
    q.enqueue("jobs.catch_up.run_passes", mid, config_path=str(fleet.config_path), passes=1)
    work(fleet, max_jobs=1)  # one pass (a job runs passes for a slice; it was asked for one)
    assert len(catchup_passes(fleet, mid)) == 1 and queued(fleet) == 0
    q.enqueue("jobs.catch_up.run_passes", mid, config_path=str(fleet.config_path))
    command.pause(fleet.config, mid)
    work(fleet)  # the job sees the pause: no pass, nothing enqueued
    assert len(catchup_passes(fleet, mid)) == 1 and queued(fleet) == 0
    assert finished_jobs(fleet)[-1].return_value() == {"migration": mid, "paused": True}

    insert_pins(fleet, "MySQL001A", "db00003", 10)
    out = command.resume(fleet.config, mid)
    assert out["job"] and out["phase"] == "catching_up"
    work(fleet, max_jobs=10)
    passes = catchup_passes(fleet, mid)
    assert len(passes) >= 2 and passes[-1]["converged"]
    assert phase(fleet, mid) == "converged"
    assert count(fleet, "MySQL003A", "db00002", "pins") == count(fleet, "MySQL001A", "db00002", "pins") == 50
    assert count(fleet, "MySQL003A", "db00003", "pins") == 30


def test_set_options_take_effect_at_the_next_copy_slice(fleet):
    mid = planned(fleet, chunk_rows=4, chunk_max_rows=4)
    command.start_copy(fleet.config, mid)
    work(fleet, max_jobs=3)  # copy-start and two table jobs with the planned options
    res = run_cli("set", mid, "--max-lag", "9.5", "--max-threads-running", "77", "--chunk-target-ms", "123",
                  "--freeze-budget-ms", "450", config=fleet.config_path)
    assert res.returncode == 0, res.stderr
    assert "max threads running 77" in res.stdout
    spec = MigrationStore(fleet.zk).spec(mid)
    assert (spec.options.max_passive_lag_s, spec.options.max_threads_running, spec.options.chunk_target_ms,
            spec.options.freeze_budget_ms) == (9.5, 77, 123, 450)
    assert spec.shards == (2, 3)  # only options changed
    work(fleet)
    slices = [j for j in finished_jobs(fleet) if (j.meta or {}).get("step") == "copy"]
    seen = [j.meta["options"]["max_threads_running"] for j in slices]
    assert seen[:2] == [50, 50] and seen[-1] == 77, seen
    later = [j.meta["options"] for j in slices[2:]]
    assert all(o["chunk_target_ms"] == 123 and o["max_standby_lag_s"] == 9.5 for o in later)
    bad = run_cli("set", mid, "--max-threads-running", "0", config=fleet.config_path)
    assert bad.returncode != 0 and "Traceback" not in bad.stderr


def test_postponed_cutover_holds_until_released(fleet):
    mid = copied(fleet)
    command.catchup(fleet.config, mid)
    assert phase(fleet, mid) == "converged"
    epoch = ShardMapStore(fleet.zk).read().epoch
    res = run_cli("postpone", mid, config=fleet.config_path)
    assert res.returncode == 0 and "postponed" in res.stdout, res.stderr
    # while postponed the pipeline keeps the target current: rows written now reach it
    passes_before = len(catchup_passes(fleet, mid))
    insert_pins(fleet, "MySQL001A", "db00002", 5)
    out = pipeline.finish(mid, str(fleet.config_path))
    assert out["next"] == "cutover postponed" and "cutover" not in out and out["pass"] == "ran", out
    assert len(catchup_passes(fleet, mid)) == passes_before + 1
    assert count(fleet, "MySQL003A", "db00002", "pins") == count(fleet, "MySQL001A", "db00002", "pins")
    assert phase(fleet, mid) == "converged" and ShardMapStore(fleet.zk).read().epoch == epoch
    # not while a cutover holds its lease (an operator's `migrator cutover`): it owns the tail then
    lease = CutoverLease(fleet.config, fleet.credentials, mid).acquire()
    try:
        out = pipeline.finish(mid, str(fleet.config_path))
        assert out["pass"].startswith("skipped"), out
    finally:
        lease.release()
    res = run_cli("postpone", mid, "--release", config=fleet.config_path)
    assert res.returncode == 0 and "released" in res.stdout, res.stderr
    for attempt in range(5):  # what RQ does with the re-enqueued finish on a busy box
        out = pipeline.finish(mid, str(fleet.config_path), attempt=attempt)
        if out.get("cutover"):
            break
    assert out.get("cutover") and phase(fleet, mid) == "done", (out.get("error"), out.get("next"))
    smap = ShardMapStore(fleet.zk).read()
    assert smap.master_of(2) == smap.master_of(3) == "MySQL003A"


def test_abort_in_catch_up_returns_cleanly_to_the_source(fleet):
    mid = copied(fleet)
    insert_pins(fleet, "MySQL001A", "db00002", 5)
    command.catchup(fleet.config, mid, passes=1)
    assert phase(fleet, mid) in ("catching_up", "converged")
    store = ShardMapStore(fleet.zk)
    before = store.read()
    locks = [fleet.zk.path("locks/shards", str(s)) for s in (2, 3)]
    assert all(fleet.zk.client.exists(p) for p in locks)
    assert plan_mod.maintenance_paused(fleet.zk, 2) == mid
    assert count(fleet, "MySQL003A", "db00002", "pins") == 25

    res = run_cli("abort", mid, "--yes", config=fleet.config_path)
    assert res.returncode == 0, res.stderr
    assert "db00002" in res.stdout
    after = store.read()
    assert after.epoch == before.epoch and after.to_json() == before.to_json()
    assert phase(fleet, mid) == "aborted"
    assert not any(fleet.zk.client.exists(p) for p in locks)
    assert plan_mod.maintenance_paused(fleet.zk, 2) is None and plan_mod.maintenance_paused(fleet.zk, 3) is None
    for host in ("MySQL003A", "MySQL003B"):
        assert count(fleet, host, "db00002", "pins") is None and count(fleet, host, "db00003", "pins") is None
    # the source keeps taking writes, and the shards can be planned again
    insert_pins(fleet, "MySQL001A", "db00002", 3)
    assert count(fleet, "MySQL001A", "db00002", "pins") == 28
    again = planned(fleet)
    assert again != mid


def test_limits_and_postpone_given_at_launch(fleet):
    """gh-ost style: the throttle and freeze limits, the retry window and a postponed cutover are set when the
    migration is launched, with the flags `migrator set` takes."""
    res = run_cli("split", "MySQL001A", "--yes", "--no-start", "--max-lag", "7.5", "--max-threads-running", "33",
                  "--freeze-budget-ms", "450", "--cutover-retry-s", "90", "--postpone-cutover", "--lock-retry-s", "12",
                  "--kill-blockers", "--json", config=fleet.config_path)
    assert res.returncode == 0, res.stderr
    [mid] = MigrationStore(fleet.zk).list()
    o = MigrationStore(fleet.zk).spec(mid).options
    assert (o.max_passive_lag_s, o.max_threads_running, o.freeze_budget_ms, o.cutover_retry_s) == (7.5, 33, 450, 90)
    assert (o.lock_retry_s, o.kill_blockers, o.kill_blockers_max_rows) == (12, True, 0)
    assert MigrationStore(fleet.zk).state(mid)[0].postpone_cutover
    assert queued(fleet) == 0  # --no-start: nothing handed to the workers
    # the opt-in is `migrator set`'s too, both ways
    res = run_cli("set", mid, "--no-kill-blockers", "--kill-blockers-max-rows", "10", config=fleet.config_path)
    assert res.returncode == 0 and "holders named" in " ".join(res.stdout.split()), res.stderr
    o = MigrationStore(fleet.zk).spec(mid).options
    assert (o.kill_blockers, o.kill_blockers_max_rows) == (False, 10)
    res = run_cli("set", mid, "--kill-blockers-max-rows", "-1", config=fleet.config_path)
    assert res.returncode != 0 and "--kill-blockers-max-rows" in res.stderr, res.stderr


def test_postpone_and_set_take_a_rebalance_id(fleet):
    """`postpone rb-...` and `set rb-...` reach every move of a rebalance (or batched split): the running ones
    and those it starts later, which take the record's setting."""
    from migrator.ops.rebalance import command as rebalance_cmd
    from migrator.ops.rebalance.record import RecordStore

    planned_moves = [{"source": "MySQL001A", "source_slave": "MySQL001B", "target": "MySQL003A",
                      "target_slave": "MySQL003B", "runs": [[2, 3]], "bytes": 0, "rows": 0, "writes": 0.0,
                      "wave": 0, "eta_s": None}]
    rid = rebalance_cmd.create(fleet.config, planned_moves, kind="split", max_concurrent=1, paused=True)
    res = run_cli("postpone", rid, config=fleet.config_path)
    assert res.returncode == 0 and "postponed" in res.stdout, res.stderr
    res = run_cli("set", rid, "--max-lag", "9", "--cutover-retry-s", "30", config=fleet.config_path)
    assert res.returncode == 0 and "max lag 9.0s" in res.stdout, res.stderr
    rec, _ = RecordStore(fleet.zk).get(rid)
    assert rec["postpone_cutover"] and rec["options"]["max_standby_lag_s"] == 9 and \
        rec["options"]["cutover_retry_s"] == 30
    assert run_cli("resume", rid, config=fleet.config_path).returncode == 0  # starts the move
    rec, _ = RecordStore(fleet.zk).get(rid)
    mid = rec["moves"][0]["migration"]
    store = MigrationStore(fleet.zk)
    assert store.state(mid)[0].postpone_cutover and store.spec(mid).options.max_passive_lag_s == 9
    res = run_cli("postpone", rid, "--release", config=fleet.config_path)
    assert res.returncode == 0 and "released (1 running moves)" in res.stdout, res.stdout
    assert not store.state(mid)[0].postpone_cutover
    assert run_cli("abort", rid, "--yes", config=fleet.config_path).returncode == 0
