"""Raw events forwarded to a target (no servers): a renamed table map and a moved statement end keep the
event's length and checksum right, and the reader's raw mode hands over whole events of the kept tables,
their keys decoded, the statement end of a dropped table's event moved onto the last kept one. The server's
side of it (``BINLOG '<base64>'`` applied) is in tests/integration/engine/test_fast_apply.py."""

from __future__ import annotations

import base64
import struct
import zlib

import pytest

from migrator.engine.binlog import client as bl
from migrator.engine.binlog import forward
from migrator.engine.binlog.reader import RAW, TxnReader
from migrator.engine.binlog.rows import T_LONG, table_map_names


def raw_event(etype: int, body: bytes, *, checksum: bool, flags: int = 0) -> bytes:
    size = 19 + len(body) + (4 if checksum else 0)
    head = struct.pack("<IBIIIH", 7, etype, 11, size, 0, flags)
    out = head + body
    return out + struct.pack("<I", zlib.crc32(out)) if checksum else out


def as_event(raw: bytes, *, checksum: bool) -> bl.Event:
    ts, etype, sid, _size, _pos, flags = struct.unpack_from("<IBIIIH", raw, 0)
    return bl.Event(etype, ts, sid, flags, raw[19:len(raw) - (4 if checksum else 0)], raw)


def table_map_body(tid: int, schema: str, table: str) -> bytes:
    """A table map of ``(id INT PRIMARY KEY)`` with its column names and primary key (full metadata)."""
    out = tid.to_bytes(6, "little") + b"\x01\x00"
    out += bytes([len(schema)]) + schema.encode() + b"\x00" + bytes([len(table)]) + table.encode() + b"\x00"
    out += b"\x01" + bytes([T_LONG]) + b"\x00" + b"\x00"  # one column, no type metadata, not nullable
    names = bytes([2]) + b"id"
    out += bytes([4, len(names)]) + names + bytes([8, 1, 0])  # COLUMN_NAME, SIMPLE_PRIMARY_KEY (column 0)
    return out


def write_rows_body(tid: int, keys: list[int], *, end: bool) -> bytes:
    out = tid.to_bytes(6, "little") + struct.pack("<H", 1 if end else 0) + struct.pack("<H", 2)  # v2, no extra
    out += b"\x01" + b"\x01"  # one column, all present
    for k in keys:
        out += b"\x00" + struct.pack("<i", k)  # null bitmap, the value
    return out


def check_crc(raw: bytes) -> None:
    assert struct.unpack("<I", raw[-4:])[0] == zlib.crc32(raw[:-4])
    assert struct.unpack_from("<I", raw, 9)[0] == len(raw)


@pytest.mark.parametrize("checksum", [True, False])
def test_a_renamed_table_map_keeps_its_length_and_checksum_right(checksum):
    raw = raw_event(bl.TABLE_MAP, table_map_body(5, "db00002", "pins"), checksum=checksum)
    out = forward.with_schema(raw, "_migrator_tomb_abc_db00002", checksum)
    body = out[19:len(out) - (4 if checksum else 0)]
    assert table_map_names(body)[:2] == ("_migrator_tomb_abc_db00002", "pins")
    assert forward.table_map_schema(out) == "_migrator_tomb_abc_db00002"
    assert struct.unpack_from("<I", out, 9)[0] == len(out)
    assert body[table_map_names(body)[2]:] == raw[19:len(raw) - (4 if checksum else 0)][len("db00002") + 2 + 8 + 6:]
    if checksum:
        check_crc(out)


def test_a_statement_end_set_on_the_way_keeps_the_checksum_right():
    raw = raw_event(bl.WRITE_ROWS_V2, write_rows_body(5, [1, 2], end=False), checksum=True)
    assert not forward.ends_statement(raw)
    out = forward.with_statement_end(raw, True)
    assert forward.ends_statement(out) and out[:25] == raw[:25] and out[27:-4] == raw[27:-4]
    check_crc(out)
    assert forward.with_statement_end(out, True) is out


def test_a_binlog_statement_carries_the_events_in_order():
    events = [b"abc", b"\x00\xff" * 10, b"z"]
    sql = forward.statement(events)
    assert sql.startswith(b"/* migrator:catchup */ BINLOG '") and sql.endswith(b"'")
    assert base64.b64decode(sql.split(b"'")[1]) == b"".join(events)
    assert forward.base64_len(len(b"".join(events))) == len(sql.split(b"'")[1])


