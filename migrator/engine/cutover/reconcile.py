"""An interrupted cutover, settled wholly before or after the flip.

Runs in a ``migrator worker`` as soon as the lease of a cutover whose phase is
still ``cutover`` ends (its holder was killed, or gave up after the flip CAS:
:mod:`migrator.engine.cutover.settle`), and at the start of the next
``migrator cutover ID``. The flip is one CAS, so the shard map says which side
it is on: if the shards are on the target, finish (tables to the tombstones,
unfreeze, phase done); otherwise undo (tables back from the tombstones,
unfreeze, phase converged). Never a split brain: until it runs, stale writers
get "table doesn't exist" on the source.

It also settles a flip whose outcome its holder could not learn
(:class:`~migrator.engine.cutover.errors.FlipUnknown`, :func:`settle_unknown`):
the holder gives its lease up, after which the flip CAS (guarded by the lease)
can no longer commit, and the map read then is final.

A settler works on every attempt of the migration at once: the gates it opens,
closes or finishes are every attempt's (their names carry the attempt,
:mod:`migrator.engine.cutover.passive_gate`), since it acts only while no lease
is held and no new attempt installs anything before the phase it writes last.
Its map and phase writes are guarded by its settle lock's node: a settler whose
session expired midway cannot write over the next one.
"""

from __future__ import annotations

import time
from typing import Any

from migrator.engine.binlog.reader import LocalReader
from migrator.engine.catch_up.checkpoint import CHECKPOINT_KEY
from migrator.engine.cutover.direction import passive_of
from migrator.engine.cutover.errors import ZK_LOST
from migrator.engine.cutover.fence import Fence, Move
from migrator.engine.cutover.lease import (
    CutoverLease,
    CutoverRunning,
    drop_record,
    holder_text,
    leases,
    read_record,
    settle_lock,
)
from migrator.engine.cutover.maps import reread_map, unfreeze_ranges
from migrator.engine.cutover.passive_gate import TriggerGate
from migrator.engine.mdl import LockWait
from migrator.engine.migration import MigrationNotFound, MigrationStore, Phase, Spec
from migrator.engine.names import SENTINEL_TABLE, rename_tomb_tables, tomb_db, tomb_suffix
from migrator.engine.plan import release_maintenance_pause
from migrator.engine.verify.drainers import CatchUpDrainer
from migrator.fleet import zk as zk_mod
from migrator.fleet.config import Config, Credentials, load_credentials
from migrator.fleet.gtid import GtidPos
from migrator.fleet.model import Host
from migrator.fleet.mysql import binlog_pos, ident, own_gtids, qualified, query, tag, tls_of
from migrator.fleet.mysql import connect as mysql_connect
from migrator.fleet.shard_map import HostRegistry, ShardMapStore
from migrator.fleet.zk import ZK

TAG = tag("cutover")


def reconcile(config: Config, migration_id: str, *, zk: ZK | None = None, lease: CutoverLease | None = None,
              blocking: bool = True) -> Phase:
    """Settle a cutover that died midway (phase ``cutover``) wholly before or after the flip.

    The flip is one CAS, so the map says which: if our shards are on the target,
    finish (tables to the tombstones, unfreeze, phase done); otherwise undo
    (tables back from the tombstones, unfreeze, phase converged).

    Acts only under the settle lock and only while no process holds the
    cutover's lease (``lease``: the caller's own, when a new attempt settles the
    one before it); raises :class:`CutoverRunning` otherwise. ``blocking=False``
    gives up at once when another process holds the lock.
    """
    creds = load_credentials(config)
    own = zk is None
    zk = zk or zk_mod.connect(config, creds)
    try:
        lock = settle_lock(zk, migration_id)
        if not lock.acquire(blocking=blocking, timeout=120 if blocking else None):
            raise CutoverRunning(f"another process is settling the cutover of {migration_id}; "
                                 "wait for it (`migrator status ID`)", phase="cutover")
        try:
            mine = lease.path.rsplit("/", 1)[1] if lease is not None and lease.path else None
            others = [x for x in leases(zk, migration_id) if x != mine]
            if others:
                raise CutoverRunning(f"the cutover of {migration_id} is running in "
                                     f"{holder_text(read_record(zk, migration_id))}; it is not settled "
                                     "while that process lives", phase="cutover")
            try:
                phase = _reconcile(config, creds, zk, migration_id, lock.guard)
            except MigrationNotFound:
                drop_record(zk, migration_id)  # a cutover record left by a migration since deleted
                raise
            if lease is None:
                drop_record(zk, migration_id)
            return phase
        finally:
            lock.release()
    finally:
        if own:
            zk.close()


