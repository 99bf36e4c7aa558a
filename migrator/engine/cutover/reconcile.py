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
:mod:`migrator.engine.cutover.trigger_gate`), since it acts only while no lease
is held and no new attempt installs anything before the phase it writes last.
Its map and phase writes are guarded by its settle lock's node: a settler whose
session expired midway cannot write over the next one.

A holder that died before the freeze (phase still ``converged``, or ``done`` for
a rollback: in its prepare step, with the gates' triggers installed) left no
fence and no frozen range, but it may have left gate objects: the trigger gate
of the pair it was fencing (the passive member's, and the master's for a gated
move). Reconcile removes them, every attempt's, in whatever phase it finds the
migration, and so does the next attempt before it prepares its own
(:func:`~migrator.engine.cutover.attempt.drive` calls :func:`reconcile` with its
lease) and ``migrator abort``. The settler records each death it settles in the
attempts node, with where the holder was (:func:`~migrator.engine.cutover.lease.where_it_was`).
"""

from __future__ import annotations

import time
from typing import Any

from migrator.engine.binlog.reader import LocalReader
from migrator.engine.catch_up.checkpoint import CHECKPOINT_KEY
from migrator.engine.cutover.direction import passive_of
from migrator.engine.cutover.errors import ZK_LOST
from migrator.engine.cutover.lease import (
    CutoverLease,
    CutoverRunning,
    drop_record,
    holder_text,
    leases,
    read_record,
    settle_lock,
    where_it_was,
)
from migrator.engine.cutover.maps import reread_map, unfreeze_ranges
from migrator.engine.cutover.rename_fence import Fence, Move
from migrator.engine.cutover.trigger_gate import GATE_SCHEMA, TRIGGER_PREFIX, TriggerGate, gate_table
from migrator.engine.mdl import LockWait
from migrator.engine.migration import MigrationNotFound, MigrationStore, Node, Phase, Spec
from migrator.engine.names import SENTINEL_TABLE, rename_tomb_tables, tomb_db, tomb_suffix
from migrator.engine.plan import release_maintenance_pause
from migrator.engine.records import AttemptsNode, AuditEntry, CatchupNode, CutoverHolder, FlipNode
from migrator.engine.verify import waits
from migrator.engine.verify.drainers import CatchUpDrainer
from migrator.engine.verify.waits import Stall, Stalled, drain_progressing
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
              blocking: bool = True, holder_died: bool = True) -> Phase:
    """Settle a cutover that died midway (phase ``cutover``) wholly before or after the flip.

    The flip is one CAS, so the map says which: if our shards are on the target,
    finish (tables to the tombstones, unfreeze, phase done); otherwise undo
    (tables back from the tombstones, unfreeze, phase converged). In any other
    phase, the gate objects any attempt left are removed (:func:`remove_gates`).

    Acts only under the settle lock and only while no process holds the
    cutover's lease (``lease``: the caller's own, when a new attempt settles the
    one before it); raises :class:`CutoverRunning` otherwise. ``blocking=False``
    gives up at once when another process holds the lock. ``holder_died``: a record
    left without its lease is kept among the attempts as its holder's death (not
    when the holder gave the lease up itself, :func:`settle_unknown`).
    """
    return settle(config, migration_id, zk=zk, lease=lease, blocking=blocking, holder_died=holder_died)[0]


#: what a settle says when it found no gate object to remove
NO_GATES_LEFT = "no gate objects were left"


def settle(config: Config, migration_id: str, *, zk: ZK | None = None, lease: CutoverLease | None = None,
           blocking: bool = True, holder_died: bool = True) -> tuple[Phase, str]:
    """:func:`reconcile`, which also says what it did (for ``migrator abort``'s answer)."""
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
            held = leases(zk, migration_id)
            # a lease after the caller's is a second attempt's, about to find it is not first and go
            others = held[:held.index(mine)] if mine in held else held
            if others:
                raise CutoverRunning(f"the cutover of {migration_id} is running in "
                                     f"{holder_text(read_record(zk, migration_id))}; it is not settled "
                                     "while that process lives", phase="cutover")
            orphan = read_record(zk, migration_id) if lease is None and holder_died else None
            try:
                phase, what = _reconcile(config, creds, zk, migration_id, lock.guard)
            except MigrationNotFound:
                drop_record(zk, migration_id)  # a cutover record left by a migration since deleted
                raise
            if CutoverHolder.parse(orphan).holder:
                _record_death(MigrationStore(zk), migration_id, orphan, what)
            if lease is None:
                drop_record(zk, migration_id)
            return phase, what
        finally:
            lock.release()
    finally:
        if own:
            zk.close()


def _reconcile(config: Config, creds: Credentials, zk: ZK, migration_id: str, guard: str) -> tuple[Phase, str]:
    """Settle; returns the phase and what was done (for the record of a death)."""
    store = MigrationStore(zk)
    state, _ = store.state(migration_id)
    if state.phase == Phase.ROLLING_BACK:
        phase = _reconcile_rollback(creds, zk, store.spec(migration_id), guard)
        return phase, ("finished after the flip back" if phase == Phase.ROLLED_BACK else "undone before the flip back")
    if state.phase != Phase.CUTOVER:
        removed = remove_gates(zk, creds, store.spec(migration_id), state.phase)
        what = ", ".join(f"{n} gate triggers and the gate table removed on {h}" for h, n in removed.items())
        return state.phase, what or NO_GATES_LEFT
    spec = store.spec(migration_id)
    maps = ShardMapStore(zk)
    smap = reread_map(maps)
    reg = HostRegistry(zk)
    source = reg.get(spec.source_master)
    passive = passive_of(reg, spec.source_master, spec.source_passive, spec)
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
        return Phase.DONE, "finished after the flip"
    store.set_phase(migration_id, Phase.CONVERGED,
                    error="cutover was interrupted before the flip; undone by reconcile",
                    expect=Phase.CUTOVER, guard=guard)
    return Phase.CONVERGED, "undone before the flip"


#: phases in which a cutover (forward) attempt may have prepared: its gates are on the source pair
BEFORE_THE_FLIP = (Phase.PLANNED, Phase.PREFLIGHT, Phase.COPYING, Phase.CATCHING_UP, Phase.CONVERGED,
                   Phase.VERIFYING, Phase.ABORTED, Phase.FAILED)


def gated_pair(zk: ZK, spec: Spec, phase: Phase) -> list[Host]:
    """Both members of the pair an attempt in ``phase`` fences (its trigger gates are there): the source
    pair before the flip, the target pair once done (a rollback's), none in the other phases."""
    reg = HostRegistry(zk)
    if phase in BEFORE_THE_FLIP:
        names = (spec.source_master, spec.source_passive)
    elif phase == Phase.DONE:
        names = (spec.target_master, spec.target_passive)
    else:
        return []
    return [reg.get(n) for n in names]


def gate_objects(conn: Any, spec: Spec) -> tuple[list[tuple[str, str, str]], list[str]]:
    """The gate objects of any attempt of ``spec`` on this server: (schema, trigger, table) of each
    trigger and the gate tables. Their names carry the migration's suffix, then the attempt's."""
    suffix = tomb_suffix(spec.id)
    dbs = spec.databases
    marks = ", ".join(["%s"] * len(dbs))
    trig = [(r[0], r[1], r[2]) for r in query(
        conn, f"{TAG}SELECT TRIGGER_SCHEMA, TRIGGER_NAME, EVENT_OBJECT_TABLE FROM information_schema.TRIGGERS "
              f"WHERE TRIGGER_SCHEMA IN ({marks}) AND LEFT(TRIGGER_NAME, %s) = %s",
        (*dbs, len(TRIGGER_PREFIX) + len(suffix), TRIGGER_PREFIX + suffix))]
    gate = gate_table(suffix)
    gates = [r[0] for r in query(
        conn, f"{TAG}SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
              "AND LEFT(TABLE_NAME, %s) = %s", (GATE_SCHEMA, len(gate), gate))]
    return trig, gates


def remove_gates(zk: ZK, creds: Credentials, spec: Spec, phase: Phase) -> dict[str, int]:
    """Remove every attempt's gate objects (triggers and gate tables) from the pair an attempt in
    ``phase`` fences (:func:`gated_pair`); returns how many triggers went, by host. Only while no
    attempt holds the lease (under the settle lock): with one, they may be that attempt's own. A
    member that cannot be reached raises: the settler retries with backoff, an attempt stops in
    its prepare step (where it would have failed anyway)."""
    removed: dict[str, int] = {}
    for host in gated_pair(zk, spec, phase):
        with mysql_connect(host, creds) as conn:
            triggers, gates = gate_objects(conn, spec)
        if not triggers and not gates:
            continue
        # remove() reads only the schemas of the tables it is given (with attempt="": every attempt's)
        tables = sorted({(db, t) for db, _, t in triggers}) or [(db, SENTINEL_TABLE) for db in spec.databases]
        gate = TriggerGate(host, creds, tables, tomb_suffix(spec.id),
                           {db: tomb_db(spec.id, db) for db in spec.databases},
                           lock_wait=LockWait.of(spec.options)).open()
        try:
            gate.remove()
        finally:
            gate.close_connection()
        removed[host.name] = len(triggers)
    return removed


def _record_death(store: MigrationStore, migration_id: str, rec: dict[str, Any], what: str) -> None:
    """Keep the death of an attempt's holder among the attempts (the cutover's, or the rollback's once done):
    who held it, where it was, what the settle did. Bookkeeping: never in the way of the settle."""
    held = CutoverHolder.parse(rec)
    node_key = Node.ROLLBACK_PASSES if held.label == "rollback" else Node.CUTOVER_ATTEMPTS
    entry = {"at": time.time(), "outcome": f"holder died {where_it_was(rec)}; settled: {what}"[:500],
             "holder": held.holder, "attempt": held.attempt, "died_at": held.where, "before_freeze": not held.step}
    try:
        node, version = store.get_progress(migration_id, node_key)
        record = dict(node or {})
        record["attempts"] = [a.dump() for a in AttemptsNode.parse(node).attempts[-19:]] + [entry]
        store.put_progress(migration_id, node_key, record, version=version)
    except Exception:  # noqa: BLE001 - see above
        pass


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
        return reconcile(config, migration_id, zk=zk, holder_died=False)
    except (CutoverRunning, *ZK_LOST):
        return None


def _record_flip(store: MigrationStore, maps: ShardMapStore, spec: Spec, direction: str, node: str) -> None:
    """The flip's positions (``fence_gtid``, ``target_gtid``: where a rollback's reverse tail
    starts) into the progress node ``node``, from the audit entry the flip CAS wrote with the map.
    The process that flipped died before it could record them itself."""
    if FlipNode.parse(store.get_progress(spec.id, node)[0]).target_gtid:
        return
    for entry in AuditEntry.parse_list(list(reversed(maps.history(limit=1000)))):
        d = entry.details
        if d.migration == spec.id and d.direction == direction and d.target_gtid:
            store.put_progress(spec.id, node, {"migration_id": spec.id, "fence_gtid": d.fence_gtid,
                                               "target_gtid": d.target_gtid, "flipped_epoch": entry.new_epoch,
                                               "target_state": d.target_state or "",
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
    passive = passive_of(reg, spec.target_master, spec.target_passive, spec)
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
            fence.abort(rename_back=False)  # the flip landed: a table renamed stays fenced
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
    node = store.get_progress(spec.id, CHECKPOINT_KEY)[0] or {}
    if not CatchupNode.parse(node).gtid:
        return None
    marker = f"_tomb_{tomb_suffix(spec.id)}_"
    with mysql_connect(source, creds) as conn:
        head = GtidPos.parse(binlog_pos(conn))
    first: GtidPos | None = None
    last: GtidPos | None = None
    # the read and the drain are outside any freeze: they go on as long as they advance (waits.STALL_S)
    with LocalReader(source.address, source.port, creds.mysql_user, creds.mysql_password, node["gtid"],
                     spec.databases, tls=tls_of(source, creds)) as st:
        stall = Stall(waits.STALL_S, (st.position, 0))
        read = 0
        for txn in st.transactions(str(head), deadline=None):
            if txn is not None:
                read += 1
                if any("RENAME TABLE" in x.query.upper() and marker in x.query for x in txn.statements):
                    if first is None:
                        first = GtidPos.parse(st.position_before(txn))
                    last = GtidPos.parse(st.position)
            stall.saw((st.position, read))
            if stall.stalled():
                raise Stalled(f"reconcile of {spec.id}: reading the binlog of {source.name} from {node['gtid']} to "
                              f"{head} for the fence's renames made no progress for {waits.STALL_S:g}s (at "
                              f"{st.position}); is {source.name} reachable? then try again", phase="reconcile")
    if first is None or last is None:
        return None
    drainer = CatchUpDrainer(config, spec.id)
    try:
        drain_progressing(drainer, str(first), what=f"reconcile of {spec.id}", phase="reconcile")
    finally:
        drainer.close()
    node, version = store.get_progress(spec.id, CHECKPOINT_KEY)
    assert node is not None
    node["gtid"] = str(last)
    node["skipped_tombstone_renames"] = {"from": str(first), "to": str(last), "at": time.time()}
    store.put_progress(spec.id, CHECKPOINT_KEY, node, version=version)
    return str(last)
