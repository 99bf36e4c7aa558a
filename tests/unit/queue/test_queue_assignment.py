"""Broker assignment by rendezvous hashing (pure)."""

from __future__ import annotations

from collections import Counter

from migrator.queue.broker import assign


def test_every_partition_has_one_owner_and_load_spreads():
    parts = [(f"q{q}", i) for q in range(10) for i in range(8)]
    a = assign(parts, ["b1", "b2", "b3"])
    assert set(a) == set(parts)
    load = Counter(a.values())
    assert set(load) == {"b1", "b2", "b3"} and min(load.values()) > len(parts) / 6


def test_deterministic_and_order_free():
    parts = [("q", i) for i in range(16)]
    assert assign(parts, ["x", "y"]) == assign(list(reversed(parts)), ["y", "x"])
    assert assign(parts, []) == {}


def test_join_and_leave_move_only_what_must_move():
    parts = [(f"q{q}", i) for q in range(5) for i in range(10)]
    before = assign(parts, ["b1", "b2", "b3"])
    after_leave = assign(parts, ["b1", "b3"])
    for p, owner in before.items():
        if owner != "b2":
            assert after_leave[p] == owner  # survivors keep what they had
    after_join = assign(parts, ["b1", "b2", "b3", "b4"])
    for p, owner in after_join.items():
        assert owner in (before[p], "b4")  # a joiner only takes
