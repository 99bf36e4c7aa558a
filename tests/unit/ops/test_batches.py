"""Batched cutovers: cutting a move into batches by the freeze budget, and adapting to measured freezes."""

from __future__ import annotations

import threading

import pytest

from migrator.engine.cutover.rename_fence import MAX_TABLES
from migrator.ops.rebalance import batches


def test_the_first_batch_is_sized_by_the_budget_within_the_fence_limit():
    assert batches.limit_for(500) == int((0.6 * 500 - batches.FIXED_MS) / batches.PER_TABLE_MS)
    assert batches.limit_for(60_000) == MAX_TABLES
    assert batches.limit_for(10) == 1  # never zero: a batch holds at least one shard


def test_cut_keeps_shards_consecutive_and_under_the_limit():
    tables = {s: 5 for s in range(100)}
    out = batches.cut(list(range(100)), tables, 42)
    assert [s for b in out for s in b] == list(range(100))
    assert all(sum(tables[s] for s in b) <= 42 for b in out)
    assert all(sum(tables[s] for s in b) + 5 > 42 for b in out[:-1])  # each full but the last
    # a shard bigger than the limit is a batch of its own
    assert batches.cut([1, 2, 3], {1: 1, 2: 50, 3: 1}, 10) == [[1], [2], [3]]


def test_runs_of_and_shards_of_round_trip():
    shards = [3, 4, 5, 9, 10, 20]
    assert batches.runs_of(shards) == [[3, 5], [9, 10], [20, 20]]
    assert batches.shards_of(batches.runs_of(shards)) == shards


def _record(budget_ms: float = 500, shards: int = 120, tables_each: int = 5):
    planned = [{"source": "A", "source_slave": "B", "target": "C", "target_slave": "D",
                "runs": [[0, shards - 1]], "bytes": 0, "rows": 0, "writes": 0.0, "wave": 0, "eta_s": None}]
    counts = {s: (tables_each, 1000) for s in range(shards)}
    moves, batching = batches.expand("rb-x", planned, counts, budget_ms, "auto")
    return {"id": "rb-x", "moves": moves, "batching": batching}


def test_a_move_over_the_fence_limit_is_one_batched_move_and_a_small_one_is_not():
    rec = _record()
    assert rec["batching"] is not None
    limit = batches.limit_for(500)
    (move,) = rec["moves"]  # one migration: copied and tailed once, cut over in batches
    assert move["batched"] and move["tables"] == 600 and move["runs"] == [[0, 119]]
    assert rec["batching"]["limit"] == limit
    preview = rec["batching"]["first_cut"]["0"]  # what the plan shows
    assert len(preview) == -(-120 // (limit // 5))
    assert sorted(s for runs in preview for s in batches.shards_of(runs)) == list(range(120))
    planned = {k: v for k, v in move.items() if k not in ("batched", "index", "group", "migration", "state")}
    small, batching = batches.expand("rb-y", [{**planned, "runs": [[0, 9]]}], {s: (5, 0) for s in range(10)}, 500,
                                     "auto")
    assert batching is None and len(small) == 1 and small[0]["tables"] == 50 and "batched" not in small[0]
    # fence=gate: one migration, whatever its size
    gated, batching = batches.expand("rb-z", [{**planned, "runs": [[0, 119]]}], {s: (5, 0) for s in range(120)}, 500,
                                     "gate")
    assert batching is None and "batched" not in gated[0]


def test_a_partition_move_counts_its_own_tables_and_is_never_cut():
    planned = [{"source": "A", "source_slave": "B", "target": "C", "target_slave": "D", "runs": [[3, 3]],
                "bytes": 0, "rows": 0, "writes": 9.0, "wave": 0, "eta_s": None, "queue": "hq", "partition": 3,
                "partition_tables": ["jobs_hq_p3", "jobs_hq_p3_dedupe"]}]
    moves, batching = batches.expand("rb-p", planned, {3: (500, 0)}, 500, "auto")
    assert batching is None and len(moves) == 1
    assert (moves[0]["tables"], moves[0]["queue"], moves[0]["partition"]) == (2, "hq", 3)


def test_batches_grow_after_quick_freezes_and_shrink_after_slow_ones():
    shards = list(range(200))
    tables = {s: 5 for s in shards}
    first = batches.next_batch(shards, tables, 500, [])
    n0 = 5 * len(first)
    assert first == shards[:len(first)] and n0 <= batches.limit_for(500)
    # a quick freeze: 100 ms fixed, 0.1 ms per table -> the next batch grows, to at most twice the last
    done = [{"tables": n0, "freeze_ms": 100 + 0.1 * n0, "steps_ms": {"release": 0.1 * n0}}]
    rest = shards[len(first):]
    second = batches.next_batch(rest, tables, 500, done)
    assert n0 < MAX_TABLES // 2 and 5 * len(second) == 2 * n0 and second[0] == rest[0]
    # a slow one: 160 ms fixed, 10 ms per table -> (300 - median(100, 160)) / 10 = 17 tables: 3 shards
    n1 = 5 * len(second)
    done.append({"tables": n1, "freeze_ms": 160 + 10 * n1, "steps_ms": {"release": 10 * n1}})
    assert len(batches.next_batch(rest[len(second):], tables, 500, done)) == 3
    assert batches.next_batch([], tables, 500, done) == []


def test_a_batch_over_the_budget_halves_the_next_whatever_the_model_says():
    shards = list(range(200))
    tables = {s: 5 for s in shards}
    # two quick batches, then one whose drain spiked: the median fixed part hardly moves, so the model alone
    # would grow the next batch to twice the last; the miss halves it instead
    done = [{"tables": 40, "freeze_ms": 120.0, "steps_ms": {"release": 4.0}},
            {"tables": 40, "freeze_ms": 110.0, "steps_ms": {"release": 4.0}},
            {"tables": 40, "freeze_ms": 523.0, "steps_ms": {"release": 4.0, "drain": 400.0}}]
    assert batches.limit_for(500, *batches.measured_costs(done)) > 80
    assert 5 * len(batches.next_batch(shards, tables, 500, done)) == 20
    # the same batch within the budget: the model's size (twice the last)
    done[-1]["freeze_ms"] = 480.0
    assert 5 * len(batches.next_batch(shards, tables, 500, done)) == 80


def test_small_batches_do_not_measure_the_per_table_rate():
    done = [{"tables": 5, "freeze_ms": 120.0, "steps_ms": {"release": 60.0, "fence": 5.0, "sentinel": 5.0}}]
    fixed, per = batches.measured_costs(done)
    assert fixed == 50.0 and per == batches.PER_TABLE_MS


def test_a_batch_freezes_only_after_the_one_before_it_ended_and_flipped():
    from jobs.pipeline import _Flight
    from migrator.engine.cutover.errors import CutoverAborted

    first = _Flight(None, "m-b000", None)
    first.hold_freeze(None)  # the first batch waits for nobody
    second = _Flight(None, "m-b001", first)
    held = threading.Thread(target=second.hold_freeze, args=(None,))
    held.start()
    held.join(0.2)
    assert held.is_alive()  # the first has not ended: the second does not freeze
    first.ended.set()
    held.join(5)
    assert not held.is_alive()
    # the one before it ended without flipping: this one stops before its freeze, saying why
    failed = _Flight(None, "m-b002", None)
    failed.error = RuntimeError("lock wait timeout")
    failed.ended.set()
    with pytest.raises(CutoverAborted, match="m-b002 before it ended with: .*lock wait timeout; not freezing"):
        _Flight(None, "m-b003", failed).hold_freeze(None)
