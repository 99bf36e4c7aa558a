"""How a cutover can stop, and what each outcome leaves behind.

Raised by the cutover and the rollback (which reuses its protocol). Before the
flip every error leaves the source serving and the ranges unfrozen
(:class:`NotConverged`, :class:`FreezeBudgetExceeded`, :class:`CutoverAborted`);
:class:`FlipUnknown` means the flip CAS went out and its outcome is unknown (no
answer, and the map read back does not show it): the fences stay closed, and
once the lease is gone the settler (a ``migrator worker``, the cutover itself,
or the next ``migrator cutover ID``) reads the map and settles it wholly before
or after the flip.
"""

from __future__ import annotations

from typing import Any

from kazoo.exceptions import ConnectionLoss, OperationTimeoutError, SessionExpiredError

from migrator.errors import MigratorError

#: ZooKeeper errors after which a CAS may or may not have landed: re-read the map to know
ZK_LOST = (ConnectionLoss, SessionExpiredError, OperationTimeoutError)


class CutoverError(MigratorError):
    component = "cutover"


class NotConverged(CutoverError):
    exit_code = 3


class FreezeBudgetExceeded(CutoverError):
    exit_code = 3
    #: the gate's prediction and its parts, when the gate refused (for the attempt's record)
    predicted: dict[str, Any] | None = None


class CutoverAborted(CutoverError):
    """The cutover stopped before the flip; the source still serves."""

    exit_code = 3


class LeaseLost(CutoverAborted):
    """This process lost the attempt's lease in ZooKeeper before a step that needs it: nothing of that
    step was done, the source still serves, and a worker may be settling the attempt already."""

    def __init__(self, label: str, before: str, undone: str):
        super().__init__(f"this process lost the {label}'s lease in ZooKeeper before {before} (its session expired, "
                         f"or ZooKeeper did not answer), so a worker may be settling it: {undone}; retry the {label}",
                         phase=label)


class FlipUnknown(CutoverError):
    """The flip CAS's outcome is unknown: the fences stay closed until the settler reads the map."""

    exit_code = 4
    #: what the attempt had measured (a :class:`~migrator.engine.cutover.hooks.CutoverResult`; its
    #: ``flipped_epoch`` is 0): returned if the settle finds the flip landed
    result: Any = None


# -- the failures of one attempt, each named once (``label``: the direction's phase, cutover or rollback) ------


class SentinelTableMissing(CutoverError):
    """Prepare: a moving db has no sentinel table on the source."""

    def __init__(self, label: str, db: str, table: str, source: str):
        super().__init__(f"{db}.{table} is missing on {source}: it must exist before the copy "
                         "(migrator.engine.sentinel.prepare_sentinels), so that the copy carries it and "
                         "catch-up never sees its CREATE TABLE; abort this migration and plan it again", phase=label)


class CopyIncomplete(CutoverError):
    """Prepare: moving tables are not on the target."""

    def __init__(self, label: str, missing: list[str], target: str):
        super().__init__(f"tables {missing} are not on the target {target}: "
                         "the copy is incomplete; run the copy again", phase=label)


class PassiveLags(CutoverAborted):
    """Before the freeze: the target's standby has not applied its master's writes."""

    def __init__(self, label: str, passive: str, target: str, head: object, timeout: float, problem: str | None):
        super().__init__(f"the target's standby {passive} has not applied {target}'s writes up "
                         f"to {head} within {timeout:.0f}s ({problem or 'it lags'}): a flip now would leave the "
                         f"new owner without a caught-up standby; repair the target pair's replication, then "
                         f"retry the cutover", phase=label)


class PairLags(CutoverAborted):
    """In the freeze: the source master had not applied its passive member's last writes in time."""

    def __init__(self, label: str, source: str, passive: str, passive_own: object):
        super().__init__(f"{source} had not applied the last writes of {passive} ({passive_own}) "
                         f"when the freeze budget ran out: the replication {passive} -> {source} "
                         "lags (lag inside the source pair); the freeze was undone and the source "
                         f"still serves; let it catch up (SHOW SLAVE STATUS on {source}), "
                         "then retry", phase=label)


class SentinelNotDrained(CutoverAborted):
    """In the freeze: the drain to the sentinel did not bring its row to the target."""

    def __init__(self, label: str, db: str, target: str, fence_gtid: str):
        super().__init__(f"the sentinel row did not reach {db} on {target} after "
                         f"draining to {fence_gtid}: catch-up is not applying; check it", phase=label)


class FenceLost(CutoverAborted):
    """Right before the flip: a member's fence no longer holds."""

    def __init__(self, label: str, why: str):
        super().__init__(f"{why}; not flipping", phase=label)


class AbortedBeforeFlip(CutoverAborted):
    """A MySQL or ZooKeeper error stopped the attempt before the flip."""

    def __init__(self, label: str, cause: BaseException):
        super().__init__(f"{label} aborted before the flip, source still serves: "
                         f"{str(cause) or type(cause).__name__}", phase=label)


#: why a freeze that ran out of budget in a step waited there, and what to do
_OVERRUN_WHY = {
    "passive_close": ("while closing the write gate on {passive}: a transaction there holds a moving "
                      "table; let it end (or end it), then retry"),
    "passive_sync": ("while {source} applied the last writes of {passive}: the replication "
                     "{passive} -> {source} lags (lag inside the source pair); let it catch up "
                     "(SHOW SLAVE STATUS on {source}), then retry"),
    "fence": ("while the fence waited for the moving tables' locks: a long transaction on a moving table "
              "holds them on {source} (SHOW PROCESSLIST); let it end (or end it), then retry"),
}


class FreezeOverrun(FreezeBudgetExceeded):
    """The watchdog undid a freeze that overran its budget; named by the step the budget ran out in."""

    def __init__(self, label: str, budget_ms: int, step: str, source: str, passive: str,
                 undo_error: BaseException | None):
        extra = f" (undo failed: {undo_error})" if undo_error else ""
        why = _OVERRUN_WHY.get(step, "in its {step} step: let catch-up converge further (or raise "
                                     "freeze_budget_ms) and retry").format(source=source, passive=passive, step=step)
        super().__init__(f"the freeze overran its budget of {budget_ms} ms and was undone{extra}; "
                         f"the source still serves. It ran out {why}", phase=label)


class CloseFailed(CutoverError):
    """Closing an attempt left something behind (a gate not reopened, the background tail failed)."""

    def __init__(self, label: str, problems: list[str]):
        super().__init__("; also ".join(problems), phase=label)
