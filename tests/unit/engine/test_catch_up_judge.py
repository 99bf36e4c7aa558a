"""The convergence verdict of a catch-up pass."""

from __future__ import annotations

from dataclasses import asdict

from migrator.engine.catch_up.passes import PassResult, judge
from migrator.engine.migration import Options


def row(n, events, apply_rate, write_rate, lag_s=0.5):
    return PassResult(number=n, started_at=0.0, head="1-1-1", from_gtid="", to_gtid="", events=events,
                      transactions=events, bytes=0, statements=0, duration_s=lag_s, apply_rate=apply_rate,
                      write_rate=write_rate, lag_s=lag_s, predicted_freeze_ms=0.0)


def test_small_delta_and_lag_converge():
    opts = Options(converge_events=100, converge_lag_s=1.0)
    assert judge(row(1, 100, 10, 5, lag_s=0.9), [], opts) == (True, False)
    assert judge(row(1, 101, 10, 5, lag_s=0.1), [], opts) == (False, False)
    assert judge(row(1, 10, 10, 5, lag_s=1.0), [], opts) == (False, False)


def test_apply_slower_than_writes_for_k_passes_is_not_converging():
    opts = Options(converge_events=10, not_converging_passes=3)
    slow = [asdict(row(i, 5000, 100, 200, lag_s=50)) for i in (1, 2)]
    assert judge(row(3, 5000, 100, 200, lag_s=50), slow, opts) == (False, True)
    # one fast pass among them resets the count
    mixed = [asdict(row(1, 5000, 100, 200, lag_s=50)), asdict(row(2, 5000, 300, 200, lag_s=17))]
    assert judge(row(3, 5000, 100, 200, lag_s=50), mixed, opts) == (False, False)
    # too few passes yet
    assert judge(row(2, 5000, 100, 200, lag_s=50), slow[:1], opts) == (False, False)
    assert judge(row(1, 5000, 100, 200, lag_s=50), [], Options(not_converging_passes=1)) == (False, True)


def test_short_passes_are_not_judged_by_their_rate():
    """A pass shorter than THROUGHPUT_PASS_S is bound by the tail's latency: its rate is no verdict."""
    opts = Options(converge_events=1000, not_converging_passes=3)
    short = [asdict(row(i, 1200, 755, 1220, lag_s=1.6)) for i in (1, 2)]
    assert judge(row(3, 1200, 755, 1220, lag_s=1.6), short, opts) == (False, False)
