"""Chunk checksums: how verify compares a table on the source with its copy on the target.

Runs in the migration worker (``migrator verify ID``), in the cutover under its
write fence, and in a rollback; every function takes open connections.

How a table is compared
-----------------------
* The source's primary key is walked in keyset chunks of ``chunk_rows`` rows
  (:func:`chunk_bounds`); a chunk is ``(lo, hi]`` (``lo``/``hi`` may be open).
* Each side computes, in SQL, ``COUNT(*)``, ``BIT_XOR`` and ``SUM`` of
  ``CRC32`` over a row image of every row in the chunk (:func:`chunk_checksum_sql`).
  The row image is ``CONCAT_WS('#', LENGTH(c1), c1, LENGTH(c2), c2, ...,
  CONCAT(ISNULL(c1), ISNULL(c2), ...))`` with every column's exact value as a
  binary string (:func:`migrator.engine.values.image_expr`: a FLOAT widened to
  DOUBLE, whose text keeps every bit, an ENUM or SET as its number, text as its
  own bytes): the lengths make ``('a#', 'b')`` differ from ``('a', '#b')``, the
  ISNULL flags make NULL differ from ``''`` (``CONCAT_WS`` skips NULLs), and the
  binary cast makes columns of different character sets comparable byte for
  byte. Both sessions use ``time_zone = '+00:00'`` so TIMESTAMP columns print
  the same.
* Keys and chunk bounds are read exactly too (:func:`migrator.engine.values.read_expr`):
  a FLOAT key as DOUBLE, an ENUM key as its index, a text key as its bytes.
* A chunk that differs is compared again row by row (primary key + CRC32)
  after catch-up has drained to the source head. A differing row that the
  source binlog shows changed since the pass began is *in flight* (a live
  write): it is left to the cutover's check under the fence. Every other
  differing row is re-copied: REPLACE the source rows into the target and
  DELETE the target rows of the range that the source does not have.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pymysql

from migrator.engine.inspector import copy_key
from migrator.engine.names import SENTINEL_TABLE
from migrator.engine.values import image_expr, read_column
from migrator.errors import MigratorError
from migrator.fleet.mysql import ident, qualified, query, tag

TAG = tag("verify")


class VerifyError(MigratorError):
    component = "verify"


# -- table metadata ----------------------------------------------------------------

@dataclass(frozen=True)
class TableInfo:
    """Columns and primary key of one table, as the source has them."""

    db: str
    table: str
    columns: tuple[str, ...]
    pk: tuple[str, ...]
    #: columns a REPLACE may write (generated columns excluded)
    writable: tuple[str, ...] = ()
    #: information_schema DATA_TYPE of each column, in the order of ``columns`` (empty: unknown, read as is)
    types: tuple[str, ...] = ()

    def on(self, db: str) -> TableInfo:
        """The same table in another schema (a tombstone, a renamed db)."""
        return TableInfo(db, self.table, self.columns, self.pk, self.writable, self.types)

    @property
    def name(self) -> str:
        return f"{self.db}.{self.table}"

    def type_of(self, column: str) -> str:
        return self.types[self.columns.index(column)] if self.types else ""

    def read(self, columns: Sequence[str]) -> str:
        """The select list reading ``columns`` exactly (:func:`migrator.engine.values.read_expr`)."""
        return ", ".join(read_column(c, self.type_of(c)) for c in columns)

    @property
    def key_sql(self) -> str:
        """The primary key's columns, read exactly."""
        return self.read(self.pk)


def table_info(conn: pymysql.connections.Connection, db: str, table: str) -> TableInfo:
    """Read columns (information_schema) and the key (:func:`~migrator.engine.inspector.copy_key`)."""
    cols = query(
        conn,
        TAG + "SELECT COLUMN_NAME, IS_GENERATED, DATA_TYPE FROM information_schema.COLUMNS "
        "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
        (db, table),
    )
    if not cols:
        raise VerifyError(f"table {db}.{table} does not exist on the source", phase="verify")
    # the same key the copy pages by and catch-up applies by: PRIMARY, else the first NOT NULL
    # unique key (which InnoDB, and the binlog's table map, treat as the primary key)
    pk, _ = copy_key(conn, db, table)
    if not pk:
        raise VerifyError(f"table {db}.{table} has no primary key nor NOT NULL unique key; it cannot be verified "
                          "by chunks", phase="verify")
    columns = tuple(c[0] for c in cols)
    for c in columns:
        ident(c)
    writable = tuple(c[0] for c in cols if (c[1] or "NEVER") == "NEVER")
    return TableInfo(db, table, columns, tuple(pk), writable, tuple((c[2] or "").lower() for c in cols))


