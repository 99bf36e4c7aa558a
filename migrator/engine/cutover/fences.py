"""The write fences of a cutover behind one interface, and the source pair's fence made of them.

Runs in the cutover process (and a rollback's). Two ways keep clients off the
moving tables of one member of the source pair:

* :class:`RenameFence`: ``LOCK TABLES`` plus one queued ``RENAME`` per table
  (:class:`~migrator.engine.cutover.fence.Fence`); releasing it ends the
  clients waiting on it and lets the renames run, which finish after the
  freeze (stale writers are ended until they have);
* :class:`GateFence`: triggers that read a gate table; dropping the gate table
  closes the member to clients, not to replication
  (:class:`~migrator.engine.cutover.passive_gate.TriggerGate`); the renames run
  after the flip.

Both answer the same verbs, one meaning each:

========== ===========================================================================
engage     clients of the moving tables stop on this member; returns once they are out
holding    still engaged: the flip is made only while every fence holds
release    after the flip, inside the freeze: clients waiting on the fence go on (re-routed)
finish     after the freeze: what the flip leaves to do on this member (the renames), stale
           clients still kept off the moving tables meanwhile
undo       before the flip: the member serves the moving tables again, as before
close      connections; a fence never flipped is removed, one whose flip is unknown kept
========== ===========================================================================

:class:`PairFence` is the source pair's fence: the active member's fence (rename
or gate) and, when the passive member takes client writes, a gate on it. The
passive gate engages first (its last writes must reach the master's binlog
before the master is fenced); an active gate closes beside it, since triggers do
not stop replication, while a rename fence waits (its lock would hold the
passive member's last writes back).
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

import pymysql

from migrator.engine.cutover.fence import Fence
from migrator.engine.cutover.passive_gate import TriggerGate
from migrator.fleet.gtid import GtidPos
from migrator.fleet.model import Host


class WriteFence(Protocol):
    host: Host

    def engage(self, timeout: float) -> GtidPos | None: ...

    def holding(self) -> str | None: ...

    def release(self) -> None: ...

    def finish(self, peer_own: GtidPos, timeout: float) -> None: ...

    def undo(self) -> None: ...

    def close(self, *, keep_closed: bool) -> list[str]: ...


class RenameFence:
    """LOCK TABLES plus a queued RENAME per moving table on the active member."""

    def __init__(self, fence: Fence):
        self.fence = fence
        self.host = fence.host
        #: ms from the UNLOCK until each table's RENAME had run, once released
        self.released: dict[str, float] = {}

    @property
    def writer(self) -> pymysql.connections.Connection:
        """The connection holding the lock: the only one that may read and write the tables under it."""
        assert self.fence.a is not None
        return self.fence.a

    def engage(self, timeout: float) -> None:
        self.fence.lock()
        self.fence.queue_rename(timeout=timeout)

    def holding(self) -> str | None:
        return None if self.fence.rename_waiting() else "the tombstone RENAME is no longer queued"

    @property
    def waiters_ended(self) -> int:
        return self.fence.waiters_ended

    def release(self) -> None:
        """End the clients waiting on the lock, then unlock: the renames run before any writer."""
        self.fence.unlock()

    def finish(self, peer_own: GtidPos, timeout: float) -> None:
        """Wait for the renames the release let run (stale writers ended until then)."""
        try:
            self.fence.wait_renamed(timeout)
        finally:
            self.released = self.fence.release_times()

    def undo(self) -> None:
        self.fence.abort()

    def settle_unknown(self, landed: bool | None) -> None:
        """The flip's outcome is unknown: known not landed, the renames are killed (the tables stay);
        otherwise they run, so the tables stay fenced in the tombstones either way."""
        if landed is False:
            self.fence.abort()
        else:
            try:
                self.fence.release()
            finally:
                self.released = self.fence.release_times()

    def close(self, *, keep_closed: bool) -> list[str]:
        self.fence.close()
        return []


class GateFence:
    """The trigger gate on one member: closed to clients, open to replication."""

    def __init__(self, gate: TriggerGate, *, log_renames: bool = False):
        self.gate = gate
        self.host = gate.host
        self.log_renames = log_renames

    def engage(self, timeout: float) -> GtidPos:
        """Returns the member's own transactions up to the close: every write it accepted."""
        return self.gate.shut(timeout)

    def holding(self) -> str | None:
        return "the write gate was reopened" if self.gate.aborted else None

    def release(self) -> None:
        """Nothing: the triggers refuse stale writers until :meth:`finish` renames the tables."""

    def finish(self, peer_own: GtidPos, timeout: float) -> None:
        self.gate.finish(peer_own, timeout=timeout, log_renames=self.log_renames)

    def undo(self) -> None:
        self.gate.reopen()

    def close(self, *, keep_closed: bool) -> list[str]:
        problems = []
        if not keep_closed:
            try:
                self.gate.reopen()
                self.gate.remove()
            except Exception as exc:  # noqa: BLE001 - reported by the caller, never instead of the cause
                problems.append(f"could not reopen the write gate on {self.host.name} ({type(exc).__name__}: "
                                f"{exc}): its clients may still be refused on the moving tables; drop its triggers "
                                f"`_mgate_{self.gate.suffix}_*` and the table `_migrator_gates`.`{self.gate.gate}` "
                                "there, or retry the cutover")
        self.gate.close_connection()
        return problems


