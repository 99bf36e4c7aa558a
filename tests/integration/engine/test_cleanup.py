"""Cleanup on the sandbox: tombstones dropped after the retention, their files gone, bookkeeping released."""

from __future__ import annotations

from pathlib import Path

import pytest

from migrator.engine.cleanup import RetentionNotOver, cleanup
from migrator.engine.cutover import cutover
from migrator.engine.migration import Options, Phase
from migrator.engine.names import tomb_db
from migrator.engine.plan import hold_maintenance_pause, maintenance_paused
from migrator.engine.rollback import rollback

from .cutover_setup import prepare_converged


def _files(fleet, host: str, schema: str) -> list[Path]:
    d = Path(fleet.sandbox.state.procs[host].datadir) / "data" / schema
    return sorted(d.glob("*.ibd")) if d.exists() else []


def test_cleanup_drops_tombstones_and_their_files(fleet):
    prep = prepare_converged(fleet, (2, 3), options=Options(freeze_budget_ms=2000))
    spec = prep.spec
    hold_maintenance_pause(fleet.zk, spec)
    cutover(fleet.config, spec.id)
    fleet.sandbox.wait_pairs_converged()
    tombs = [tomb_db(spec.id, db) for db in spec.databases]
    for host in (spec.source_master, spec.source_passive):  # the RENAME replicated to the old standby
        for t in tombs:
            assert len(_files(fleet, host, t)) == 5, (host, t)

    with pytest.raises(RetentionNotOver, match="--now"):
        cleanup(fleet.config, spec.id)
    assert _files(fleet, spec.source_master, tombs[0])

    hold_maintenance_pause(fleet.zk, spec)
    res = cleanup(fleet.config, spec.id, now=True)
    # no wait here: cleanup returns once the old standby has applied the drops too
    assert res.bytes_freed > 0 and res.passive_lag == []
    assert sorted(res.dropped) == sorted([f"{spec.source_master}:{t}" for t in tombs] +
                                         [f"{spec.source_master}:{db}" for db in spec.databases])
    for host in (spec.source_master, spec.source_passive):
        for schema in (*tombs, *spec.databases):
            assert not (Path(fleet.sandbox.state.procs[host].datadir) / "data" / schema).exists(), (host, schema)
    # the target still serves the shards
    assert _files(fleet, spec.target_master, "db00002")
    assert prep.store.holders(spec.shards) == {}
    assert all(maintenance_paused(fleet.zk, s) is None for s in spec.shards)
    st, _ = prep.store.state(spec.id)
    assert st.phase == Phase.CLEANED


def test_cleanup_after_rollback_drops_the_new_masters_copies(fleet):
    prep = prepare_converged(fleet, (4,), options=Options(freeze_budget_ms=2000))
    spec = prep.spec
    cutover(fleet.config, spec.id)
    rollback(fleet.config, spec.id)
    tomb = tomb_db(spec.id, "db00004")
    assert len(_files(fleet, spec.target_master, tomb)) == 5
    res = cleanup(fleet.config, spec.id, now=True)
    fleet.sandbox.wait_pairs_converged()
    for host in (spec.target_master, spec.target_passive):
        assert not (Path(fleet.sandbox.state.procs[host].datadir) / "data" / tomb).exists()
        assert not (Path(fleet.sandbox.state.procs[host].datadir) / "data" / "db00004").exists()
    assert len(_files(fleet, spec.source_master, "db00004")) == 6  # live again, sentinel included
    assert f"{spec.target_master}:{tomb}" in res.dropped


def test_an_overdue_cleanup_runs_from_the_record_without_its_job(fleet):
    """The cleanup job lives in Redis; with it lost (here: never enqueued), a worker's settler runs
    the cleanup from the ZooKeeper record once it is overdue."""
    import time

    from migrator.engine.cutover.settle import Settler

    prep = prepare_converged(fleet, (5,), options=Options(freeze_budget_ms=2000, retention_s=0))
    spec = prep.spec
    cutover(fleet.config, spec.id)
    logs: list[str] = []
    settler = Settler(fleet.config, cleanup_every_s=0.2, cleanup_grace_s=0.0, log=logs.append).start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and prep.store.state(spec.id)[0].phase != Phase.CLEANED:
            time.sleep(0.2)
    finally:
        settler.stop()
    st, _ = prep.store.state(spec.id)
    assert st.phase == Phase.CLEANED, logs
    assert any("cleanup was overdue" in line for line in logs), logs
    fleet.sandbox.wait_pairs_converged()
    tomb = tomb_db(spec.id, spec.databases[0])
    assert not (Path(fleet.sandbox.state.procs[spec.source_master].datadir) / "data" / tomb).exists()


