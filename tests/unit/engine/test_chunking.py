"""Chunk-size adaptation and the throttler's decisions (no servers)."""

from __future__ import annotations

import pytest

from migrator.engine.throttler import ChunkSizer, Throttler, ThrottleReading, ThrottleTimeout


def test_chunk_grows_toward_the_time_target_at_most_doubling():
    s = ChunkSizer(rows=100, target_s=0.5)
    assert s.observe(100, 0.05) == 200  # 10x faster than target: bounded at x2
    assert s.observe(200, 0.1) == 400
    assert s.observe(400, 0.4) == 500  # close to target: moves to the ideal size


def test_chunk_shrinks_when_slow_at_most_halving():
    s = ChunkSizer(rows=1000, target_s=0.5)
    assert s.observe(1000, 5.0) == 500
    assert s.observe(500, 0.75) == 333


def test_chunk_converges_on_a_steady_rate():
    s = ChunkSizer(rows=10, target_s=0.2, max_rows=1_000_000)
    rate = 20_000  # rows/s
    for _ in range(30):
        s.observe(s.rows, s.rows / rate)
    assert s.rows == pytest.approx(rate * 0.2, rel=0.01)


def test_chunk_bounds_and_short_last_chunk():
    s = ChunkSizer(rows=50, target_s=0.5, min_rows=10, max_rows=60)
    assert s.observe(50, 0.001) == 60  # capped by max_rows
    assert s.observe(3, 10.0) == 60  # a short (last) chunk is ignored
    assert s.observe(0, 0.0) == 60
    for _ in range(10):
        s.observe(s.rows, 100.0)
    assert s.rows == 10  # floored by min_rows
    assert ChunkSizer(rows=0, target_s=1, min_rows=10).rows == 10


class FakeThrottler(Throttler):
    def __init__(self, readings, **kw):
        self.now = 0.0
        super().__init__(None, None, sleep=self._sleep, clock=lambda: self.now, **kw)
        self.readings = list(readings)
        self.slept = 0.0

    def _sleep(self, s: float) -> None:
        self.now += s
        self.slept += s

    def read(self) -> ThrottleReading:
        lag, threads = self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]
        reason = None
        if lag is None:
            reason = "not replicating"
        elif lag > self.max_lag_s:
            reason = "lag"
        elif threads > self.max_threads_running:
            reason = "busy"
        self.last = ThrottleReading(lag, threads, reason)
        return self.last


def test_throttler_waits_while_lagging_or_busy_then_lets_go():
    t = FakeThrottler([(10, 1), (7, 1), (0, 99), (1, 2)], max_lag_s=5, max_threads_running=50, check_interval_s=0.5)
    waited = t.wait()
    assert waited == pytest.approx(1.5) and t.slept == pytest.approx(1.5)
    assert t.wait() == 0.0  # checked moments ago: no new round trip


def test_throttler_gives_up_with_a_clear_error():
    t = FakeThrottler([(None, 1)], max_lag_s=5, max_threads_running=50, give_up_after_s=3)
    with pytest.raises(ThrottleTimeout, match="held back"):
        t.wait()
