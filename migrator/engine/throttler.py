"""Decides whether the copy may send its next chunk, and how big it should be.

Runs inside each copy worker, between chunks. Two signals hold the copy back
(as gh-ost's throttler does): the target standby's replication lag
(``Seconds_Behind_Master`` on the target slave, which replays everything the
copy writes on the target master) and the source master's load
(``Threads_running``). The checks are rate-limited so a chunk does not pay a
round trip per signal.

:class:`ChunkSizer` keeps each chunk near a time target: a chunk that took
twice the target halves the next one, and so on, within bounds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import pymysql

from migrator.engine.inspector import global_status, slave_status
from migrator.errors import MigratorError


class ThrottleTimeout(MigratorError):
    component = "throttler"


@dataclass
class ChunkSizer:
    """Adapts the rows per chunk to a target duration per chunk.

    ``observe(rows, seconds)`` after each chunk; ``rows`` is the size to use
    next. Growth and shrink per step are bounded (x2 / x0.5 by default) so one
    outlier (a page fault, a lock wait) does not swing the size wildly.
    """

    rows: int
    target_s: float
    min_rows: int = 10
    max_rows: int = 50_000
    max_step: float = 2.0

    def __post_init__(self) -> None:
        self.rows = max(self.min_rows, min(self.max_rows, int(self.rows)))

    def observe(self, rows: int, seconds: float) -> int:
        if rows <= 0:
            return self.rows
        if rows < self.rows:  # a short (last) chunk says little about the rate
            return self.rows
        seconds = max(seconds, 1e-4)
        ideal = rows * self.target_s / seconds
        lo, hi = self.rows / self.max_step, self.rows * self.max_step
        nxt = max(lo, min(hi, ideal))
        self.rows = int(max(self.min_rows, min(self.max_rows, nxt)))
        return self.rows


@dataclass
class ThrottleReading:
    lag_s: float | None  # None: the standby is not replicating
    threads_running: int
    reason: str | None  # why the copy must wait, or None


class Throttler:
    """Holds a copy worker back while the target standby lags or the source is busy.

    ``target_passive`` and ``source`` are connections the caller owns.
    ``sleep`` and ``clock`` are replaceable so tests need not wait.
    """

    def __init__(
        self,
        target_passive: pymysql.connections.Connection | None,
        source: pymysql.connections.Connection | None,
        *,
        max_lag_s: float,
        max_threads_running: int,
        check_interval_s: float = 0.5,
        give_up_after_s: float = 600.0,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.target_passive = target_passive
        self.source = source
        self.max_lag_s = max_lag_s
        self.max_threads_running = max_threads_running
        self.check_interval_s = check_interval_s
        self.give_up_after_s = give_up_after_s
        self.sleep = sleep
        self.clock = clock
        self._last_check = float("-inf")
        self.throttled_s = 0.0
        self.last: ThrottleReading | None = None

    def read(self) -> ThrottleReading:
        lag: float | None = 0.0
        if self.target_passive is not None:
            st = slave_status(self.target_passive)
            if not st or st.get("Slave_SQL_Running") != "Yes" or st.get("Seconds_Behind_Master") is None:
                lag = None
            else:
                lag = float(st["Seconds_Behind_Master"])
        threads = global_status(self.source, "Threads_running") if self.source is not None else 0
        reason = None
        if lag is None:
            reason = "the target standby is not replicating"
        elif lag > self.max_lag_s:
            reason = f"target standby lag {lag:.0f}s > {self.max_lag_s:g}s"
        elif threads > self.max_threads_running:
            reason = f"source Threads_running {threads} > {self.max_threads_running}"
        self.last = ThrottleReading(lag, threads, reason)
        return self.last

    def wait(self, should_stop: Callable[[], bool] = lambda: False) -> float:
        """Return when the copy may go on; the seconds spent waiting.

        Raises :class:`ThrottleTimeout` when held back longer than
        ``give_up_after_s`` (the step fails and can be resumed later).
        """
        now = self.clock()
        if now - self._last_check < self.check_interval_s:
            return 0.0
        start = now
        while True:
            self._last_check = self.clock()
            reading = self.read()
            if reading.reason is None or should_stop():
                waited = self.clock() - start
                self.throttled_s += waited
                return waited
            if self.clock() - start > self.give_up_after_s:
                raise ThrottleTimeout(
                    f"copy held back for over {self.give_up_after_s:.0f}s: {reading.reason}; "
                    "fix the target pair or the source load, then `migrator copy ID` resumes",
                    phase="copy",
                )
            self.sleep(self.check_interval_s)
