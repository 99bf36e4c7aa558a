"""Raw binlog events forwarded to a target as ``BINLOG '<base64>'``: the bytes the fast apply path sends.

Runs in the catch-up reader process (marking where a statement ends) and in the catch-up worker
(:mod:`migrator.engine.catch_up.fast`: renaming a schema, building the statements).

``BINLOG '<base64>'`` is the statement ``mariadb-binlog`` writes: the server decodes the events and
applies them through the same row applier as a replica's SQL thread, below SQL (no parsing, no
planning, no row rendered as text on either side). A session first sends the source's format
description event (the post-header lengths and the checksum algorithm of the events that follow),
then table-map events followed by the rows events that use them. Each event goes as it was logged:
its 19-byte header, its body and, when the source writes checksums (``binlog_checksum=CRC32``), its
CRC32. An event changed on the way gets its length and checksum computed again.

A rows event whose flags carry ``STMT_END_F`` ends a statement: the server then closes the tables its
table maps opened, and the next rows event needs its table map again. Two cases change where a
statement ends: a statement that also wrote tables that do not move (their events are dropped, the end
flag with them: it goes onto the last event kept), and a statement cut across two ``BINLOG``
statements (a transaction larger than one statement's bytes): each ``BINLOG`` statement's last rows
event ends a statement, and the next one opens its tables with their table maps again.
"""

from __future__ import annotations

import base64
import struct
import zlib

#: a binlog event's common header: timestamp, type, server id, event size, next position, flags
HEADER_LEN = 19
#: rows event flag: the last event of a statement
STMT_END_F = 0x0001
#: where a rows event's flags are: after the header and the 6-byte table id
_ROWS_FLAGS = HEADER_LEN + 6
#: where a table map's schema name is: after the header, the table id and the flags
_MAP_SCHEMA = HEADER_LEN + 8


def ends_statement(raw: bytes) -> bool:
    """A raw rows event carries ``STMT_END_F``."""
    return bool(raw[_ROWS_FLAGS] & STMT_END_F)


def with_statement_end(raw: bytes, checksum: bool) -> bytes:
    """``raw`` (a rows event) with ``STMT_END_F`` set, its checksum computed again."""
    if ends_statement(raw):
        return raw
    out = bytearray(raw)
    out[_ROWS_FLAGS] |= STMT_END_F
    return _sealed(out, checksum)


def table_map_schema(raw: bytes) -> str:
    """The schema a raw table-map event names."""
    n = raw[_MAP_SCHEMA]
    return raw[_MAP_SCHEMA + 1:_MAP_SCHEMA + 1 + n].decode("utf-8")


def with_schema(raw: bytes, schema: str, checksum: bool) -> bytes:
    """A raw table-map event naming ``schema`` instead of its own (the reverse tail writes into tombstone
    schemas): the length in its header and its checksum computed again."""
    name = schema.encode("utf-8")
    if len(name) > 64:
        raise ValueError(f"schema name {schema!r} is longer than a table map can carry")
    n = raw[_MAP_SCHEMA]
    out = bytearray(raw[:_MAP_SCHEMA])
    out.append(len(name))
    out += name
    out += raw[_MAP_SCHEMA + 1 + n:]
    struct.pack_into("<I", out, 9, len(out))  # the event size in the header
    return _sealed(out, checksum)


def _sealed(event: bytearray, checksum: bool) -> bytes:
    if checksum:
        struct.pack_into("<I", event, len(event) - 4, zlib.crc32(memoryview(event)[:-4]))
    return bytes(event)


def statement(events: list[bytes]) -> bytes:
    """One ``BINLOG`` statement carrying ``events`` (raw, in order), as bytes for the connection."""
    return b"/* migrator:catchup */ BINLOG '" + base64.b64encode(b"".join(events)) + b"'"


def base64_len(raw_bytes: int) -> int:
    """The length of ``raw_bytes`` of events in a ``BINLOG`` statement (base64 grows them by a third)."""
    return (raw_bytes + 2) // 3 * 4
