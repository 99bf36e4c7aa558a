"""The write fences of a cutover behind one interface, and the source pair's fence made of them.

Runs in the cutover process (and a rollback's). Two ways keep clients off the
moving tables of one member of the source pair:

* :class:`RenameFence`: ``LOCK TABLES`` plus one queued ``RENAME`` per table
  (:class:`~migrator.engine.cutover.rename_fence.Fence`); releasing it ends the
  clients waiting on it and lets the renames run, which finish after the
  freeze (stale writers are ended until they have);
* :class:`GateFence`: triggers that read a gate table; dropping the gate table
  closes the member to clients, not to replication
  (:class:`~migrator.engine.cutover.trigger_gate.TriggerGate`); the renames run
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

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Protocol

import pymysql

from migrator.engine.cutover.rename_fence import Fence, Move, fence_mode
from migrator.engine.cutover.trigger_gate import TriggerGate
from migrator.engine.mdl import LockWait
from migrator.engine.migration import Spec
from migrator.engine.names import SENTINEL_TABLE, tomb_db, tomb_suffix
from migrator.fleet.config import Credentials
from migrator.fleet.gtid import GtidPos
from migrator.fleet.model import Host
from migrator.fleet.mysql import connect as mysql_connect
from migrator.fleet.mysql import mark_own, tag

TAG = tag("cutover")


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
    """The source pair's fence: the active member's (rename or gate), and a gate on the passive member.

    Made empty with the attempt; :meth:`prepare` opens it (connections, the gates' triggers) and picks
    the mode. The run writes and reads under it through :attr:`writer` only, whichever fence it is."""

    def __init__(self, source: Host, passive_host: Host | None, creds: Credentials, attempt_id: str, *,
                 phase: str = "cutover"):
        self.source = source
        #: the direction's label (``cutover``, ``rollback``): the phase the fences' errors name
        self.phase = phase
        self.passive_host = passive_host
        self.creds = creds
        self.attempt_id = attempt_id
        #: "rename" (:class:`RenameFence`) or "gate" (:class:`GateFence`), see :func:`fence_mode`
        self.mode = "rename"
        self.active: RenameFence | GateFence | None = None
        self.passive: GateFence | None = None
        #: this attempt's trigger gates by role ("active", "passive"), each as soon as it is installed
        self.gates: dict[str, TriggerGate] = {}
        #: the connection on the source that writes the sentinel rows and reads under the fence
        self.writer: pymysql.connections.Connection | None = None
        self._active_engaged = False
        #: True while the attempt holds its lease: the gates install only then (set by the run)
        self.owner: Callable[[], bool] | None = None

    # -- prepare ------------------------------------------------------------------------------
    def prepare(self, spec: Spec, tables: Sequence[tuple[str, str]]) -> None:
        """Open the fences of ``tables`` (nothing installed, nothing closed): the rename fence's
        connections, or the master's gate's, and the passive member's gate's, each gate checked. Sets
        :attr:`active` and :attr:`passive` once all are open; if one fails, what it opened is closed and
        the error raised. The gates' triggers come later, right before the freeze (:meth:`install_gates`)."""
        opts = spec.options
        self.mode = fence_mode(opts.fence, len(tables))
        if self.mode == "rename":
            moves = [Move(db, table, tomb_db(spec.id, db)) for db, table in tables]
            # with a gated passive member each side renames its own tables (unlogged); else the partner follows
            fence = Fence(self.source, self.creds, moves, [(db, SENTINEL_TABLE) for db in spec.databases],
                          lock_wait_timeout=max(1.0, opts.freeze_budget_ms / 1000),
                          log_renames=self.passive_host is None, phase=self.phase)
            fence.open()
            try:
                if self.passive_host is not None:
                    self._open_gate("passive", self.passive_host, spec, tables)
            except BaseException:
                fence.close()
                raise
            rename = RenameFence(fence)
            self.active, self.passive = rename, self._gate_fence("passive")
            self.writer = rename.writer
            return
        if self.passive_host is not None:
            self._open_gate("passive", self.passive_host, spec, tables)
        # the gate fence: one DROP TABLE closes every moving table; the renames come after the flip
        try:
            self._open_gate("active", self.source, spec, tables)
        except BaseException:
            for gate in self.gates.values():
                gate.close_connection()
            raise
        passive = self._gate_fence("passive")
        self.active, self.passive = GateFence(self.gates["active"], log_renames=passive is None), passive
        self.writer = mark_own(mysql_connect(self.source, self.creds, read_timeout=600))
        with self.writer.cursor() as cur:
            cur.execute(f"{TAG}SET SESSION time_zone = '+00:00'")

    def _gate_fence(self, role: str) -> GateFence | None:
        return GateFence(self.gates[role]) if role in self.gates else None

    def _open_gate(self, role: str, host: Host, spec: Spec, tables: Sequence[tuple[str, str]]) -> None:
        """This attempt's trigger gate on ``host``: its connections open and the member checked (nothing
        installed yet: :meth:`install_gates`)."""
        gate = TriggerGate(host, self.creds, list(tables), tomb_suffix(spec.id),
                           {db: tomb_db(spec.id, db) for db in spec.databases}, attempt=self.attempt_id,
                           lock_wait=LockWait.of(spec.options), phase=self.phase, owner=self.owner).open()
        try:
            gate.check()
        except BaseException:
            gate.close_connection()
            raise
        self.gates[role] = gate

    # -- around the freeze -------------------------------------------------------------------
    def install_gates(self) -> None:
        """Install this attempt's gates' triggers (open: clients still write), the passive member's first.
        Right before the freeze: the triggers live from here until each member's finish. A gate that
        stops installing removes its own; the others are removed when the attempt closes."""
        for role in ("passive", "active"):
            if role in self.gates:
                self.gates[role].install()

    def gates_age_s(self) -> float:
        """Seconds since the oldest of this attempt's installed gates began installing (0: none installed)."""
        return max((g.age_s() for g in self.gates.values()), default=0.0)

    def reinstall_gates(self) -> None:
        """Take this attempt's triggers off and install them again (the freeze did not start within their
        lifetime): for the time in between its clients write with no trigger at all."""
        for role in ("active", "passive"):
            if role in self.gates:
                self.gates[role].remove()
        self.install_gates()

    def triggers_ms(self) -> dict[str, float]:
        """Per gated host, how long this attempt's triggers existed there (for the attempt's record)."""
        return {g.host.name: g.triggers_ms() for role in ("active", "passive")
                if (g := self.gates.get(role)) is not None and g.triggers_ms() > 0}

    def lock_waits(self) -> dict[str, Any]:
        """Per gated host, how its statements waited for their metadata locks (for the attempt's record)."""
        return {g.host.name: g.lock_attempts.to_dict() for role in ("active", "passive")
                if (g := self.gates.get(role)) is not None}

    # -- the freeze ----------------------------------------------------------------------------
    @property
    def control(self) -> pymysql.connections.Connection:
        """A connection on the source for waits under the fence (the rename fence's C, else the writer)."""
        conn = self.active.fence.c if isinstance(self.active, RenameFence) else self.writer
        assert conn is not None
        return conn

    @contextmanager
    def one_commit(self) -> Iterator[pymysql.cursors.Cursor]:
        """A cursor on :attr:`writer` whose statements commit together, at the end of the block.

        Under the rename fence with ``autocommit=0`` and one COMMIT: START TRANSACTION would end LOCK
        TABLES, a COMMIT does not (checked on MariaDB 10.11)."""
        assert self.writer is not None
        locked = isinstance(self.active, RenameFence)
        with self.writer.cursor() as cur:
            cur.execute(f"{TAG}SET SESSION autocommit = 0" if locked else f"{TAG}START TRANSACTION")
            yield cur
            cur.execute(f"{TAG}COMMIT")
            if locked:
                cur.execute(f"{TAG}SET SESSION autocommit = 1")

    @property
    def members(self) -> list[WriteFence]:
        return [f for f in (self.active, self.passive) if f is not None]

    def close_passive(self, timeout: float) -> GtidPos:
        """Close the passive member's gate (an active gate beside it, at the same time): returns the
        passive member's own transactions, which the master must apply before its fence."""
        assert self.passive is not None and self.active is not None
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
        assert self.active is not None
        if not self._active_engaged:
            self.active.engage(timeout)
            self._active_engaged = True

    def holding(self) -> str | None:
        """None while every member's fence holds; else why not."""
        return next((why for f in self.members if (why := f.holding()) is not None), None)

    def release(self) -> None:
        assert self.active is not None
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
        """Close every member (see :meth:`WriteFence.close`) and the writer; the problems met, if any.
        A pair whose prepare did not complete is left as it is (its gates to the next settle)."""
        if self.active is None:
            return []
        problems = []
        for f in (self.active, self.passive):
            if f is not None:
                problems += f.close(keep_closed=keep_closed)
        if isinstance(self.active, GateFence) and self.writer is not None:
            self.writer.close()
        return problems