def _reconcile(config: Config, creds: Credentials, zk: ZK, migration_id: str, guard: str) -> Phase:
    store = MigrationStore(zk)
    state, _ = store.state(migration_id)
    if state.phase == Phase.ROLLING_BACK:
        return _reconcile_rollback(creds, zk, store.spec(migration_id), guard)
    if state.phase != Phase.CUTOVER:
        return state.phase
    spec = store.spec(migration_id)
    maps = ShardMapStore(zk)
    smap = reread_map(maps)
    reg = HostRegistry(zk)
    source = reg.get(spec.source_master)
    passive = passive_of(reg, spec.source_master, spec.source_slave, spec)
    landed = spec.moving.served_by(smap, spec.target_master)
    _settle_fenced_pair(source, passive, creds, spec, landed=landed)
    if not landed and passive is None:
        skip_tombstone_renames(config, zk, creds, spec, source)
    unfreeze_ranges(maps, spec.moving, reason=f"cutover {migration_id}: reconcile after interruption", guard=guard)
    if landed:
        _record_flip(store, maps, spec, "cutover", "cutover")
        store.set_phase(migration_id, Phase.DONE, flipped_epoch=smap.epoch,
                        tombstone_db_suffix=tomb_suffix(migration_id),
                        cleanup_after=time.time() + spec.options.retention_s,
                        error="cutover was interrupted after the flip; finished by reconcile",
                        expect=Phase.CUTOVER, guard=guard)
        release_maintenance_pause(zk, spec)
        return Phase.DONE
    store.set_phase(migration_id, Phase.CONVERGED,
                    error="cutover was interrupted before the flip; undone by reconcile",
                    expect=Phase.CUTOVER, guard=guard)
    return Phase.CONVERGED


def settle_unknown(config: Config, zk: ZK, migration_id: str, lease: CutoverLease) -> Phase | None:
    """After a flip whose outcome is unknown: give the lease up, then settle as any settler would.

    The flip CAS is guarded by the lease (checked in its ZooKeeper transaction),
    so once the lease node is deleted a CAS still held somewhere can no longer
    commit, and the map read after that says for good which side of the flip
    the cutover (or rollback) is on. Returns the phase it settled to, or None
    when it cannot be settled now (ZooKeeper still unreachable, so the lease
    could not be given up and ends only with its session; another settler at
    it): then a ``migrator worker`` settles it once the lease has ended, and
    the fences stay closed until then.
    """
    lease.release()  # the record stays (phase cutover / rolling_back): an orphan, for a settler
    try:
        return reconcile(config, migration_id, zk=zk)
    except (CutoverRunning, *ZK_LOST):
        return None


def _record_flip(store: MigrationStore, maps: ShardMapStore, spec: Spec, direction: str, node: str) -> None:
    """The flip's positions (``fence_gtid``, ``target_gtid``: where a rollback's reverse tail
    starts) into the progress node ``node``, from the audit entry the flip CAS wrote with the map.
    The process that flipped died before it could record them itself."""
    if (store.get_progress(spec.id, node)[0] or {}).get("target_gtid"):
        return
    for entry in reversed(maps.history(limit=1000)):
        d = entry.get("details") or {}
        if d.get("migration") == spec.id and d.get("direction", "cutover") == direction and d.get("target_gtid"):
            store.put_progress(spec.id, node, {"migration_id": spec.id, "fence_gtid": d.get("fence_gtid"),
                                               "target_gtid": d["target_gtid"], "flipped_epoch": entry.get("new_epoch"),
                                               "target_state": d.get("target_state") or "",
                                               "settled_by": "reconcile"})
            return


