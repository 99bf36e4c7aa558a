"""Batched cutovers: cutting a move into batches by the freeze budget, and adapting to measured freezes."""

from __future__ import annotations

import threading

import pytest

from migrator.engine.cutover.rename_fence import MAX_TABLES
from migrator.ops.batched import sizing as batches


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


def test_the_first_batch_is_sized_by_the_model_and_each_later_one_by_the_freeze_before_it():
    shards = list(range(200))
    tables = {s: 5 for s in shards}
    first = batches.next_batch(shards, tables, 500, None)
    n0 = 5 * len(first)
    assert first == shards[:len(first)] and n0 <= batches.limit_for(500) == batches.next_limit(500, None)
    rest = shards[len(first):]
    # the aim is 0.6 x 500 = 300 ms: the last batch's freeze per table scales it
    assert batches.next_limit(500, batches.Measured(40, 300.0)) == 40  # at the aim: the same size
    assert batches.next_limit(500, batches.Measured(40, 200.0)) == 60
    assert batches.next_limit(500, batches.Measured(40, 100.0)) == 80  # quick: at most twice the last
    assert batches.next_limit(500, batches.Measured(150, 100.0)) == MAX_TABLES
    assert batches.next_limit(500, batches.Measured(1, 900.0)) == 1  # never zero: at least one shard
    second = batches.next_batch(rest, tables, 500, batches.Measured(n0, 0.6 * 500 * n0 / (2 * n0)))
    assert 5 * len(second) == 2 * n0 and second[0] == rest[0]
    assert batches.next_batch([], tables, 500, batches.Measured(n0, 100.0)) == []


def test_a_freeze_over_the_budget_shrinks_the_next_batch():
    for n, freeze in ((40, 501.0), (40, 600.0), (100, 1000.0), (7, 520.0)):
        after = batches.next_limit(500, batches.Measured(n, freeze))
        assert after < 0.6 * n, (n, freeze, after)


def test_a_batch_over_the_budget_halves_the_next_whatever_its_rate_says():
    # a freeze just over the budget scales to 0.6 x 500 / 510 = 59 % of the batch; a miss halves it
    assert batches.next_limit(500, batches.Measured(40, 510.0)) == 20
    assert batches.next_limit(500, batches.Measured(40, 480.0)) == 25  # within the budget: the rate decides


def test_batch_sizes_follow_each_batch_s_own_freeze_not_the_worst_so_far():
    """A freeze of 100 ms plus 2 ms a table: the sizes climb to the aim (300 ms: 100 tables) without a freeze
    past it; one batch that froze long (a burst of writes to compare under its fence) makes the next one
    small, and the batches after it grow back, as they would not if the slow one's rate stayed the measure."""
    def freeze(n: int) -> float:
        return 100.0 + 2.0 * n

    sizes = [batches.next_limit(500, None)]
    for _ in range(8):
        sizes.append(batches.next_limit(500, batches.Measured(sizes[-1], freeze(sizes[-1]))))
    assert all(freeze(n) <= 300.0 for n in sizes) and sizes[-1] >= 95, sizes
    assert sizes == sorted(sizes), sizes  # never shrinks while the freezes stay under the aim
    slow = batches.next_limit(500, batches.Measured(sizes[-1], 900.0))  # the compare took 600 ms more
    assert slow < 0.6 * sizes[-1], slow
    after = [slow]
    for _ in range(8):
        after.append(batches.next_limit(500, batches.Measured(after[-1], freeze(after[-1]))))
    assert after[-1] >= 95 and max(freeze(n) for n in after) <= 300.0, after


def test_a_freeze_measured_by_its_steps_sizes_the_next_batch_on_its_fixed_and_per_table_parts():
    """A freeze of 200 ms of which 60 ms grew with its 60 tables (1 ms a table; the drain and the two CAS the
    rest): the next batch holds what freezes within the aim (300 ms) on top of the 140 ms fixed part, 160
    tables, not the 90 the whole freeze taken per table would allow; a fixed part past the aim halves it."""
    def measured(n: int, fixed: float, per_table: float) -> batches.Measured:
        grows = per_table * n
        return batches.Measured(n, fixed + grows, {"freeze_cas": 10.0, "fence": grows / 2, "sentinel": grows / 4,
                                                   "passive_close": grows / 4, "drain": fixed - 10.0})

    assert batches.Measured(60, 200.0).parts() is None
    assert measured(60, 140.0, 1.0).parts() == (140.0, 1.0)
    assert batches.next_limit(500, measured(60, 140.0, 1.0)) == 120  # at most twice the last
    assert batches.next_limit(500, measured(100, 140.0, 1.0)) == 160
    assert batches.next_limit(500, batches.Measured(100, 240.0)) == 125  # without the steps: all per table
    assert batches.next_limit(500, measured(100, 320.0, 1.0)) == 50  # a fixed part past the aim: halved
    assert batches.next_limit(500, measured(100, 420.0, 1.0)) == 50  # a miss: at most half


