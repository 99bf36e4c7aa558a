"""The sentinel table: how the cutover proves the target has every write the source accepted.

Under the write fence the cutover writes a unique row to ``_migrator_sentinel``
in each moving db and drains catch-up to the source position of that write;
the row must then be on the target (idea: gh-ost's ``waitForEventsUpToLock``).
The table is created on the source before the copy (:func:`prepare_sentinels`,
run by the copy's preparation), so the copy carries it over like any other and
catch-up never meets its CREATE TABLE, which it would rightly refuse as a
schema change in a moving shard.
"""

from __future__ import annotations

import pymysql

from migrator.engine.migration import Spec
from migrator.engine.names import SENTINEL_TABLE
from migrator.fleet.config import Credentials
from migrator.fleet.mysql import connect as mysql_connect
from migrator.fleet.mysql import qualified, scalar, tag
from migrator.fleet.shard_map import HostRegistry
from migrator.fleet.zk import ZK

TAG = tag("cutover")


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