def test_a_cleanup_waits_for_a_rollback_under_way(fleet):
    """A rollback asked for (its chain reads the tombstones) holds the cleanup, scheduled or overdue,
    until it ends; ``--now`` still drops them."""
    from migrator.engine.cleanup import RollbackUnderWay, cleanup, overdue

    prep = prepare_converged(fleet, (6,), options=Options(freeze_budget_ms=2000, retention_s=0))
    spec = prep.spec
    cutover(fleet.config, spec.id)
    prep.store.update(spec.id, lambda s: setattr(s, "rollback_requested", 1.0) or s)
    assert spec.id not in overdue(fleet.zk, grace_s=0.0)
    with pytest.raises(RollbackUnderWay, match="rollback of .* is under way"):
        cleanup(fleet.config, spec.id)
    assert prep.store.state(spec.id)[0].phase == Phase.DONE  # nothing dropped
    prep.store.update(spec.id, lambda s: setattr(s, "rollback_requested", None) or s)  # the rollback ended
    assert spec.id in overdue(fleet.zk, grace_s=0.0)
    assert cleanup(fleet.config, spec.id).dropped
    assert prep.store.state(spec.id)[0].phase == Phase.CLEANED


def test_a_cleanup_reports_a_standby_that_has_not_applied_its_drops(fleet, monkeypatch):
    """The old standby's SQL thread is stopped: cleanup drops on the master, waits its bounded time
    for the standby, then says which standby still holds the schemas (not an error: it applies the
    drops once replication runs again)."""
    from migrator.engine import cleanup as cleanup_mod

    prep = prepare_converged(fleet, (7,), options=Options(freeze_budget_ms=2000))
    spec = prep.spec
    cutover(fleet.config, spec.id)
    fleet.sandbox.wait_pairs_converged()
    monkeypatch.setattr(cleanup_mod, "PASSIVE_WAIT_S", 1.0)
    tomb = tomb_db(spec.id, "db00007")
    with fleet.sandbox.root_conn(spec.source_passive) as root, root.cursor() as cur:
        cur.execute("STOP SLAVE SQL_THREAD")
        try:
            res = cleanup(fleet.config, spec.id, now=True)
            assert _files(fleet, spec.source_passive, tomb), "the standby applied the drop with its SQL thread stopped"
        finally:
            cur.execute("START SLAVE SQL_THREAD")
    assert len(res.passive_lag) == 1 and res.passive_lag[0].startswith(f"{spec.source_passive}: had not applied")
    assert prep.store.state(spec.id)[0].phase == Phase.CLEANED
    fleet.sandbox.wait_pairs_converged()
    assert not _files(fleet, spec.source_passive, tomb)


def test_cleanup_never_drops_the_tombstones_under_a_rollback_on_any_path(fleet, monkeypatch):
    """A rollback run in this process (``--sync``, a playbook's step, ``command.rollback``: no
    ``rollback_requested`` in the record) reads the tombstones; a cleanup, even with ``--now``, refuses
    while it does, and the rollback flips back with everything. A rollback started while a cleanup holds
    the tombstones refuses, naming the cleanup."""
    import threading

    from migrator.engine import cleanup as cleanup_mod
    from migrator.engine import rollback as rollback_mod
    from migrator.engine.cleanup import RollbackUnderWay
    from migrator.engine.rollback import RollbackError

    prep = prepare_converged(fleet, (5,), options=Options(freeze_budget_ms=2000, retention_s=0))
    spec = prep.spec
    cutover(fleet.config, spec.id)
    monkeypatch.setattr(cleanup_mod, "TOMBSTONE_LOCK_WAIT_S", 0.5)
    in_rollback, go_on = threading.Event(), threading.Event()

    def slow_pass(_res):  # the rollback is reading the tombstones now
        in_rollback.set()
        go_on.wait(30)

    outcome: dict = {}
    t = threading.Thread(target=lambda: outcome.setdefault("r", rollback(fleet.config, spec.id, on_pass=slow_pass)))
    t.start()
    try:
        assert in_rollback.wait(60)
        assert prep.store.state(spec.id)[0].rollback_requested is None  # no record of it but the lock
        with pytest.raises(RollbackUnderWay, match="reading its tombstones"):
            cleanup(fleet.config, spec.id, now=True)
    finally:
        go_on.set()
        t.join(120)
    assert "r" in outcome and prep.store.state(spec.id)[0].phase == Phase.ROLLED_BACK
    # the other way round: a cleanup holding the tombstones keeps a rollback from starting
    prep2 = prepare_converged(fleet, (6,), options=Options(freeze_budget_ms=2000, retention_s=0))
    cutover(fleet.config, prep2.spec.id)
    monkeypatch.setattr(rollback_mod, "TOMBSTONE_LOCK_WAIT_S", 0.5)
    held = prep2.store.tombstone_lock(prep2.spec.id, "cleanup", exclusive=True)
    assert held.acquire(timeout=5)
    try:
        with pytest.raises(RollbackError, match="cleanup of .* is dropping its tombstones"):
            rollback(fleet.config, prep2.spec.id)
    finally:
        held.release()
    assert prep2.store.state(prep2.spec.id)[0].phase == Phase.DONE