def test_the_reader_in_raw_mode_hands_over_whole_events_with_their_keys_and_moves_a_dropped_statement_end():
    ck = True
    rd = TxnReader("0-1-1", ["db00002"], raw=True, checksum=ck)
    fde = raw_event(bl.FORMAT_DESCRIPTION, b"\x04\x00" + b"x" * 50, checksum=ck)
    rd.feed(as_event(fde, checksum=ck))
    assert rd.new_format and rd.format == fde
    rd.feed(bl.Event(bl.GTID, 0, 1, 0, struct.pack("<QIB", 2, 0, 0)))
    moving_map = raw_event(bl.TABLE_MAP, table_map_body(5, "db00002", "pins"), checksum=ck)
    staying_map = raw_event(bl.TABLE_MAP, table_map_body(6, "db00000", "pins"), checksum=ck)
    rd.feed(as_event(moving_map, checksum=ck))
    rd.feed(as_event(staying_map, checksum=ck))
    moving_rows = raw_event(bl.WRITE_ROWS_V2, write_rows_body(5, [1, 2], end=False), checksum=ck)
    rd.feed(as_event(moving_rows, checksum=ck))
    # the statement ends on an event of a table that stays: the end flag moves onto the moving table's event
    rd.feed(as_event(raw_event(bl.WRITE_ROWS_V2, write_rows_body(6, [9], end=True), checksum=ck), checksum=ck))
    txn = rd.feed(bl.Event(bl.XID, 0, 1, 0, struct.pack("<Q", 1)))
    assert txn is not None and len(txn.changes) == 1
    _sid, kind, keys, tm, ev, rows = txn.changes[0]
    assert kind == RAW and keys == (("1",), ("2",)) and tm == moving_map and rows == 2
    assert forward.ends_statement(ev) and ev[27:-4] == moving_rows[27:-4]
    check_crc(ev)


def test_an_event_over_the_raw_limit_is_decoded_as_rows():
    rd = TxnReader("0-1-1", ["db00002"], raw=True, raw_max=40, checksum=False)
    rd.feed(bl.Event(bl.GTID, 0, 1, 0, struct.pack("<QIB", 2, 0, 0)))
    rd.feed(as_event(raw_event(bl.TABLE_MAP, table_map_body(5, "db00002", "pins"), checksum=False), checksum=False))
    rd.feed(as_event(raw_event(bl.WRITE_ROWS_V2, write_rows_body(5, [1], end=True), checksum=False), checksum=False))
    rd.feed(as_event(raw_event(bl.WRITE_ROWS_V2, write_rows_body(5, list(range(2, 12)), end=True), checksum=False),
                     checksum=False))
    txn = rd.feed(bl.Event(bl.XID, 0, 1, 0, struct.pack("<Q", 1)))
    assert txn is not None
    assert [c[1] for c in txn.changes] == [RAW] + ["w"] * 10


def test_past_a_tables_first_events_the_raw_reader_reckons_rows_from_their_size_and_the_applier_decodes_keys():
    from migrator.engine.binlog.reader import LEARN_EVENTS
    from migrator.engine.catch_up.fast import ForwardedRows

    rd = TxnReader("0-1-1", ["db00002"], raw=True, checksum=True)
    rd.feed(bl.Event(bl.GTID, 0, 1, 0, struct.pack("<QIB", 2, 0, 0)))
    rd.feed(as_event(raw_event(bl.TABLE_MAP, table_map_body(5, "db00002", "pins"), checksum=True), checksum=True))
    for k in range(LEARN_EVENTS + 3):
        rows = list(range(k * 10, k * 10 + 1 + k % 4))
        rd.feed(as_event(raw_event(bl.WRITE_ROWS_V2, write_rows_body(5, rows, end=True), checksum=True),
                         checksum=True))
    txn = rd.feed(bl.Event(bl.XID, 0, 1, 0, struct.pack("<Q", 1)))
    assert txn is not None
    items = txn.changes
    assert [it[5] for it in items] == [1 + k % 4 for k in range(LEARN_EVENTS + 3)]  # fixed-width rows: exact
    assert all(it[2] is not None for it in items[:LEARN_EVENTS]) and all(it[2] is None for it in items[LEARN_EVENTS:])
    last = items[-1]
    k = LEARN_EVENTS + 2
    assert ForwardedRows().of(last, True) == [(str(x),) for x in range(k * 10, k * 10 + 1 + k % 4)]
