"""The freeze's watchdog: a timer that undoes a freeze which overruns its budget.

Runs as a timer thread in the cutover process, started when the freeze CAS
commits. If it fires before the main thread claims the flip, it undoes
everything by itself (kills the pending RENAMEs, releases the lock,
unfreezes); once the flip is claimed it no longer acts.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class Watchdog:
    """Aborts a freeze that overruns its budget, from a timer thread.

    The main thread must :meth:`claim` the flip: once claimed the watchdog no
    longer acts; once fired the flip is refused. The lock makes the two exclusive.
    """

    def __init__(self, budget_s: float, on_fire: Callable[[], None]):
        self._lock = threading.Lock()
        self.state = "armed"
        self.error: BaseException | None = None
        self._on_fire = on_fire
        self._timer = threading.Timer(budget_s, self._fire)
        self._timer.daemon = True

    def start(self) -> Watchdog:
        self._timer.start()
        return self

    def _fire(self) -> None:
        with self._lock:
            if self.state != "armed":
                return
            self.state = "fired"
            try:
                self._on_fire()
            except BaseException as exc:  # reported by the main thread
                self.error = exc

    def claim(self) -> bool:
        """Take over from the watchdog; False if it already fired (and undid the freeze)."""
        with self._lock:
            self._timer.cancel()
            if self.state == "armed":
                self.state = "claimed"
                return True
            return False

    @property
    def fired(self) -> bool:
        return self.state == "fired"