def moving_tables(conn: pymysql.connections.Connection, db: str, only: Sequence[str] = ()) -> list[str]:
    """Base tables of ``db`` that move (``only`` if given), the sentinel excluded."""
    rows = query(
        conn,
        TAG + "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
        "AND TABLE_TYPE = 'BASE TABLE' ORDER BY TABLE_NAME",
        (db,),
    )
    names = [r[0] for r in rows if r[0] != SENTINEL_TABLE]
    if only:
        missing = [t for t in only if t not in names]
        if missing:
            raise VerifyError(f"tables {missing} are not in {db} on the source", phase="verify")
        names = [t for t in names if t in only]
    return names


def load_tables(conn: pymysql.connections.Connection, databases: Sequence[str], only: Sequence[str] = (),
                db_of: Callable[[str], str] = lambda db: db) -> list[TableInfo]:
    """TableInfo of every moving table, named by its logical db, read from ``db_of(db)``."""
    out = []
    for db in databases:
        for name in moving_tables(conn, db_of(db), only):
            out.append(table_info(conn, db_of(db), name).on(db))
    return out


# -- SQL builders (pure; unit-tested) --------------------------------------------------------

def row_image_sql(columns: Sequence[str], types: Sequence[str] = ()) -> str:
    """The CRC32 of one row's image: lengths + exact bytes of each column, then NULL flags.

    ``types`` (information_schema DATA_TYPE, one per column) picks each column's exact image
    (:func:`migrator.engine.values.image_expr`); without it every column is cast to BINARY."""
    parts = []
    for i, c in enumerate(columns):
        q = image_expr(c, types[i] if types else "")
        parts.append(f"LENGTH({q})")
        parts.append(q)
    flags = "CONCAT(" + ", ".join(f"ISNULL({ident(c)})" for c in columns) + ")"
    return f"CRC32(CONCAT_WS('#', {', '.join(parts)}, {flags}))"


def after_key_sql(pk: Sequence[str]) -> str:
    """``(pk) > (%s, ...)`` expanded so the optimizer uses a range on the key."""
    ors = []
    for i in range(len(pk)):
        eqs = [f"{ident(c)} = %s" for c in pk[:i]]
        ors.append("(" + " AND ".join([*eqs, f"{ident(pk[i])} > %s"]) + ")")
    return "(" + " OR ".join(ors) + ")"


def upto_key_sql(pk: Sequence[str]) -> str:
    """``(pk) <= (%s, ...)`` expanded."""
    ors = []
    for i in range(len(pk)):
        eqs = [f"{ident(c)} = %s" for c in pk[:i]]
        ors.append("(" + " AND ".join([*eqs, f"{ident(pk[i])} < %s"]) + ")")
    ors.append("(" + " AND ".join(f"{ident(c)} = %s" for c in pk) + ")")
    return "(" + " OR ".join(ors) + ")"


def _after_args(key: Sequence[Any]) -> list[Any]:
    out: list[Any] = []
    for i in range(len(key)):
        out.extend(key[: i + 1])
    return out


def _upto_args(key: Sequence[Any]) -> list[Any]:
    return _after_args(key) + list(key)


def range_where(pk: Sequence[str], lo: Sequence[Any] | None, hi: Sequence[Any] | None) -> tuple[str, list[Any]]:
    """WHERE clause (and its arguments) for the chunk ``(lo, hi]``; None is open."""
    conds: list[str] = []
    args: list[Any] = []
    if lo is not None:
        conds.append(after_key_sql(pk))
        args += _after_args(lo)
    if hi is not None:
        conds.append(upto_key_sql(pk))
        args += _upto_args(hi)
    return (" AND ".join(conds) if conds else "1=1"), args


def chunk_checksum_sql(t: TableInfo, lo: Sequence[Any] | None, hi: Sequence[Any] | None) -> tuple[str, list[Any]]:
    """One statement giving ``(rows, bit_xor, sum)`` of the row CRCs in ``(lo, hi]``."""
    where, args = range_where(t.pk, lo, hi)
    sql = (
        f"{TAG}SELECT COUNT(*), COALESCE(BIT_XOR(h), 0), COALESCE(SUM(h), 0) FROM "
        f"(SELECT {row_image_sql(t.columns, t.types)} AS h FROM {qualified(t.db, t.table)} WHERE {where}) AS c"
    )
    return sql, args


def row_hashes_sql(t: TableInfo, lo: Sequence[Any] | None, hi: Sequence[Any] | None) -> tuple[str, list[Any]]:
    """Primary key + row CRC of every row in ``(lo, hi]``."""
    where, args = range_where(t.pk, lo, hi)
    sql = f"{TAG}SELECT {t.key_sql}, {row_image_sql(t.columns, t.types)} FROM {qualified(t.db, t.table)} WHERE {where}"
    return sql, args