def _settle_fenced_pair(source: Host, passive: Host | None, creds: Credentials, spec: Spec, *,
                        landed: bool) -> None:
    """The fenced pair's moving tables wholly on one side of the flip: on the master (its gate or
    rename fence) and on the passive member (its gate)."""
    _settle_source_gate(source, creds, spec, landed=landed, logged=passive is None)
    moving = _settle_source(source, creds, spec, landed=landed, logged=passive is None)
    if passive is None or not moving:
        return
    gate = TriggerGate(passive, creds, moving, tomb_suffix(spec.id),
                       {db: tomb_db(spec.id, db) for db in spec.databases},
                       lock_wait=LockWait.of(spec.options)).open()
    try:
        if landed:
            if gate.gate_exists():
                gate.shut(timeout=30)
            with mysql_connect(source, creds) as conn:
                head = own_gtids(conn)
            gate.finish(head, timeout=60 + 0.05 * len(moving))
        else:
            gate.reopen()
            gate.remove()
    finally:
        gate.close_connection()


def _reconcile_rollback(creds: Credentials, zk: ZK, spec: Spec, guard: str) -> Phase:
    """A rollback that died in its fenced flip back, settled wholly before or after that flip.

    The reverse of a cutover: the new master (and its passive member) was fenced
    and the old master's tombstones were renamed back to the live names just
    before the flip. Landed (the shards are on the old master again): the new
    master's tables go to its tombstones, the old master's are live, phase
    ``rolled_back``. Not landed: the new master's tables are live again, the old
    master's go back to their tombstone names, phase ``done``.
    """
    store = MigrationStore(zk)
    maps = ShardMapStore(zk)
    smap = reread_map(maps)
    reg = HostRegistry(zk)
    new, old = reg.get(spec.target_master), reg.get(spec.source_master)
    passive = passive_of(reg, spec.target_master, spec.target_slave, spec)
    landed = spec.moving.served_by(smap, spec.source_master)
    _settle_fenced_pair(new, passive, creds, spec, landed=landed)
    _place_old_tables(old, creds, spec, live=landed)
    unfreeze_ranges(maps, spec.moving, reason=f"rollback {spec.id}: reconcile after interruption", guard=guard)
    if landed:
        _record_flip(store, maps, spec, "rollback", "rollback")
        store.set_phase(spec.id, Phase.ROLLED_BACK, flipped_epoch=smap.epoch,
                        error="rollback was interrupted after the flip back; finished by reconcile",
                        expect=Phase.ROLLING_BACK, guard=guard)
        return Phase.ROLLED_BACK
    store.set_phase(spec.id, Phase.DONE, error="rollback was interrupted before the flip back; undone by reconcile",
                    expect=Phase.ROLLING_BACK, guard=guard)
    return Phase.DONE


def _place_old_tables(old: Host, creds: Credentials, spec: Spec, *, live: bool) -> None:
    """The old master's moving tables all under their live names (``live``) or all in the tombstones.

    Nobody writes them meanwhile: the map routes the shards to the new master
    until a flip back lands, and after it the old master's tables are live."""
    with mysql_connect(old, creds) as conn:
        pairs: list[tuple[str, str]] = []
        for db in spec.databases:
            named, tombstoned, _ = _live_and_tombstoned(conn, spec, db)
            here, there = named - {SENTINEL_TABLE}, tombstoned - {SENTINEL_TABLE}
            if spec.tables:
                here, there = here & set(spec.tables), there & set(spec.tables)
            pairs += [(db, t) for t in sorted(there - here if live else here - there)]
        rename_tomb_tables(conn, spec.id, pairs, to_live=live, tag=TAG, server=old.name)


