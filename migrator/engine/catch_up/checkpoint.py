"""The catch-up checkpoint of a migration: where its binlog tail resumes.

The resume contract: the ``catchup`` progress node of the migration record
(ZooKeeper) holds ``gtid``, and every transaction up to it is applied on the
target; ``state`` says the same per (domain, server) (what decides whether a
target is reached in every GTID layout: :mod:`migrator.fleet.gtid`). It is
written by compare-and-set after each committed batch, so a second catch-up
worker on the same migration loses a CAS and steps aside
(:class:`CatchUpConflict`). Before any of that, a tail takes the migration's
applier lock (:func:`applier_lock`); the lock's node is its claim
(:class:`ApplierClaim`): its checkpoint writes commit only while that node
exists (one ZooKeeper transaction with a check of it), and the node's czxid is
the fencing token every write of the tail to the target carries
(:class:`~migrator.engine.catch_up.lanes.Epoch`). A tail whose session expired
while it lived on can then neither land rows nor move the checkpoint
(:class:`~migrator.engine.catch_up.tailer.StaleApplier`). Before the first pass
there is no ``gtid`` yet: the tail starts at the earliest ``start_gtid`` that
the copy recorded for its tables (:func:`copy_start`): the one read first, told
by the ``start_state`` recorded beside each (per-domain minima would pick a
later position when two servers share a domain). Replaying from any earlier
position is harmless because apply is idempotent by key.

:func:`open_tailer` is how every user gets a tailer for a migration: catch-up
passes, verify's drains and the cutover's drain under its fence.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, NamedTuple

from kazoo.exceptions import BadVersionError, ConnectionLoss, LockTimeout, SessionExpiredError

from migrator.engine.catch_up.lanes import Epoch
from migrator.engine.catch_up.tailer import CatchUpConflict, CatchUpError, StaleApplier, Tailer, stale_message
from migrator.engine.migration import GuardLost, MigrationStore, Node, Spec
from migrator.engine.records import CatchupNode, TableProgress, VerifyNode
from migrator.fleet import config as config_mod
from migrator.fleet import zk as zk_mod
from migrator.fleet.config import Config, Credentials
from migrator.fleet.gtid import GtidPos, GtidState, earliest
from migrator.fleet.model import Host
from migrator.fleet.shard_map import HostRegistry

CHECKPOINT_KEY = Node.CATCHUP
COPY_PREFIX = "copy"


#: where the applier locks live: ``<root>/appliers/<migration id>[-rollback]``
APPLIERS = "appliers"


@dataclass(frozen=True)
class ApplierClaim:
    """What a tail holds while it applies: its applier-lock node and the fencing token from it."""

    #: the applier: the migration id, or ``<id>-rollback``
    key: str
    #: the lock's node (ephemeral, of the tail's session): the guard of its checkpoint writes
    node: str
    #: the node's czxid: ZooKeeper's transaction id at its creation, larger for every later holder
    token: int

    def epoch(self) -> Epoch:
        return Epoch(self.key, self.token, zk_mod.holder())

    def lost(self, detail: str) -> StaleApplier:
        return StaleApplier(stale_message(self.key, "the target", detail))


def applier_claim(zk: zk_mod.ZK, lock: Any, key: str) -> ApplierClaim:
    """The claim of a held applier lock (its node and token)."""
    node = f"{lock.path}/{lock.node}"
    stat = zk.client.exists(node)
    if stat is None:
        raise CatchUpConflict(f"{key}: the applier lock's node {node} vanished right after it was taken "
                              "(the ZooKeeper session expired?); try again")
    return ApplierClaim(key, node, stat.czxid)


def applier_lock(zk: zk_mod.ZK, key: str, what: str, timeout: float = 30.0) -> Any:
    """Hold the one right to apply a migration's binlog to its target (``key``: the migration id,
    or ``<id>-rollback`` for the reverse tail) before reading the checkpoint; returns the lock.

    Two tails applying at once interleave row images: the older images of one can land after
    the newer ones of the other, and a row on the target loses an acknowledged write (seen: two
    pipeline chains after a Redis wipe, each verifying with its own tail). The checkpoint's
    compare-and-set noticed only after the rows were written; this lock is taken first. A
    holder that died lets go when its ZooKeeper session ends (``zookeeper.session_timeout``,
    10 s by default), so waiting ``timeout`` covers it; after it, :class:`CatchUpConflict`.
    """
    lock = zk.client.Lock(zk.path(APPLIERS, key), identifier=f"{zk_mod.holder()} {what}")
    try:
        got = lock.acquire(timeout=timeout)
    except LockTimeout:
        got = False
    if not got:
        holders = ", ".join(str(x) for x in lock.contenders()) or "?"
        raise CatchUpConflict(f"{key}: another tail applies this migration's binlog ({holders}) and kept it "
                              f"for {timeout:.0f}s; only one applies at a time: wait for it, or stop it")
    return lock


class Checkpoint:
    """The ``catchup`` progress node of one migration, written by compare-and-set.

    Holds ``gtid`` (every transaction up to it is applied on the target), the
    pass table, and the convergence verdict. A lost CAS means a second
    catch-up worker writes it too: that raises :class:`CatchUpConflict`.
    """

    def __init__(self, store: MigrationStore, migration_id: str, claim: ApplierClaim | None = None):
        self.store = store
        self.migration_id = migration_id
        #: with a claim, every write commits only while the applier lock's node exists
        self.claim = claim
        data, version = store.get_progress(migration_id, CHECKPOINT_KEY)
        self.record = CatchupNode.parse(data or {"gtid": None, "passes": []})
        self.version = version

    @property
    def gtid(self) -> GtidPos | None:
        g = self.record.gtid
        return None if g is None else GtidPos.parse(g)

    def save(self, **fields: Any) -> None:
        """Change ``fields`` of the record and write it (a CAS on the version read or last written)."""
        data = {**self.record.dump(), **fields, "updated_at": time.time()}
        self.record = CatchupNode.parse(data)
        try:
            self.version = self.store.put_progress(self.migration_id, CHECKPOINT_KEY, data, version=self.version,
                                                   guard=self.claim.node if self.claim is not None else None)
        except GuardLost:
            assert self.claim is not None
            raise self.claim.lost("its applier lock is gone, so the checkpoint was not written") from None
        except SessionExpiredError:
            if self.claim is None:
                raise
            raise self.claim.lost("its ZooKeeper session expired, and its applier lock with it") from None
        except ConnectionLoss:
            if self.claim is None:
                raise
            # unanswered: whether its lock lives on is unknown, so this tail stops (a resume takes over)
            raise self.claim.lost("ZooKeeper did not answer its checkpoint write (connection lost), so it "
                                  "cannot show it still holds its applier lock") from None
        except BadVersionError:
            raise CatchUpConflict(
                f"migration {self.migration_id}: the catch-up checkpoint was written by someone else meanwhile; "
                "only one catch-up worker may run per migration (check `rq info` and stop the other one)"
            ) from None

    @property
    def state(self) -> str:
        return str(self.record.state or "")

    def set_gtid(self, pos: GtidPos, state: GtidState | str | None = None) -> None:
        if state is None:
            self.save(gtid=str(pos))
        else:
            self.save(gtid=str(pos), state=str(state))


def copy_start(store: MigrationStore, migration_id: str) -> CopyStart:
    """The earliest ``start_gtid`` of the copy's table nodes, and those still not done. Raises when the
    copy recorded nothing.

    Each start was read on the source when its table's copy began, with ``start_state`` (the source's
    ``@@gtid_binlog_state``, read just before). States read at different times on one binlog are ordered,
    so the earliest start is the one whose state every other reaches: in every GTID layout. Positions
    alone are ordered per domain only with one writer per domain; nodes without a state (written before
    states were recorded) fall back to the per-domain minimum."""
    keys = store.progress_keys(migration_id, COPY_PREFIX)
    starts, unfinished = [], []
    for key in keys:
        node = TableProgress.parse(store.get_progress(migration_id, f"{COPY_PREFIX}/{key}")[0])
        if node.start_gtid is None:
            unfinished.append(key)
            continue
        starts.append((GtidPos.parse(node.start_gtid), node.start_state))
        if not node.done:
            unfinished.append(key)
    if not starts:
        raise CatchUpError(
            f"migration {migration_id}: the copy recorded no start position (no copy/<db>.<table> node with "
            "start_gtid); run the copy first (`migrator copy ID`)"
        )
    if all(st is not None for _, st in starts):
        first = min(starts, key=lambda s: _state_rank(GtidState.parse(s[1]), [GtidState.parse(x) for _, x in starts]))
        return CopyStart(first[0], unfinished, str(first[1]))
    return CopyStart(earliest(p for p, _ in starts), unfinished, "")


class CopyStart(NamedTuple):
    """Where catch-up starts: the copy's earliest start, the tables not yet copied, and the source's
    binlog state read with that start (empty for nodes written before states were recorded). The state
    says which server's transactions the copy already holds when one GTID domain is shared by several
    servers: without it a tail cannot tell that a partner's transaction written before the copy is
    applied, and waits for it forever."""

    gtid: GtidPos
    unfinished: list[str]
    state: str


def _state_rank(state: GtidState, all_states: list[GtidState]) -> int:
    """How many of ``all_states`` this one is not at or before (0 for the earliest)."""
    return sum(1 for other in all_states if not other.reaches(state))


def _hosts(zk: zk_mod.ZK, spec: Spec) -> tuple[Host, Host]:
    reg = HostRegistry(zk)
    return reg.get(spec.source_master), reg.get(spec.target_master)


def moving_tables(spec: Spec) -> set[str] | None:
    """Table filter of a migration: the queue partition's tables, or None (whole shards)."""
    if spec.kind == "queue_partition":
        if not spec.tables:
            raise CatchUpError(f"migration {spec.id}: a queue_partition migration names no tables")
        return set(spec.tables)
    return set(spec.tables) if spec.tables else None


