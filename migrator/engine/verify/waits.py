"""Waits that scale with the work: given up only once nothing has moved for a while.

Runs wherever a drain or a binlog read outside the freeze waits for a position
that may be hours of binlog away: the full check's drains
(:func:`migrator.engine.verify.run.run_full_check`), the re-check before a
cutover's freeze (:func:`migrator.engine.cutover.recheck.refresh_verified_gtid`),
which reads every row changed since the last full check, the cutover gate's
catch-up before it times the drain (:func:`migrator.engine.cutover.budget.predict_freeze_ms`),
reconcile's drain up to an undone cutover's renames and its binlog read of them
(:func:`migrator.engine.cutover.reconcile.skip_tombstone_renames`), and a
rollback's drain before its timed gate. A fixed timeout there
refuses exactly the large windows a host-sized move under writes produces, and
refuses them the same way on every retry. So these waits go on while the tail's
position (or the key reader's) advances and end only after :data:`STALL_S`
without progress, with an error that says how far they got. Waits under the
freeze keep their fixed budget (the freeze is a promise about time).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING

from migrator.engine.catch_up.tailer import DrainTimeout, TailStats
from migrator.engine.verify.checksums import VerifyError

if TYPE_CHECKING:
    from migrator.engine.verify.drainers import Drainer

#: a drain or a key read outside the freeze is given up after this many seconds without progress (a variable:
#: tests shorten it)
STALL_S = 120.0


class Stalled(VerifyError):
    """A wait outside the freeze made no progress for its stall timeout."""


class WaitTimeout(VerifyError):
    """A wait for the catch-up worker's checkpoint ran out of time
    (:class:`~migrator.engine.verify.drainers.CheckpointWaiter`)."""


class Stall:
    """Tells a wait that still moves from one that is stuck: :meth:`saw` is given the progress marker
    (any comparable value: a position, a count) whenever it is read; :meth:`stalled` is true once the
    marker has not changed for ``stall_s``."""

    def __init__(self, stall_s: float, marker: Hashable):
        self.stall_s = stall_s
        self.marker = marker
        self.moved_at = time.monotonic()

    def saw(self, marker: Hashable) -> None:
        if marker != self.marker:
            self.marker, self.moved_at = marker, time.monotonic()

    def stalled(self) -> bool:
        return time.monotonic() - self.moved_at >= self.stall_s


def drain_progressing(drainer: Drainer, gtid: str, *, what: str, stall_s: float | None = None,
                      phase: str = "verify") -> TailStats | None:
    """``drainer.drain_to(gtid)`` for as long as the tail advances; returns what the whole wait applied (the
    stats of every slice as one: :meth:`~migrator.engine.catch_up.tailer.TailStats.and_then`), None from a
    drainer that returns none.

    The drain runs in slices of the stall timeout; a slice that ends short of ``gtid`` is followed by
    another as long as the drainer's :meth:`~migrator.engine.verify.drainers.Drainer.progress` moved
    during it (a tail applying hours of binlog is never cut off), and raises :class:`Stalled`, naming the
    position reached, after a slice without progress. A drain's own failures (anything but its time
    running out) are raised as they come.
    ``phase``: the phase the error is tagged with (the cutover's gate or re-check, reconcile, a rollback).
    """
    stall_s = STALL_S if stall_s is None else stall_s
    progress: Callable[[], Hashable] = drainer.progress
    before = progress()
    t0 = time.monotonic()
    done: TailStats | None = None  # what the slices that ended short applied (a drain's timeout carries it)
    while True:
        try:
            last = drainer.drain_to(gtid, stall_s)
            return last if done is None or last is None else done.and_then(last)
        except (DrainTimeout, WaitTimeout) as exc:
            part = getattr(exc, "stats", None)
            if part is not None:
                done = part if done is None else done.and_then(part)
            now = progress()
            if now == before:
                raise Stalled(f"{what}: the drain to {gtid} made no progress for {stall_s:g}s "
                              f"(after {time.monotonic() - t0:.0f}s it had applied up to {_named(now)}); is the "
                              "source or the target reachable, and the tail's applier lock free? "
                              "(`migrator status ID`), then try again", phase=phase) from None
            before = now


def _named(marker: Hashable) -> str:
    """A drainer's progress marker as the operator reads it: the position, and the row changes read."""
    if isinstance(marker, tuple) and len(marker) == 2:
        return f"{marker[0] or 'nothing'} ({marker[1]} row changes read)"
    return str(marker or "nothing")
