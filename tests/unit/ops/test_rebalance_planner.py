"""The rebalance planner's properties on modelled fleets (no servers)."""

from __future__ import annotations

import random

import pytest

from bench.rebalance import layout, zipf_fleet
from migrator.ops.rebalance.planner import (
    PartitionCost,
    RebalanceError,
    ShardCost,
    coalesce,
    lower_bound,
    plan,
    plan_with_partitions,
)
from migrator.ops.rebalance.schedule import Rates, simulate


def owners_after(p) -> dict[int, str]:
    return {s: pair for lo, hi, pair in p.ranges_after for s in range(lo, hi + 1)}


def check_consistent(p, costs) -> None:
    """Moves, loads and the map after agree; every shard moves at most once, from its owner."""
    before = {s: pair for lo, hi, pair in p.ranges_before for s in range(lo, hi + 1)}
    after = dict(before)
    seen: set[int] = set()
    for m in p.moves:
        for s in m.shards:
            assert s not in seen, f"shard {s} moves twice"
            seen.add(s)
            assert before[s] == m.source
            after[s] = m.target
    assert after == owners_after(p)
    load = {q: 0.0 for q in p.pairs}
    for s, q in after.items():
        load[q] += costs[s].bytes
    assert load == pytest.approx(p.load_after)
    assert p.ranges_after == coalesce([after[s] for s in range(len(costs))])


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("pairs", [8, 64])
def test_every_pair_ends_within_the_threshold(seed, pairs):
    costs = zipf_fleet(4096, 0.5, 1e12, seed)
    p = plan(layout(4096, pairs), costs, threshold=0.10)
    check_consistent(p, costs)
    assert not p.unbalanced
    for q in p.pairs:
        assert p.mean * 0.9 * (1 - 1e-9) <= p.load_after[q] <= p.mean * 1.1 * (1 + 1e-9), q
    bound = lower_bound(p.load_before, p.pairs, p.drain, 0.10)
    assert bound <= p.bytes_moved <= 1.2 * bound
    assert p.plan_s < 5


def test_added_pairs_are_filled_and_moves_are_few():
    costs = zipf_fleet(4096, 0.5, 1e12, 7)
    new = [f"MySQL{i:03d}A" for i in range(9, 17)]
    p = plan(layout(4096, 8), costs, add_pairs=new)
    check_consistent(p, costs)
    assert not p.unbalanced
    assert p.imbalance() <= 1.10 + 1e-9 and p.imbalance(after=False) > 1.9
    for q in new:
        assert p.load_after[q] >= p.mean * 0.9 * (1 - 1e-9)
    # compact: about one range more per new pair
    assert len(p.ranges_after) <= 2 * 16


def test_a_wave_holds_at_most_one_move_per_pair_and_the_cap():
    costs = zipf_fleet(2048, 0.5, 1e12, 3)
    p = plan(layout(2048, 32), costs, max_concurrent=3)
    assert p.moves
    for w in range(p.waves):
        wave = [m for m in p.moves if m.wave == w]
        assert 1 <= len(wave) <= 3
        used = [q for m in wave for q in (m.source, m.target)]
        assert len(used) == len(set(used)), f"wave {w} uses a pair twice: {used}"
    p2 = plan(layout(2048, 32), costs, max_moves_per_pair=2)
    for w in range(p2.waves):
        used = [q for m in p2.moves if m.wave == w for q in (m.source, m.target)]
        assert max(used.count(q) for q in used) <= 2


def test_a_pair_is_a_source_or_a_target_never_both():
    costs = zipf_fleet(4096, 0.5, 1e12, 11)
    p = plan(layout(4096, 64), costs)
    sources = {m.source for m in p.moves}
    targets = {m.target for m in p.moves}
    assert not sources & targets


def test_drain_empties_the_pair():
    costs = [ShardCost(bytes=random.Random(s).randint(50, 150)) for s in range(64)]
    p = plan(layout(64, 4), costs, drain=["MySQL002A"])
    check_consistent(p, costs)
    assert p.load_after["MySQL002A"] == 0
    assert "MySQL002A" not in {q for _, _, q in p.ranges_after}
    assert all(m.target != "MySQL002A" for m in p.moves)
    assert p.imbalance() <= 1.10 + 1e-9


def test_moves_take_runs_at_range_edges_and_keep_the_map_compact():
    # 4 even pairs, one empty added: each donor gives one run at an edge of its range
    costs = [ShardCost(bytes=10, rows=1) for _ in range(400)]
    p = plan(layout(400, 4), costs, add_pairs=["MySQL005A"])
    check_consistent(p, costs)
    assert not p.unbalanced
    for m in p.moves:
        (lo, hi), = m.runs
        src = [(a, b) for a, b, q in p.ranges_before if q == m.source]
        assert any(lo == a or hi == b for a, b in src), (m, src)
    # 4 ranges before; each donor's run becomes a range of the new pair, merged where they touch
    assert len(p.ranges_after) <= 4 + 4


