"""Cleanup: drop a finished migration's tombstones and release its bookkeeping.

Runs in the migration worker (``migrator cleanup ID``, scheduled for
``State.cleanup_after``) once the retention (``Options.retention_s``, 24 h by
default) has passed; ``now=True`` skips the wait (tests, or an operator who is
sure no rollback will be needed).

* After a cutover (phase ``done``) the tombstones are on the old master:
  ``_tomb_<suffix>_dbNNNNN``. Each is dropped (``DROP DATABASE``, binlogged so
  the old standby drops its copy too), then the source ``dbNNNNN``, which only
  holds the sentinel table (and the views and routines the copy carried) by
  now, unless other tables still live there (a queue-partition move: only the
  sentinel goes).
* After a rollback (phase ``rolled_back``) the tombstones are the new
  master's copies: the same names on the target host; the target's
  ``dbNNNNN`` (sentinel only) goes too, and the emptied tombstone schemas on the
  old master.
* Then the shard locks and the maintenance pause nodes
  (``<root>/maintenance/paused/<shard>``) of this migration are removed, and the
  phase becomes ``cleaned``. The migration record stays, for its history.

The result lists the schemas dropped and the bytes they held
(information_schema), so the disk returned can be checked.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pymysql
from kazoo.exceptions import LockTimeout

from migrator.engine.migration import MigrationNotFound, MigrationStore, Phase, Spec
from migrator.engine.names import SENTINEL_TABLE, tomb_db
from migrator.engine.plan import release_maintenance_pause
from migrator.errors import MigratorError
from migrator.fleet import zk as zk_mod
from migrator.fleet.config import Config, Credentials, load_credentials
from migrator.fleet.gtid import GtidPos
from migrator.fleet.model import Host
from migrator.fleet.mysql import connect as mysql_connect
from migrator.fleet.mysql import ident, own_gtids, qualified, query, scalar, tag, wait_applied
from migrator.fleet.shard_map import HostRegistry
from migrator.fleet.zk import ZK

TAG = tag("cleanup")

#: how long cleanup waits for each pair partner to apply the drops
PASSIVE_WAIT_S = 60.0


class CleanupError(MigratorError):
    component = "cleanup"


class RetentionNotOver(CleanupError):
    exit_code = 3


class RollbackUnderWay(RetentionNotOver):
    """A rollback of the migration runs (or was asked for and not settled): its tombstones are in use."""



@dataclass
class CleanupResult:
    migration_id: str
    dropped: list[str] = field(default_factory=list)  # "host:schema"
    bytes_freed: int = 0
    released_locks: int = 0
    released_pauses: int = 0
    #: "standby: why" for each pair partner that had not applied the drops within the wait
    passive_lag: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _schema_bytes(conn: pymysql.connections.Connection, db: str) -> int:
    return int(scalar(conn, "SELECT COALESCE(SUM(DATA_LENGTH + INDEX_LENGTH + DATA_FREE), 0) "
                            "FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s", (db,)) or 0)


def _tables(conn: pymysql.connections.Connection, db: str) -> list[str]:
    """Base tables only: the views (and routines) of a moved shard were carried with it and go too."""
    return [r[0] for r in query(conn, "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
                                "AND TABLE_TYPE = 'BASE TABLE'", (db,))]


def _exists(conn: pymysql.connections.Connection, db: str) -> bool:
    return bool(scalar(conn, "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s", (db,)))


def _drop_schema(conn: pymysql.connections.Connection, host: Host, db: str, result: CleanupResult) -> None:
    if not _exists(conn, db):
        return
    result.bytes_freed += _schema_bytes(conn, db)
    with conn.cursor() as cur:
        cur.execute(f"{TAG}DROP DATABASE {ident(db)}")
    result.dropped.append(f"{host.name}:{db}")


def _drop_leftover(conn: pymysql.connections.Connection, host: Host, db: str, result: CleanupResult) -> None:
    """The moving db on the host that no longer serves it: drop it if only the sentinel is left."""
    if not _exists(conn, db):
        return
    left = set(_tables(conn, db))
    if left <= {SENTINEL_TABLE}:
        _drop_schema(conn, host, db, result)
    elif SENTINEL_TABLE in left:
        with conn.cursor() as cur:
            cur.execute(f"{TAG}DROP TABLE {qualified(db, SENTINEL_TABLE)}")


def _wait_partner(reg: HostRegistry, host: Host, pos: GtidPos, creds: Credentials, result: CleanupResult) -> None:
    """Wait for the pair partner to apply the drops (they replicate), so that a cleaned migration's
    schemas are gone from both members: a new move onto this pair, planned at once, would otherwise
    find them on the standby and be refused by its preflight. A partner that lags is reported in
    the result, not an error: the drops are in its relay log and it applies them in time. ``pos``: the
    host's own transactions after the drops (:func:`own_gtids`), which the partner must have applied."""
    if not host.partner:
        return
    timeout = PASSIVE_WAIT_S
    try:
        partner = reg.get(host.partner)
        with mysql_connect(partner, creds, read_timeout=int(timeout) + 30) as pconn:
            if not wait_applied(pconn, pos, timeout):
                result.passive_lag.append(f"{partner.name}: had not applied the drops ({pos}) after {timeout:.0f}s")
    except (MigratorError, pymysql.err.MySQLError) as exc:
        result.passive_lag.append(f"{host.partner}: could not check ({exc})")


