"""A chunk of the copy: where it starts (the WHERE after the last key) and its checkpoint key.

Pure functions (unit-tested without a server), used by the copy
(:mod:`migrator.engine.copy`) in the RQ copy jobs. How a chunk's rows are
rendered and loaded is in :mod:`migrator.engine.copy_load`.

A chunk starts after the last key copied (keyset pagination:
``WHERE key > last_key ORDER BY key LIMIT n``); that key is the table's whole
checkpoint, stored in ZooKeeper as JSON (:func:`encode_key`).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
from typing import Any

from migrator.errors import MigratorError
from migrator.fleet.mysql import ident, tag

T = tag("copy")


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


def create_table_sql(create_sql: str) -> str:
    """The source's ``SHOW CREATE TABLE`` text, made idempotent."""
    prefix = "CREATE TABLE "
    if not create_sql.startswith(prefix):
        raise CopyError(f"unexpected SHOW CREATE TABLE output: {create_sql[:60]!r}", phase="copy")
    return T + "CREATE TABLE IF NOT EXISTS " + create_sql[len(prefix):]
