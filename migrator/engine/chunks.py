"""A chunk of the copy: the SQL that reads it, the SQL that writes it, and its checkpoint key.

Pure functions (unit-tested without a server), used by the copy
(:mod:`migrator.engine.copy`) in the RQ copy jobs.

Rows never pass through Python values: the source renders each row as a SQL
``(...)`` tuple (QUOTE(), hex for binary, FLOAT widened to DOUBLE; see
:func:`literal_expr`) and the tuples are joined into the REPLACE. Decoding
and re-escaping every value in pure Python was the copy's bottleneck.

A chunk starts after the last key copied (keyset pagination:
``WHERE key > last_key ORDER BY key LIMIT n``); that key is the table's whole
checkpoint, stored in ZooKeeper as JSON (:func:`encode_key`).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
from typing import Any

from migrator.engine.inspector import TableInfo, quoted_columns
from migrator.errors import MigratorError
from migrator.fleet.mysql import ident, qualified, tag

T = tag("copy")
#: one REPLACE statement carries at most this many bytes of row data (max_allowed_packet is 16 MiB by default)
MAX_STATEMENT_BYTES = 4 * 1024 * 1024


class CopyError(MigratorError):
    component = "copy"


# -- key values in JSON ------------------------------------------------------------------------
# last_key is stored in ZooKeeper as JSON; key columns can be binary, dates or decimals.

def encode_key(values: tuple[Any, ...] | list[Any] | None) -> list[Any] | None:
    if values is None:
        return None
    out: list[Any] = []
    for v in values:
        if v is None or isinstance(v, (bool, int, float, str)):
            out.append(v)
        elif isinstance(v, (bytes, bytearray)):
            out.append({"b64": base64.b64encode(bytes(v)).decode()})
        elif isinstance(v, dt.datetime):
            out.append({"dt": v.isoformat()})
        elif isinstance(v, dt.date):
            out.append({"d": v.isoformat()})
        elif isinstance(v, dt.timedelta):
            out.append({"td": v.total_seconds()})
        elif isinstance(v, decimal.Decimal):
            out.append({"dec": str(v)})
        else:
            raise CopyError(f"cannot checkpoint a key value of type {type(v).__name__}", phase="copy")
    return out


def decode_key(values: list[Any] | None) -> tuple[Any, ...] | None:
    if values is None:
        return None
    out: list[Any] = []
    for v in values:
        if isinstance(v, dict):
            (kind, raw), = v.items()
            out.append({"b64": lambda r: base64.b64decode(r), "dt": dt.datetime.fromisoformat,
                        "d": dt.date.fromisoformat, "td": lambda r: dt.timedelta(seconds=r),
                        "dec": decimal.Decimal}[kind](raw))
        else:
            out.append(v)
    return tuple(out)


# -- SQL builders (pure) ------------------------------------------------------------------------

def after_key_clause(key: tuple[str, ...], last: tuple[Any, ...] | None) -> tuple[str, list[Any]]:
    """``WHERE`` text and parameters selecting rows whose key is after ``last``.

    A composite key (a, b, c) expands to ``a >= x AND (a > x OR (a = x AND b >
    y) OR (a = x AND b = y AND c > z))``: the leading ``a >= x`` gives the
    optimizer a range on the index even where it does not plan the OR.
    """
    if last is None:
        return "1=1", []
    if len(last) != len(key):
        raise CopyError(f"checkpoint has {len(last)} key values for a {len(key)}-column key", phase="copy")
    cols = [ident(c) for c in key]
    ors: list[str] = []
    params: list[Any] = [last[0]]
    for i in range(len(cols)):
        parts = [f"{cols[j]} = %s" for j in range(i)] + [f"{cols[i]} > %s"]
        params.extend(last[: i + 1])
        ors.append("(" + " AND ".join(parts) + ")")
    return f"{cols[0]} >= %s AND (" + " OR ".join(ors) + ")", params


#: types whose values travel as hex literals (X'..'): raw bytes never pass through a text literal
BINARY_TYPES = frozenset({"binary", "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "geometry", "point",
                          "linestring", "polygon", "multipoint", "multilinestring", "multipolygon",
                          "geometrycollection"})


def literal_expr(column: str, data_type: str) -> str:
    """SQL that makes the *source* render ``column`` as a ready SQL literal.

    The copy never decodes and re-escapes row values in Python (the slow part
    of a client-side copy): the source returns each row as one ``(...)``
    VALUES tuple, built with QUOTE() (``NULL`` for NULL), hex for binary
    types, and FLOAT widened to DOUBLE so its value survives the text form.
    """
    c = ident(column)
    if data_type in BINARY_TYPES:
        return f"IF({c} IS NULL, 'NULL', CONCAT('X''', HEX({c}), ''''))"
    if data_type == "bit":  # b'0101': HEX of a BIT value can have an odd number of digits
        return f"IF({c} IS NULL, 'NULL', CONCAT('b''', BIN({c} + 0), ''''))"
    if data_type == "float":
        return f"QUOTE(CAST({c} AS DOUBLE))"
    # one character set for the whole tuple: columns in two non-Unicode
    # character sets (latin1 and cp1251, say) cannot be concatenated as they are
    return f"CONVERT(QUOTE({c}) USING utf8mb4)"


def key_expr(info: TableInfo, column: str) -> str:
    return f"CAST({ident(column)} AS DOUBLE)" if column in info.float_columns else ident(column)


def chunk_select(info: TableInfo, last: tuple[Any, ...] | None, limit: int) -> tuple[str, list[Any]]:
    """The next chunk: its key columns (for the checkpoint) and each row as a
    rendered VALUES tuple, in key order after ``last``."""
    where, params = after_key_clause(info.key, last)
    order = ", ".join(ident(c) for c in info.key)
    row = "CONCAT('(', " + ", ',', ".join(literal_expr(c, info.types.get(c, "")) for c in info.columns) + ", ')')"
    keys = ", ".join(key_expr(info, c) for c in info.key)
    sql = (T + f"SELECT {keys}, {row} FROM {qualified(info.db, info.table)} "
           f"WHERE {where} ORDER BY {order} LIMIT %s")
    return sql, [*params, int(limit)]


def replace_statements(db: str, table: str, columns: tuple[str, ...], tuples: list[str],
                       max_bytes: int = MAX_STATEMENT_BYTES) -> list[str]:
    """Multi-row ``REPLACE`` statements of rendered ``(...)`` tuples, each under
    ``max_bytes`` (max_allowed_packet is 16 MiB by default)."""
    head = T + f"REPLACE INTO {qualified(db, table)} ({quoted_columns(columns)}) VALUES "
    out: list[str] = []
    batch: list[str] = []
    size = 0
    for t in tuples:
        if batch and size + len(t) > max_bytes:
            out.append(head + ",".join(batch))
            batch, size = [], 0
        batch.append(t)
        size += len(t) + 1
    if batch:
        out.append(head + ",".join(batch))
    return out


def create_table_sql(create_sql: str) -> str:
    """The source's ``SHOW CREATE TABLE`` text, made idempotent."""
    prefix = "CREATE TABLE "
    if not create_sql.startswith(prefix):
        raise CopyError(f"unexpected SHOW CREATE TABLE output: {create_sql[:60]!r}", phase="copy")
    return T + "CREATE TABLE IF NOT EXISTS " + create_sql[len(prefix):]
