"""A transaction of any size is held in bounded memory (no servers): over the bound its changes leave as parts
when nothing can undo them, or go to a file on local disk while a savepoint or an XA prepare could."""

from __future__ import annotations

import struct

import pytest

from migrator.engine.binlog import client as bl
from migrator.engine.binlog.reader import Gtid, Spill, Txn, TxnReader, format_pos


def ch(k: int) -> tuple:
    return (1, "u", (str(k),), None, (str(k), "1"))


def keys(changes) -> list[int]:
    return [int(c[2][0]) for c in changes]


def fill(t: Txn, ks, limit: int) -> list:
    parts = []
    for k in ks:
        t.changes.append(ch(k))
        parts.extend(t.bound(limit))
    return parts


def test_over_the_bound_a_transaction_leaves_in_parts_and_keeps_at_most_the_bound():
    t = Txn(Gtid(0, 1, 9), 0)
    parts = fill(t, range(25), 10)
    assert [keys(p.changes) for p in parts] == [list(range(10)), list(range(10, 20))]
    assert all(p.partial and p.gtid == t.gtid and not p.statements for p in parts)
    assert keys(t.changes) == list(range(20, 25)) and t.count == 25 and t.spill is None


def test_after_a_savepoint_it_spills_and_a_rollback_to_truncates_the_spill():
    t = Txn(Gtid(0, 1, 9), 0)
    parts = fill(t, range(12), 10)  # 0..9 leave: nothing can undo them
    t.savepoint("s")  # at change 12
    parts += fill(t, range(12, 40), 10)  # nothing leaves now: 10..11 + 12..39 go to disk
    assert len(parts) == 1 and t.spill is not None and len(t.changes) < 10
    t.rollback_to("s")
    assert t.count == 12
    parts += fill(t, range(100, 103), 10)
    got = keys(parts[0].changes) + [k for p in t.held_parts() for k in keys(p.changes)] + keys(t.changes)
    assert got == [*range(12), 100, 101, 102]


def test_an_xa_prepare_spills_instead_of_leaving():
    t = Txn(Gtid(0, 1, 9), 0, xid=b"x1")
    assert fill(t, range(35), 10) == []
    assert t.spill is not None and t.spill.count == 30 and keys(t.changes) == list(range(30, 35))
    t.discard()  # XA ROLLBACK
    assert t.spill is None and t.changes == []


def test_a_spill_truncates_inside_a_chunk_and_reads_back_in_order():
    s = Spill()
    try:
        s.write([ch(k) for k in range(5)])
        s.write([ch(k) for k in range(5, 9)])
        s.truncate(7)
        s.write([ch(50)])
        assert [k for c in s.chunks() for k in keys(c)] == [0, 1, 2, 3, 4, 5, 6, 50] and s.count == 8
        s.truncate(0)
        assert list(s.chunks()) == [] and s.count == 0
    finally:
        s.close()


def gtid_event(domain: int, server: int, seq: int, xid: bytes | None = None) -> bl.Event:
    from migrator.engine.binlog.reader import FL_PREPARED_XA

    body = struct.pack("<QIB", seq, domain, FL_PREPARED_XA if xid else 0)
    if xid:
        body += struct.pack("<iBB", 1, len(xid), 0) + xid
    return bl.Event(bl.GTID, 0, server, 0, body)


def test_a_transaction_that_spilled_moves_the_position_only_after_its_last_part():
    rd = TxnReader("0-1-8", ["db"], part_changes=10)
    rd.feed(gtid_event(0, 1, 9))
    txn = rd._txn
    assert txn is not None
    txn.savepoint("s")  # as a SAVEPOINT event would
    for k in range(25):
        txn.changes.append(ch(k))
        assert txn.bound(rd.part_changes) == []  # spilled: a savepoint is set
    assert rd.feed(bl.Event(bl.XID, 0, 1, 0, struct.pack("<Q", 1))) is None  # its end comes with its parts
    seen = []
    for p in rd.take_parts():
        seen.append((p.partial, keys(p.changes), format_pos(rd.position)))
    assert seen[:-1] == [(True, list(range(10)), "0-1-8"), (True, list(range(10, 20)), "0-1-8")]
    assert seen[-1] == (False, list(range(20, 25)), "0-1-9")


