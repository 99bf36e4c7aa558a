"""Savepoints in the binlog reader (no servers): which statements are savepoints, and what each does
to the changes read so far. The real binlog's shape is in tests/integration/engine/test_binlog_reader.py."""

from __future__ import annotations

import pytest

from migrator.engine.binlog.reader import Gtid, ReaderError, Txn, savepoint_statement


@pytest.mark.parametrize("query,want", [
    ("SAVEPOINT `s1`", ("set", "s1")),              # as MariaDB logs it
    ("ROLLBACK TO `s1`", ("rollback_to", "s1")),
    ("ROLLBACK TO SAVEPOINT S1", ("rollback_to", "s1")),  # savepoint names ignore case
    ("rollback work to savepoint `we``ird`", ("rollback_to", "we`ird")),
    ("ROLLBACK TO savepoint", ("rollback_to", "savepoint")),
    ("RELEASE SAVEPOINT `x`", ("release", "x")),
    ("ROLLBACK", None),                              # the end of an undone group
    ("ROLLBACK TO", None),
    ("SAVEPOINTS", None),
    ("XA ROLLBACK 'x'", None),
])
def test_savepoint_statements_are_told_from_a_full_rollback(query, want):
    assert savepoint_statement(query) == want


def _txn(*keys: int) -> Txn:
    t = Txn(Gtid(1, 1, 5), 0)
    for k in keys:
        t.changes.append((1, "u", (str(k),), None, (str(k), "1")))
    return t


def _keys(t: Txn) -> list[int]:
    return [int(ch[2][0]) for ch in t.changes]


def test_rollback_to_drops_what_came_after_its_savepoint_and_later_savepoints():
    t = _txn(1)
    t.savepoint("a")
    t.changes.append((1, "u", ("2",), None, ("2", "1")))
    t.savepoint("b")
    t.changes.append((1, "u", ("3",), None, ("3", "1")))
    t.rollback_to("a")
    assert _keys(t) == [1] and list(t.savepoints) == ["a"]
    t.changes.append((1, "u", ("4",), None, ("4", "1")))
    t.rollback_to("a")  # a savepoint stays after a rollback to it
    assert _keys(t) == [1]
    with pytest.raises(ReaderError, match="ROLLBACK TO `b`.*never set"):  # gone with the rollback to a
        t.rollback_to("b")
    assert _keys(t) == [1]


def test_a_savepoint_set_again_moves_and_release_undoes_nothing():
    t = _txn(1)
    t.savepoint("a")
    t.changes.append((1, "u", ("2",), None, ("2", "1")))
    t.savepoint("a")
    t.changes.append((1, "u", ("3",), None, ("3", "1")))
    t.rollback_to("a")
    assert _keys(t) == [1, 2]
    t.savepoint("b")
    t.release("a")  # a and everything set after it
    assert _keys(t) == [1, 2] and not t.savepoints