def release_bookkeeping(zk: ZK, store: MigrationStore, spec: Spec) -> tuple[int, int]:
    """Shard locks and maintenance pause nodes held by this migration."""
    locks = len(store.holders(spec.shards))
    store.release_locks(spec)
    locks -= len(store.holders(spec.shards))
    pauses = release_maintenance_pause(zk, spec)
    return locks, pauses


def cleanup(config: Config, migration_id: str, *, now: bool = False,
            clock: Callable[[], float] = time.time) -> CleanupResult:
    """Drop the tombstones once the retention is over (or at once with ``now``)."""
    creds: Credentials = load_credentials(config)
    with zk_mod.connect(config, creds) as zk:
        store = MigrationStore(zk)
        spec = store.spec(migration_id)
        state, _ = store.state(migration_id)
        if state.phase not in (Phase.DONE, Phase.ROLLED_BACK):
            raise CleanupError(f"migration {migration_id} is {state.phase.value}: only a done or rolled-back "
                               "migration has tombstones to drop", phase="cleanup")
        if not now and state.phase == Phase.DONE and state.rollback_requested:
            raise RollbackUnderWay(
                f"a rollback of {migration_id} is under way (asked for at "
                f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(state.rollback_requested))}): its reverse "
                "tail reads the tombstones; cleanup waits for it to end (or run cleanup with --now to drop them "
                "anyway, which makes the rollback fail)", phase="cleanup")
        if not now and state.cleanup_after is not None and clock() < state.cleanup_after:
            left = state.cleanup_after - clock()
            raise RetentionNotOver(
                f"the tombstones are kept for rollback until "
                f"{time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(state.cleanup_after))} "
                f"({left / 3600:.1f} h from now); run cleanup then, or with --now to drop them anyway",
                phase="cleanup")
        # the exclusive side of the tombstones' lock: a rollback reading them, on any path (its RQ chain,
        # --sync, a playbook), holds the shared side; one started later waits until the drops are done
        lock = store.tombstone_lock(migration_id, "cleanup", exclusive=True)
        if not _acquire(lock, TOMBSTONE_LOCK_WAIT_S):
            holders = ", ".join(str(c) for c in lock.contenders()) or "?"
            raise RollbackUnderWay(
                f"a rollback of {migration_id} is reading its tombstones ({holders}): cleanup does not drop them "
                "under it, --now or not; wait for it to end (or stop it), then run cleanup again", phase="cleanup")
        try:
            return _drop_tombstones(zk, store, spec, state.phase, creds)
        finally:
            _release(lock)


#: how long cleanup waits for a rollback's hold on the tombstones before it refuses (seconds)
TOMBSTONE_LOCK_WAIT_S = 5.0


def _acquire(lock: Any, timeout: float) -> bool:
    try:
        return bool(lock.acquire(timeout=timeout))
    except LockTimeout:
        return False


def _release(lock: Any) -> None:
    try:
        lock.release()
    except Exception:  # noqa: BLE001 - a lost session released it already
        pass


def _drop_tombstones(zk: ZK, store: MigrationStore, spec: Spec, phase: Phase, creds: Credentials) -> CleanupResult:
    """Drop the tombstones (and what is left of the moved dbs), then the phase ``cleaned``: a compare-and-set
    from the phase cleanup started from (a rollback that moved it on meanwhile makes it refuse)."""
    migration_id = spec.id
    state, _ = store.state(migration_id)
    if state.phase != phase:
        raise CleanupError(f"migration {migration_id} is {state.phase.value} now, not {phase.value}: not dropping "
                           "its tombstones", phase="cleanup")
    reg = HostRegistry(zk)
    old, new = reg.get(spec.source_master), reg.get(spec.target_master)
    result = CleanupResult(migration_id)
    if state.phase == Phase.DONE:
        plan = [(old, [tomb_db(migration_id, db) for db in spec.databases], spec.databases)]
    else:
        plan = [(new, [tomb_db(migration_id, db) for db in spec.databases], spec.databases),
                (old, [tomb_db(migration_id, db) for db in spec.databases], [])]
    for host, tombs, leftovers in plan:
        conn = mysql_connect(host, creds, read_timeout=3600)
        try:
            before = len(result.dropped)
            for tomb in tombs:
                _drop_schema(conn, host, tomb, result)
            for db in leftovers:
                _drop_leftover(conn, host, db, result)
            if len(result.dropped) > before:
                _wait_partner(reg, host, own_gtids(conn), creds, result)
        finally:
            conn.close()
    result.released_locks, result.released_pauses = release_bookkeeping(zk, store, spec)
    store.set_phase(migration_id, Phase.CLEANED, cleaned=result.to_dict(), expect=phase)
    return result


def overdue(zk: ZK, *, grace_s: float = 120.0, clock: Callable[[], float] = time.time) -> list[str]:
    """Migrations done, rolled back or not, whose retention ended more than ``grace_s`` ago.

    Their cleanup is scheduled on RQ when the cutover ends; one still not run
    ``grace_s`` after its time was lost with Redis (or no worker ran the
    scheduler), and the record in ZooKeeper is enough to run it now.
    """
    store = MigrationStore(zk)
    due = []
    for migration_id in store.list():
        try:
            state, _ = store.state(migration_id)
        except MigrationNotFound:
            continue  # deleted meanwhile
        if state.phase in (Phase.DONE, Phase.ROLLED_BACK) and state.cleanup_after is not None \
                and clock() >= state.cleanup_after + grace_s and not state.rollback_requested:
            due.append(migration_id)
    return due
