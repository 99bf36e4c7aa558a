"""The arithmetic of ``bench.cutover``'s re-check line (no servers): compared rows/s against the writers'."""

from __future__ import annotations

import pytest

from bench.cutover import recheck_rates


def test_the_recheck_rate_is_rows_compared_over_compare_seconds_and_the_write_rate_spans_the_rounds_before():
    first = [{"rows": 900, "events": 1200, "s": 2.0, "compared": 900, "compare_s": 0.3},
             {"rows": 300, "events": 400, "s": 0.5, "compared": 300, "compare_s": 0.1},
             {"rows": 50, "events": 100, "s": 0.1, "compared": 50, "compare_s": 0.05}]
    second = [{"rows": 10, "events": 10, "s": 0.2, "compared": 10, "compare_s": 0.05}]
    compared, written = recheck_rates([first, second])
    assert compared == pytest.approx(1260 / 0.5)
    # the first round of each re-check reads everything since the check before (not a rate); later rounds
    # read what was written while the round before them ran
    assert written == pytest.approx(500 / 2.5)


def test_rounds_recorded_before_the_compare_was_timed_give_no_rate():
    assert recheck_rates([[{"rows": 5, "events": 5, "s": 0.1}]]) == (None, None)
    assert recheck_rates([]) == (None, None)
