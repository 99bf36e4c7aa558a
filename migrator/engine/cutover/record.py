"""What one cutover (or rollback) attempt measured and how it ended: the attempt's record.

Filled by :class:`~migrator.engine.cutover.run.CutoverRun` as its steps run, and written to the
migration's ``cutover_attempts`` (or ``rollback_attempts``) node by
:mod:`migrator.engine.cutover.attempt`, for attempts that flipped and for those that stopped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class AttemptRecord:
    #: ms of each step of the freeze, each timed from the end of the one before (see ``FREEZE_STEPS``)
    steps: dict[str, float] = field(default_factory=dict)
    #: ms of each step before the freeze (prepare, gate, standby, recheck)
    before_freeze: dict[str, float] = field(default_factory=dict)
    #: the rounds of the re-check before the freeze (rows re-checked, seconds)
    refresh_rounds: list[dict[str, float]] = field(default_factory=list)
    #: the gate's predictions (:func:`migrator.engine.cutover.gate.check_budget`)
    predicted: dict[str, Any] = field(default_factory=dict)
    #: the drain under the fence (row changes read, ms until the last were read and until their round was
    #: sent, ms saving checkpoints)
    drained: dict[str, Any] = field(default_factory=dict)
    #: under the rename fence, ms from the UNLOCK until each table's RENAME had run (slowest first)
    released: dict[str, float] = field(default_factory=dict)
    #: client statements the rename fence ended (waiting on it at the flip, or stale behind its renames)
    waiters_ended: int = 0
    #: where the compare under the fence took the changed keys from: drain, reader or binlog
    keys_from: str = ""
    rows_checked: int = 0
    rows_repaired: int = 0
    #: monotonic times: the frozen map committed (clients wait from then), the clients let go
    t_freeze: float | None = None
    t_released: float | None = None
    #: the freeze step under way when the watchdog fired (what an overrun's refusal names)
    overrun_step: str | None = None

    def freeze_ms(self) -> float | None:
        """How long clients have waited in the freeze (so far, while it holds); None before it."""
        if self.t_freeze is None:
            return None
        end = self.t_released if self.t_released is not None else time.monotonic()
        return round((end - self.t_freeze) * 1000, 2)

    def to_dict(self, outcome: str, lock_waits: dict[str, Any]) -> dict[str, Any]:
        """The record as written to ZooKeeper (kept for aborted attempts too)."""
        return {"at": time.time(), "outcome": outcome[:500], "freeze_ms": self.freeze_ms(),
                "steps_ms": dict(self.steps), "refresh_rounds": list(self.refresh_rounds),
                "predicted": dict(self.predicted), "drained": dict(self.drained), "released": dict(self.released),
                "waiters_ended": self.waiters_ended, "before_freeze_ms": dict(self.before_freeze),
                "lock_waits": lock_waits}
