"""The arithmetic of ``bench.concurrency`` (no servers): where a move's time goes, and the share of the
cores busy between two /proc/stat samples."""

from __future__ import annotations

import pytest

from bench.concurrency import PHASES, breakdown, busy_share, phase_times


def history(*marks: tuple[str, float]) -> list[dict]:
    return [{"to": to, "when": at} for to, at in marks]


MOVE = history(("planned", 100.0), ("preflight", 101.0), ("copying", 102.0), ("catching_up", 110.0),
               ("converged", 111.0), ("cutover", 116.0), ("done", 116.5))


def test_phase_times_run_from_each_change_to_the_next():
    assert phase_times(MOVE) == {"planned": 1.0, "preflight": 1.0, "copying": 8.0, "catching_up": 1.0,
                                 "converged": 5.0, "cutover": 0.5}


def test_the_converged_phase_is_cut_at_the_end_of_the_verify():
    out = breakdown(MOVE, verified_at=114.0)
    assert list(out) == list(PHASES)
    assert out == pytest.approx({"queued": 1.0, "preflight": 1.0, "copy": 8.0, "catch-up": 1.0, "verify": 3.0,
                                 "cutover": 2.5})
    assert sum(out.values()) == pytest.approx(116.5 - 100.0)


def test_without_a_verify_time_the_converged_phase_counts_as_cutover():
    out = breakdown(MOVE, verified_at=None)
    assert out["verify"] == 0.0 and out["cutover"] == pytest.approx(5.5)
    # a verify recorded after the phase ended (clocks of two processes) never makes the cutover negative
    assert breakdown(MOVE, verified_at=130.0)["cutover"] == pytest.approx(0.5)


def test_busy_share_of_all_cores():
    assert busy_share((10.0, 1.0, 100.0), (13.0, 2.0, 104.0)) == (0.75, 0.25)
    assert busy_share((1.0, 0.0, 5.0), (1.0, 0.0, 5.0)) == (0.0, 0.0)
