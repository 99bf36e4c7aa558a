"""Plan arithmetic: which shards a split moves, spare pairs, target checks, ETA."""

from __future__ import annotations

import pytest

from migrator.engine.eta import copy_eta
from migrator.engine.plan import (
    PlanError,
    parse_shards,
    source_pair,
    spare_pairs,
    split_shards,
    target_pair,
    upper_half,
)
from migrator.errors import UnknownHost
from migrator.fleet.model import Host, ShardMap, ShardRange


def _map(*ranges: tuple[int, int, str, str]) -> ShardMap:
    return ShardMap(num_shards=max(r[1] for r in ranges) + 1,
                    ranges=tuple(ShardRange(lo=lo, hi=hi, master=m, passive=s) for lo, hi, m, s in ranges))


def _hosts(*pairs: tuple[str, str]) -> dict[str, Host]:
    out = {}
    for i, (a, b) in enumerate(pairs):
        out[a] = Host(name=a, port=3300 + 2 * i, partner=b)
        out[b] = Host(name=b, port=3301 + 2 * i, partner=a)
    return out


@pytest.mark.parametrize("lo,hi,expect", [
    (0, 3, [2, 3]), (0, 0, []), (0, 1, [1]), (4, 8, [7, 8]), (0, 511, list(range(256, 512))), (10, 12, [12]),
])
def test_upper_half(lo, hi, expect):
    assert upper_half(lo, hi) == expect


def test_split_takes_the_upper_half_of_every_range_of_the_master():
    m = _map((0, 3, "A1", "B1"), (4, 7, "A2", "B2"), (8, 13, "A1", "B1"), (14, 15, "A2", "B2"))
    assert split_shards(m, "A1") == [2, 3, 11, 12, 13]
    assert split_shards(m, "A2") == [6, 7, 15]


def test_split_refuses_the_standby_single_shard_ranges_and_idle_hosts():
    m = _map((0, 0, "A1", "B1"), (1, 3, "A2", "B2"))
    with pytest.raises(PlanError, match="standby .* split its master A2"):
        split_shards(m, "B2")
    with pytest.raises(PlanError, match="single-shard"):
        split_shards(m, "A1")
    with pytest.raises(PlanError, match="holds no shard range"):
        split_shards(m, "C1")


def test_parse_shards():
    assert parse_shards("4-7") == [4, 5, 6, 7]
    assert parse_shards("4-5, 9,4") == [4, 5, 9]
    for bad in ("7-4", "x", "", "4-"):
        with pytest.raises(PlanError):
            parse_shards(bad)


def test_spare_pairs_are_registered_pairs_without_a_range():
    m = _map((0, 3, "A1", "B1"))
    hosts = _hosts(("A1", "B1"), ("A3", "B3"), ("A2", "B2"))
    assert spare_pairs(hosts, m) == [("A2", "B2"), ("A3", "B3")]


def test_source_pair_must_be_one_pair():
    m = _map((0, 3, "A1", "B1"), (4, 7, "A2", "B2"))
    assert source_pair(m, [2, 3]) == ("A1", "B1")
    with pytest.raises(PlanError, match="more than one pair"):
        source_pair(m, [3, 4])


def test_target_pair_checks():
    m = _map((0, 3, "A1", "B1"), (4, 7, "A2", "B2"))
    hosts = _hosts(("A1", "B1"), ("A2", "B2"), ("A3", "B3"))
    assert target_pair(hosts, m, ("A1", "B1"), "A3") == ("A3", "B3")
    assert target_pair(hosts, m, ("A1", "B1"), "A2") == ("A2", "B2")
    with pytest.raises(PlanError, match="source pair"):
        target_pair(hosts, m, ("A1", "B1"), "B1")
    with pytest.raises(PlanError, match="standby .* name its master A2"):
        target_pair(hosts, m, ("A1", "B1"), "B2")
    with pytest.raises(UnknownHost):
        target_pair(hosts, m, ("A1", "B1"), "A9")


def test_eta_is_a_fixed_cost_per_table_plus_bytes_at_a_stream_rate():
    # 4 tables of 10 MB at 1 MB/s per stream, 0.5 s per table, 4 streams: (4 * 0.5 + 40) / 4
    assert copy_eta(4, 40_000_000, 1e6, 0.5, streams=4) == pytest.approx(10.5)
    # streams are bounded by the number of tables
    assert copy_eta(2, 20_000_000, 1e6, 0.0, streams=8) == pytest.approx(10.0)
    # thousands of empty tables cost their fixed cost, not nothing
    assert copy_eta(1000, 0, 1e6, 0.02, streams=2) == pytest.approx(10.0)
    assert copy_eta(0, 0, 1e6, 0.5, streams=1) == 0.0
    assert copy_eta(1, 10, 0.0, 0.5, streams=1) == float("inf")
    # the schema is created first, PREPARE_THREADS (4) tables at a time
    assert copy_eta(100, 0, 1e6, 0.0, streams=4, prepare_s=0.2) == pytest.approx(5.0)