def keys_where(pk: Sequence[str], n: int) -> str:
    """``(pk) IN ((%s, ...), ...)`` for ``n`` keys, written as ORs of equalities."""
    one = "(" + " AND ".join(f"{ident(c)} = %s" for c in pk) + ")"
    return "(" + " OR ".join([one] * n) + ")"


def boundary_sql(t: TableInfo, after: Sequence[Any] | None, step: int) -> tuple[str, list[Any]]:
    """The key ``step`` rows after ``after`` (the inclusive end of the next chunk)."""
    where, args = range_where(t.pk, after, None)
    order = ", ".join(ident(c) for c in t.pk)
    sql = (f"{TAG}SELECT {t.key_sql} FROM {qualified(t.db, t.table)} WHERE {where} "
           f"ORDER BY {order} LIMIT 1 OFFSET {int(step) - 1}")
    return sql, args


# -- comparisons --------------------------------------------------------------------------

Key = tuple[Any, ...]


class LiteralKey(tuple):  # type: ignore[type-arg]
    """A primary key as SQL literals (``('42', "X'6869'")``), as the binlog decoder renders it.

    Such keys are written into the statement as they are (never bound as
    parameters): they are exact whatever the column's type and character set.
    """

    __slots__ = ()


def literal_keys_where(pk: Sequence[str], keys: Sequence[LiteralKey]) -> str:
    """``(pk) IN ((lit, ...), ...)`` for literal keys (row constructors use the primary key index)."""
    if len(pk) == 1:
        return f"{ident(pk[0])} IN ({','.join(k[0] for k in keys)})"
    cols = "(" + ",".join(ident(c) for c in pk) + ")"
    return f"{cols} IN (" + ",".join("(" + ",".join(k) + ")" for k in keys) + ")"


@dataclass
class ChunkResult:
    table: str
    lo: Key | None
    hi: Key | None
    source: tuple[int, int, int]
    target: tuple[int, int, int]

    @property
    def equal(self) -> bool:
        return self.source == self.target


@dataclass
class RowDiff:
    table: str
    key: Key
    kind: str  # "changed" | "missing_on_target" | "extra_on_target"

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table, "key": [_plain(k) for k in self.key], "kind": self.kind}


def _plain(v: Any) -> Any:
    if isinstance(v, (bytes, bytearray)):
        return v.hex()
    if isinstance(v, (int, float, str)) or v is None:
        return v
    return str(v)


def _key(row: Sequence[Any], n: int) -> Key:
    return tuple(row[:n])


def prepare_session(conn: pymysql.connections.Connection) -> None:
    """Same TIMESTAMP rendering on both sides; a repair keeps explicit zero ids and writes rows in any
    order, as the copy and catch-up do (no foreign-key checks: a parent re-copied by REPLACE keeps
    its children, a child may arrive before its parent)."""
    with conn.cursor() as cur:
        # explicit zero ids stay zero when a repair REPLACEs a row
        cur.execute(TAG + "SET SESSION time_zone = '+00:00', foreign_key_checks = 0, "
                    "sql_mode = 'NO_AUTO_VALUE_ON_ZERO,NO_ENGINE_SUBSTITUTION'")


def chunk_bounds(conn: pymysql.connections.Connection, t: TableInfo,
                 step: int) -> Iterator[tuple[Key | None, Key | None]]:
    """Walk the source key in chunks of ``step`` rows: yields ``(lo, hi]`` pairs."""
    lo: Key | None = None
    n = len(t.pk)
    while True:
        sql, args = boundary_sql(t, lo, step)
        rows = query(conn, sql, args)
        if not rows:
            yield lo, None
            return
        hi = _key(rows[0], n)
        yield lo, hi
        lo = hi


def checksum(conn: pymysql.connections.Connection, t: TableInfo, lo: Key | None,
             hi: Key | None) -> tuple[int, int, int]:
    sql, args = chunk_checksum_sql(t, lo, hi)
    row = query(conn, sql, args)[0]
    return int(row[0]), int(row[1]), int(row[2])


def row_hashes(conn: pymysql.connections.Connection, t: TableInfo, lo: Key | None, hi: Key | None) -> dict[Key, int]:
    sql, args = row_hashes_sql(t, lo, hi)
    n = len(t.pk)
    return {_key(r, n): int(r[n]) for r in query(conn, sql, args)}


def _select_keys(t: TableInfo, part: Sequence[Key]) -> tuple[str, list[Any] | None]:
    """The WHERE of one query's keys: literal keys inline, value keys as parameters."""
    if part and isinstance(part[0], LiteralKey):
        return literal_keys_where(t.pk, part), None  # type: ignore[arg-type]
    return keys_where(t.pk, len(part)), [v for k in part for v in k]