def test_the_batch_that_just_released_its_freeze_sizes_the_next():
    """The pipeline hands the next batch over while the one before renames its tables behind its released
    freeze, before that one's record is written: the freeze it measured at its release is the one used."""
    from migrator.engine.migration import State
    from migrator.ops.batched import run

    flight = run.Flight(None, "m-b001", None)
    flight.freeze_ms = 123.0
    st = State(batches=["m-b000", "m-b001"], batch_tables={"m-b000": 200, "m-b001": 35})
    assert run._last_freeze(None, st, flight) == batches.Measured(35, 123.0)


def _waits(call) -> threading.Thread:
    held = threading.Thread(target=call, args=(None,), daemon=True)
    held.start()
    held.join(0.2)
    return held


def test_a_batch_gates_once_the_freeze_before_it_left_the_passive_member_and_freezes_once_it_renamed():
    from migrator.engine.cutover.errors import CutoverAborted
    from migrator.ops.batched.run import Flight as _Flight

    first = _Flight(None, "m-b000", None)
    first.hold_gates(None)  # the first batch waits for nobody
    first.hold_freeze(None)
    second = _Flight(None, "m-b001", first)
    gating = _waits(second.hold_gates)
    assert gating.is_alive()  # the first batch's freeze is not past its passive member yet
    first.passive_done.set()
    gating.join(5)
    assert not gating.is_alive()
    freezing = _waits(second.hold_freeze)
    assert freezing.is_alive()  # the first has not released its freeze: the second does not freeze
    first.flipped = True
    first.released.set()
    freezing.join(0.2)
    assert freezing.is_alive()  # released, its tables not renamed on the master yet
    first.renamed.set()
    freezing.join(5)
    assert not freezing.is_alive()
    # the one before it ended without flipping: this one stops where it waits, saying why
    failed = _Flight(None, "m-b002", None)
    failed.error = RuntimeError("lock wait timeout")
    for done in (failed.passive_done, failed.released, failed.renamed, failed.ended):
        done.set()
    for hold in ("hold_gates", "hold_freeze"):
        with pytest.raises(CutoverAborted, match="m-b002 before it ended with: .*lock wait timeout; not freezing"):
            getattr(_Flight(None, "m-b003", failed), hold)(None)
    # one that flipped and failed after its release (its renames): the next one freezes behind it
    late = _Flight(None, "m-b004", None)
    late.flipped, late.error = True, RuntimeError("lost after the release")
    for done in (late.passive_done, late.released, late.renamed, late.ended):
        done.set()
    _Flight(None, "m-b005", late).hold_freeze(None)


def test_a_batch_is_sized_so_its_freeze_and_the_watchdog_s_reserve_fit_together():
    """The gate refuses a freeze that leaves the watchdog less than its reserve before the claim: a batch is not
    made so big that it would be (a freeze of 140 ms fixed and 1 ms a table, a reserve of 100 ms plus 1 ms a
    table: 105 tables fit 90 % of a 500 ms budget); the reserve counts at most half the budget."""
    def measured(n: int) -> batches.Measured:
        return batches.Measured(n, 140.0 + n, {"fence": float(n), "drain": 130.0, "freeze_cas": 10.0})

    assert batches.within_reserve(500, measured(100), 160, lambda n: 100.0 + n) == 105
    assert batches.within_reserve(500, measured(100), 60, lambda n: 100.0 + n) == 60
    assert batches.within_reserve(500, measured(100), 160, lambda n: 10_000.0) == 60  # at most 250 ms kept back
    assert batches.within_reserve(500, None, 75, lambda n: 100.0 + n) <= 75
    # the last freeze's flip CAS and release come after the claim, in the reserve: not counted twice
    flipped = batches.Measured(100, 240.0 + 100, {"fence": 100.0, "drain": 130.0, "flip_cas": 60.0, "release": 40.0})
    assert batches.within_reserve(500, flipped, 160, lambda n: 100.0 + n) == 105
