"""What the binlog reader process sends its parent survives the pipe as the same typed message (no servers)."""

from __future__ import annotations

import pickle
from multiprocessing.reduction import ForkingPickler

import pytest

from migrator.engine.binlog.messages import Failure, Shapes, Tick, Txns
from migrator.engine.binlog.reader import Committed, Gtid, Shape, Statement

TXN = Committed(Gtid(0, 1, 5), Gtid(0, 1, 4), 1_700_000_000,
                [(7, "u", ("1",), None, ("1", "'a'")), (7, "d", ("2",), None, None)], [], 120, 4)
DDL = Committed(Gtid(0, 1, 6), Gtid(0, 1, 5), 1_700_000_001, [], [Statement("db", "TRUNCATE t")], 30, 5)


@pytest.mark.parametrize("msg", [
    Shapes([Shape(7, "db", "t", ("id", "v"), (0,))]),
    Txns([TXN, DDL], "0-1-6", 1_700_000_001, 123.5, "0-1-6,0-2-3"),
    Tick("0-1-9", 1_700_000_002, "0-1-9"),
    Failure("Could not find first log file name in binary log index file", 1236),
    Failure("boom", None),
])
def test_a_message_comes_out_of_the_pipe_as_it_went_in(msg):
    back = pickle.loads(bytes(ForkingPickler.dumps(msg)))  # what Connection.send/recv do
    assert back == msg and type(back) is type(msg)


def test_messages_are_read_by_shape():
    def kind(msg) -> str:
        match msg:
            case Txns(txns, position, _, _, state):
                return f"txns {len(txns)} to {position} ({state})"
            case Tick(position):
                return f"tick {position}"
            case Shapes(shapes):
                return f"shapes {[s.id for s in shapes]}"
            case Failure(message, code):
                return f"failure {code}: {message}"
        return "?"

    assert kind(Txns([TXN], "0-1-5", 0, 0.0, "0-1-5")) == "txns 1 to 0-1-5 (0-1-5)"
    assert kind(Tick("0-1-9", 0, "")) == "tick 0-1-9"
    assert kind(Shapes([Shape(3, "db", "t", ("id",), (0,))])) == "shapes [3]"
    assert kind(Failure("gone", 1236)) == "failure 1236: gone"


def test_a_message_cannot_be_changed_after_it_is_made():
    msg = Tick("0-1-9", 0, "")
    with pytest.raises(AttributeError):
        msg.position = "0-1-10"  # type: ignore[misc]
