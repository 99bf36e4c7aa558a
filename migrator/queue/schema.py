"""Where a queue lives, and the DDL of its tables.

Runs in the queue service when a queue is created or dropped, and in the
load generator and benchmarks; everything else reads the names from here.

Where a queue lives (contract with the migration engine)
--------------------------------------------------------
Each queue is recorded in ZooKeeper at ``<root>/queues/<name>`` (protected
ACL: world-readable, writable by the migrator identity) as JSON::

    {"name": "emails",
     "config": {"max_jobs_per_second": 0, "lease_seconds": 30, "default_attempts": 3,
                "retention": {"new": ..., "ipr": ..., "ok": ..., "fail": ...},
                "partitions": 2, "fifo": false, "paused": false},
     "partitions": [{"index": 0, "shard": 5, "table": "jobs_emails_p0",
                     "tables": ["jobs_emails_p0", "jobs_emails_p0_dedupe"]}, ...],
     "created_at": 1790000000.0}

A partition's tables live in database ``db%05d`` of its shard (``db00005``),
on whichever pair the shard map names for that shard: routing is by shard via
:class:`migrator.fleet.router.ShardRouter`, never by host. ``tables`` lists every
table of the partition (the jobs table and its dedupe side table); a mover
copies them all. The partitions of one queue are on distinct shards, so a job
id (shard, TYPE_JOB, local id; see :mod:`migrator.fleet.ids`) names exactly one
partition of its queue.

The jobs table
--------------
Partitioned ``RANGE COLUMNS(state, updated_at)`` with per-state time buckets,
a ``*_FUTURE`` partition per state and ``p_CATCHALL`` (see
:mod:`migrator.queue.partitioning`); ``updated_at`` is ``DATETIME(6)`` set from
database time, so a state change moves the row to another partition and
purging is ``DROP PARTITION``. The primary key ``(local_id, state,
updated_at)`` holds every partitioning column, so uniqueness of dedupe keys
lives in the side table ``<table>_dedupe`` (``dedupe_key`` primary key).
"""

from __future__ import annotations

import datetime as dt

import pymysql

from migrator.fleet.mysql import ident, qualified, tag
from migrator.queue.partitioning import TablePolicy, partition_clause

T = tag("queue")


EPOCH = dt.datetime(1970, 1, 1)


def jobs_table_name(queue: str, index: int) -> str:
    return f"jobs_{queue}_p{index}"


def dedupe_table_name(table: str) -> str:
    return f"{table}_dedupe"


def to_epoch(value: dt.datetime | None) -> float | None:
    if value is None:
        return None
    return (value - EPOCH).total_seconds()


def from_epoch(value: float) -> dt.datetime:
    return EPOCH + dt.timedelta(seconds=value)


# -- DDL ----------------------------------------------------------------------------

def jobs_ddl(db: str, table: str, policy: TablePolicy, now: dt.datetime) -> str:
    return (
        f"{T}CREATE TABLE IF NOT EXISTS {qualified(db, table)} (\n"
        "  local_id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,\n"
        "  state TINYINT NOT NULL,\n"
        "  updated_at DATETIME(6) NOT NULL,\n"
        "  created_at DATETIME(6) NOT NULL,\n"
        "  run_after DATETIME(6) NOT NULL,\n"
        "  priority TINYINT NOT NULL,\n"
        "  attempts_allowed SMALLINT NOT NULL,\n"
        "  attempts_left SMALLINT NOT NULL,\n"
        "  claim_token CHAR(32) NULL,\n"
        "  lease_until DATETIME(6) NULL,\n"
        "  custom_status VARCHAR(1000) NOT NULL DEFAULT '',\n"
        "  dedupe_key VARCHAR(191) NULL,\n"
        "  body MEDIUMTEXT NOT NULL,\n"
        "  PRIMARY KEY (local_id, state, updated_at),\n"
        "  KEY ready (state, priority, run_after),\n"
        "  KEY lease (state, lease_until)\n"
        ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4\n"
        f"{partition_clause(policy, now)}"
    )


def dedupe_ddl(db: str, table: str) -> str:
    return (
        f"{T}CREATE TABLE IF NOT EXISTS {qualified(db, dedupe_table_name(table))} (\n"
        "  dedupe_key VARCHAR(191) NOT NULL PRIMARY KEY,\n"
        "  local_id BIGINT UNSIGNED NOT NULL,\n"
        "  created_at DATETIME(6) NOT NULL,\n"
        "  KEY created (created_at)\n"
        ") ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"
    )


def db_now(conn: pymysql.connections.Connection) -> dt.datetime:
    with conn.cursor() as cur:
        cur.execute(f"{T}SELECT NOW(6)")
        return cur.fetchone()[0]


def create_partition_tables(conn: pymysql.connections.Connection, db: str, table: str,
                            policy: TablePolicy) -> None:
    """Create the database (if new), the jobs table and its dedupe table.

    Only queue creation calls this. An error that says a table is missing
    (1146) must never lead here: it means the table moved.
    """
    now = db_now(conn)
    with conn.cursor() as cur:
        cur.execute(f"{T}CREATE DATABASE IF NOT EXISTS {ident(db)}")
        cur.execute(jobs_ddl(db, table, policy, now))
        cur.execute(dedupe_ddl(db, table))


def drop_partition_tables(conn: pymysql.connections.Connection, db: str, tables: list[str]) -> None:
    with conn.cursor() as cur:
        for t in tables:
            cur.execute(f"{T}DROP TABLE IF EXISTS {qualified(db, t)}")
