"""The freeze's watchdog: a timer that undoes a freeze which overruns its budget.

Runs as a timer thread in the cutover process, started when the freeze CAS
commits. If it fires before the main thread claims the flip, it undoes
everything by itself (kills the pending RENAMEs, releases the lock,
unfreezes); once the flip is claimed it no longer acts.

Its last chance is the claim, and the freeze goes on after it (the flip's
ZooKeeper write, the release of the fence; or, when it fires, its own undo):
so it fires not at the budget but ``reserve_s`` before it, the cost of what
follows as this migration's (or the fleet's) earlier attempts measured it
(:func:`migrator.engine.cutover.budget.after_claim_ms`). A claim that comes
after that deadline (the timer thread not scheduled yet) is refused and undone
in the claiming thread, as if the timer had fired.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

#: what follows the watchdog's last chance (the flip CAS and the release, or the undo) when no earlier
#: attempt measured it, in ms: the undo is the longer of the two (it opens the fences and unfreezes;
#: docs/performance.md, "Constants measured by the benchmarks")
AFTER_CLAIM_MS = 200.0
#: the share of the budget the reserve may take at most: the steps before the claim keep the rest
MAX_RESERVE_SHARE = 0.5


class Watchdog:
    """Aborts a freeze that overruns its budget less the reserve, from a timer thread.

    The main thread must :meth:`claim` the flip: once claimed the watchdog no
    longer acts; once fired the flip is refused. The lock makes the two exclusive.
    """

    def __init__(self, budget_s: float, on_fire: Callable[[], None], *, reserve_s: float = 0.0):
        self._lock = threading.Lock()
        self.state = "armed"
        self.error: BaseException | None = None
        self._on_fire = on_fire
        #: seconds after the start at which the freeze is undone unless the flip was claimed
        self.deadline_s = budget_s - min(max(0.0, reserve_s), MAX_RESERVE_SHARE * budget_s)
        self._deadline = 0.0
        self._timer = threading.Timer(self.deadline_s, self._fire)
        self._timer.daemon = True

    def start(self) -> Watchdog:
        self._deadline = time.monotonic() + self.deadline_s
        self._timer.start()
        return self

    def _fire(self) -> None:
        with self._lock:
            self._fire_locked()

    def _fire_locked(self) -> None:
        if self.state != "armed":
            return
        self.state = "fired"
        try:
            self._on_fire()
        except BaseException as exc:  # reported by the main thread
            self.error = exc

    def claim(self) -> bool:
        """Take over from the watchdog; False if it already fired (and undid the freeze), or if its
        deadline has passed (it fires now, in this thread: what follows the claim would overrun the budget)."""
        with self._lock:
            self._timer.cancel()
            if self.state == "armed" and time.monotonic() >= self._deadline:
                self._fire_locked()
            if self.state == "armed":
                self.state = "claimed"
                return True
            return False

    @property
    def fired(self) -> bool:
        return self.state == "fired"
