"""An image read only for its key (an update's before image, a deleted row) never has its strings and BLOBs
hex-encoded: the key decoder steps over them and lands where the full decoder does (no servers)."""

from __future__ import annotations

import struct

from migrator.engine.binlog.rows import (
    T_BLOB,
    T_LONG,
    T_STRING,
    T_VARCHAR,
    UPDATE,
    TableMap,
    decode_rows,
)


def _table() -> TableMap:
    return TableMap(1, "db", "t", (T_LONG, T_VARCHAR, T_BLOB, T_STRING, T_VARCHAR),
                    (0, 300, 3, (T_STRING, 40), 20), (False, True, True, False, False),
                    ("id", "vc", "b", "c", "k2"), (True,) * 5, (False,) * 5, (0, 4))


def _image(i: int, blob: bytes, null_vc: bool = False) -> bytes:
    out = bytes([0b10 if null_vc else 0]) + struct.pack("<i", i)
    if not null_vc:
        out += struct.pack("<H", 5) + b"hello"
    out += len(blob).to_bytes(3, "little") + blob
    out += bytes([3]) + b"abc"
    out += bytes([2]) + b"k" + bytes([48 + i % 10])
    return out


def test_the_key_decoder_skips_what_is_not_key_and_ends_where_the_full_one_does():
    tm = _table()
    full, key = tm.decoder(), tm.key_decoder()
    for i, blob, null_vc in ((1, b"\x00\xff" * 70_000, False), (2, b"", True), (3, b"x", False)):
        d = b"zz" + _image(i, blob, null_vc) + b"tail"
        whole, p1 = full(d, 2)
        keyed, p2 = key(d, 2)
        assert p1 == p2 == len(d) - 4
        assert keyed[0] == whole[0] == str(i) and keyed[4] == whole[4]
        assert whole[2] == "X'" + blob.hex() + "'" and keyed[2] == ""
        assert keyed[1] == ("NULL" if null_vc else "") and keyed[3] == ""


def test_an_update_decodes_its_before_image_for_the_key_only():
    tm = _table()
    before, after = _image(7, b"old" * 1000), _image(7, b"new" * 1000)
    n = len(tm.types)
    body = bytes([n]) + b"\x1f" + b"\x1f" + before + after  # column count, both images' column bitmaps
    (got_before, got_after), = decode_rows(body, tm, UPDATE, 0)
    assert got_before[0] == "7" and got_before[2] == ""
    assert got_after == tm.decoder()(after, 0)[0] and got_after[2] == "X'" + (b"new" * 1000).hex() + "'"
