"""How a cutover can stop, and what each outcome leaves behind.

Raised by the cutover and the rollback (which reuses its protocol). Before the
flip every error leaves the source serving and the ranges unfrozen
(:class:`NotConverged`, :class:`FreezeBudgetExceeded`, :class:`CutoverAborted`);
:class:`FlipUnknown` means ZooKeeper stayed unreachable after the flip CAS, and
the next ``migrator cutover ID`` reconciles it wholly before or after the flip.
"""

from __future__ import annotations

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


class CutoverAborted(CutoverError):
    """The cutover stopped before the flip; the source still serves."""

    exit_code = 3


class FlipUnknown(CutoverError):
    """ZooKeeper stayed unreachable after the flip CAS: run ``cutover ID`` again to reconcile."""

    exit_code = 4
