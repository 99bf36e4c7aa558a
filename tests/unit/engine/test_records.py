"""The typed records read what the engine stored before them, and write it back unchanged."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from migrator.engine import records
from migrator.engine.catch_up.checkpoint import CHECKPOINT_KEY, Checkpoint
from migrator.engine.catch_up.passes import PassResult
from migrator.engine.cutover.freeze_stats import FreezeStats
from migrator.engine.eta import CopyRate
from migrator.ops.playbook.runner import PlaybookRun, StepRun
from migrator.ops.rebalance.record import Move, Rebalance
from migrator.ops.watch import MigrationStatus

PASS = asdict(PassResult(number=3, started_at=1700000000.5, head="0-1-90", from_gtid="0-1-80", to_gtid="0-1-90",
                         events=12, transactions=4, bytes=900, statements=12, duration_s=0.25, apply_rate=48.0,
                         write_rate=5, lag_s=0, predicted_freeze_ms=17.5, converged=True))
ATTEMPT = {"at": 1700000100.0, "outcome": "flipped", "freeze_ms": 120.5, "fence": "rename",
           "steps_ms": {"drain": 20.0, "flip_cas": 3.0}, "predicted": {"drain_sampled_ms": 18.0},
           "blockers": [], "attempt": 1, "holder": "w1", "tables": 4, "epoch": 7}

#: each record in the shape the engine writes it, with what its model reads from it
OLD = [
    (records.TableProgress, {"db": "db00002", "table": "pins", "key": ["id"], "done": False, "last_key": None,
                             "start_gtid": None, "rows": 0, "bytes": 0, "chunks": 0, "est_rows": 120,
                             "est_bytes": 4096, "prepare_s": 0.0123},
     {"db": "db00002", "rows": 0, "est_rows": 120, "done": False, "start_gtid": None, "copy_s": 0.0}),
    (records.TableProgress, {"db": "db00002", "table": "pins", "key": ["id"], "done": True, "last_key": "WzQyXQ==",
                             "start_gtid": "0-1-50", "start_state": "0-1-50", "started_at": 1.5, "rows": 42,
                             "bytes": 4200, "chunks": 2, "est_rows": 40, "est_bytes": 4096, "prepare_s": 0.01,
                             "chunk_rows": 2000, "copy_s": 0.2, "wall_s": 0.3, "read_s": 0.1, "load_s": 0.1,
                             "throttled_s": 0.0, "finished_at": 2.5},
     {"done": True, "rows": 42, "rows_left": 0, "finished_at": 2.5, "chunk_rows": 2000}),
    (records.CatchupPass, PASS, {"number": 3, "events": 12, "lag_s": 0, "converged": True}),
    (records.CatchupNode, {"gtid": "0-1-90", "start_gtid": "0-1-10", "state": "0-1-90", "source": "MySQL001A",
                           "target": "MySQL003A", "passes": [PASS], "head_at": 5.0, "converged": True,
                           "not_converging": None, "updated_at": 6.0},
     {"gtid": "0-1-90", "head_at": 5.0, "not_converging": None}),
    (records.Attempt, ATTEMPT, {"outcome": "flipped", "freeze_ms": 120.5, "died_at": None}),
    (records.AttemptsNode, {"attempts": [ATTEMPT], "next_try": {"at": 9.0, "attempt": 2, "delay_s": 4.0,
                                                                 "until": 99.0}},
     {"passes": []}),
    (records.NextTry, {"at": 9.0, "attempt": 2, "delay_s": 4.0, "until": 99.0}, {"at": 9.0, "until": 99.0}),
    (records.VerifyNode, {"verified_gtid": "0-1-70", "suspect_chunks": [{"table": "db00002.pins", "lo": [1],
                                                                         "hi": None, "rows": 10}],
                          "at": 3.0, "chunks": 12, "mismatched": 0, "repaired": 0},
     {"verified_gtid": "0-1-70", "mismatched": 0}),
    (records.FlipNode, {"migration_id": "m-1", "fence_gtid": "0-1-9", "target_gtid": "0-2-4", "flipped_epoch": 7,
                        "target_state": "0-2-4", "settled_by": "reconcile"},
     {"target_gtid": "0-2-4", "freeze_ms": None, "steps_ms": {}}),
    (records.PhaseChange, {"who": "ops@box", "when": 4.0, "from": "copying", "to": "catching_up",
                           "component": "copy"},
     {"from_": "copying", "to": "catching_up", "error": None, "component": "copy"}),
    (records.Stopped, {"step": "cutover", "reason": "freeze over budget", "next": "migrator resume m-1",
                       "at": 8.0, "exit_code": 3},
     {"step": "cutover", "exit_code": 3}),
    (records.CutoverHolder, {"holder": "w1@box", "label": "cutover", "attempt": 2, "before_freeze": "gate",
                             "lease": "lease-0000000001"},
     {"step": None, "where": "gate"}),
    (records.FreezeSample, {"fixed_ms": 80.0, "fence": "rename", "tables": 4, "migration": "m-1", "at": 1.0,
                            "drain_ms": 20.0, "drain_sampled_ms": None},
     {"fixed_ms": 80.0, "drain_sampled_ms": None}),
    (records.AuditEntry, {"when": 1.0, "who": "ops", "reason": "cutover m-1", "old_epoch": 6, "new_epoch": 7,
                          "details": {"migration": "m-1", "direction": "rollback", "target_gtid": "0-2-4"}},
     {"new_epoch": 7}),
    (records.HandoverNode, {"attempts": [{"verify": 1.5, "cutover": 0.25}]}, {}),
    (CopyRate, {"rows_per_s": 1000.0, "bytes_per_s": 1e5, "rows": 10, "est_bytes": 100, "tables": 2,
                "seconds": 0.1, "total_s": None, "stream_bytes_per_s": 2e5, "per_table_s": 0.02,
                "prepare_s": 0.03, "overhead_s": 0.5, "read_s": 0.01, "load_s": 0.02, "migration": "m-1", "at": 1.0},
     {"tables": 2, "overhead_s": 0.5}),
    (FreezeStats, {"recent": [{"fixed_ms": 80.0, "fence": "gate", "tables": 4, "migration": "m-1", "at": 1.0,
                               "drain_ms": 20.0, "drain_sampled_ms": 18.0}]}, {}),
    (Move, {"index": 0, "source": "MySQL001A", "source_slave": "MySQL001B", "target": "MySQL003A",
            "target_slave": "MySQL003B", "runs": [[2, 3]], "bytes": 1.5e6, "rows": 10, "writes": 0.0,
            "eta_s": None, "wave": 0, "group": 0, "migration": "rb-x-m000", "tables": 4, "state": "failed",
            "error": "stopped", "exit_code": 6, "started_at": 1.0},
     {"batched": False, "batch_of": None, "exit_code": 6, "freeze_ms": None}),
    (Rebalance, {"id": "rb-x", "phase": "running", "paused": False, "max_concurrent": None, "objective": "bytes",
                 "options": {"copy_workers": 2}, "created_at": 1.0, "moves": [], "eta_s": 12.0},
     {"kind": "rebalance", "max_running": 0, "batching": None, "queue": None}),
    (PlaybookRun, {"playbook": "split", "text": "name: split", "params": {}, "context": {}, "cursor": 0,
                   "status": "pending", "steps": {}, "created_by": "ops", "created_at": 1.0,
                   "failed_step": None, "handlers_run": []},
     {"error": ""}),
    (StepRun, {"status": "pending", "attempts": 0}, {"first_seen": None, "started": None}),
]


@pytest.mark.parametrize(("model", "data", "read"), OLD, ids=[f"{m.__name__}-{i}" for i, (m, _, _) in enumerate(OLD)])
def test_an_old_record_reads_and_writes_back_as_it_was(model, data, read):
    rec = model.parse(json.loads(json.dumps(data)))
    for attr, value in read.items():
        assert getattr(rec, attr) == value, attr
    out = rec.dump()
    assert json.dumps(out) == json.dumps(data)  # same keys, order and values


def test_missing_and_null_keys_read_as_the_old_defaults_and_stay_null_when_written():
    prog = records.TableProgress.parse({"db": "db00002", "table": "pins", "rows": None, "est_rows": None})
    assert (prog.rows, prog.est_rows, prog.bytes, prog.done, prog.started_at) == (0, 0, 0, False, None)
    assert prog.dump() == {"db": "db00002", "table": "pins", "rows": None, "est_rows": None}
    moved = prog.model_copy(update={"rows": 5})
    assert moved.dump() == {"db": "db00002", "table": "pins", "rows": 5, "est_rows": None}
    assert records.CatchupNode.parse(None).passes == [] and records.Stopped.parse(None).at is None


def test_a_model_given_a_model_keeps_it():
    p = records.CatchupPass.parse(PASS)
    assert records.CatchupPass.parse(p) is p
    assert records.CatchupPass.parse_list([p, PASS])[1].number == 3


def test_the_status_view_reads_the_status_output():
    st = MigrationStatus.parse({"id": "m-1", "phase": "copying", "paused": False, "postpone_cutover": False,
                                "error": None, "stopped": None, "spec": {"source_master": "A", "shards": [2]},
                                "copy": {"tables": 2, "done": 1, "rows": 5, "est_rows": 9, "bytes": 50,
                                         "start_gtids": [], "per_table": []},
                                "passes": [PASS], "cutover_attempts": [ATTEMPT], "cutover_next_try": None,
                                "verify_mismatches": 0})
    assert (st.copy_.done, st.spec.shards, st.passes[0].number, st.cutover_attempts[0].freeze_ms) == (1, [2], 3, 120.5)
    assert st.workers is None and st.verify_mismatches == 0


class _Store:
    """A progress node store in memory: what :class:`Checkpoint` reads and writes."""

    def __init__(self, node):
        self.node, self.version = node, 0

    def get_progress(self, mid, key):
        assert key == CHECKPOINT_KEY
        return self.node, self.version

    def put_progress(self, mid, key, value, version=None, guard=None):
        assert version == self.version
        self.node = json.loads(json.dumps(value))
        self.version += 1
        return self.version


def test_the_checkpoint_writes_the_keys_it_read_and_those_it_was_given():
    old = {"gtid": "0-1-90", "start_gtid": "0-1-10", "state": "0-1-90", "source": "A", "target": "B",
           "passes": [PASS], "head_at": 5.0, "converged": True, "not_converging": None, "updated_at": 6.0}
    store = _Store(json.loads(json.dumps(old)))
    ckpt = Checkpoint(store, "m-1")
    assert str(ckpt.gtid) == "0-1-90" and ckpt.state == "0-1-90"
    ckpt.save(gtid="0-1-95")
    assert list(store.node) == list(old)
    assert {k: v for k, v in store.node.items() if k not in ("gtid", "updated_at")} == {
        k: v for k, v in old.items() if k not in ("gtid", "updated_at")}
    assert store.node["gtid"] == "0-1-95" and ckpt.record.gtid == "0-1-95"
    fresh = _Store(None)
    Checkpoint(fresh, "m-2").save(gtid="0-1-1", state="0-1-1")
    assert list(fresh.node) == ["gtid", "passes", "state", "updated_at"] and fresh.node["passes"] == []