def test_a_balanced_fleet_needs_no_move():
    costs = [ShardCost(bytes=100) for _ in range(64)]
    p = plan(layout(64, 4), costs)
    assert p.moves == [] and p.ranges_after == p.ranges_before


def test_objective_rows_and_writes():
    costs = [ShardCost(bytes=1, rows=1000 if s < 16 else 10, writes=5.0 if s >= 48 else 0.5) for s in range(64)]
    for obj in ("rows", "writes"):
        p = plan(layout(64, 4), costs, objective=obj, threshold=0.2, add_pairs=["MySQL005A"])
        assert p.objective == obj
        assert p.imbalance(after=True) < p.imbalance(after=False)


@pytest.mark.parametrize("kwargs, msg", [
    (dict(objective="cpu"), "unknown objective"),
    (dict(threshold=0), "threshold"),
    (dict(add_pairs=["MySQL001A"]), "already holds shards"),
    (dict(drain=["MySQL009A"]), "holds no shards"),
    (dict(drain=["MySQL001A", "MySQL002A"]), "every pair would be drained"),
    (dict(max_concurrent=0), "max-concurrent"),
])
def test_bad_input_is_one_clear_error(kwargs, msg):
    costs = [ShardCost(bytes=1) for _ in range(8)]
    with pytest.raises(RebalanceError, match=msg):
        plan(layout(8, 2), costs, **kwargs)


def test_the_schedule_runs_disjoint_moves_at_once():
    costs = zipf_fleet(4096, 0.5, 1e12, 7)
    p = plan(layout(4096, 8), costs, add_pairs=[f"MySQL{i:03d}A" for i in range(9, 17)])
    rates = Rates()
    one, four = simulate(p.moves, 1, rates), simulate(p.moves, 4, rates)
    assert one == pytest.approx(sum(rates.duration_s(m.bytes, m.writes) for m in p.moves))
    assert one / 4 <= four < one / 2


def _queue_fleet(hot: float):
    """Three pairs of four shards; shards 0 and 1 on pair A hold queue partitions q[0] and q[1], each
    writing ``hot``/s (in their shard's writes: measured on the range's pair)."""
    ranges = [(0, 3, "A"), (4, 7, "B"), (8, 11, "C")]
    costs = [ShardCost(bytes=10_000_000, rows=1000, writes=10.0) for _ in range(12)]
    for s in (0, 1):
        costs[s] = ShardCost(bytes=10_000_000, rows=1000, writes=10.0 + hot)
    parts = [PartitionCost(queue="q", partition=i, shard=s, tables=(f"jobs_q_p{i}", f"jobs_q_p{i}_dedupe"),
                           pair={0: "A", 1: "A", 5: "B", 9: "C"}[s], bytes=200_000, rows=50,
                           writes=hot if s in (0, 1) else 0.5)
             for i, s in enumerate((0, 1, 5, 9))]
    return ranges, costs, parts


def test_a_hot_partition_moves_on_its_own_where_that_beats_moving_shards():
    ranges, costs, parts = _queue_fleet(hot=25.0)
    shards_only = plan(ranges, costs, objective="writes", threshold=0.2)
    p = plan_with_partitions(ranges, costs, parts, objective="writes", threshold=0.2)
    assert [(m.queue, m.source, len(m.runs)) for m in p.moves] == [("q", "A", 1)]
    k = p.moves[0].partition
    assert p.moves[0].runs == [(k, k)] and p.moves[0].tables == (f"jobs_q_p{k}", f"jobs_q_p{k}_dedupe")
    assert p.moves[0].target in ("B", "C") and "A" not in p.unbalanced and p.load_after["A"] == 65.0
    assert p.ranges_after == p.ranges_before  # no range moves
    assert p.bytes_moved < shards_only.bytes_moved
    assert p.imbalance() <= max(shards_only.imbalance(), 1.2) + 1e-9
    assert p.as_dict()["moves"][0]["queue"] == "q"


def test_shards_move_when_partitions_are_not_what_makes_a_pair_hot():
    ranges, costs, parts = _queue_fleet(hot=0.5)
    costs[2] = ShardCost(bytes=10_000_000, rows=1000, writes=80.0)  # a shard hot by its own tables
    p = plan_with_partitions(ranges, costs, parts, objective="writes", threshold=0.2)
    assert p.moves and all(m.queue is None for m in p.moves)
    # and bytes or rows never look at partitions
    assert all(m.queue is None for m in plan_with_partitions(ranges, costs, parts, objective="bytes").moves)
