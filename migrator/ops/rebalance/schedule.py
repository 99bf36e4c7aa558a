"""How long a plan's moves take, one by one and together.

A move's time is its copy (bytes at the copy rate), its catch-up (the writes that
arrived during the copy, applied at the apply rate while new ones keep coming),
its verify (a checksum read of the same bytes) and a fixed cost per migration
(preflight, schema, cutover). Its predicted write freeze is the freeze's fixed
cost plus the drain of one second of its writes at the apply rate (catch-up
converges to under a second of lag before the cutover).

:func:`simulate` runs the plan the way the live rebalance does: a move starts as
soon as neither of its pairs is busy and fewer than K moves run; moves are taken
in plan order.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from migrator.ops.rebalance.planner import Move

#: what a freeze costs besides the drain (the cutover gate's fixed cost, ms)
FIXED_FREEZE_MS = 60.0


@dataclass(frozen=True)
class Rates:
    """Measured rates of one migration stream (``bench.copy``, ``bench.catchup``, or a finished copy); the
    defaults' figures: docs/performance.md, "Constants measured by the benchmarks"."""

    copy_bytes_per_s: float = 4.4e6  # one table stream (bench.copy)
    copy_streams: int = 4  # Options.copy_workers: tables copied at once
    apply_rows_per_s: float = 13_600.0  # bench.catchup
    verify_factor: float = 3.0  # a checksum read runs this many times faster than a copy
    fixed_s: float = 60.0  # preflight, schema, cutover, bookkeeping
    converge_lag_s: float = 1.0

    def duration_s(self, nbytes: float, writes_per_s: float) -> float:
        copy_s = nbytes / (self.copy_bytes_per_s * self.copy_streams)
        spare = self.apply_rows_per_s - writes_per_s
        if spare <= 0:
            return float("inf")  # catch-up never converges: the move has to wait for less load
        catch_up_s = writes_per_s * copy_s / spare
        return copy_s + catch_up_s + copy_s / self.verify_factor + self.fixed_s

    def freeze_ms(self, writes_per_s: float) -> float:
        return FIXED_FREEZE_MS + 1000.0 * writes_per_s * self.converge_lag_s / self.apply_rows_per_s


def simulate(moves: Sequence[Move], k: int, rates: Rates) -> float:
    """Total seconds for ``moves`` with at most ``k`` at once and one move per pair."""
    if not moves:
        return 0.0
    waiting = list(range(len(moves)))
    busy: set[str] = set()
    running: list[tuple[float, int]] = []
    now = 0.0
    while waiting or running:
        started = True
        while started and len(running) < k:
            started = False
            for i in waiting:
                m = moves[i]
                if m.source in busy or m.target in busy:
                    continue
                busy.update((m.source, m.target))
                heapq.heappush(running, (now + rates.duration_s(m.bytes, m.writes), i))
                waiting.remove(i)
                started = True
                break
        if not running:
            return float("inf")  # nothing can start (cannot happen: a free pair set always exists)
        now, i = heapq.heappop(running)
        busy.difference_update((moves[i].source, moves[i].target))
    return now
