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
