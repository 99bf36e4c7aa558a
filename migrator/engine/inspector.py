"""Reads what the copy needs to know about a source table, and nothing else.

The inspector runs wherever a copy or preflight step runs (an RQ worker, the
CLI process). It only reads: table lists, column lists, the key the copy pages
by, the table's DDL (partitioning included), size estimates and the server's
binlog position. Writes belong to :mod:`migrator.engine.copy`.

The copy pages by the PRIMARY KEY, or, for a table without one, by the first
UNIQUE key whose columns are all NOT NULL (the same rule InnoDB uses to pick a
clustered index), so every row has exactly one key value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pymysql

from migrator.errors import MigratorError
from migrator.fleet.mysql import qualified, query, scalar, tag

T = tag("inspect")


class InspectError(MigratorError):
    component = "inspector"


@dataclass(frozen=True)
class TableInfo:
    """The shape of one source table, as the copy uses it."""

    db: str
    table: str
    columns: tuple[str, ...]  # the columns the copy reads and writes (generated ones excluded)
    key: tuple[str, ...]  # the key the copy pages by; () when the table has none usable
    key_kind: str  # "primary" | "unique" | "none"
    create_sql: str
    auto_increment: int | None = None
    est_rows: int = 0
    data_bytes: int = 0
    avg_row_bytes: int = 0
    partitioned: bool = False
    #: column -> information_schema DATA_TYPE (lower case): how each value is read exactly
    #: (:mod:`migrator.engine.values`) and rendered for the copy
    types: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.db}.{self.table}"


def list_tables(conn: pymysql.connections.Connection, db: str) -> list[str]:
    """Base tables of ``db`` (views are not data and are not copied)."""
    rows = query(conn, T + "SELECT table_name FROM information_schema.tables "
                 "WHERE table_schema = %s AND table_type = 'BASE TABLE' ORDER BY table_name", (db,))
    return [r[0] for r in rows]


def database_exists(conn: pymysql.connections.Connection, db: str) -> bool:
    return bool(scalar(conn, T + "SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name = %s", (db,)))


def table_exists(conn: pymysql.connections.Connection, db: str, table: str) -> bool:
    return bool(scalar(conn, T + "SELECT COUNT(*) FROM information_schema.tables "
                       "WHERE table_schema = %s AND table_name = %s", (db, table)))


def database_charset(conn: pymysql.connections.Connection, db: str) -> tuple[str, str]:
    rows = query(conn, T + "SELECT default_character_set_name, default_collation_name "
                 "FROM information_schema.schemata WHERE schema_name = %s", (db,))
    if not rows:
        raise InspectError(f"database {db} does not exist on the source", phase="copy")
    return rows[0][0], rows[0][1]


def copy_key(conn: pymysql.connections.Connection, db: str, table: str) -> tuple[tuple[str, ...], str]:
    """The key the copy pages by: PRIMARY, else a NOT NULL unique key, else ()."""
    # SHOW INDEX, not information_schema.statistics joined to columns: the join
    # scans the dictionary and takes ~50 ms a table, SHOW INDEX well under 1 ms
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(T + f"SHOW INDEX FROM {qualified(db, table)}")
        rows = cur.fetchall()
    indexes: dict[str, list[tuple[int, str, bool, bool]]] = {}
    for r in rows:
        indexes.setdefault(r["Key_name"], []).append(
            (int(r["Seq_in_index"]), r["Column_name"], bool(int(r["Non_unique"])), r["Null"] == "YES"))
    if "PRIMARY" in indexes:
        return tuple(c for _, c, _, _ in sorted(indexes["PRIMARY"])), "primary"
    # in SHOW INDEX order (the server's key order): the first NOT NULL unique key is the one
    # InnoDB clusters by and the binlog's table map names as the primary key
    for name in indexes:
        cols = sorted(indexes[name])
        if not cols[0][2] and not any(n for _, _, _, n in cols):
            return tuple(c for _, c, _, _ in cols), "unique"
    return (), "none"


def describe(conn: pymysql.connections.Connection, db: str, table: str) -> TableInfo:
    """Everything the copy needs about ``db.table`` on the source."""
    cols = query(conn, T + "SELECT column_name, extra, data_type FROM information_schema.columns "
                 "WHERE table_schema = %s AND table_name = %s ORDER BY ordinal_position", (db, table))
    if not cols:
        raise InspectError(f"table {db}.{table} does not exist on the source", phase="copy")
    # generated (virtual or stored) columns are computed by the target itself
    columns = tuple(c for c, extra, _ in cols if "GENERATED" not in (extra or "").upper())
    key, kind = copy_key(conn, db, table)
    create = query(conn, T + f"SHOW CREATE TABLE {qualified(db, table)}")[0][1]
    meta = query(conn, T + "SELECT auto_increment, table_rows, data_length + index_length, avg_row_length, "
                 "create_options FROM information_schema.tables WHERE table_schema = %s AND table_name = %s",
                 (db, table))
    auto_inc, est_rows, data_bytes, avg_row, options = meta[0]
    return TableInfo(
        db=db, table=table, columns=columns, key=key, key_kind=kind, create_sql=create,
        auto_increment=int(auto_inc) if auto_inc is not None else None,
        est_rows=int(est_rows or 0), data_bytes=int(data_bytes or 0), avg_row_bytes=int(avg_row or 0),
        partitioned="partitioned" in (options or "").lower(),
        types={c: (dtype or "").lower() for c, _, dtype in cols},
    )


def auto_increment(conn: pymysql.connections.Connection, db: str, table: str) -> int | None:
    v = scalar(conn, T + "SELECT auto_increment FROM information_schema.tables "
               "WHERE table_schema = %s AND table_name = %s", (db, table))
    return int(v) if v is not None else None


def global_variables(conn: pymysql.connections.Connection, names: list[str]) -> dict[str, Any]:
    marks = ",".join(["%s"] * len(names))
    rows = query(conn, T + f"SELECT variable_name, variable_value FROM information_schema.global_variables "
                 f"WHERE variable_name IN ({marks})", [n.upper() for n in names])
    return {k.lower(): v for k, v in rows}


def global_status(conn: pymysql.connections.Connection, name: str) -> int:
    rows = query(conn, T + "SHOW GLOBAL STATUS LIKE %s", (name,))
    return int(rows[0][1]) if rows else 0


def slave_status(conn: pymysql.connections.Connection) -> dict[str, Any] | None:
    """``SHOW SLAVE STATUS`` as a dict (None when the host replicates from nobody)."""
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(T + "SHOW SLAVE STATUS")
        row = cur.fetchone()
    return dict(row) if row else None
