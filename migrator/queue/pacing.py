"""Pure pacing pieces of the queue service: retry backoff and a token bucket.

No I/O; the clock and the random source are parameters so tests can pin them.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

#: failure-ack retry delay: base * 2**(attempt-1), capped, with "equal jitter"
BACKOFF_BASE = 1.0
BACKOFF_CAP = 300.0


def backoff_seconds(attempt: int, *, base: float = BACKOFF_BASE, cap: float = BACKOFF_CAP,
                    rand: Callable[[], float] = random.random) -> float:
    """Delay before the next try after ``attempt`` (1-based) failed.

    Capped exponential with equal jitter (half fixed, half random), so a burst
    of failures does not retry in lockstep: the result lies in [d/2, d] where
    d = min(cap, base * 2**(attempt-1)).
    """
    attempt = max(1, int(attempt))
    d = min(cap, base * (2 ** min(attempt - 1, 62)))
    return d / 2 + rand() * d / 2


class TokenBucket:
    """A rate limiter: ``rate`` tokens per second, bursts up to ``burst``.

    ``take(n)`` returns how many of ``n`` tokens were granted (0..n) and never
    blocks. A rate of 0 means unlimited.
    """

    def __init__(self, rate: float, burst: float | None = None, *, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._lock = threading.Lock()
        self.rate = 0.0
        self.burst = 0.0
        self.tokens = 0.0
        self.stamp = clock()
        self.configure(rate, burst)

    def configure(self, rate: float, burst: float | None = None) -> None:
        with self._lock:
            new_burst = burst if burst is not None else max(1.0, rate)
            if rate != self.rate or new_burst != self.burst:
                self.rate = float(rate)
                self.burst = float(new_burst)
                self.tokens = min(self.tokens, self.burst) if self.tokens else self.burst

    def take(self, n: int) -> int:
        if self.rate <= 0:
            return n
        with self._lock:
            now = self.clock()
            self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
            self.stamp = now
            got = min(n, int(self.tokens))
            self.tokens -= got
            return got

    def give_back(self, n: int) -> None:
        """Return unused tokens (a dequeue that found fewer jobs than it reserved)."""
        if self.rate <= 0 or n <= 0:
            return
        with self._lock:
            self.tokens = min(self.burst, self.tokens + n)
