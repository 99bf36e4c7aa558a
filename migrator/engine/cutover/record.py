"""What one cutover (or rollback) attempt measured and how it ended: the attempt's record.

Filled by :class:`~migrator.engine.cutover.run.CutoverRun` as its steps run, and written to the
migration's ``cutover_attempts`` (or ``rollback_attempts``) node by
:mod:`migrator.engine.cutover.attempt`, for attempts that flipped and for those that stopped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, fields
from typing import Any

from migrator.fleet.gtid import GtidPos


@dataclass
class AttemptRecord:
    #: ms of each step of the freeze, each timed from the end of the one before (see ``FREEZE_STEPS``)
    steps: dict[str, float] = field(default_factory=dict)
    #: ms of each step before the freeze (prepare, gate, standby, recheck)
    before_freeze: dict[str, float] = field(default_factory=dict)
    #: the rounds of the re-check before the freeze (rows re-checked, seconds)
    refresh_rounds: list[dict[str, float]] = field(default_factory=list)
    #: the gate's predictions (:func:`migrator.engine.cutover.budget.check_budget`)
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
    #: the flip CAS went out and its outcome is unknown: the fences stay closed for the settler
    flip_unknown: bool = False
    #: when the last step of the freeze ended (each step is timed from the end of the one before)
    step_end: float = 0.0
    #: ms a flipped freeze went over the budget (it could not be undone after the claim); 0 within it
    over_budget_ms: float = 0.0
    #: ms an undone freeze took to undo (the fences opened, the ranges unfrozen): the watchdog keeps it back
    undo_ms: float | None = None

    def step_done(self, name: str) -> None:
        """Record step ``name`` as ended now, timed from the end of the one before."""
        now = time.monotonic()
        self.steps[name] = round((now - self.step_end) * 1000, 2)
        self.step_end = now

    def freeze_ms(self) -> float | None:
        """How long clients have waited in the freeze (so far, while it holds); None before it."""
        if self.t_freeze is None:
            return None
        end = self.t_released if self.t_released is not None else time.monotonic()
        return round((end - self.t_freeze) * 1000, 2)

    def entry(self, outcome: str, lock_waits: dict[str, Any],
              triggers_ms: dict[str, float] | None = None) -> AttemptEntry:
        """What the attempt did so far, as it is written to ZooKeeper (kept for aborted attempts too). A flip
        whose freeze went over the budget says so in its outcome too, never as a plain flip."""
        if self.over_budget_ms:
            outcome = f"{outcome}, over budget by {self.over_budget_ms:.0f} ms"
        return AttemptEntry(time.time(), outcome[:500], self.freeze_ms(), dict(self.steps), list(self.refresh_rounds),
                            dict(self.predicted), dict(self.drained), dict(self.released), self.waiters_ended,
                            dict(self.before_freeze), lock_waits,
                            triggers_ms=dict(triggers_ms) if triggers_ms else None,
                            over_budget_ms=self.over_budget_ms, undo_ms=self.undo_ms)


#: the entry's fields written only when known (:meth:`AttemptEntry.as_dict`)
OPTIONAL = ("blockers", "triggers_ms", "over_budget_ms", "undo_ms")


@dataclass
class AttemptEntry:
    """One entry of the attempts node: the attempt's record at one moment, with its outcome."""

    at: float
    outcome: str
    freeze_ms: float | None
    steps_ms: dict[str, float]
    refresh_rounds: list[dict[str, float]]
    predicted: dict[str, Any]
    drained: dict[str, Any]
    released: dict[str, float]
    waiters_ended: int
    before_freeze_ms: dict[str, float]
    #: per gated host, how its statements waited for their metadata locks
    lock_waits: dict[str, Any]
    #: who held the moving tables, when the attempt stopped waiting for their locks (written only when known)
    blockers: list[dict[str, Any]] | None = None
    #: per gated host, ms its write gate's triggers existed on its live tables (written only when it had some)
    triggers_ms: dict[str, float] | None = None
    #: ms the freeze went over the budget after a flip that could not be undone (written only when over)
    over_budget_ms: float = 0.0
    #: ms the undo of an undone freeze took (written only when undone)
    undo_ms: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """The entry as written to ZooKeeper: the same keys in the same order as always, then what is
        written only when known (the blockers last of all)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in OPTIONAL}
        if self.triggers_ms is not None:
            out["triggers_ms"] = self.triggers_ms
        if self.over_budget_ms:
            out["over_budget_ms"] = self.over_budget_ms
        if self.undo_ms is not None:
            out["undo_ms"] = self.undo_ms
        if self.blockers is not None:
            out["blockers"] = self.blockers
        return out


@dataclass
class FencePoint:
    """Where the fence put the source, and the target once drained to it."""

    #: the sentinel rows' token (unique per attempt)
    token: str = ""
    #: the source's position after the sentinel write (where the drain goes)
    fence_gtid: str = ""
    #: the source master's own transactions up to and including the sentinel write (what a member of
    #: its pair must have applied before it renames: :func:`~migrator.fleet.mysql.wait_applied`)
    fence_own: GtidPos = field(default_factory=GtidPos)
    #: the target's binlog position and state read right after the drain (where a reverse tail starts)
    target_pos: str = ""
    target_state: str = ""