class Session:
    """ZooKeeper + credentials for one call; closes what it opened."""

    def __init__(self, config_or_zk: Config | zk_mod.ZK, credentials: Credentials | None):
        self.own_zk = False
        if isinstance(config_or_zk, zk_mod.ZK):
            self.zk = config_or_zk
            creds = credentials or config_or_zk.credentials
        else:
            creds = credentials or config_mod.load_credentials(config_or_zk)
            self.zk = zk_mod.connect(config_or_zk, creds)
            self.own_zk = True
        if creds is None:
            raise CatchUpError("no credentials: pass them, or a ZK connected with them")
        self.credentials: Credentials = creds
        self.store = MigrationStore(self.zk)

    def close(self) -> None:
        if self.own_zk:
            self.zk.close()


def open_tailer(
    config_or_zk: Config | zk_mod.ZK,
    migration_id: str,
    *,
    credentials: Credentials | None = None,
    extra_tables: tuple[str, ...] = (),
) -> Tailer:
    """A :class:`Tailer` for a migration, from its checkpoint (or the copy's
    earliest start), checkpointing into its ``catchup`` node. The cutover opens
    one before its freeze and calls :meth:`Tailer.drain_to` under the fence.
    The caller closes it (``tailer.close()``; also closes its ZooKeeper
    session when it opened one). ``extra_tables``: more table names to follow when
    the migration moves only some tables (the cutover's sentinel)."""
    sess = Session(config_or_zk, credentials)
    lock = None
    try:
        lock = applier_lock(sess.zk, migration_id, "catch-up")  # before the checkpoint and the spec are read
        claim = applier_claim(sess.zk, lock, migration_id)
        # read under the lock: a hand-over (migrator.ops.batched.handover) takes the same lock to move shards out of
        # a batched migration's spec, so a spec read before it could name shards another tail now applies
        spec = sess.store.spec(migration_id)
        ckpt = Checkpoint(sess.store, migration_id, claim)
        start = ckpt.gtid
        start_state = ckpt.state
        if start is None:
            start, unfinished, start_state = copy_start(sess.store, migration_id)
            if unfinished:
                raise CatchUpError(
                    f"migration {migration_id}: the copy of {', '.join(unfinished[:5])} is not finished; "
                    "catch-up starts once every table is copied"
                )
            ckpt.save(gtid=str(start), start_gtid=str(start), state=start_state, source=spec.source_master,
                      target=spec.target_master, passes=[p.dump() for p in ckpt.record.passes])
        source, target = _hosts(sess.zk, spec)
        tables = moving_tables(spec)
        if tables is not None:
            tables |= set(extra_tables)
        # from the position the last full check proved equal on, the source's own rows events apply
        # strictly (the fast path, migrator.engine.catch_up.fast); before it, the idempotent row path
        # (rows a check re-copied from the live source, or left suspect, may be ahead of the tail: a window
        # the strict apply refuses is written again by key, migrator.engine.catch_up.fast.FastApplier.add)
        verified = VerifyNode.parse(sess.store.get_progress(migration_id, Node.VERIFY)[0]).verified_gtid
        tailer = Tailer(
            source, target, sess.credentials, start=start, start_state=start_state,
            schema_map={db: db for db in spec.databases}, tables=tables,
            epoch=claim.epoch(), fast_from=verified or None, path=apply_path_from_env(),
        )
        tailer.on_checkpoint = lambda pos: ckpt.set_gtid(pos, tailer.applied_state)
    except BaseException:
        _release(lock)
        sess.close()
        raise
    tailer.checkpoint_node = ckpt  # type: ignore[attr-defined]
    tailer.spec = spec  # type: ignore[attr-defined]
    inner_close = tailer.close

    def close() -> None:
        try:
            inner_close()
        finally:
            _release(lock)
            sess.close()

    tailer.close = close  # type: ignore[method-assign]
    return tailer


#: ``row`` keeps every tail of this process on the row path; ``auto`` (the default) lets it take the fast
#: path from the verified position on (migrator.engine.catch_up.fast)
APPLY_PATH_ENV = "MIGRATOR_APPLY_PATH"


def apply_path_from_env() -> str:
    raw = os.environ.get(APPLY_PATH_ENV, "").strip().lower() or "auto"
    if raw not in ("auto", "row"):
        raise CatchUpError(f"{APPLY_PATH_ENV}={raw!r}: set it to auto (the fast path once verified) or row")
    return raw


def _release(lock: Any) -> None:
    if lock is not None:
        try:
            lock.release()
        except Exception:  # noqa: BLE001 - a lost session released it already
            pass