def row_hashes_for(conn: pymysql.connections.Connection, t: TableInfo, keys: Sequence[Key],
                   per_query: int = 200) -> dict[Key, int]:
    """Row hashes of the rows with these keys (value keys or :class:`LiteralKey`, not mixed),
    keyed by the key values the query returns."""
    out: dict[Key, int] = {}
    n = len(t.pk)
    for i in range(0, len(keys), per_query):
        where, args = _select_keys(t, keys[i:i + per_query])
        sql = (f"{TAG}SELECT {t.key_sql}, {row_image_sql(t.columns, t.types)} FROM {qualified(t.db, t.table)} "
               f"WHERE {where}")
        for r in query(conn, sql, args):
            out[_key(r, n)] = int(r[n])
    return out


def group_sums_sql(groups: Sequence[tuple[TableInfo, Sequence[Key]]]) -> tuple[str, list[Any] | None]:
    """One statement giving ``(group, rows, bit_xor, sum)`` of the row CRCs of each group of keys (a table
    and keys of it, value keys or :class:`LiteralKey`, not mixed within a group): the chunk checksum
    (:func:`chunk_checksum_sql`) over ``WHERE (pk) IN (...)`` instead of a key range, one ``UNION ALL``
    part per group, so groups of several tables cost one round trip. A group no row matches gives
    ``(group, 0, 0, 0)``. Arguments are None when every group's keys are literals. Literal and value
    groups never share a statement: a literal's ``%`` would be taken for a parameter."""
    if len({bool(keys) and isinstance(keys[0], LiteralKey) for _, keys in groups}) > 1:
        raise ValueError("literal and value keys in one statement")
    parts: list[str] = []
    args: list[Any] = []
    for i, (t, keys) in enumerate(groups):
        where, a = _select_keys(t, keys)
        if a:
            args += a
        parts.append(f"SELECT {i}, COUNT(*), COALESCE(BIT_XOR(h), 0), COALESCE(SUM(h), 0) FROM "
                     f"(SELECT {row_image_sql(t.columns, t.types)} AS h FROM {qualified(t.db, t.table)} "
                     f"WHERE {where}) AS g{i}")
    return TAG + " UNION ALL ".join(parts), (args or None)


def group_sums(conn: pymysql.connections.Connection,
               groups: Sequence[tuple[TableInfo, Sequence[Key]]]) -> list[tuple[int, int, int]]:
    """``(rows, bit_xor, sum)`` of each group (:func:`group_sums_sql`), in the order given, in one query."""
    if not groups:
        return []
    sql, args = group_sums_sql(groups)
    got = {int(r[0]): (int(r[1]), int(r[2]), int(r[3])) for r in query(conn, sql, args)}
    return [got.get(i, (0, 0, 0)) for i in range(len(groups))]


def keys_of(conn: pymysql.connections.Connection, t: TableInfo, keys: Sequence[Key], per_query: int = 500) -> set[Key]:
    """The key values of the rows these keys select (the rows that exist on this side)."""
    out: set[Key] = set()
    n = len(t.pk)
    for i in range(0, len(keys), per_query):
        where, args = _select_keys(t, keys[i:i + per_query])
        for r in query(conn, f"{TAG}SELECT {t.key_sql} FROM {qualified(t.db, t.table)} WHERE {where}", args):
            out.add(_key(r, n))
    return out


def diff_hashes(table: str, src: dict[Key, int], dst: dict[Key, int]) -> list[RowDiff]:
    out = []
    for k, h in src.items():
        if k not in dst:
            out.append(RowDiff(table, k, "missing_on_target"))
        elif dst[k] != h:
            out.append(RowDiff(table, k, "changed"))
    for k in dst:
        if k not in src:
            out.append(RowDiff(table, k, "extra_on_target"))
    return sorted(out, key=lambda d: (d.kind, repr(d.key)))


# -- the pieces a check is made of -------------------------------------------------------------

@dataclass
class Side:
    """One end of a comparison: a connection and the schema the tables live in."""

    conn: pymysql.connections.Connection
    db_of: Callable[[str], str] = lambda db: db


def compare_chunks(src: Side, dst: Side, tables: Sequence[TableInfo], step: int) -> tuple[list[ChunkResult], int]:
    """Checksum every chunk of every table; returns (all chunk results, rows seen on the source)."""
    results: list[ChunkResult] = []
    rows = 0
    for t in tables:
        s_t, d_t = t.on(src.db_of(t.db)), t.on(dst.db_of(t.db))
        for lo, hi in chunk_bounds(src.conn, s_t, step):
            s = checksum(src.conn, s_t, lo, hi)
            d = checksum(dst.conn, d_t, lo, hi)
            rows += s[0]
            results.append(ChunkResult(t.name, lo, hi, s, d))
    return results, rows
