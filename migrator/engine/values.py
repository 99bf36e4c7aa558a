"""Exact values: how a column is read, compared and hashed so that no path loses a bit.

Used wherever rows or keys pass through Python or through a text rendering:
the copy's chunk keys (:mod:`migrator.engine.copy_load`), verify's row images,
chunk bounds and re-copies (:mod:`migrator.engine.verify`), and so the
cutover's compare under the fence. The binlog path (catch-up) renders its own
exact literals from the row images (:mod:`migrator.engine.binlog.rows`).

What MariaDB's text protocol does to each type (checked on MariaDB 10.11.19
with PyMySQL 1.2.4 and a utf8mb4 connection, session ``time_zone = '+00:00'``;
a value read, written back with ``REPLACE`` and compared by ``CHECKSUM TABLE``:
``tests/integration/engine/test_values.py``):

===================================  =================================================  ======================
type                                 through the text protocol                           read here as
===================================  =================================================  ======================
FLOAT                                **changed**: 6 significant digits (``0.143443``     ``CAST(c AS DOUBLE)``
                                     for 0.14344295859336853); 97% of 100,000 random
                                     floats came back another float
FLOAT(M,D), DOUBLE(M,D)              exact (D decimals of a value stored rounded to D)   FLOAT(M,D) as DOUBLE
DOUBLE                               exact: the shortest digits that parse back          as is
                                     (100,000 random doubles; ``-0`` is stored 0)
integers, BIGINT UNSIGNED, DECIMAL   exact                                               as is
DATE, DATETIME(n), TIME(n), YEAR     exact (negative TIME too)                           as is
TIMESTAMP(n)                         exact in a ``+00:00`` session                       as is
INET6, UUID                          exact: canonical text, parsed back to the bytes     as is
GEOMETRY, BINARY, VARBINARY, BLOB    exact: bytes                                        as is
ENUM                                 **changed**: the label ``''`` is both a member      ``c + 0`` (the index)
                                     ``''`` and the invalid value (index 0)
SET                                  exact as a value                                    ``c + 0`` (the bit set)
BIT                                  exact as a value (bytes)                            ``c + 0``
CHAR, VARCHAR, TEXT, JSON            **changed** where the character set has bytes       ``CAST(c AS BINARY)``
                                     utf8mb4 cannot hold: cp1251 ``0x98`` comes back
                                     ``?`` (latin1 maps every byte and is exact)
===================================  =================================================  ======================

ENUM, SET and BIT are read as numbers for their keys too: ``ORDER BY`` sorts
an ENUM or SET by its number but ``c > 'x'`` compares labels, so keyset paging
by label skips rows; ``bit_col = X'000B'`` found the row whose value is 11
through the column's index and the row whose value is 0 without it.

A value read as :func:`read_expr` says is exact in Python and is written back
exactly by PyMySQL's parameter escaping (a float as ``repr`` + ``e0``, bytes as
``_binary'..'``, which a character column stores byte for byte). Compared with
a key column (``c > %s``) each read value orders as the column's index does:
bytes against a character column are compared in the column's collation (a
``_binary`` literal is coercible, the column implicit), an index against an
ENUM numerically. Verify's row image (:func:`image_expr`) hashes the same exact
forms as bytes.
"""

from __future__ import annotations

from migrator.fleet.mysql import ident

#: single-precision floats: the text protocol rounds them to 6 significant digits
FLOAT_TYPES = frozenset({"float"})
#: types whose exact value is their number (an ENUM's index, a SET's bit set, a BIT's value)
NUMBERED_TYPES = frozenset({"enum", "set", "bit"})
#: types whose value is text in a character set (information_schema DATA_TYPE; JSON is a LONGTEXT)
CHARACTER_TYPES = frozenset({"char", "varchar", "tinytext", "text", "mediumtext", "longtext", "json"})


def read_expr(sql: str, data_type: str) -> str:
    """SQL that reads the value of ``sql`` (a column of type ``data_type``) exactly into Python."""
    t = (data_type or "").lower()
    if t in FLOAT_TYPES:
        return f"CAST({sql} AS DOUBLE)"
    if t in NUMBERED_TYPES:
        return f"({sql} + 0)"
    if t in CHARACTER_TYPES:
        return f"CAST({sql} AS BINARY)"
    return sql


def read_column(column: str, data_type: str) -> str:
    """:func:`read_expr` of a column by name (quoted here)."""
    return read_expr(ident(column), data_type)


def image_expr(column: str, data_type: str) -> str:
    """The bytes verify hashes for one column: its exact value as a binary string."""
    t = (data_type or "").lower()
    c = ident(column)
    if t in FLOAT_TYPES:
        return f"CAST(CAST({c} AS DOUBLE) AS BINARY)"
    if t in ("enum", "set"):
        return f"CAST({c} + 0 AS BINARY)"
    return f"CAST({c} AS BINARY)"  # BIT and GEOMETRY: their stored bytes; numbers and times: exact text


def max_expr(alias: str, data_type: str) -> str:
    """The largest value of a key column ``alias`` (over a chunk), read exactly: the last row in
    the column's index order. A binary cast does not keep a collation's order, so a character
    column's maximum is taken first and cast after; every other read keeps the order."""
    if (data_type or "").lower() in CHARACTER_TYPES:
        return read_expr(f"MAX({alias})", data_type)
    return f"MAX({read_expr(alias, data_type)})"
