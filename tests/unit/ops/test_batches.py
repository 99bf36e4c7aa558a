"""Batched cutovers: cutting a move into batches by the freeze budget, and adapting to measured freezes."""

from __future__ import annotations

from migrator.engine.cutover.fence import MAX_TABLES
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


def test_a_move_over_the_fence_limit_is_cut_and_a_small_one_is_not():
    rec = _record()
    assert rec["batching"] is not None
    limit = batches.limit_for(500)
    assert len(rec["moves"]) == -(-120 // (limit // 5))
    assert all(m["tables"] <= limit for m in rec["moves"])
    assert len({m["migration"] for m in rec["moves"]}) == len(rec["moves"])
    assert sorted(s for m in rec["moves"] for s in batches.shards_of(m["runs"])) == list(range(120))
    small, batching = batches.expand("rb-y", [{**rec["moves"][0], "runs": [[0, 9]]}],
                                     {s: (5, 0) for s in range(10)}, 500, "auto")
    assert batching is None and len(small) == 1 and small[0]["tables"] == 50
    # fence=gate: one migration, whatever its size
    _, gated = batches.expand("rb-z", [{**rec["moves"][0], "runs": [[0, 119]]}],
                              {s: (5, 0) for s in range(120)}, 500, "gate")
    assert gated is None


def test_a_partition_move_counts_its_own_tables_and_is_never_cut():
    planned = [{"source": "A", "source_slave": "B", "target": "C", "target_slave": "D", "runs": [[3, 3]],
                "bytes": 0, "rows": 0, "writes": 9.0, "wave": 0, "eta_s": None, "queue": "hq", "partition": 3,
                "partition_tables": ["jobs_hq_p3", "jobs_hq_p3_dedupe"]}]
    moves, batching = batches.expand("rb-p", planned, {3: (500, 0)}, 500, "auto")
    assert batching is None and len(moves) == 1
    assert (moves[0]["tables"], moves[0]["queue"], moves[0]["partition"]) == (2, "hq", 3)


def _finish(m, freeze_ms, release_ms):
    m.update(state="done", freeze_ms=freeze_ms, steps_ms={"release": release_ms})


def test_batches_grow_after_quick_freezes_and_shrink_after_slow_ones():
    rec = _record(budget_ms=500, shards=200)
    first = rec["moves"][0]
    n0 = first["tables"]
    # a quick freeze: 100 ms fixed, 0.1 ms per table -> the next batches grow (to at most twice the last)
    _finish(first, 100 + 0.1 * n0, 0.1 * n0)
    assert batches.adapt(rec)
    nxt = [m for m in rec["moves"] if m["state"] == "waiting"]
    assert n0 < MAX_TABLES // 2 and nxt[0]["tables"] == 2 * n0
    ids = [m["migration"] for m in rec["moves"]]
    assert len(set(ids)) == len(ids)
    assert max(m["index"] for m in rec["moves"]) < 1 + len(rec["moves"])  # waiting batches' indices reused
    assert sorted(s for m in rec["moves"] for s in batches.shards_of(m["runs"])) == list(range(200))
    assert not batches.adapt(rec)  # nothing new measured: unchanged
    # a slow one: 160 ms fixed, 10 ms per table -> (300 - median(100, 160)) / 10 = 17 tables
    _finish(nxt[0], 160 + 10 * nxt[0]["tables"], 10 * nxt[0]["tables"])
    assert batches.adapt(rec)
    waiting = [m for m in rec["moves"] if m["state"] == "waiting"]
    assert waiting and all(m["tables"] == 15 for m in waiting[:-1])  # 3 shards of 5 tables
    assert sorted(s for m in rec["moves"] for s in batches.shards_of(m["runs"])) == list(range(200))


def test_small_batches_do_not_measure_the_per_table_rate():
    done = [{"tables": 5, "freeze_ms": 120.0, "steps_ms": {"release": 60.0, "fence": 5.0, "sentinel": 5.0}}]
    fixed, per = batches.measured_costs(done)
    assert fixed == 50.0 and per == batches.PER_TABLE_MS
