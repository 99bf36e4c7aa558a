"""The SQL a lane writes: where a table's rows go (:class:`Target`), and its multi-row statements.

A lane's part of a round becomes, per table, multi-row ``DELETE ... WHERE key IN (...)`` and
``REPLACE INTO ... VALUES (...)`` statements (:mod:`.lanes`). Values arrive as SQL literals
already (the binlog reader decodes row images straight to them), so building a statement is
joining strings. A statement holds at most ``MAX_ROWS_PER_STATEMENT`` rows, and a ``REPLACE`` at
most ``MAX_BYTES_PER_STATEMENT`` bytes; a row of ``WIDE_ROW`` bytes or more is a statement of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pymysql

from migrator.fleet.mysql import tag

TAG = tag("catchup")
MAX_ROWS_PER_STATEMENT = 1000
MAX_BYTES_PER_STATEMENT = 4 << 20
#: a row with this many bytes of literals (or more) is a REPLACE of its own, sent as bytes
WIDE_ROW = 1 << 20


@dataclass
class Target:
    """Where one table's rows go, and which of its columns a REPLACE may write."""

    sql_table: str                  # `db`.`table` on the target
    columns_sql: str                # the REPLACE column list
    take: tuple[int, ...] | None    # indexes of the writable columns in the row image (None: all)
    key_sql: tuple[str, ...]        # quoted key column names


def target_for(conn: pymysql.connections.Connection, schema: str, table: str, names: tuple[str, ...],
               key_names: tuple[str, ...], quote: Callable[[str], str]) -> Target:
    """The :class:`Target` of one table: generated columns (which take no value) left out."""
    with conn.cursor() as cur:
        cur.execute(TAG + "SELECT COLUMN_NAME, IS_GENERATED FROM information_schema.COLUMNS "
                    "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s", (schema, table))
        gen = {r[0] for r in cur.fetchall() if (r[1] or "NEVER") != "NEVER"}
    if gen:
        take: tuple[int, ...] | None = tuple(i for i, n in enumerate(names) if n not in gen)
        cols = [names[i] for i in take]  # type: ignore[union-attr]
    else:
        take, cols = None, list(names)
    return Target(f"{quote(schema)}.{quote(table)}", ",".join(quote(c) for c in cols), take,
                  tuple(quote(k) for k in key_names))


def delete_statements(t: Target, keys: list[tuple[str, ...]]) -> list[str]:
    out = []
    head = f"{TAG}DELETE FROM {t.sql_table} WHERE "
    if len(t.key_sql) == 1:
        col = t.key_sql[0]
        for i in range(0, len(keys), MAX_ROWS_PER_STATEMENT):
            out.append(f"{head}{col} IN ({','.join(k[0] for k in keys[i:i + MAX_ROWS_PER_STATEMENT])})")
    else:
        cols = "(" + ",".join(t.key_sql) + ")"
        for i in range(0, len(keys), MAX_ROWS_PER_STATEMENT):
            vals = ",".join("(" + ",".join(k) + ")" for k in keys[i:i + MAX_ROWS_PER_STATEMENT])
            out.append(f"{head}{cols} IN ({vals})")
    return out


def replace_statements(t: Target, rows: Any) -> Iterator[str | bytes]:
    """The REPLACEs of ``rows``, built one at a time as they are taken: a lane holds one statement's
    text at once (a part of wide rows is never all built up front; a statement is given up before
    the next row's literal is built).

    A row whose literals come to ``WIDE_ROW`` bytes or more is a statement of its own, built as
    bytes in one join (:func:`wide_replace`): the driver then sends it without copying it again.
    """
    head = f"{TAG}REPLACE INTO {t.sql_table} ({t.columns_sql}) VALUES "
    take = t.take
    parts: list[str] = []
    size = len(head)
    for r in rows:
        vals = r if take is None else [r[i] for i in take]
        n = sum(map(len, vals)) + len(vals) + 2
        wide = n >= WIDE_ROW
        if parts and (wide or len(parts) >= MAX_ROWS_PER_STATEMENT or size + n > MAX_BYTES_PER_STATEMENT):
            sql = head + ",".join(parts)
            parts, size = [], len(head)
            yield sql
            del sql
        if wide:
            yield wide_replace(head, vals)
            continue
        parts.append("(" + ",".join(vals) + ")")
        size += n
    if parts:
        sql = head + ",".join(parts)
        parts = []
        yield sql


def wide_replace(head: str, vals: Any) -> bytes:
    """One row's REPLACE as bytes: the literals encoded one by one and joined once, so the statement
    costs the row's size once more (a ``str`` statement cost it twice more: the text, then the
    driver's encoding of it, both held while it is sent)."""
    pieces = [head.encode(), b"("]
    for i, v in enumerate(vals):
        if i:
            pieces.append(b",")
        pieces.append(v.encode())
    pieces.append(b")")
    return b"".join(pieces)
