"""A batched migration hands a batch of its shards to a migration of their own, which cuts them over.

A move of more tables than one rename fence takes (a host: 512 shards x 5
tables) is one migration with ``Spec.batched`` set: it is preflighted, copied,
tailed and verified once, for every shard. It never cuts over itself. Once it
has converged and been verified, its pipeline (:mod:`.run`)
hands its shards over one batch at a time, each batch sized to the freeze
budget, to a *batch migration* (``<id>-b000``, ``-b001``, ...) that starts
converged and runs the normal rename-fenced cutover: the freeze, the fence on
both members of the source pair, the drain, the compare and the flip of only
the batch's ranges, its own lease, settler, reconcile, rollback and cleanup.
Between two batches the map is valid with part of the ranges moved.

What :func:`hand_over` guarantees, and how:

* **No row is applied twice by two tails.** It holds the batched migration's
  applier lock (:func:`~migrator.engine.catch_up.checkpoint.applier_lock`), so
  none of its tails runs, and raises that applier's fencing token on the target
  (:class:`~migrator.engine.catch_up.lanes.Epoch`), so a tail of it that outlived
  its ZooKeeper session can no longer land a row. From then on the batch's
  rows are applied only by the batch migration's own tail.
* **Nothing between the two tails is lost.** The batch starts from the batched
  migration's checkpoint, read under the lock: every source transaction up to
  it is applied for the batch's tables, and the batch's tail resumes there.
* **One ZooKeeper transaction** (:meth:`MigrationStore.hand_over`) makes the
  batch's record (spec, state ``converged``, checkpoint, the full check's
  result for its tables), gives it each shard's lock, and takes the shards out
  of the batched migration's spec: its later passes, its verify and an abort of
  it (which drops the target copies) no longer see them. It commits only while
  the applier lock's node, the checkpoint's version and the batched migration's
  state are as read.
* **A batch's re-checks read only binlog of its own life.** A batch inherits
  the batched migration's ``verified_gtid`` and its cutover first re-checks
  every row changed since then. Verified once, a host-sized move under writes
  would hand every batch the same, ever older, position: hours of a host's
  binlog to read before the first freeze. So right before every hand-over the
  batched migration drains its tail to the head and refreshes its own check
  (:func:`refresh_parent`, the cutover's re-check run on the shards it still
  holds, in one round): its ``verified_gtid`` is then its checkpoint, which the
  batch starts from. The batch's record says so (``verify.from_start``: the
  inherited position reaches the checkpoint handed; ``window_from``), and the
  batched migration's own re-checks read only what came since the hand-over
  before: one batch's life each.
* **Queue maintenance resumes on every shard once its batch ends.** The same
  transaction gives the batch the maintenance pause node of each of its shards
  (the node's data becomes the batch's id, at the version read), so the batch's
  flip, reconcile, abort or cleanup releases it as any migration's; the batched
  migration releases whatever pause node still carries its id when it ends
  (``cleaned`` or aborted).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from migrator.engine.catch_up.checkpoint import applier_claim, applier_lock
from migrator.engine.cutover import recheck
from migrator.engine.cutover.direction import forward
from migrator.engine.migration import MigrationError, MigrationStore, Node, Phase, PhaseConflict, Spec, State
from migrator.engine.plan import maintenance_pauses
from migrator.engine.records import CatchupNode, VerifyNode
from migrator.engine.verify.checksums import TableInfo, moving_tables, prepare_session, table_info
from migrator.engine.verify.drainers import CatchUpDrainer
from migrator.fleet.config import Config, Credentials
from migrator.fleet.gtid import GtidState
from migrator.fleet.ids import shard_db
from migrator.fleet.mysql import connect as mysql_connect
from migrator.fleet.shard_map import HostRegistry, actor
from migrator.fleet.zk import ZK


class HandOverError(MigrationError):
    component = "handover"


def batch_id(parent_id: str, n: int) -> str:
    """The id of the ``n``-th batch of a batched migration."""
    return f"{parent_id}-b{n:03d}"


def hand_over(zk: ZK, creds: Credentials, parent_id: str, shards: Sequence[int], *, tables: int = 0) -> Spec:
    """Give ``shards`` of the converged batched migration ``parent_id`` to a new batch migration, which starts
    converged from the parent's checkpoint; returns the batch's spec. ``tables``: how many tables the
    batch holds (kept in the parent's state, for sizing the batches after it)."""
    spec = MigrationStore(zk).spec(parent_id)
    if not spec.batched:
        raise HandOverError(f"migration {parent_id} is not batched: it cuts over itself (`migrator cutover ID`)")
    return _give(zk, creds, spec, shards, tables, parent_id)


def split_batch(zk: ZK, creds: Credentials, bid: str, shards: Sequence[int], *, tables: int = 0) -> Spec:
    """Give ``shards`` of the converged batch ``bid`` to a new batch of the same batched migration, cut over
    right after it; returns the new batch's spec. A batch whose freeze ran over the budget is made smaller
    this way (:func:`migrator.ops.batched.run.step`): a batch is sized before it is measured, and a busier
    moment than the one its size was learnt from would otherwise keep it overrunning at every retry.
    Everything :func:`hand_over` guarantees holds, with the batch as the giver: its applier lock and fencing
    token, its checkpoint and its check go with the shards, in one ZooKeeper transaction that also lists the
    new batch in the batched migration (after ``bid``: one freeze at a time, in the order of the shards).
    ``tables``: how many tables move (the batched migration's counts of both batches follow)."""
    spec = MigrationStore(zk).spec(bid)
    if spec.batched or spec.parent is None:
        raise HandOverError(f"migration {bid} is not a batch of a batched migration: nothing to split it into")
    return _give(zk, creds, spec, shards, tables, spec.parent)


def _give(zk: ZK, creds: Credentials, spec: Spec, shards: Sequence[int], tables: int, batched_id: str) -> Spec:
    """Move ``shards`` of the converged migration ``spec`` (the batched migration ``batched_id`` itself, or a
    batch of it) to a new batch of ``batched_id``, which starts converged from ``spec``'s checkpoint."""
    store = MigrationStore(zk)
    giver = spec.id
    want = sorted(set(shards))
    if not want or not set(want) <= set(spec.shards):
        raise HandOverError(f"migration {giver} does not hold shards "
                            f"{sorted(set(want) - set(spec.shards)) or want}: nothing handed over")
    if giver != batched_id and set(want) == set(spec.shards):
        raise HandOverError(f"batch {giver} would give away every shard it holds: nothing handed over")
    lock = applier_lock(zk, giver, "hand-over")  # no tail of the giver applies while we hold it
    try:
        claim = applier_claim(zk, lock, giver)
        target = HostRegistry(zk).get(spec.target_master)
        with mysql_connect(target, creds) as conn:
            # waits for the lane transactions of any older tail of the giver still in flight, and makes
            # every later one of them fail: from here the batch's rows are applied by the batch alone
            claim.epoch().claim(conn)
        st, version = store.state(giver)
        if st.phase != Phase.CONVERGED:
            raise PhaseConflict(f"migration {giver} is {st.phase.value}, not converged: batches are handed "
                                "their shards only once it has caught up and been verified")
        ckpt, ck_version = store.get_progress(giver, Node.CATCHUP)
        gtid = CatchupNode.parse(ckpt).gtid
        if not gtid or ck_version is None:
            raise HandOverError(f"migration {giver} has no catch-up checkpoint: run a pass first")
        verify, _ = store.get_progress(giver, Node.VERIFY)
        verified = VerifyNode.parse(verify)
        if not verified.verified_gtid:
            raise HandOverError(f"migration {giver} has not been verified: verify it before its batches")
        batches = st.batches if giver == batched_id else store.state(batched_id)[0].batches
        cid = batch_id(batched_id, len(batches))
        child = spec.model_copy(update={"id": cid, "shards": tuple(want), "batched": False, "parent": batched_id,
                                        "created_at": time.time()})
        now = time.time()
        cstate = State(phase=Phase.CONVERGED, autopilot=st.autopilot, postpone_cutover=st.postpone_cutover,
                       history=[{"who": actor(), "when": now, "from": None, "to": Phase.CONVERGED.value,
                                 "handed_by": giver}])
        dbs = {shard_db(s) for s in want}
        progress: dict[str, dict[str, Any]] = {
            Node.CATCHUP: {**ckpt, "handed_by": giver, "handed_at": now},
            Node.VERIFY: {**verify, "handed_by": giver, "window_from": verified.verified_gtid,
                          # the batch's re-check windows start at its own start (the checkpoint handed), not
                          # earlier: what a refresh right before the hand-over gives (refresh_parent)
                          "from_start": GtidState.parse(verified.verified_gtid).reaches(GtidState.parse(str(gtid))),
                          "suspect_chunks": [c.dump() for c in verified.suspect_chunks
                                             if c.table.split(".", 1)[0] in dbs]},
        }

        def listed(s: State) -> State:
            """The batched migration lists the new batch: last, or right after the batch that gave it its shards."""
            at = s.batches.index(giver) + 1 if giver in s.batches else len(s.batches)
            s.batches.insert(at, cid)
            s.batch_tables[cid] = tables
            if giver in s.batch_tables:
                s.batch_tables[giver] = max(0, s.batch_tables[giver] - tables)
            return s

        checks = {claim.node: -1, store.node_path(giver, Node.CATCHUP): ck_version}
        store.hand_over(spec, version, child, cstate, progress, checks,
                        listed if giver == batched_id else (lambda s: s),
                        pauses=maintenance_pauses(zk, giver, want),
                        register=None if giver == batched_id else (batched_id, listed))
    finally:
        try:
            lock.release()
        except Exception:  # noqa: BLE001 - a lost session released it already
            pass
    return child


def refresh_parent(config: Config, zk: ZK, creds: Credentials, parent_id: str) -> recheck.Refreshed:
    """Bring the converged batched migration ``parent_id``'s last full check up to now, for the shards it
    still holds: the rows changed since its ``verified_gtid`` are re-checked (and re-copied) and the new
    position is stored in its ``verify`` node, which the next hand-over gives the batch.

    This is the cutover's own re-check (:func:`migrator.engine.cutover.recheck.refresh_verified_gtid`), run
    on the batched migration with its own tail and no freeze after it. Why the batch's inherited check
    still covers every row: the check said the shards' rows were equal at the old ``verified_gtid`` V0
    (or suspect: those chunks go with it); the re-check drains the target to a source position V1, reads
    from the binlog every key of the moving tables changed in (V0, V1] and re-copies those rows; every
    other row was equal at V0 and no transaction up to V1 touched it, so it is equal at V1 too. V1 is
    stored only after that, so a hand-over (which reads the node under the same applier lock this holds
    while it runs) gives a batch either V0 with the old check or V1 with the new one, never a position
    past the rows checked; the batch's tail starts at the checkpoint and its re-check covers (V1, now].
    The drain leaves the checkpoint at V1 itself, so a hand-over right after this call (nothing else tails
    the batched migration) hands over a check that starts where the batch does.
    Shards handed over before this call are not touched: the spec is read under the applier lock.
    """
    drainer = CatchUpDrainer(config, parent_id).open()  # the applier lock first, then the spec
    try:
        store = MigrationStore(zk)
        spec = store.spec(parent_id)
        if not spec.batched:
            raise HandOverError(f"migration {parent_id} is not batched: its cutover re-checks it itself")
        st, _ = store.state(parent_id)
        if st.phase != Phase.CONVERGED:
            raise PhaseConflict(f"migration {parent_id} is {st.phase.value}, not converged: its check is "
                                "refreshed only between hand-overs")
        direction = forward(zk, spec)
        with mysql_connect(direction.source, creds, read_timeout=600) as src:
            prepare_session(src)
            # names only: the columns and key of a table are read once a window changed rows of it
            tables = [TableInfo(db, name, (), ()) for db in spec.databases
                      for name in moving_tables(src, db, spec.tables)]
        target = mysql_connect(direction.target, creds, read_timeout=600)
        try:
            prepare_session(target)
            moving = recheck.Moving(spec, direction, direction.source, creds, tables, target, drainer,
                                    resolve=lambda conn, t: table_info(conn, t.db, t.table))
            # one round: no freeze follows, and the hand-over right after it takes what this drained to
            return recheck.refresh_verified_gtid(config, store, moving, track=False, max_rounds=1)
        finally:
            target.close()
    finally:
        drainer.close()
