"""What a cutover shows the outside: named hook points while it runs, and its result.

Tests (fault injection at a named step) and benchmarks pass
:class:`CutoverHooks` to :func:`migrator.engine.cutover.cutover`; each hook is
called with a :class:`RunView` of the attempt at that point of the freeze,
never the run itself. :class:`CutoverResult` is what a finished cutover records in
the migration's ``cutover`` progress node (a rollback, in ``rollback``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pymysql

from migrator.engine.cutover.lease import CutoverLease
from migrator.engine.cutover.maps import MapEdits
from migrator.engine.cutover.record import AttemptRecord
from migrator.engine.migration import Spec
from migrator.fleet.zk import ZK


@dataclass(frozen=True)
class RunView:
    """What a hook may see of the attempt that calls it. A hook reads, or acts on the world around the
    attempt (the map, ZooKeeper, the lease, as a fault would); it never drives the run."""

    spec: Spec
    attempt_id: str
    #: the steps done so far (ms each), when the freeze began and was released (monotonic), ...
    record: AttemptRecord
    #: the ranges the attempt freezes and flips
    ranges: list[Any]
    zk: ZK
    #: the attempt's map edits (their store: ``edits.maps``)
    edits: MapEdits
    lease: CutoverLease | None
    #: the connection that writes and reads on the source under the fence (None before it is open)
    writer: pymysql.connections.Connection | None
    #: the connection on the target (None before the attempt is prepared)
    target_conn: pymysql.connections.Connection | None

    @property
    def maps(self) -> Any:
        return self.edits.maps


Hook = Callable[[RunView], None]


@dataclass
class CutoverHooks:
    """Named points where tests (and playbooks) can act during a cutover."""

    #: called after the re-check, right before the phase becomes "cutover" and the freeze starts; raising
    #: stops the attempt there (nothing frozen, the phase unchanged)
    before_freeze: Hook | None = None
    #: called once the gates' triggers are installed, right before the phase becomes "cutover" and the freeze
    #: starts: a wait here counts in the triggers' lifetime (a batch waits here for the batch before it to
    #: release its freeze: :class:`migrator.ops.batched.run.Flight`); raising stops the attempt there (its
    #: triggers come off, nothing frozen, the phase unchanged)
    after_gates: Hook | None = None
    after_freeze: Hook | None = None
    after_fence: Hook | None = None
    before_flip: Hook | None = None
    after_flip: Hook | None = None
    #: called before each group of the write gates' install statements, before the attempt checks it still holds
    #: its lease (a test expires the lease there)
    gate_statement: Hook | None = None
    #: called after each step of the freeze is done, with its name (``freeze_cas``, ``passive_close``,
    #: ``passive_sync``, ``fence``, ``sentinel``, ``drain``, ``compare``, ``flip_cas``, ``release``),
    #: and after each step behind it (``renames``, ``active_finish``, ``passive_finish``)
    at_step: Callable[[RunView, str], None] | None = None


@dataclass
class CutoverResult:
    migration_id: str
    freeze_ms: float
    flipped_epoch: int
    fence_gtid: str
    target_gtid: str
    rows_checked: int
    rows_repaired: int
    steps_ms: dict[str, float] = field(default_factory=dict)
    #: where the changed keys compared in the freeze came from: drain | reader | binlog
    keys_from: str = ""
    #: the target's binlog state read with ``target_gtid`` (just before it): which server's transactions
    #: a reverse tail starting there already has, when one GTID domain is shared by several servers
    target_state: str = ""
    #: ms the freeze went over the budget after a flip that could not be undone (0: within it)
    over_budget_ms: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("migration_id", "freeze_ms", "flipped_epoch", "fence_gtid",
                                               "target_gtid", "rows_checked", "rows_repaired", "steps_ms",
                                               "keys_from", "target_state", "over_budget_ms")}
