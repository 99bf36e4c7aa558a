"""Wide rows on their way through catch-up: the reader process's pipe, and the REPLACE of a wide row."""

from __future__ import annotations

import os
import pickle
import struct
import threading
from multiprocessing.connection import Connection

import pytest

from migrator.engine.binlog.process import _Pipe
from migrator.engine.catch_up.sql import WIDE_ROW, Target, replace_statements


def _pipe_pair() -> tuple[_Pipe, int]:
    """A :class:`_Pipe` and the write end of the pipe it reads."""
    r, w = os.pipe()
    back_r, back_w = os.pipe()
    os.close(back_r)
    return _Pipe(r, back_w), w


def test_a_message_larger_than_the_pipe_arrives_whole_and_in_order():
    pipe, w = _pipe_pair()
    writer = Connection(w, readable=False)  # what the reader process writes with
    big = {"rows": ["X'" + "41" * (3 << 20) + "'"], "n": 1}
    small = ("tick", 2)
    t = threading.Thread(target=lambda: (writer.send(big), writer.send(small), writer.close()))
    t.start()
    try:
        assert pipe.recv() == big
        assert pipe.recv() == small
        with pytest.raises(EOFError):
            pipe.recv()
    finally:
        t.join()
        pipe.close()


def test_the_long_header_of_multiprocessing_is_read():
    """Messages of 2 GiB or more carry -1 and an 8-byte size: the same reader takes that header."""
    pipe, w = _pipe_pair()
    body = pickle.dumps(["wide"])
    os.write(w, struct.pack("!i", -1) + struct.pack("!Q", len(body)) + body)
    os.close(w)
    try:
        assert pipe.recv() == ["wide"]
    finally:
        pipe.close()


def test_a_pipe_closed_mid_message_is_an_eof():
    pipe, w = _pipe_pair()
    os.write(w, struct.pack("!i", 100) + b"x" * 10)
    os.close(w)
    try:
        with pytest.raises(EOFError):
            pipe.recv()
    finally:
        pipe.close()


def _target() -> Target:
    return Target("`db`.`t`", "`id`,`data`", None, ("`id`",))


def test_a_wide_row_is_a_statement_of_its_own_in_bytes():
    wide = "X'" + "42" * (WIDE_ROW // 2) + "'"
    rows = [("1", "X'41'"), ("2", "X'41'"), ("3", wide), ("4", "X'43'")]
    out = list(replace_statements(_target(), rows))
    assert [type(s) for s in out] == [str, bytes, str]
    assert out[0].endswith("VALUES (1,X'41'),(2,X'41')")
    assert out[1] == (out[0].split("VALUES ")[0] + f"VALUES (3,{wide})").encode()
    assert out[2].endswith("VALUES (4,X'43')")


def test_narrow_rows_stay_text_in_shared_statements():
    out = list(replace_statements(_target(), [(str(i), "X'41'") for i in range(2500)]))
    assert all(isinstance(s, str) for s in out) and len(out) == 3
