"""Cutover: the short write freeze that moves the moving ranges to the target pair.

Runs in the migration worker (``migrator cutover ID``, ``jobs.cutover``) once
catch-up has converged. It reads like the runbook:

1. **Gate.** The migration is ``converged`` and the predicted freeze
   (``State.predicted_freeze_ms``, else a timed drain to the source head plus
   the fixed cost) fits ``Options.freeze_budget_ms``.
2. **Prepare** (no freeze yet): the sentinel table exists in every moving db on
   both sides (:func:`prepare_sentinels` made it before the copy), the
   tombstone schemas exist on the source, a full verify has recorded
   ``verified_gtid`` and the rows changed since then are re-checked
   (:mod:`migrator.engine.verify`), and the fence connections are open.
3. **Freeze** the moving ranges in the shard map (one CAS). Well-behaved
   clients now wait (``ShardRouter.wait_unfrozen``). A watchdog timer of the
   freeze budget starts: if it fires before the flip it undoes everything by
   itself (kills the pending RENAMEs, releases the lock, unfreezes). The
   budget bounds the time to the flip decision; once the flip CAS is under
   way nothing is undone, so a slow release can push ``freeze_ms`` past it.
4. **Fence** the source tables (:class:`migrator.engine.cutover.fence.Fence`): LOCK TABLES
   ... WRITE on connection A, one RENAME per table to the tombstones queued on
   B1..Bn (one per table: see the fence module for why).
5. **Sentinel**: under the lock, A writes a unique row to ``_migrator_sentinel``
   in each moving db and reads ``@@gtid_binlog_pos``; catch-up drains to that
   exact position and the row must be on the target. This proves the target has
   every write the source accepted (idea: gh-ost's ``waitForEventsUpToLock``).
6. **Compare** the rows changed since the last check (their keys are those the
   drain applied since ``verified_gtid``, trusted only if the sentinel row is
   among them; else a background binlog reader's, else the binlog segment read
   then) and the chunks the full check left suspect; re-copy any difference
   (the source is fenced, so this is exact) and require a clean second look.
7. **Flip** the ranges to the target pair and unfreeze them in one CAS on the
   epoch of our freeze. A conflict aborts; it is never retried.
8. **Release**: UNLOCK on A; each table's RENAME runs before the writers queued
   on it, which then get 1146 and refresh the map. The source tables are
   tombstones. Partition maintenance may run again on the moved shards.
9. Record ``freeze_ms`` (from the commit of the freeze CAS to the end of the
   release; the CAS itself, ``steps_ms["freeze_cas"]``, is not in it), the flipped
   epoch, the tombstone suffix and ``cleanup_after``; phase ``done``.

Any failure before the flip leaves the source serving and the ranges unfrozen.
A ZooKeeper connection loss during the flip CAS is resolved by re-reading the
map after reconnecting: the flip is one CAS, so it either landed (finish) or
did not (undo the fence). A cutover that died midway (phase still
``cutover``) is reconciled the same way by the next ``cutover`` call.

Queue-partition moves
---------------------
The shard map routes by shard, and the queue service resolves a partition to
its shard and then to that shard's master. So a queue partition moves by moving
its shard: the partition's shard must be wholly owned by the partition. The
cutover checks it (every other table of that shard db on the source is empty)
and refuses otherwise, then fences only ``Spec.tables`` (the partition's jobs
table; the sentinel lives in the same db) and flips the shard in the shard map
exactly like a shard move. A per-partition host override in the queue record
would need a second routing source and a two-node atomic flip, and every reader
of the shard db would have to know about it; one source of routing is simpler
to reason about and to audit.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pymysql
from kazoo.exceptions import ConnectionLoss, OperationTimeoutError, SessionExpiredError
from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_fixed

from migrator.fleet import zk as zk_mod
from migrator.fleet.config import Config, Credentials, load_credentials
from migrator.errors import MigratorError, ShardMapConflict
from migrator.engine.cutover.fence import Fence, Move
from migrator.engine.cutover.passive_gate import PassiveGate, wait_applied
from migrator.fleet.model import Host, ShardMap
from migrator.fleet.gtid import GtidPos
from migrator.engine.migration import MigrationStore, Phase, Spec
from migrator.engine.names import tomb_db, tomb_suffix
from migrator.fleet.mysql import connect as mysql_connect
from migrator.fleet.mysql import ident, qualified, query, scalar, tag
from migrator.fleet.shard_map import HostRegistry, ShardMapStore
from migrator.engine.names import SENTINEL_TABLE
from migrator.engine.verify.run import VERIFY_NODE, verify_migration
from migrator.engine.verify.drainers import CatchUpDrainer, Drainer, default_drainer
from migrator.engine.verify.changes import ChangeTracker, changed_keys
from migrator.engine.verify.checksums import Side, TableInfo, load_tables, prepare_session
from migrator.fleet.mysql import binlog_pos
from migrator.engine.verify.repair import check_chunk, check_rows
from migrator.fleet.zk import ZK

TAG = tag("cutover")
#: what a freeze costs besides the drain (two CAS, lock, sentinel, compare), for the prediction
FIXED_FREEZE_MS = 60.0
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


# -- names ---------------------------------------------------------------------------------

SENTINEL_DDL = (
    "CREATE TABLE IF NOT EXISTS {table} ("
    " token VARCHAR(64) NOT NULL PRIMARY KEY,"
    " migration_id VARCHAR(100) NOT NULL,"
    " created_at DATETIME(6) NOT NULL DEFAULT NOW(6)"
    ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
)


def ensure_sentinel(conn: pymysql.connections.Connection, db: str) -> None:
    """Create ``db._migrator_sentinel`` (idempotent: an existing table is not even binlogged)."""
    with conn.cursor() as cur:
        cur.execute(TAG + SENTINEL_DDL.format(table=qualified(db, SENTINEL_TABLE)))


def has_sentinel(conn: pymysql.connections.Connection, db: str) -> bool:
    return bool(scalar(conn, "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
                             "AND TABLE_NAME = %s", (db, SENTINEL_TABLE)))


def prepare_sentinels(zk: ZK, spec: Spec, credentials: Credentials) -> list[str]:
    """Create the sentinel table in every moving db on the source master.

    Call it before the copy (plan or copy preparation): the copy then carries
    the table over like any other, and catch-up never meets its CREATE TABLE
    (which it would rightly refuse as a schema change in a moving shard).
    Returns the dbs where it was created.
    """
    source = HostRegistry(zk).get(spec.source_master)
    made = []
    with mysql_connect(source, credentials) as conn:
        for db in spec.databases:
            if not has_sentinel(conn, db):
                ensure_sentinel(conn, db)
                made.append(db)
    return made


# -- hooks and results ---------------------------------------------------------------------

Hook = Callable[["CutoverRun"], None]


@dataclass
class CutoverHooks:
    """Named points where tests (and playbooks) can act during a cutover."""

    after_freeze: Hook | None = None
    after_fence: Hook | None = None
    before_flip: Hook | None = None
    after_flip: Hook | None = None


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

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("migration_id", "freeze_ms", "flipped_epoch", "fence_gtid",
                                               "target_gtid", "rows_checked", "rows_repaired", "steps_ms",
                                               "keys_from")}


class Watchdog:
    """Aborts a freeze that overruns its budget, from a timer thread.

    The main thread must :meth:`claim` the flip: once claimed the watchdog no
    longer acts; once fired the flip is refused. The lock makes the two exclusive.
    """

    def __init__(self, budget_s: float, on_fire: Callable[[], None]):
        self._lock = threading.Lock()
        self.state = "armed"
        self.error: BaseException | None = None
        self._on_fire = on_fire
        self._timer = threading.Timer(budget_s, self._fire)
        self._timer.daemon = True

    def start(self) -> Watchdog:
        self._timer.start()
        return self

    def _fire(self) -> None:
        with self._lock:
            if self.state != "armed":
                return
            self.state = "fired"
            try:
                self._on_fire()
            except BaseException as exc:  # reported by the main thread
                self.error = exc

    def claim(self) -> bool:
        """Take over from the watchdog; False if it already fired (and undid the freeze)."""
        with self._lock:
            self._timer.cancel()
            if self.state == "armed":
                self.state = "claimed"
                return True
            return False

    @property
    def fired(self) -> bool:
        return self.state == "fired"


# -- one run -----------------------------------------------------------------------------------

@dataclass
class Direction:
    """Which way a freeze moves the ranges: forward (cutover) or back (rollback).

    ``source`` is the host that gets fenced (its tables become tombstones),
    ``target`` the host whose tables must hold every row; on the target the
    tables live in ``target_db_of(db)`` (the tombstone schema for a rollback).
    ``pre_flip``/``undo_pre_flip`` run under the fence just before the flip
    CAS, and to undo it if the flip does not land.
    """

    label: str
    source: Host
    target: Host
    from_master: str
    to_master: str
    to_slave: str
    #: the source's pair partner, closed by a :class:`PassiveGate` (None: not fenced)
    passive: Host | None = None
    verify_node: str = VERIFY_NODE
    target_db_of: Callable[[str], str] = lambda db: db
    pre_flip: Callable[[CutoverRun], None] | None = None
    undo_pre_flip: Callable[[CutoverRun], None] | None = None


def forward(zk: ZK, spec: Spec) -> Direction:
    reg = HostRegistry(zk)
    return Direction("cutover", reg.get(spec.source_master), reg.get(spec.target_master),
                     spec.source_master, spec.target_master, spec.target_slave,
                     passive=passive_of(reg, spec.source_master, spec.source_slave, spec))


def passive_of(reg: HostRegistry, master: str, slave: str, spec: Spec) -> Host | None:
    """The pair partner to gate while ``master`` is fenced, or None when the option turns it off."""
    if not spec.options.fence_passive:
        return None
    host = reg.get(slave)
    if host.partner != master:
        raise CutoverError(f"{slave} is not registered as the pair partner of {master} (its partner is "
                           f"{host.partner}): fix the host registry before the cutover", phase="cutover")
    return host


class CutoverRun:
    """The state of one cutover attempt (what the hooks see)."""

    def __init__(self, config: Config, zk: ZK, creds: Credentials, spec: Spec, drainer: Drainer,
                 direction: Direction | None = None):
        self.config = config
        self.zk = zk
        self.creds = creds
        self.spec = spec
        self.drainer = drainer
        self.store = MigrationStore(zk)
        self.maps = ShardMapStore(zk)
        self.direction = direction or forward(zk, spec)
        self.source: Host = self.direction.source
        self.target: Host = self.direction.target
        self.target_pos = ""
        self._pre_flipped = False
        self.tracker: ChangeTracker | None = None
        self.collecting = False
        self.keys_from = ""
        self.verified_from = ""
        self.token = ""
        self._t_compare = 0.0
        self.ranges = spec.ranges()
        self.tables: list[TableInfo] = []
        self.fence: Fence | None = None
        self.passive_gate: PassiveGate | None = None
        self.target_conn: pymysql.connections.Connection | None = None
        self.frozen_epoch: int | None = None
        self.frozen_map: ShardMap | None = None
        self.flipped_epoch: int | None = None
        self.fence_gtid = ""
        self.steps: dict[str, float] = {}
        self.rows_checked = 0
        self.rows_repaired = 0
        self.watchdog: Watchdog | None = None
        self.t_freeze: float | None = None
        self._undo_lock = threading.Lock()
        self._undone = False

    # -- helpers ------------------------------------------------------------------------
    def _step(self, name: str, t0: float) -> float:
        now = time.monotonic()
        self.steps[name] = round((now - t0) * 1000, 2)
        return now

    def remaining_s(self) -> float:
        budget = self.spec.options.freeze_budget_ms / 1000
        if self.t_freeze is None:
            return budget
        return max(0.01, budget - (time.monotonic() - self.t_freeze))

    def tomb(self, db: str) -> str:
        return tomb_db(self.spec.id, db)

    # -- prepare --------------------------------------------------------------------------
    def prepare(self) -> None:
        spec = self.spec
        src = mysql_connect(self.source, self.creds, read_timeout=600)
        try:
            prepare_session(src)
            for db in spec.databases:
                if not has_sentinel(src, db):
                    raise CutoverError(
                        f"{db}.{SENTINEL_TABLE} is missing on {self.source.name}: it must exist before the copy "
                        "(migrator.engine.cutover.run.prepare_sentinels), so that the copy carries it and catch-up never "
                        "sees its CREATE TABLE; abort this migration and plan it again", phase=self.direction.label)
                with src.cursor() as cur:
                    cur.execute(f"{TAG}CREATE DATABASE IF NOT EXISTS {ident(self.tomb(db))}")
            self.tables = load_tables(src, spec.databases, spec.tables)
            if spec.kind == "queue_partition":
                self._check_partition_owns_shard(src)
        finally:
            src.close()
        self.target_conn = mysql_connect(self.target, self.creds, read_timeout=600)
        prepare_session(self.target_conn)
        tdb = self.direction.target_db_of
        for db in spec.databases:
            ensure_sentinel(self.target_conn, tdb(db))
        missing = [t.name for t in self.tables
                   if not scalar(self.target_conn, "SELECT COUNT(*) FROM information_schema.TABLES "
                                 "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s", (tdb(t.db), t.table))]
        if missing:
            raise CutoverError(f"tables {missing} are not on the target {self.target.name}: "
                               "the copy is incomplete; run the copy again", phase="cutover")
        moves = [Move(t.db, t.table, self.tomb(t.db)) for t in self.tables]
        sentinels = [(db, SENTINEL_TABLE) for db in spec.databases]
        if self.direction.passive is not None:
            self.passive_gate = PassiveGate(self.direction.passive, self.creds, [(t.db, t.table) for t in self.tables],
                                            tomb_suffix(spec.id), {db: self.tomb(db) for db in spec.databases}).open()
            self.passive_gate.install()
        # with a gated passive member each side renames its own tables (unlogged); else the partner follows
        self.fence = Fence(self.source, self.creds, moves, sentinels,
                           lock_wait_timeout=max(1.0, spec.options.freeze_budget_ms / 1000),
                           log_renames=self.passive_gate is None).open()

    def _check_partition_owns_shard(self, src: pymysql.connections.Connection) -> None:
        if len(self.spec.shards) != 1 or not self.spec.tables:
            raise CutoverError("a queue-partition move needs exactly one shard and its table(s)", phase="cutover")
        db = self.spec.databases[0]
        others = [r[0] for r in query(src, "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
                                           "AND TABLE_TYPE = 'BASE TABLE'", (db,))
                  if r[0] not in self.spec.tables and r[0] != SENTINEL_TABLE]
        busy = [t for t in others if scalar(src, f"SELECT EXISTS(SELECT 1 FROM {qualified(db, t)})")]
        if busy:
            raise CutoverError(
                f"queue partition {self.spec.queue}[{self.spec.partition}] does not own shard {db} alone: "
                f"tables {busy} hold rows and would be routed to the target by the flip; "
                "give the partition a shard of its own first", phase="cutover")

    def refresh_verified_gtid(self) -> str:
        """Make the last full check recent: re-check rows changed since it (outside the freeze)."""
        key = self.direction.verify_node
        node, _ = self.store.get_progress(self.spec.id, key)
        if (not node or not node.get("verified_gtid")) and key == VERIFY_NODE:
            verify_migration(self.config, self.spec.id, drainer=self.drainer)
            node, _ = self.store.get_progress(self.spec.id, key)
        if not node or not node.get("verified_gtid"):
            raise CutoverError(f"no verified position in {key}: verify first (`migrator verify ID`)",
                               phase=self.direction.label)
        since = node["verified_gtid"]
        src = mysql_connect(self.source, self.creds, read_timeout=600)
        try:
            prepare_session(src)
            head = binlog_pos(src)
            self.drainer.drain_to(head, 60)
            # the tail may have gone past head in some domain: verify up to where it really is
            head = getattr(self.drainer, "position", None) or head
            keys = changed_keys(self.source, self.creds, self.tables, since, head, timeout=60)
            for t in self.tables:
                check_rows(Side(src), Side(self.target_conn, self.direction.target_db_of),  # type: ignore[arg-type]
                           t, keys[t.name], repair=True)
        finally:
            src.close()
        node["verified_gtid"] = head
        node["at"] = time.time()
        self.store.put_progress(self.spec.id, key, node)
        # from here on, the keys changed are collected from the drain itself (the
        # tail applies them anyway), else read by a background binlog reader
        want = {(t.db, t.table): t.pk for t in self.tables}
        want.update({(db, SENTINEL_TABLE): ("token",) for db in self.spec.databases})
        collect = getattr(self.drainer, "collect", None)
        self.collecting = bool(collect and collect(want))
        if not self.collecting:
            self.tracker = ChangeTracker(self.source, self.creds, self.tables, head).start()
        self.verified_from = head
        return head

    def close(self) -> None:
        if self.tracker is not None:
            self.tracker.stop()
        if self.fence is not None:
            self.fence.close()
        if self.passive_gate is not None:
            if self.flipped_epoch is None:
                # never flipped (or undone): the passive member goes back to how it was
                try:
                    self.passive_gate.reopen()
                    self.passive_gate.remove()
                except Exception:  # noqa: BLE001 - the next attempt or abort removes them; never mask the cause
                    pass
            self.passive_gate.close_connection()
        if self.target_conn is not None:
            self.target_conn.close()

    # -- map edits -------------------------------------------------------------------------
    def freeze(self) -> None:
        cur = self.maps.read()
        new = cur
        for lo, hi in self.ranges:
            for s in range(lo, hi + 1):
                if cur.master_of(s) != self.direction.from_master:
                    raise CutoverError(f"shard {s} is on {cur.master_of(s)}, not {self.direction.from_master}: "
                                       "the map changed since the plan", phase=self.direction.label)
                if cur.is_frozen(s):
                    raise CutoverError(f"shard {s} is already frozen by someone else", phase="cutover")
            new = new.with_frozen(lo, hi)
        assert cur.epoch is not None
        stored = self.maps.cas(new, cur.epoch, reason=f"{self.direction.label} {self.spec.id}: freeze",
                               details={"migration": self.spec.id, "ranges": self.ranges})
        self.frozen_epoch = stored.epoch
        self.frozen_map = stored

    def flipped_map(self, frozen: ShardMap) -> ShardMap:
        new = frozen
        for lo, hi in self.ranges:
            new = new.reassign(lo, hi, self.direction.to_master, self.direction.to_slave).without_frozen(lo, hi)
        return new

    def flip_landed(self, smap: ShardMap) -> bool:
        return all(smap.master_of(s) == self.direction.to_master for s in self.spec.shards)

    def unfreeze(self) -> None:
        unfreeze_ranges(self.maps, self.ranges, reason=f"{self.direction.label} {self.spec.id}: abort, unfreeze")

    # -- undo --------------------------------------------------------------------------------
    def undo(self) -> None:
        """Before the flip: kill the pending RENAME, release the lock, unfreeze. Idempotent."""
        with self._undo_lock:
            if self._undone:
                return
            self._undone = True
            try:
                if self._pre_flipped and self.direction.undo_pre_flip is not None:
                    self.direction.undo_pre_flip(self)
                    self._pre_flipped = False
                if self.fence is not None:
                    self.fence.abort()
            finally:
                try:
                    if self.passive_gate is not None:
                        self.passive_gate.reopen()
                finally:
                    if self.frozen_epoch is not None:
                        self.unfreeze()

    # -- the freeze ----------------------------------------------------------------------------
    def run(self, hooks: CutoverHooks) -> CutoverResult:
        assert self.fence is not None and self.target_conn is not None
        node, _ = self.store.get_progress(self.spec.id, self.direction.verify_node)
        verified = (node or {}).get("verified_gtid") or ""
        suspect = (node or {}).get("suspect_chunks") or []
        budget_s = self.spec.options.freeze_budget_ms / 1000

        t = time.monotonic()
        self.freeze()
        # the freeze starts when the frozen map is committed: from here clients wait
        t = self.t_freeze = self._step("freeze_cas", t)
        self.watchdog = Watchdog(budget_s, self.undo).start()
        flipped = False
        try:
            if hooks.after_freeze:
                hooks.after_freeze(self)
            if self.passive_gate is not None:
                # the passive member's clients stop; its last writes reach the master's binlog before the fence
                passive_pos = self.passive_gate.close(self.remaining_s())
                t = self._step("passive_close", t)
                assert self.fence.c is not None
                if not wait_applied(self.fence.c, passive_pos, self.remaining_s()):
                    raise CutoverAborted(f"{self.source.name} did not apply the last writes of "
                                         f"{self.passive_gate.host.name} ({passive_pos}) within the freeze budget: "
                                         "its replication lags; retry when it has caught up", phase="cutover")
                t = self._step("passive_sync", t)
            self.fence.lock()
            self.fence.queue_rename(timeout=self.remaining_s())
            t = self._step("fence", t)
            if hooks.after_fence:
                hooks.after_fence(self)
            token = self.token = uuid.uuid4().hex
            a = self.fence.a
            assert a is not None
            with a.cursor() as cur:
                for db in self.spec.databases:
                    cur.execute(f"{TAG}INSERT INTO {qualified(db, SENTINEL_TABLE)} (token, migration_id) VALUES (%s, %s)",
                                (token, self.spec.id))
            self.fence_gtid = binlog_pos(a)
            t = self._step("sentinel", t)
            self.drainer.drain_to(self.fence_gtid, self.remaining_s())
            tdb = self.direction.target_db_of
            for db in self.spec.databases:
                if not scalar(self.target_conn, f"{TAG}SELECT COUNT(*) FROM {qualified(tdb(db), SENTINEL_TABLE)} "
                                                "WHERE token = %s", (token,)):
                    raise CutoverAborted(f"the sentinel row did not reach {db} on {self.target.name} after draining "
                                         f"to {self.fence_gtid}: catch-up is not applying; check it", phase="cutover")
            self.target_pos = binlog_pos(self.target_conn)  # where a reverse tail would start
            t = self._step("drain", t)
            self._t_compare = time.monotonic()
            self._compare_in_freeze(verified, suspect)
            t = self._step("compare", t)
            if hooks.before_flip:
                hooks.before_flip(self)
            if not self.watchdog.claim():
                raise FreezeBudgetExceeded(self._overrun_msg(), phase="cutover")
            if not self.fence.rename_waiting():
                raise CutoverAborted("the tombstone RENAME is no longer queued; not flipping", phase="cutover")
            if self.direction.pre_flip is not None:
                self._pre_flipped = True
                self.direction.pre_flip(self)
            flipped = self._flip()
            t = self._step("flip_cas", t)
            self.fence.release()
            t_end = self._step("release", t)
            freeze_ms = (t_end - self.t_freeze) * 1000
            if self.passive_gate is not None:
                # outside the freeze: the passive member stays closed by its gate meanwhile
                self.passive_gate.finish(self.fence_gtid, timeout=60)
                self._step("passive_finish", t_end)
        except FlipUnknown:
            # Neither undo nor claim success: let the RENAME run. If the flip
            # landed this is the finish; if not, writers get 1146 until
            # reconcile() renames the tables back. Never a split brain.
            self.fence.release()
            raise
        except BaseException as exc:
            if not flipped:
                if self.watchdog.claim() or not self.watchdog.fired:
                    self.undo()
                if self.watchdog.fired:
                    raise FreezeBudgetExceeded(self._overrun_msg(), phase="cutover") from None
            if isinstance(exc, (MigratorError, pymysql.err.MySQLError, *ZK_LOST)) and not flipped:
                if isinstance(exc, MigratorError):
                    raise
                raise CutoverAborted(f"cutover aborted before the flip, source still serves: {exc}",
                                     phase="cutover") from None
            raise
        if hooks.after_flip:
            hooks.after_flip(self)
        assert self.flipped_epoch is not None
        return CutoverResult(self.spec.id, round(freeze_ms, 2), self.flipped_epoch, self.fence_gtid,
                             self.target_pos, self.rows_checked, self.rows_repaired, dict(self.steps),
                             self.keys_from)

    def _overrun_msg(self) -> str:
        extra = f" (undo failed: {self.watchdog.error})" if self.watchdog and self.watchdog.error else ""
        return (f"the freeze overran its budget of {self.spec.options.freeze_budget_ms} ms and was undone{extra}; "
                "the source still serves. Let catch-up converge further (or raise freeze_budget_ms) and retry")

    def _compare_in_freeze(self, verified: str, suspect: list[dict[str, Any]]) -> None:
        assert self.fence is not None and self.fence.a is not None and self.target_conn is not None
        src, dst = Side(self.fence.a), Side(self.target_conn, self.direction.target_db_of)
        keys = None
        if self.collecting and self.verified_from == verified:
            got = self.drainer.collected()  # type: ignore[attr-defined]
            # trust the set only if the sentinel row the drain applied is in it
            if all((self.token,) in got.get((db, SENTINEL_TABLE), set()) for db in self.spec.databases):
                keys = {t.name: got.get((t.db, t.table), set()) for t in self.tables}
                self.keys_from = "drain"
        if keys is None and self.tracker is not None and self.tracker.since == verified:
            keys = self.tracker.keys_until(self.fence_gtid, self.remaining_s())
            self.keys_from = "reader"
        if keys is None and verified:
            keys = changed_keys(self.source, self.creds, self.tables, verified, self.fence_gtid,
                                timeout=self.remaining_s())
            self.keys_from = "binlog"
        if keys is None:
            keys = {t.name: set() for t in self.tables}
        self.steps["compare_keys"] = round((time.monotonic() - self._t_compare) * 1000, 2)
        by_name = {t.name: t for t in self.tables}
        for t in self.tables:
            ks = keys[t.name]
            if not ks:
                continue
            self.rows_checked += len(ks)
            diffs, fixed = check_rows(src, dst, t, ks, repair=True)
            self.rows_repaired += fixed
            if diffs and check_rows(src, dst, t, ks, repair=False)[0]:
                raise CutoverAborted(f"{t.name}: rows still differ after re-copy inside the freeze", phase="cutover")
        for ch in suspect:
            t = by_name.get(ch["table"])
            if t is None:
                continue
            lo = tuple(ch["lo"]) if ch.get("lo") is not None else None
            hi = tuple(ch["hi"]) if ch.get("hi") is not None else None
            diffs, fixed = check_chunk(src, dst, t, lo, hi, repair=True)
            self.rows_repaired += fixed
            if diffs and check_chunk(src, dst, t, lo, hi, repair=False)[0]:
                raise CutoverAborted(f"{t.name}: chunk {lo}..{hi} still differs after re-copy", phase="cutover")

    def _flip(self) -> bool:
        """The one CAS. Returns True when the flip landed; raises (after undo by the caller) if not."""
        assert self.frozen_epoch is not None and self.frozen_map is not None
        # never re-read: we flip exactly the map we froze, on its epoch
        new = self.flipped_map(self.frozen_map)
        try:
            stored = self.maps.cas(new, self.frozen_epoch, reason=f"{self.direction.label} {self.spec.id}: flip to "
                                   f"{self.direction.to_master}/{self.direction.to_slave}",
                                   details={"migration": self.spec.id, "ranges": self.ranges,
                                            "fence_gtid": self.fence_gtid})
            self.flipped_epoch = stored.epoch
            return True
        except ShardMapConflict as exc:
            raise CutoverAborted(f"the shard map changed during the freeze (epoch {self.frozen_epoch} expected): "
                                 f"{exc.message} The flip was not made and the source still serves; "
                                 "look at `migrator topology history`, then retry the cutover", phase="cutover") from None
        except ZK_LOST:
            try:
                smap = reread_map(self.maps)
            except ZK_LOST:
                raise FlipUnknown(
                    "lost ZooKeeper during the flip and could not read the map back; the source tables are "
                    "being released to the tombstones (safe either way); run `migrator cutover ID` again when "
                    "ZooKeeper is back to finish or undo", phase="cutover") from None
            if self.flip_landed(smap):
                self.flipped_epoch = smap.epoch
                return True
            raise CutoverAborted("lost ZooKeeper during the flip and the flip did not land; the fence was undone "
                                 "and the source still serves; retry the cutover", phase="cutover") from None


def reread_map(maps: ShardMapStore, timeout: float = 60.0) -> ShardMap:
    """Read the map after a connection loss, waiting for the session to come back."""
    for attempt in Retrying(stop=stop_after_delay(timeout), wait=wait_fixed(0.2),
                            retry=retry_if_exception_type(ZK_LOST), reraise=True):
        with attempt:
            return maps.read()
    raise AssertionError("unreachable")


def unfreeze_ranges(maps: ShardMapStore, ranges: list[tuple[int, int]], *, reason: str, attempts: int = 5) -> None:
    """Remove our frozen ranges. Re-reads on a conflict: it only undoes our own freeze."""
    for _ in range(attempts):
        cur = reread_map(maps)
        new = cur
        for lo, hi in ranges:
            new = new.without_frozen(lo, hi)
        if new.frozen == cur.frozen:
            return
        assert cur.epoch is not None
        try:
            maps.cas(new, cur.epoch, reason=reason)
            return
        except ShardMapConflict:
            continue
        except ZK_LOST:
            continue
    raise CutoverError(f"could not unfreeze {ranges} after {attempts} tries: unfreeze them with "
                       "`migrator topology` by hand", phase="cutover")


# -- the command ---------------------------------------------------------------------------------

def predict_freeze_ms(run: CutoverRun) -> float:
    """Time a drain to the current source head and add the fixed cost of a freeze."""
    conn = mysql_connect(run.source, run.creds)
    try:
        head = binlog_pos(conn)
    finally:
        conn.close()
    t0 = time.monotonic()
    run.drainer.drain_to(head, 30)
    return (time.monotonic() - t0) * 1000 + FIXED_FREEZE_MS


def cutover(config: Config, migration_id: str, *, drainer: Drainer | None = None,
            hooks: CutoverHooks | None = None, now: Callable[[], float] = time.time) -> CutoverResult:
    """Freeze, fence, drain to the sentinel, compare, flip and release (see the module doc).

    Raises :class:`NotConverged` before anything is touched when the migration
    is not ready, and :class:`CutoverAborted` / :class:`FreezeBudgetExceeded`
    when it stopped before the flip (source serving, ranges unfrozen).
    """
    creds = load_credentials(config)
    hooks = hooks or CutoverHooks()
    with zk_mod.connect(config, creds) as zk:
        store = MigrationStore(zk)
        spec = store.spec(migration_id)
        state, _ = store.state(migration_id)
        if state.phase == Phase.CUTOVER:
            reconcile(config, migration_id, zk=zk)
            state, _ = store.state(migration_id)
            if state.phase == Phase.DONE:
                raise CutoverError(f"migration {migration_id} had already flipped; it is done", phase="cutover")
        if state.phase != Phase.CONVERGED:
            raise NotConverged(f"migration {migration_id} is {state.phase.value}, not converged: "
                               "wait for catch-up to converge (`migrator status ID`)", phase="cutover")
        own_drainer = drainer is None
        drainer = drainer or default_drainer(config, migration_id, state.phase)
        if drainer is None:
            raise CutoverError("no catch-up available to drain the binlog (migrator.engine.catch_up.passes is missing)",
                               phase="cutover")
        run = CutoverRun(config, zk, creds, spec, drainer)
        budget = spec.options.freeze_budget_ms
        try:
            run.prepare()
            predicted = state.predicted_freeze_ms
            if predicted is None:
                predicted = predict_freeze_ms(run)
            if predicted > budget:
                raise FreezeBudgetExceeded(
                    f"predicted freeze {predicted:.0f} ms exceeds the budget of {budget} ms: let catch-up converge "
                    "further (lower write load) or raise freeze_budget_ms", phase="cutover")
            run.refresh_verified_gtid()
            store.set_phase(migration_id, Phase.CUTOVER, predicted_freeze_ms=predicted)
            try:
                result = run.run(hooks)
            except FlipUnknown:
                raise  # phase stays "cutover": the next call reconciles
            except BaseException as exc:
                msg = exc.message if isinstance(exc, MigratorError) else f"{type(exc).__name__}: {exc}"
                if run.flipped_epoch is not None:
                    # flipped, but the release did not complete: reconcile finishes it
                    store.set_phase(migration_id, Phase.CUTOVER, error=f"flipped; release failed: {msg}")
                    raise CutoverError(f"the ranges flipped to {spec.target_master} but releasing the fence failed "
                                       f"({msg}); run `migrator cutover {migration_id}` again to finish",
                                       phase="cutover") from None
                store.set_phase(migration_id, Phase.CONVERGED, error=f"cutover aborted: {msg}")
                raise
            retention = spec.options.retention_s
            # the flip landed: record it even across a ZooKeeper session loss (each write is idempotent)
            for attempt in Retrying(stop=stop_after_delay(60), wait=wait_fixed(0.2),
                                    retry=retry_if_exception_type(ZK_LOST), reraise=True):
                with attempt:
                    store.set_phase(migration_id, Phase.DONE, freeze_ms=result.freeze_ms,
                                    flipped_epoch=result.flipped_epoch, tombstone_db_suffix=tomb_suffix(migration_id),
                                    cleanup_after=now() + retention)
                    store.put_progress(migration_id, "cutover", result.to_dict())
                    _release_maintenance_pause(zk, spec)
            return result
        finally:
            run.close()
            if own_drainer and hasattr(drainer, "close"):
                drainer.close()


def _release_maintenance_pause(zk: ZK, spec: Spec) -> None:
    """Partition maintenance may run again on the moved shards (now on the target)."""
    try:
        from migrator.engine.plan import release_maintenance_pause
    except ImportError:
        return
    release_maintenance_pause(zk, spec)


# -- an interrupted cutover ---------------------------------------------------------------------

def reconcile(config: Config, migration_id: str, *, zk: ZK | None = None) -> Phase:
    """Settle a cutover that died midway (phase ``cutover``) wholly before or after the flip.

    The flip is one CAS, so the map says which: if our shards are on the target,
    finish (tables to the tombstones, unfreeze, phase done); otherwise undo
    (tables back from the tombstones, unfreeze, phase converged).
    """
    creds = load_credentials(config)
    own = zk is None
    zk = zk or zk_mod.connect(config, creds)
    try:
        store = MigrationStore(zk)
        spec = store.spec(migration_id)
        state, _ = store.state(migration_id)
        if state.phase != Phase.CUTOVER:
            return state.phase
        maps = ShardMapStore(zk)
        smap = reread_map(maps)
        reg = HostRegistry(zk)
        source = reg.get(spec.source_master)
        passive = passive_of(reg, spec.source_master, spec.source_slave, spec)
        landed = all(smap.master_of(s) == spec.target_master for s in spec.shards)
        moving = _settle_source(source, creds, spec, landed=landed, logged=passive is None)
        if passive is not None and moving:
            gate = PassiveGate(passive, creds, moving, tomb_suffix(migration_id),
                               {db: tomb_db(migration_id, db) for db in spec.databases}).open()
            try:
                if landed:
                    if gate.gate_exists():
                        gate.close(timeout=30)
                    with mysql_connect(source, creds) as conn:
                        head = binlog_pos(conn)
                    gate.finish(head, timeout=120)
                else:
                    gate.reopen()
                    gate.remove()
            finally:
                gate.close_connection()
        if not landed and passive is None:
            skip_tombstone_renames(config, zk, creds, spec, source)
        unfreeze_ranges(maps, spec.ranges(), reason=f"cutover {migration_id}: reconcile after interruption")
        if landed:
            store.set_phase(migration_id, Phase.DONE, flipped_epoch=smap.epoch,
                            tombstone_db_suffix=tomb_suffix(migration_id),
                            cleanup_after=time.time() + spec.options.retention_s,
                            error="cutover was interrupted after the flip; finished by reconcile")
            _release_maintenance_pause(zk, spec)
            return Phase.DONE
        store.set_phase(migration_id, Phase.CONVERGED,
                        error="cutover was interrupted before the flip; undone by reconcile")
        return Phase.CONVERGED
    finally:
        if own:
            zk.close()


def _settle_source(source: Host, creds: Credentials, spec: Spec, *, landed: bool,
                   logged: bool) -> list[tuple[str, str]]:
    """Put the source master's moving tables wholly on one side of the flip; returns them all.

    Landed: the tables still live go to the tombstones with the fence's own
    protocol (a stale writer may still be at them). Not landed: tombstones go
    back to their live names (nobody writes a tombstone).
    """
    moving: list[tuple[str, str]] = []
    todo_fence: list[Move] = []
    with mysql_connect(source, creds) as conn:
        with conn.cursor() as cur:
            for db in spec.databases:  # binlogged: the partner gets the tombstone schemas too
                cur.execute(f"{TAG}CREATE DATABASE IF NOT EXISTS {ident(tomb_db(spec.id, db))}")
            if not logged:
                cur.execute(f"{TAG}SET SESSION sql_log_bin = 0")
        for db in spec.databases:
            tomb = tomb_db(spec.id, db)
            live = {r[0] for r in query(conn, "SELECT TABLE_NAME FROM information_schema.TABLES "
                                              "WHERE TABLE_SCHEMA = %s", (db,))}
            dead = {r[0] for r in query(conn, "SELECT TABLE_NAME FROM information_schema.TABLES "
                                              "WHERE TABLE_SCHEMA = %s", (tomb,))}
            names = list(spec.tables) or sorted((live | dead) - {SENTINEL_TABLE})
            moving += [(db, t) for t in names]
            if landed:
                todo_fence += [Move(db, t, tomb) for t in names if t in live and t not in dead]
            else:
                back = [t for t in names if t in dead and t not in live]
                if back:
                    with conn.cursor() as cur:
                        cur.execute(f"{TAG}RENAME TABLE " + ", ".join(
                            f"{qualified(tomb, t)} TO {qualified(db, t)}" for t in back))
    if todo_fence:
        fence = Fence(source, creds, todo_fence, log_renames=logged, lock_wait_timeout=30).open()
        try:
            fence.lock()
            fence.queue_rename(timeout=30)
            fence.release(timeout=60)
        except BaseException:
            fence.abort()
            raise
        finally:
            fence.close()
    return moving


def skip_tombstone_renames(config: Config, zk: ZK, creds: Credentials, spec: Spec, source: Host) -> str | None:
    """Step catch-up over the fence's RENAMEs (to the tombstones and back) of an undone cutover.

    Only for a cutover whose renames were binlogged (no passive gate,
    ``fence_passive=false``); with a gate they are not, and catch-up never sees them.

    Catch-up refuses a RENAME of a moving table, rightly in general; these
    ones changed nothing (no client could write the tables while they had
    the tombstone names). So: drain up to just before the first of them, then
    move the checkpoint to just after the last. Returns the new checkpoint, or
    None when there was nothing to skip.
    """
    from migrator.engine import catch_up
    from migrator.engine.catch_up.streamer import BinlogStreamer

    store = MigrationStore(zk)
    node, _ = store.get_progress(spec.id, catch_up.CHECKPOINT_KEY)
    if not node or not node.get("gtid"):
        return None
    marker = f"_tomb_{tomb_suffix(spec.id)}_"
    with mysql_connect(source, creds) as conn:
        head = GtidPos.parse(binlog_pos(conn))
    first: GtidPos | None = None
    last: GtidPos | None = None
    with BinlogStreamer(source, creds, start=GtidPos.parse(node["gtid"]), schemas=spec.databases) as st:
        for txn in st.transactions(head, deadline=time.monotonic() + 120):
            if txn is None:
                continue
            if any("RENAME TABLE" in x.query.upper() and marker in x.query for x in txn.statements):
                if first is None:
                    first = st.position_before(txn)
                last = st.position
    if first is None or last is None:
        return None
    drainer = CatchUpDrainer(config, spec.id)
    try:
        drainer.drain_to(str(first), 120)
    finally:
        drainer.close()
    node, version = store.get_progress(spec.id, catch_up.CHECKPOINT_KEY)
    assert node is not None
    node["gtid"] = str(last)
    node["skipped_tombstone_renames"] = {"from": str(first), "to": str(last), "at": time.time()}
    store.put_progress(spec.id, catch_up.CHECKPOINT_KEY, node, version=version)
    return str(last)
