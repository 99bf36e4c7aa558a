"""Partition maintenance: drop expired buckets, split ``*_FUTURE`` ahead of time.

Runs from ``migrator partitions maintain`` and the periodic RQ job
``jobs.maintenance.run`` (any worker). For every table under a declarative
policy (:mod:`migrator.queue.partitioning`) it

* drops buckets whose rows are all past their state's retention with
  ``ALTER TABLE .. DROP PARTITION`` (never ``DELETE``), so each bucket's
  ``.ibd`` file leaves the disk;
* splits each ``*_FUTURE`` partition into new empty buckets ahead of time with
  ``ALTER TABLE .. REORGANIZE PARTITION`` (cheap while FUTURE is empty);
* NEW jobs have a finite retention too, so a forgotten queue empties itself.

Tables: every queue partition's jobs table (policy from the queue's retention;
its dedupe side table is trimmed to the NEW retention in small chunks), and
every shard table partitioned like the seed's daily log table (partitions
named ``pLOG_*``, :data:`LOG_POLICY`).

Never stall the queue: partition DDL needs an exclusive metadata lock, and
while it waits every queue statement on the table queues behind it. Each DDL
runs with a short ``lock_wait_timeout`` (default 2 s); on timeout the table is
skipped and reported, and the next run tries again.

Pausing (the migration engine uses this)
----------------------------------------
Maintenance of shard ``N`` is paused while the ZooKeeper node

    ``<root>/maintenance/paused/<N>``          (e.g. ``/migrator/maintenance/paused/5``)

exists; its content is free text (who paused and why). Partition DDL reaches
the binlog as a statement, not as row events, so a shard being copied must not
be maintained: the engine creates this node before it starts copying a shard
and deletes it after cutover or abort. :func:`pause_shard` /
:func:`resume_shard` do the same from Python; ``migrator partitions pause N``
from the shell. The check is made per table, right before its DDL.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from dataclasses import dataclass, field
from typing import Any

import pymysql
from kazoo.exceptions import NodeExistsError, NoNodeError

from migrator.fleet.ids import shard_db
from migrator.fleet.mysql import ER_LOCK_WAIT_TIMEOUT, ident, qualified, tag
from migrator.fleet.zk import ZK
from migrator.queue import schema
from migrator.queue.partitioning import (
    LOG_POLICY,
    TablePolicy,
    parse_bucket,
    partition_clause,
    plan_maintenance,
    reorganize_sql,
)

T = tag("maintenance")
PAUSED = "maintenance/paused"
DEFAULT_LOCK_WAIT = 2


# -- pause nodes -------------------------------------------------------------------------

def pause_path(zk: ZK, shard: int) -> str:
    return zk.path(PAUSED, str(int(shard)))


def pause_shard(zk: ZK, shard: int, reason: str = "") -> None:
    zk.ensure(zk.path(PAUSED))
    try:
        zk.client.create(pause_path(zk, shard), json.dumps({"reason": reason, "at": time.time()}).encode(),
                         acl=zk.protected_acl())
    except NodeExistsError:
        pass


def resume_shard(zk: ZK, shard: int) -> None:
    try:
        zk.client.delete(pause_path(zk, shard))
    except NoNodeError:
        pass


def is_paused(zk: ZK, shard: int) -> bool:
    return zk.client.exists(pause_path(zk, shard)) is not None


def paused_shards(zk: ZK) -> list[int]:
    try:
        return sorted(int(x) for x in zk.client.get_children(zk.path(PAUSED)) if x.isdigit())
    except NoNodeError:
        return []


# -- one table ---------------------------------------------------------------------------------

@dataclass
class TableReport:
    shard: int
    table: str
    kind: str
    dropped: list[str] = field(default_factory=list)
    added: list[str] = field(default_factory=list)
    trimmed: int = 0
    skipped: str | None = None

    def to_text(self) -> str:
        where = f"{shard_db(self.shard)}.{self.table}"
        if self.skipped:
            return f"{where}: skipped ({self.skipped})"
        return (f"{where}: dropped {len(self.dropped)} partition(s), added {len(self.added)}"
                + (f", trimmed {self.trimmed} dedupe keys" if self.trimmed else ""))


def partition_names(conn: pymysql.connections.Connection, db: str, table: str) -> list[str]:
    with conn.cursor() as cur:
        cur.execute(f"{T}SELECT PARTITION_NAME FROM information_schema.PARTITIONS "
                    "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND PARTITION_NAME IS NOT NULL "
                    "ORDER BY PARTITION_ORDINAL_POSITION", (db, table))
        return [r[0] for r in cur.fetchall()]


def maintain_table(conn: pymysql.connections.Connection, shard: int, table: str, policy: TablePolicy, *,
                   advance_seconds: float = 0.0, lock_wait_timeout: int = DEFAULT_LOCK_WAIT,
                   dry_run: bool = False) -> TableReport:
    """Apply ``policy`` to one table on the connection's host (its shard's master)."""
    db = shard_db(shard)
    rep = TableReport(shard, table, policy.kind)
    names = partition_names(conn, db, table)
    if not names:
        rep.skipped = "table missing or not partitioned"
        return rep
    now = schema.db_now(conn) + dt.timedelta(seconds=advance_seconds)
    plan = plan_maintenance(policy, names, now)
    rep.dropped = list(plan.drops)
    rep.added = [d.name for s in plan.splits for d in s.into if parse_bucket(d.name)]
    if dry_run or plan.empty:
        return rep
    t = qualified(db, table)
    with conn.cursor() as cur:
        cur.execute("SELECT @@session.lock_wait_timeout")
        before = int(cur.fetchone()[0])
        cur.execute("SET SESSION lock_wait_timeout = %s", (int(lock_wait_timeout),))
        try:
            if plan.drops:
                cur.execute(f"{T}ALTER TABLE {t} DROP PARTITION {', '.join(ident(n)[1:-1] for n in plan.drops)}")
            for split in plan.splits:
                cur.execute(f"{T}ALTER TABLE {t} {reorganize_sql(split)}")
        except pymysql.err.OperationalError as exc:
            if exc.args and exc.args[0] == ER_LOCK_WAIT_TIMEOUT:
                rep.skipped = (f"metadata lock busy for {lock_wait_timeout}s (a long transaction or copy holds "
                               "the table); the next run retries")
                return rep
            raise
        finally:
            cur.execute("SET SESSION lock_wait_timeout = %s", (before,))
    return rep


def trim_dedupe(conn: pymysql.connections.Connection, shard: int, table: str, keep_seconds: int,
                *, advance_seconds: float = 0.0, chunk: int = 1000, max_chunks: int = 100) -> int:
    """Forget dedupe keys older than the NEW retention (small-chunk DELETE on the side table)."""
    t = qualified(shard_db(shard), schema.dedupe_table_name(table))
    n = 0
    with conn.cursor() as cur:
        for _ in range(max_chunks):
            cur.execute(f"{T}DELETE FROM {t} WHERE created_at < NOW(6) - INTERVAL %s MICROSECOND LIMIT %s",
                        (int((keep_seconds - advance_seconds) * 1e6), chunk))
            n += cur.rowcount
            if cur.rowcount < chunk:
                break
    return n


# -- log tables ----------------------------------------------------------------------------------

def create_log_table(conn: pymysql.connections.Connection, shard: int, table: str = "logs") -> None:
    """The seed's log table, partitioned by day on ``ts`` (maintained by :data:`LOG_POLICY`)."""
    now = schema.db_now(conn)
    with conn.cursor() as cur:
        cur.execute(
            f"{T}CREATE TABLE IF NOT EXISTS {qualified(shard_db(shard), table)} (\n"
            "  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,\n"
            "  ts DATETIME(6) NOT NULL,\n"
            "  board_id BIGINT NOT NULL DEFAULT 0,\n"
            "  source VARCHAR(32) NOT NULL,\n"
            "  message TEXT NOT NULL,\n"
            "  PRIMARY KEY (id, ts),\n"
            "  KEY board_id_idx (board_id),\n"
            "  KEY ts_idx (ts)\n"
            ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4\n"
            f"{partition_clause(LOG_POLICY, now)}"
        )


