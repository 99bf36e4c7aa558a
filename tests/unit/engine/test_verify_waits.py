"""Waits outside the freeze go on while they advance and stop only once stuck (:mod:`migrator.engine.verify.waits`).

A drainer here is a stand-in that applies a given number of transactions per slice (the real tail's
drain is shown on the sandbox in tests/integration/engine/test_verify.py)."""

from __future__ import annotations

import time

import pytest

from migrator.engine.catch_up.tailer import DrainTimeout, TailStats
from migrator.engine.verify.drainers import NoTail
from migrator.engine.verify.waits import Stall, Stalled, WaitTimeout, drain_progressing


class SlowTail(NoTail):
    """Reaches its target after ``slices`` calls, advancing by one each call for ``moving`` calls (a
    :class:`~migrator.engine.verify.drainers.Drainer` with no tail: its other verbs are no-ops)."""

    def __init__(self, slices: int, moving: int, error: type[Exception] = DrainTimeout):
        self.slices, self.moving, self.error = slices, moving, error
        self.calls = 0
        self.at = 0
        self.timeouts: list[float] = []

    def progress(self) -> tuple[str, int]:
        return (f"0-1-{self.at}", self.at)

    def drain_to(self, gtid: str, timeout: float, *, save: bool = True) -> str:
        self.calls += 1
        self.timeouts.append(timeout)
        time.sleep(timeout)
        if self.calls <= self.moving:
            self.at += 1
        if self.calls >= self.slices:
            return "reached"
        raise self.error(f"not within {timeout}s")


def test_a_drain_that_keeps_advancing_is_not_cut_off():
    # 6 slices of 0.01 s, each advancing: far longer than one stall timeout, and it finishes
    tail = SlowTail(slices=6, moving=6)
    assert drain_progressing(tail, "0-1-999", what="re-check", stall_s=0.01) == "reached"
    assert tail.calls == 6 and set(tail.timeouts) == {0.01}


@pytest.mark.parametrize("error", [DrainTimeout, WaitTimeout])
def test_a_drain_that_stops_advancing_is_refused_naming_where_it_got(error):
    tail = SlowTail(slices=100, moving=3, error=error)
    with pytest.raises(Stalled, match=r"re-check of m1: the drain to 0-1-999 made no progress for 0.01s .*"
                                      r"applied up to 0-1-3 \(3 row changes read\)"):
        drain_progressing(tail, "0-1-999", what="re-check of m1", stall_s=0.01)
    assert tail.calls == 4  # three slices that advanced, then one that did not


class SlicedTail(NoTail):
    """Applies a window of ``total`` row changes: each of the first ``short`` slices applies ``per`` of them in
    0.5 s and ends short (its :class:`DrainTimeout` carries what it applied, as the tail's does), the last
    applies the rest."""

    def __init__(self, total: int, per: int, short: int):
        self.total, self.per, self.short = total, per, short
        self.calls = 0
        self.at = 0

    def progress(self) -> tuple[str, int]:
        return (f"0-1-{self.at}", self.at)

    def drain_to(self, gtid: str, timeout: float, *, save: bool = True) -> TailStats:
        self.calls += 1
        start, ends_short = f"0-1-{self.at}", self.calls <= self.short
        n = self.per if ends_short else self.total - self.at
        self.at += n
        stats = TailStats(start=start, end=f"0-1-{self.at}", reached=not ends_short, events=n, transactions=n,
                          rounds=1, duration_s=0.5, read_s=0.4 if n else 0.0)
        if ends_short:
            short = DrainTimeout(f"not within {timeout}s")
            short.stats = stats
            raise short
        return stats


def test_a_wait_of_several_slices_returns_what_every_slice_applied():
    tail = SlicedTail(total=1000, per=300, short=3)
    stats = drain_progressing(tail, "0-1-1000", what="re-check", stall_s=0.01)
    assert tail.calls == 4
    assert (stats.start, stats.end, stats.reached) == ("0-1-0", "0-1-1000", True)
    assert stats.events == stats.transactions == 1000 and stats.rounds == 4
    assert stats.duration_s == pytest.approx(2.0) and stats.read_s == pytest.approx(1.9)  # from the wait's start


def test_two_calls_of_one_wait_count_as_one():
    a = TailStats(start="0-1-0", end="0-1-5", reached=False, events=5, transactions=2, duration_s=1.0, read_s=0.8,
                  path="fast", fast_replays=[{"table": "db.t"}], first_ts=10, last_ts=11, retries=1,
                  retry_cause="deadlock", lanes=2)
    b = TailStats(start="0-1-5", end="0-1-9", reached=True, events=4, transactions=1, duration_s=0.5, submit_s=0.3,
                  path="row", last_ts=12, lanes=4)
    ab = a.and_then(b)
    assert (ab.start, ab.end, ab.reached, ab.events, ab.transactions) == ("0-1-0", "0-1-9", True, 9, 3)
    assert ab.duration_s == 1.5 and ab.read_s == 0.8 and ab.submit_s == 1.3  # b read nothing; it submitted at 0.3 s
    assert (ab.first_ts, ab.last_ts, ab.lanes, ab.retries, ab.retry_cause) == (10, 12, 4, 1, "deadlock")
    assert ab.path == "fast+row" and ab.fast_replays == [{"table": "db.t"}]


def test_a_drains_own_failure_is_not_a_stall():
    tail = SlowTail(slices=100, moving=100, error=RuntimeError)
    with pytest.raises(RuntimeError):
        drain_progressing(tail, "0-1-999", what="verify", stall_s=0.01)
    assert tail.calls == 1


def test_a_stall_counts_from_the_last_change():
    stall = Stall(0.05, "a")
    time.sleep(0.06)
    assert stall.stalled()
    stall.saw("b")  # moved: counts again from here
    assert not stall.stalled()
    stall.saw("b")
    time.sleep(0.06)
    assert stall.stalled()
