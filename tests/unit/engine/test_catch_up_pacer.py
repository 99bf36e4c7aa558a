"""When the tail cuts a round and sends it to the lanes (no servers)."""

from __future__ import annotations

import time

from migrator.engine.catch_up.pacer import Cut, Pacer


def never() -> bool:
    raise AssertionError("not asked")


def yes() -> bool:
    return True


def no() -> bool:
    return False


def test_a_round_at_its_size_limit_is_cut_even_while_the_lanes_write():
    p = Pacer(round_rows=100)
    assert p.cut(100, time.monotonic(), int(time.time()), never, never) is Cut.SIZE


def test_while_a_round_is_written_a_smaller_one_keeps_collecting():
    p = Pacer(round_rows=100)
    assert p.cut(99, time.monotonic() - 10, int(time.time()), yes, never) is None


def test_at_the_sources_head_with_nothing_more_read_the_round_goes_at_once():
    p = Pacer(round_rows=100)
    now = time.monotonic()
    assert p.cut(1, now, int(time.time()), no, no) is Cut.HEAD
    # more already read: the round keeps collecting until it is old enough
    assert p.cut(1, now, int(time.time()), no, yes) is None


def test_in_a_backlog_a_round_goes_once_it_is_old_enough():
    p = Pacer(round_rows=100, round_target_ms=150)
    old = int(time.time()) - 3600  # transactions an hour old: a backlog
    assert p.cut(1, time.monotonic(), old, no, never) is None
    assert p.cut(1, time.monotonic() - 0.2, old, no, never) is Cut.AGE
    assert p.cut(1, time.monotonic() - 0.2, 0, no, never) is Cut.AGE  # no timestamp read yet


def test_rounds_cut_by_size_and_written_fast_grow():
    p = Pacer(round_rows=1000, round_target_ms=150)
    p.after_round(1000, 10.0, cut_by_size=True)
    assert p.round_rows == 1500
    p.after_round(1500, 10.0, cut_by_size=False)  # cut by age or at the head: no growth
    assert p.round_rows == 1500


def climb(best: int, rounds: int = 200) -> list[int]:
    """The lane counts a pacer walks through when ``best`` lanes write fastest (each lane away from it
    5 % slower)."""
    p = Pacer(lanes=4, round_target_ms=150)
    seen = []
    for _ in range(rounds):
        rate = 100.0 * (1 - 0.15 * abs(p.lanes - best))  # rows per ms
        p.after_round(1000, 1000 / rate, cut_by_size=False)
        seen.append(p.lanes)
    return seen


def test_the_lane_count_settles_where_writing_is_fastest_below_the_start():
    seen = climb(best=2)
    assert seen[-1] == 2
    assert max(seen) <= 5  # one step up tried, not a climb to the maximum


def test_the_lane_count_settles_where_writing_is_fastest_above_the_start():
    assert climb(best=6)[-1] == 6


def test_the_lane_count_stays_put_at_the_best_start():
    seen = climb(best=4)
    assert seen[-1] == 4 and max(seen) <= 5 and min(seen) >= 3