def log_tables(conn: pymysql.connections.Connection, shards: list[int]) -> list[tuple[int, str]]:
    """(shard, table) of every table on this host laid out by :data:`LOG_POLICY`."""
    if not shards:
        return []
    dbs = [shard_db(s) for s in shards]
    marks = ",".join(["%s"] * len(dbs))
    with conn.cursor() as cur:
        cur.execute(f"{T}SELECT DISTINCT TABLE_SCHEMA, TABLE_NAME FROM information_schema.PARTITIONS "
                    f"WHERE TABLE_SCHEMA IN ({marks}) AND PARTITION_NAME = 'pLOG_FUTURE'", dbs)
        return [(int(db[2:]), name) for db, name in cur.fetchall()]


# -- the whole fleet ---------------------------------------------------------------------------------

def maintain(service: Any, *, advance_seconds: float = 0.0, lock_wait_timeout: int = DEFAULT_LOCK_WAIT,
             dry_run: bool = False, queues: list[str] | None = None, logs: bool = True) -> list[TableReport]:
    """Maintain every queue partition and log table; returns one report per table.

    ``service`` is a :class:`migrator.queue.service.QueueService` (for its
    router, executor and catalog). ``advance_seconds`` pretends the clock is
    that much later (tests, demos and "what would run" previews).
    """
    from migrator.queue.service import policy_for

    zk = service.zk
    reports: list[TableReport] = []
    recs = [service.catalog.get(q, fresh=True) for q in queues] if queues else service.catalog.all()
    for rec in recs:
        policy = policy_for(rec.config)
        for part in rec.partitions:
            if is_paused(zk, part.shard):
                why = f"maintenance paused on shard {part.shard} ({pause_path(zk, part.shard)})"
                reports.append(TableReport(part.shard, part.table, policy.kind, skipped=why))
                continue
            r = service.executor.run(part.shard, lambda c, part=part, policy=policy: maintain_table(
                c, part.shard, part.table, policy, advance_seconds=advance_seconds,
                lock_wait_timeout=lock_wait_timeout, dry_run=dry_run), what=f"maintain {part.table}",
                table=part.table)
            if not dry_run and r.skipped is None:
                r.trimmed = service.executor.run(part.shard, lambda c, part=part, rec=rec: trim_dedupe(
                    c, part.shard, part.table, rec.config.retention.new, advance_seconds=advance_seconds),
                    what=f"trim {part.table} dedupe", table=part.table)
            reports.append(r)
    if logs:
        smap = service.router.map
        for master in smap.masters():
            shards = smap.shards_on(master)
            found = service.executor.run(shards[0], lambda c, shards=shards: log_tables(c, shards), write=False,
                                         what="find log tables")
            for shard, table in found:
                if is_paused(zk, shard):
                    reports.append(TableReport(shard, table, LOG_POLICY.kind,
                                               skipped=f"maintenance paused on shard {shard}"))
                    continue
                reports.append(service.executor.run(shard, lambda c, shard=shard, table=table: maintain_table(
                    c, shard, table, LOG_POLICY, advance_seconds=advance_seconds,
                    lock_wait_timeout=lock_wait_timeout, dry_run=dry_run), what=f"maintain {table}"))
    return reports
