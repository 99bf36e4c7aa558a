"""Waits outside the freeze go on while they advance and stop only once stuck (:mod:`migrator.engine.verify.waits`).

A drainer here is a stand-in that applies a given number of transactions per slice (the real tail's
drain is shown on the sandbox in tests/integration/engine/test_verify.py)."""

from __future__ import annotations

import time

import pytest

from migrator.engine.catch_up.tailer import DrainTimeout
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