def test_the_keys_of_a_huge_change_become_the_whole_table():
    from migrator.engine.catch_up.statements import WHOLE_TABLE
    from migrator.engine.verify.changes import note_key
    from migrator.engine.verify.checksums import LiteralKey

    keys: set = set()
    for k in range(5):
        note_key(keys, LiteralKey((str(k),)), limit=4)
    assert keys == {LiteralKey(WHOLE_TABLE)}  # compared whole: no key set grows past the bound
    note_key(keys, LiteralKey(("9",)), limit=4)
    assert keys == {LiteralKey(WHOLE_TABLE)}


def test_the_bound_is_read_where_the_reader_runs_and_bad_values_say_what_to_set(monkeypatch):
    from migrator.engine.binlog.reader import TxnReader, part_changes_from_env

    monkeypatch.delenv("MIGRATOR_CATCHUP_PART_CHANGES", raising=False)
    assert part_changes_from_env() == 5000
    monkeypatch.setenv("MIGRATOR_CATCHUP_PART_CHANGES", "100")
    assert TxnReader("0-1-8", ["db"]).part_changes == 100
    assert TxnReader("0-1-8", ["db"], part_changes=7).part_changes == 7
    for bad in ("lots", "0", "-5"):
        monkeypatch.setenv("MIGRATOR_CATCHUP_PART_CHANGES", bad)
        with pytest.raises(ValueError, match="MIGRATOR_CATCHUP_PART_CHANGES"):
            part_changes_from_env()


def test_wide_changes_leave_by_bytes_long_before_the_change_count():
    """The bound counts the bytes of the row events a transaction's changes came from: three 1 MiB rows over a
    2 MiB bound leave as parts of what was read, each carrying its bytes (the tail's round bound counts them)."""
    t = Txn(Gtid(0, 1, 9), 0)
    parts = []
    for k in range(5):
        t.changes.append(ch(k))
        t.size += 1 << 20  # the row event it came from
        parts.extend(t.bound(5000, 2 << 20))
    assert [keys(p.changes) for p in parts] == [[0, 1], [2, 3]]
    assert [p.size for p in parts] == [2 << 20, 2 << 20] and keys(t.changes) == [4]


def test_wide_changes_after_a_savepoint_spill_by_bytes_and_come_back_with_their_size():
    t = Txn(Gtid(0, 1, 9), 0)
    t.savepoint("s")
    for k in range(6):
        t.changes.append(ch(k))
        t.size += 1 << 20
        assert t.bound(5000, 2 << 20) == []
    assert t.spill is not None and t.spill.count == 6 and t.changes == []
    back = list(t.held_parts())
    assert [keys(p.changes) for p in back] == [[0, 1], [2, 3], [4, 5]] and all(p.size > 0 for p in back)


def test_the_byte_bound_is_read_where_the_reader_runs(monkeypatch):
    from migrator.engine.binlog.reader import DEFAULT_PART_BYTES, part_bytes_from_env

    monkeypatch.delenv("MIGRATOR_CATCHUP_PART_BYTES", raising=False)
    assert part_bytes_from_env() == DEFAULT_PART_BYTES == 32 << 20
    monkeypatch.setenv("MIGRATOR_CATCHUP_PART_BYTES", "4096")
    assert TxnReader("0-1-8", ["db"]).part_bytes == 4096
    assert TxnReader("0-1-8", ["db"], part_bytes=None).part_bytes is None
    for bad in ("lots", "0"):
        monkeypatch.setenv("MIGRATOR_CATCHUP_PART_BYTES", bad)
        with pytest.raises(ValueError, match="MIGRATOR_CATCHUP_PART_BYTES"):
            part_bytes_from_env()