def _settle_source_gate(source: Host, creds: Credentials, spec: Spec, *, landed: bool, logged: bool) -> None:
    """A move fenced by a write gate on the source master (``fence=gate``): finish it or open it again.

    Landed: close the gate if it is still open, then rename the tables to the
    tombstones and drop the triggers (:meth:`TriggerGate.finish`). Not landed:
    reopen the gate and drop the triggers. Nothing to do for a rename fence.
    """
    with mysql_connect(source, creds) as conn:
        tables = _moving_tables(conn, spec)
    if not tables:
        return
    gate = TriggerGate(source, creds, tables, tomb_suffix(spec.id),
                       {db: tomb_db(spec.id, db) for db in spec.databases},
                       lock_wait=LockWait.of(spec.options)).open()
    try:
        if not gate.installed():
            return
        if landed:
            if gate.gate_exists():
                gate.shut(timeout=30)
            with mysql_connect(source, creds) as conn:
                head = own_gtids(conn)
            gate.finish(head, timeout=60 + 0.05 * len(tables), log_renames=logged)
        else:
            gate.reopen()
            gate.remove()
    finally:
        gate.close_connection()


def _live_and_tombstoned(conn: Any, spec: Spec, db: str) -> tuple[set[str], set[str], list[str]]:
    """The base tables of ``db`` under its live name and in its tombstone schema (as they are on this
    server), and the moving ones of them: the migration's tables, or every base table on either side
    but the sentinel. Views stay where they are (the copy carries them; a cutover never renames one,
    and MariaDB refuses to rename a view into another schema)."""
    live = {r[0] for r in query(conn, "SELECT TABLE_NAME FROM information_schema.TABLES "
                                      "WHERE TABLE_SCHEMA = %s AND TABLE_TYPE = 'BASE TABLE'", (db,))}
    dead = {r[0] for r in query(conn, "SELECT TABLE_NAME FROM information_schema.TABLES "
                                      "WHERE TABLE_SCHEMA = %s AND TABLE_TYPE = 'BASE TABLE'",
                                (tomb_db(spec.id, db),))}
    return live, dead, list(spec.tables) or sorted((live | dead) - {SENTINEL_TABLE})


def _moving_tables(conn: Any, spec: Spec) -> list[tuple[str, str]]:
    """The moving (db, table) pairs, whether live or already in the tombstones."""
    out: list[tuple[str, str]] = []
    for db in spec.databases:
        out += [(db, t) for t in _live_and_tombstoned(conn, spec, db)[2]]
    return out


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
            live, dead, names = _live_and_tombstoned(conn, spec, db)
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
        fence = Fence(source, creds, todo_fence, log_renames=logged, lock_wait_timeout=30,
                      lock_wait=LockWait.of(spec.options)).open()
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
    store = MigrationStore(zk)
    node, _ = store.get_progress(spec.id, CHECKPOINT_KEY)
    if not node or not node.get("gtid"):
        return None
    marker = f"_tomb_{tomb_suffix(spec.id)}_"
    with mysql_connect(source, creds) as conn:
        head = GtidPos.parse(binlog_pos(conn))
    first: GtidPos | None = None
    last: GtidPos | None = None
    with LocalReader(source.address, source.port, creds.mysql_user, creds.mysql_password, node["gtid"],
                     spec.databases, tls=tls_of(source, creds)) as st:
        for txn in st.transactions(str(head), deadline=time.monotonic() + 120):
            if txn is None:
                continue
            if any("RENAME TABLE" in x.query.upper() and marker in x.query for x in txn.statements):
                if first is None:
                    first = GtidPos.parse(st.position_before(txn))
                last = GtidPos.parse(st.position)
    if first is None or last is None:
        return None
    drainer = CatchUpDrainer(config, spec.id)
    try:
        drainer.drain_to(str(first), 120)
    finally:
        drainer.close()
    node, version = store.get_progress(spec.id, CHECKPOINT_KEY)
    assert node is not None
    node["gtid"] = str(last)
    node["skipped_tombstone_renames"] = {"from": str(first), "to": str(last), "at": time.time()}
    store.put_progress(spec.id, CHECKPOINT_KEY, node, version=version)
    return str(last)
