"""The migration record: what to move (spec) and how far it got (state).

Resume contract
---------------
Everything needed to continue a migration after any crash lives in ZooKeeper
under ``<root>/migrations/<id>``; Redis/RQ only holds the *next step to run*
and can be lost (``migrator resume ID`` re-enqueues the current step from the
record: :func:`migrator.ops.steps.enqueue_current_step`).

* ``spec`` is immutable once created: source and target pairs, shards (or one
  queue partition), options. Changing what to move means a new migration.
* ``state`` (the node's own data, written by compare-and-set on its znode
  version) holds the phase and small counters. Phases only move forward,
  except ``abort``/``rollback`` which have their own terminal phases. A phase
  change that must start from a known phase says so (``expect``: refused with
  :class:`PhaseConflict` otherwise), and one made on behalf of a claim that can
  be lost (a cutover's lease, a settler's lock) names that claim's znode
  (``guard``): the write commits in one ZooKeeper transaction with a check that
  the node still exists, so a process that lost its claim cannot write the
  phase behind the back of whoever took over (:class:`GuardLost`).
* Per-table copy progress lives in child nodes ``copy/<db>.<table>``
  (``last_key``: the primary key of the last row copied, ``done``, ``rows``,
  ``start_gtid``: the source position seen before the first chunk). A chunk is
  recorded only after the target committed it, and it is written idempotently
  (REPLACE), so redoing the last chunk after a crash is harmless.
* The binlog checkpoint lives in ``catchup`` (``gtid``: last GTID whose events
  are committed on the target, plus the pass table). It is written after the
  target commit of each batch; replay from an earlier GTID converges because
  apply is idempotent by primary key.

Shard locks: ``<root>/locks/shards/<shard>`` persistent nodes naming the
migration, created in the same ZooKeeper transaction as the record, so two
migrations can never hold overlapping shards.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable
from enum import Enum
from typing import Any, Literal

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError
from pydantic import BaseModel, ConfigDict, Field

from migrator.errors import InvalidIdError, MigratorError
from migrator.fleet import zk as zk_mod
from migrator.fleet.model import WIRE_NAMES, MovingSet
from migrator.fleet.shard_map import actor
from migrator.fleet.zk import ZK

MIGRATIONS = "migrations"
LOCKS = "locks/shards"
#: what a record's znode name may be: the ids :func:`new_id` makes are of this form (the command line accepts
#: exactly those, :data:`migrator.fleet.bounds.MIGRATION_ID_RE`); nothing else becomes a ZooKeeper path
_NODE_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}")
#: ``<root>/locks/tombstones/<id>``: a rollback reads a migration's tombstones under the shared side of this
#: lock, a cleanup drops them under its exclusive side (:meth:`MigrationStore.tombstone_lock`)
TOMBSTONE_LOCKS = "locks/tombstones"


class MigrationError(MigratorError):
    component = "migration"


class MigrationNotFound(MigrationError):
    exit_code = 2


class PhaseConflict(MigrationError):
    """A phase change found the migration in another phase than the one it starts from."""

    exit_code = 3


class GuardLost(MigrationError):
    """A guarded write was refused: its guard znode (a lease, a lock) is gone, so the process
    that made it no longer holds the claim the write was made under."""

    exit_code = 3


class ShardsBusy(MigrationError):
    """Another migration already holds some of these shards."""

    exit_code = 3


class Phase(str, Enum):
    PLANNED = "planned"
    PREFLIGHT = "preflight"
    COPYING = "copying"
    CATCHING_UP = "catching_up"
    CONVERGED = "converged"
    VERIFYING = "verifying"
    CUTOVER = "cutover"
    DONE = "done"  # flipped; source tables are tombstones until cleanup
    ROLLING_BACK = "rolling_back"  # a rollback's fenced flip back is under way (a lease holds it)
    ROLLED_BACK = "rolled_back"
    CLEANED = "cleaned"
    ABORTED = "aborted"
    FAILED = "failed"

    @property
    def terminal(self) -> bool:
        return self in (Phase.CLEANED, Phase.ABORTED, Phase.ROLLED_BACK)


class Options(BaseModel):
    """Tunables of one migration; defaults are the documented ones.

    Stored, set and listed under their config keys: the code's name of a field differs from its key only
    where the key keeps an older word (the target pair's passive member was its *standby*); the alias is
    the one place that translates, read and written (:data:`WIRE_NAMES`)."""

    model_config = ConfigDict(extra="forbid", validate_by_name=True, validate_by_alias=True, serialize_by_alias=True)

    chunk_rows: int = Field(default=1000, ge=1, le=1_000_000)  # first chunk; adapts after
    chunk_target_ms: int = Field(default=500, ge=10)
    chunk_max_rows: int = Field(default=50_000, ge=1)  # upper bound of the adapted chunk
    copy_workers: int = Field(default=4, ge=1, le=64)
    # throttle copy above this lag of the target's passive member
    max_passive_lag_s: float = Field(default=5.0, gt=0, alias=WIRE_NAMES["max_passive_lag_s"])
    max_threads_running: int = Field(default=50, ge=1)  # throttle copy while the source is this busy
    converge_lag_s: float = Field(default=1.0, gt=0)
    converge_events: int = Field(default=1000, ge=0)  # a pass delta at or under this converges
    not_converging_passes: int = Field(default=3, ge=1)
    freeze_budget_ms: int = Field(default=500, ge=1)
    #: close the moving tables on the source pair's passive member too (off only when that host is down)
    fence_passive: bool = True
    #: how the source master is fenced in the freeze: "rename" (LOCK TABLES and one queued RENAME per
    #: table, at most fence.MAX_TABLES tables), "gate" (triggers and one gate table, any number of tables),
    #: "auto" (rename up to fence.MAX_TABLES tables, else gate; the CLI runs a bigger split or move as one batched
    #: migration cut over in rename-fenced batches instead, see migrator.ops.batched); see
    #: migrator.engine.cutover.rename_fence
    fence: Literal["auto", "rename", "gate"] = "auto"
    retention_s: int = Field(default=24 * 3600, ge=0)
    #: how long the pipeline (``jobs.pipeline.finish``) keeps trying a cutover that stopped before the flip
    #: (a lock held on a moving table, a freeze over its budget), with backoff between attempts; 0: once
    cutover_retry_s: float = Field(default=600.0, ge=0, le=7 * 24 * 3600)
    #: how long a statement that needs a live table's metadata lock outside the freeze (the write gates'
    #: triggers, the renames after the flip) keeps trying; each try waits at most half the freeze budget, so no
    #: client queues behind it for longer (migrator.engine.mdl)
    lock_retry_s: float = Field(default=30.0, gt=0, le=3600)
    #: when such a statement's tries are over, end the connections holding the lock (KILL CONNECTION) and try
    #: once more, instead of stopping; never one whose transaction changed more than kill_blockers_max_rows rows
    kill_blockers: bool = False
    kill_blockers_max_rows: int = Field(default=0, ge=0)
    #: the longest the write gates' triggers stay on a live table before the freeze: they are installed after
    #: every wait that can last (the gate's drain, the target check, the re-check, the batch before), and
    #: taken off and installed again when the freeze does not start within this (migrator.engine.cutover)
    gate_lifetime_s: float = Field(default=5.0, gt=0, le=600)


#: the fields of a :class:`Spec` that say what moves, from where, to where: never changed once stored
WHAT_MOVES = ("kind", "source_master", "source_passive", "target_master", "target_passive", "shards", "tables",
              "queue", "partition", "batched", "parent")


class Spec(BaseModel):
    """What a migration moves. Immutable once stored (the pairs' passive members under their stored
    keys, ``source_passive``/``target_passive``: :data:`WIRE_NAMES`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_by_name=True, validate_by_alias=True,
                              serialize_by_alias=True)

    id: str
    kind: str = "shards"  # "shards" | "queue_partition"
    source_master: str
    source_passive: str = Field(alias=WIRE_NAMES["source_passive"])
    target_master: str
    target_passive: str = Field(alias=WIRE_NAMES["target_passive"])
    shards: tuple[int, ...]
    #: for kind == "queue_partition": only these tables of the shard move
    tables: tuple[str, ...] = ()
    queue: str | None = None
    partition: int | None = None
    options: Options = Options()
    #: a move of more tables than one rename fence takes: copied and tailed once as this migration, cut over
    #: as batch migrations handed its shards one batch at a time (:mod:`migrator.ops.batched.handover`); its
    #: ``shards`` shrink with every batch handed over, the one change a stored spec takes
    batched: bool = False
    #: a batch of a batched migration: the migration it was handed its shards by
    parent: str | None = None
    created_at: float = Field(default_factory=time.time)
    created_by: str = Field(default_factory=actor)

    @property
    def databases(self) -> list[str]:
        return [f"db{s:05d}" for s in self.shards]

    def same_move(self, other: Spec) -> bool:
        """``other`` moves the same thing the same way (what, from, to), whatever the ids and options."""
        return all(getattr(self, f) == getattr(other, f) for f in WHAT_MOVES)

    def ranges(self) -> list[tuple[int, int]]:
        """The shards as maximal contiguous [lo, hi] ranges."""
        return self.moving.ranges

    @property
    def moving(self) -> MovingSet:
        """What the cutover freezes and flips in the shard map: the shards' ranges, or for a queue
        partition its tables' route."""
        return MovingSet(tuple(self.shards), tuple(self.tables) if self.kind == "queue_partition" else ())


class State(BaseModel):
    """How far a migration got. Small: big progress lives in child nodes."""

    model_config = ConfigDict(extra="allow")

    phase: Phase = Phase.PLANNED
    error: str | None = None
    updated_at: float = Field(default_factory=time.time)
    history: list[dict[str, Any]] = Field(default_factory=list)  # phase changes: who, when, from, to
    paused: bool = False
    postpone_cutover: bool = False
    #: driven end to end by the RQ pipeline (``split --yes``): convergence enqueues verify + cutover
    autopilot: bool = False
    freeze_ms: float | None = None
    predicted_freeze_ms: float | None = None
    flipped_epoch: int | None = None
    tombstone_db_suffix: str | None = None
    cleanup_after: float | None = None
    #: the pipeline gave up on a step: {"step", "reason", "next", "at"}; cleared when it is resumed
    stopped: dict[str, Any] | None = None
    #: when ``migrator rollback ID`` handed a rollback to the RQ workers; cleared when its chain gives up
    #: with a verdict. While it is set and the phase is ``done``, ``migrator resume ID`` re-enqueues the chain
    rollback_requested: float | None = None
    #: a batched migration's batches, in the order they were handed their shards (their migration ids)
    batches: list[str] = Field(default_factory=list)
    #: the tables of each of those batches (what the next batch's size is measured against)
    batch_tables: dict[str, int] = Field(default_factory=dict)


def new_id(prefix: str = "m") -> str:
    """Migration ids are RQ-safe: letters, digits, '-' and '_' only."""
    return f"{prefix}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"


class Node:
    """The progress nodes under a migration's record (``<root>/migrations/<id>/<node>``): every name
    the store is asked for is one of these (per-table copy progress is ``copy/<db>.<table>``)."""

    CATCHUP = "catchup"  # the catch-up checkpoint and its passes
    VERIFY = "verify"  # the last full check
    CUTOVER = "cutover"  # what the flip recorded (fence_gtid, target_gtid, target_state, steps)
    CUTOVER_ATTEMPTS = "cutover_attempts"  # every attempt, refused and undone ones too
    ROLLBACK = "rollback"  # what the flip back recorded
    ROLLBACK_TAIL = "rollback_tail"  # the reverse tail's checkpoint
    ROLLBACK_VERIFY = "rollback_verify"  # the reverse check
    ROLLBACK_PASSES = "rollback_passes"  # the reverse passes
    HANDOVER = "handover"  # a batch of a batched migration: seconds of each pipeline step around its cutover


class MigrationStore:
    """Migration records, their per-table progress, and the shard locks."""

    def __init__(self, zk: ZK):
        self.zk = zk
        self.base = zk.path(MIGRATIONS)
        self.locks = zk.path(LOCKS)

    def _node(self, migration_id: str, *sub: str) -> str:
        if not isinstance(migration_id, str) or not _NODE_NAME_RE.fullmatch(migration_id):
            raise InvalidIdError(f"{migration_id!r:.60} is not a migration id: they look like m-20261122-155024-7e9460")
        return "/".join([self.base, migration_id, *sub])

    def node_path(self, migration_id: str, *sub: str) -> str:
        """The znode of a migration's record (or of one of its progress nodes)."""
        return self._node(migration_id, *sub)

    # -- create / read -----------------------------------------------------
    def create(self, spec: Spec) -> State:
        """Store spec + initial state and take the shard locks, atomically."""
        self.zk.ensure(self.base)
        self.zk.ensure(self.locks)
        acl = self.zk.protected_acl()
        state = State(history=[_transition(None, Phase.PLANNED)])
        tx = self.zk.client.transaction()
        tx.create(self._node(spec.id), state.model_dump_json().encode(), acl=acl)
        tx.create(self._node(spec.id, "spec"), spec.model_dump_json().encode(), acl=acl)
        for s in spec.shards:
            tx.create(f"{self.locks}/{s}", spec.id.encode(), acl=acl)
        results = tx.commit()
        if any(isinstance(r, Exception) for r in results):
            busy = self.holders(spec.shards)
            if busy:
                desc = ", ".join(f"shard {s} by {m}" for s, m in sorted(busy.items()))
                raise ShardsBusy(f"shards already moving: {desc}; wait for it, or abort it with `migrator abort ID`")
            if any(isinstance(r, NodeExistsError) for r in results):
                raise MigrationError(f"migration {spec.id} already exists")
            raise MigrationError(f"could not store migration {spec.id}: {[type(r).__name__ for r in results]}")
        return state

    def tombstone_lock(self, migration_id: str, who: str, *, exclusive: bool) -> Any:
        """The lock on a migration's tombstones: every rollback (its RQ slices, ``--sync``, a playbook's step,
        ``command.rollback``) holds the shared side while it reads them; cleanup holds the exclusive side
        while it drops them, so the two never overlap, on any path. A holder that dies lets go with its
        ZooKeeper session. Returns the kazoo lock, not yet acquired."""
        path = self.zk.path(TOMBSTONE_LOCKS, migration_id)
        ident = f"{zk_mod.holder()} {who}"
        return (self.zk.client.WriteLock if exclusive else self.zk.client.ReadLock)(path, identifier=ident)

    def holders(self, shards: tuple[int, ...] | list[int]) -> dict[int, str]:
        out = {}
        for s in shards:
            try:
                data, _ = self.zk.client.get(f"{self.locks}/{s}")
                out[s] = data.decode()
            except NoNodeError:
                pass
        return out

    def release_locks(self, spec: Spec) -> None:
        for s in spec.shards:
            try:
                data, stat = self.zk.client.get(f"{self.locks}/{s}")
                if data.decode() == spec.id:
                    self.zk.client.delete(f"{self.locks}/{s}", version=stat.version)
            except (NoNodeError, BadVersionError):
                pass

    def spec(self, migration_id: str) -> Spec:
        try:
            data, _ = self.zk.client.get(self._node(migration_id, "spec"))
        except NoNodeError:
            raise MigrationNotFound(f"no migration {migration_id!r} (see `migrator status`)") from None
        return Spec.model_validate_json(data)

    def replace_spec(self, spec: Spec) -> None:
        """Change a spec's options (what moves never changes: same id, pairs, shards, tables)."""
        try:
            data, stat = self.zk.client.get(self._node(spec.id, "spec"))
        except NoNodeError:
            raise MigrationNotFound(f"no migration {spec.id!r} (see `migrator status`)") from None
        old = Spec.model_validate_json(data)
        if not old.same_move(spec):
            raise MigrationError(f"migration {spec.id}: only options may change; plan a new migration instead")
        try:
            # by version: a batched migration's shards shrink as it hands batches over (:meth:`hand_over`)
            self.zk.client.set(self._node(spec.id, "spec"), spec.model_dump_json().encode(), version=stat.version)
        except BadVersionError:
            raise PhaseConflict(f"migration {spec.id}: its spec changed meanwhile (a batch was handed its shards); "
                                "read it again and retry") from None

    def state(self, migration_id: str) -> tuple[State, int]:
        try:
            data, stat = self.zk.client.get(self._node(migration_id))
        except NoNodeError:
            raise MigrationNotFound(f"no migration {migration_id!r} (see `migrator status`)") from None
        return State.model_validate_json(data), stat.version

    def list(self) -> list[str]:
        try:
            return sorted(self.zk.client.get_children(self.base))
        except NoNodeError:
            return []

    # -- state changes -------------------------------------------------------
    def update(self, migration_id: str, change: Callable[[State], State | None], *, attempts: int = 20,
               guard: str | None = None) -> State:
        """Apply ``change`` to the state by CAS, re-reading on a lost race.

        ``change`` may mutate and return the state, or return None to skip.
        ``guard``: a znode that must still exist for the write to commit (checked in the
        same ZooKeeper transaction); :class:`GuardLost` when it is gone.
        """
        for _ in range(attempts):
            st, version = self.state(migration_id)
            new = change(st.model_copy(deep=True))
            if new is None:
                return st
            _stamp_actor(new.history, len(st.history))
            new.updated_at = time.time()
            data = new.model_dump_json().encode()
            if guard is None:
                try:
                    self.zk.client.set(self._node(migration_id), data, version=version)
                    return new
                except BadVersionError:
                    continue
            tx = self.zk.client.transaction()
            tx.check(guard, -1)
            tx.set_data(self._node(migration_id), data, version=version)
            results = tx.commit()
            if isinstance(results[0], NoNodeError):
                raise GuardLost(f"migration {migration_id}: {guard} is gone, so the state was not changed: the process "
                                "that held it lost its claim (its ZooKeeper session expired) and whoever took "
                                "over decides now")
            if isinstance(results[1], BadVersionError):
                continue
            _raise_first(results)
            return new
        raise MigrationError(f"migration {migration_id}: state kept changing under us ({attempts} tries)")

    def set_phase(self, migration_id: str, phase: Phase, *, error: str | None = None,
                  expect: Phase | tuple[Phase, ...] | None = None, guard: str | None = None,
                  **fields: Any) -> State:
        """Set the phase (and ``fields``); a compare-and-set on the record.

        ``expect``: the phase (or phases) the change starts from; in any other phase it is
        refused with :class:`PhaseConflict` and nothing is written. ``guard``: see :meth:`update`.
        """
        allowed = (expect,) if isinstance(expect, Phase) else expect

        def change(st: State) -> State:
            if allowed is not None and st.phase not in allowed:
                raise PhaseConflict(f"migration {migration_id} is {st.phase.value}, not "
                                    f"{' or '.join(p.value for p in allowed)}: someone else moved it on; "
                                    f"not setting it to {phase.value} (see `migrator status {migration_id}`)")
            if st.phase != phase:
                st.history.append(_transition(st.phase, phase, error))
            st.phase = phase
            st.error = error
            for k, v in fields.items():
                setattr(st, k, v)
            return st

        return self.update(migration_id, change, guard=guard)

    def record_stop(self, migration_id: str, step: str, reason: str, next_step: str, exit_code: int = 3) -> State:
        """The pipeline gave up on ``step``: say why and what to do next, where ``status`` shows it;
        ``exit_code`` (:class:`~migrator.errors.ExitCode`) is what a command following it exits with."""

        def change(st: State) -> State:
            st.stopped = {"step": step, "reason": reason[:2000], "next": next_step, "at": time.time(),
                          "exit_code": int(exit_code)}
            st.error = f"{step}: {reason}"[:2000]
            return st

        return self.update(migration_id, change)

    # -- progress nodes (copy/<db>.<table>, catchup, ...) ---------------------
    def get_progress(self, migration_id: str, key: str, watch: Callable[[Any], None] | None = None
                     ) -> tuple[dict[str, Any] | None, int | None]:
        """The progress node's value and version (None, None if there is none). ``watch`` is called
        once on the node's next change (kazoo's one-shot watch; none is left on a missing node)."""
        try:
            data, stat = self.zk.client.get(self._node(migration_id, key), watch=watch)
        except NoNodeError:
            return None, None
        return json.loads(data), stat.version

    def put_progress(self, migration_id: str, key: str, value: dict[str, Any], version: int | None = None,
                     guard: str | None = None) -> int:
        """Write a progress node; with ``version`` it is a CAS (BadVersionError on a race). With
        ``guard`` the write commits only while that znode exists (one ZooKeeper transaction;
        :class:`GuardLost` otherwise): a tail writes its checkpoint so, guarded by its applier lock."""
        path = self._node(migration_id, key)
        data = json.dumps(value, default=str).encode()
        if guard is not None:
            return self._put_guarded(migration_id, path, data, version, guard)
        if version is None:
            try:
                stat = self.zk.client.set(path, data)
                return stat.version
            except NoNodeError:
                self.zk.client.create(path, data, acl=self.zk.protected_acl(), makepath=True)
                return 0
        stat = self.zk.client.set(path, data, version=version)
        return stat.version

    def _put_guarded(self, migration_id: str, path: str, data: bytes, version: int | None, guard: str) -> int:
        for create in (False, True):
            tx = self.zk.client.transaction()
            tx.check(guard, -1)
            if create:
                tx.create(path, data, acl=self.zk.protected_acl())
            else:
                tx.set_data(path, data, version=-1 if version is None else version)
            results = tx.commit()
            if isinstance(results[0], NoNodeError):
                raise GuardLost(
                    f"migration {migration_id}: {guard} is gone, so {path.rsplit('/', 1)[1]} was not written: "
                    "the process that held it lost its claim (its ZooKeeper session expired)"
                )
            if not create and version is None and isinstance(results[1], NoNodeError):
                self.zk.ensure(path.rsplit("/", 1)[0])
                continue  # a first write: create the node, under the same guard
            _raise_first(results)
            return 0 if create else results[1].version
        raise AssertionError("unreachable")

    def progress_keys(self, migration_id: str, prefix: str) -> list[str]:
        try:
            return sorted(self.zk.client.get_children(self._node(migration_id, prefix)))
        except NoNodeError:
            return []

    def put_progress_many(self, migration_id: str, items: list[tuple[str, dict[str, Any], int]]) -> bool:
        """Write several progress nodes at once, each by compare-and-set on its version; all or
        none (False when any node changed meanwhile)."""
        if not items:
            return True
        tx = self.zk.client.transaction()
        for key, value, version in items:
            tx.set_data(self._node(migration_id, key), json.dumps(value, default=str).encode(), version=version)
        return not any(isinstance(r, Exception) for r in tx.commit())

    def create_progress(self, migration_id: str, key: str, value: dict[str, Any]) -> bool:
        """Create a progress node unless it exists; True if this call created it."""
        try:
            self.zk.client.create(self._node(migration_id, key), json.dumps(value, default=str).encode(),
                                  acl=self.zk.protected_acl(), makepath=True)
            return True
        except NodeExistsError:
            return False

    def hand_over(self, parent: Spec, version: int, child: Spec, child_state: State,
                  progress: dict[str, dict[str, Any]], checks: dict[str, int],
                  change: Callable[[State], State], pauses: dict[str, int] | None = None,
                  register: tuple[str, Callable[[State], State]] | None = None) -> State:
        """Move ``child.shards`` from the batched migration ``parent`` (state at ``version``) to a new
        migration ``child``, in one ZooKeeper transaction: the parent's spec loses the shards, its state
        is changed by ``change``, the child's record is made with its ``progress`` nodes, each shard's
        lock is given to the child, and so is each maintenance pause node in ``pauses`` (path -> version
        as read: the node then carries the child's id). ``checks``: znodes (path -> version, -1 for
        "exists") that must be as read for it to commit (the parent's applier lock, its checkpoint).
        ``register``: a third migration whose state changes in the same transaction (``(id, change)``, at
        the version read here): a batch that gives part of its shards to a new batch registers it with the
        batched migration both belong to. Nothing is written unless it all is; :class:`PhaseConflict` when
        the parent, a lock, a pause node or the registering migration changed meanwhile."""
        st, _ = self.state(parent.id)
        new = change(st.model_copy(deep=True))
        _stamp_actor(new.history, len(st.history))
        new.updated_at = time.time()
        data, stat = self.zk.client.get(self._node(parent.id, "spec"))
        stored, spec_version = Spec.model_validate_json(data), stat.version
        if not set(child.shards) <= set(stored.shards):
            raise PhaseConflict(f"migration {parent.id} no longer holds shards "
                                f"{sorted(set(child.shards) - set(stored.shards))}: not handing them over")
        left = tuple(s for s in stored.shards if s not in set(child.shards))
        narrowed = stored.model_copy(update={"shards": left})
        acl = self.zk.protected_acl()
        tx = self.zk.client.transaction()
        for path, v in checks.items():
            tx.check(path, v)
        tx.set_data(self._node(parent.id), new.model_dump_json().encode(), version=version)
        tx.set_data(self._node(parent.id, "spec"), narrowed.model_dump_json().encode(), version=spec_version)
        tx.create(self._node(child.id), child_state.model_dump_json().encode(), acl=acl)
        tx.create(self._node(child.id, "spec"), child.model_dump_json().encode(), acl=acl)
        for key, value in progress.items():
            tx.create(self._node(child.id, key), json.dumps(value, default=str).encode(), acl=acl)
        for s in child.shards:
            data, stat = self.zk.client.get(f"{self.locks}/{s}")
            if data.decode() != parent.id:
                raise PhaseConflict(f"shard {s} is locked by {data.decode()}, not {parent.id}: not handing it over")
            tx.set_data(f"{self.locks}/{s}", child.id.encode(), version=stat.version)
        for path, v in (pauses or {}).items():
            tx.set_data(path, child.id.encode(), version=v)
        if register is not None:
            other, other_change = register
            ost, oversion = self.state(other)
            onew = other_change(ost.model_copy(deep=True))
            onew.updated_at = time.time()
            tx.set_data(self._node(other), onew.model_dump_json().encode(), version=oversion)
        results = tx.commit()
        if any(isinstance(r, Exception) for r in results):
            raise PhaseConflict(f"migration {parent.id}: handing shards {child.ranges()} to {child.id} was refused "
                                f"({[type(r).__name__ for r in results if not isinstance(r, RolledBackError)]}): "
                                "the migration, its checkpoint, its tail, a shard lock or a pause node changed since")
        return new

    def delete(self, migration_id: str) -> None:
        spec = self.spec(migration_id)
        self.release_locks(spec)
        self.zk.client.delete(self._node(migration_id), recursive=True)


def _raise_first(results: list[Any]) -> None:
    """kazoo's ``transaction().commit()`` returns exceptions instead of raising them: raise the first
    real one (the others of a failed transaction are RolledBackError)."""
    errors = [r for r in results if isinstance(r, Exception)]
    real = [r for r in errors if not isinstance(r, RolledBackError)]
    if real or errors:
        raise (real or errors)[0]


def _stamp_actor(history: list[dict[str, Any]], since: int) -> None:
    """Phase changes name who made them (:func:`migrator.fleet.shard_map.actor`, the operator or the
    worker's user@host); a component that wrote its own name as ``who`` keeps it as ``component``."""
    me = actor()
    for rec in history[since:]:
        if rec.get("who") != me:
            rec.setdefault("component", rec.get("who"))
            rec["who"] = me


def _transition(old: Phase | None, new: Phase, error: str | None = None) -> dict[str, Any]:
    rec = {"who": actor(), "when": time.time(), "from": old.value if old else None, "to": new.value}
    if error:
        rec["error"] = error
    return rec