class PairFence:
    """The source pair's fence: the active member's (rename or gate), and a gate on the passive member."""

    def __init__(self, active: RenameFence | GateFence, passive: GateFence | None = None):
        self.active = active
        self.passive = passive
        self._active_engaged = False

    @property
    def members(self) -> list[WriteFence]:
        return [f for f in (self.active, self.passive) if f is not None]

    def close_passive(self, timeout: float) -> GtidPos:
        """Close the passive member's gate (an active gate beside it, at the same time): returns the
        passive member's own transactions, which the master must apply before its fence."""
        assert self.passive is not None
        if not isinstance(self.active, GateFence):
            return self.passive.engage(timeout)
        # leaving the pool waits for the passive close, even when the active one failed: an undo
        # never runs beside a close still under way
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="passive-gate") as pool:
            passive = pool.submit(self.passive.engage, timeout)
            self.active.engage(timeout)
            self._active_engaged = True
        return passive.result()

    def engage(self, timeout: float) -> None:
        """Fence the active member (unless its gate closed beside the passive one)."""
        if not self._active_engaged:
            self.active.engage(timeout)
            self._active_engaged = True

    def holding(self) -> str | None:
        """None while every member's fence holds; else why not."""
        return next((why for f in self.members if (why := f.holding()) is not None), None)

    def release(self) -> None:
        self.active.release()

    @property
    def released(self) -> dict[str, float]:
        """ms from the UNLOCK until each table's RENAME had run (a rename fence's), slowest first."""
        return self.active.released if isinstance(self.active, RenameFence) else {}

    @property
    def waiters_ended(self) -> int:
        """Client statements the rename fence ended (waiting on it at the flip, or stale behind its renames)."""
        return self.active.waiters_ended if isinstance(self.active, RenameFence) else 0

    def to_finish(self) -> Iterator[tuple[str, WriteFence]]:
        """(step name, fence) of each member with something left to do after the freeze."""
        if isinstance(self.active, RenameFence):
            yield "renames", self.active
        if isinstance(self.active, GateFence):
            yield "active_finish", self.active
        if self.passive is not None:
            yield "passive_finish", self.passive

    def undo(self) -> None:
        """Before the flip: the active fence first, then the gates (each step runs even if one before failed)."""
        try:
            if isinstance(self.active, RenameFence):
                self.active.undo()
        finally:
            for gate in (self.active, self.passive):
                if isinstance(gate, GateFence):
                    gate.undo()

    def settle_unknown(self, landed: bool | None) -> None:
        """After an unknown flip: the rename fence to the side the map shows (gates stay closed)."""
        if isinstance(self.active, RenameFence):
            self.active.settle_unknown(landed)

    def close(self, *, keep_closed: bool) -> list[str]:
        problems = []
        for f in (self.active, self.passive):
            if f is not None:
                problems += f.close(keep_closed=keep_closed)
        return problems
