"""The cutover's drainer following the source in the background: a drain waits for the follower to
reach its position (it is not stopped first), and a follower that failed is reported at once."""

from __future__ import annotations

import json
import time

import pytest

from migrator.fleet.gtid import GtidPos
from migrator.fleet.mysql import binlog_pos, qualified
from migrator.fleet.mysql import connect as mysql_connect

from .cutover_setup import prepare_converged


def _write(conn, db: str, n: int, start: int) -> None:
    with conn.cursor() as cur:
        for i in range(start, start + n):
            cur.execute(f"INSERT INTO {qualified(db, 'users')} (local_id, data) VALUES (%s, %s)",
                        (9_000_000 + i, json.dumps({"follow": i})))


def test_a_drain_while_following_reaches_the_position_without_stopping_the_tail_first(fleet):
    prep = prepare_converged(fleet, (2,))
    db = prep.spec.databases[0]
    d = prep.drainer
    d.drain_to(binlog_pos(mysql_connect(prep.source, fleet.credentials)), 30)
    d.collect({(db, "users"): ("local_id",)})
    assert d.follow()
    with mysql_connect(prep.source, fleet.credentials) as src, mysql_connect(prep.target, fleet.credentials) as dst:
        _write(src, db, 200, 0)
        time.sleep(0.3)  # the follower applies most of it by itself
        _write(src, db, 50, 200)
        head = binlog_pos(src)
        stats = d.drain_to(head, 30, save=False)
        assert d._follower is None, "the drain did not stop the follower"
        assert GtidPos.parse(str(d.applied())).contains(GtidPos.parse(head))
        assert stats.reached
        with dst.cursor() as cur:
            cur.execute(f"SELECT COUNT(*) FROM {qualified(db, 'users')} WHERE local_id >= 9000000")
            assert cur.fetchone()[0] == 250
    keys = d.collected()[(db, "users")]
    assert len(keys) == 250  # every key the follower and the drain applied, once each


def test_a_follower_that_failed_makes_the_drain_fail_at_once(fleet):
    prep = prepare_converged(fleet, (3,))
    db = prep.spec.databases[0]
    d = prep.drainer
    d.drain_to(binlog_pos(mysql_connect(prep.source, fleet.credentials)), 30)
    with mysql_connect(prep.target, fleet.credentials) as dst, dst.cursor() as cur:
        cur.execute("SET SESSION sql_log_bin = 0")
        cur.execute(f"DROP TABLE {qualified(db, 'users')}")  # the follower's apply fails on it
    assert d.follow()
    with mysql_connect(prep.source, fleet.credentials) as src:
        _write(src, db, 5, 0)
        head = binlog_pos(src)
        t0 = time.monotonic()
        with pytest.raises(Exception) as err:
            d.drain_to(head, 60)
        assert time.monotonic() - t0 < 30, "the drain waited out its timeout for a follower that had failed"
    assert "users" in str(err.value) or "1146" in str(err.value), err.value


def test_a_wake_ends_the_tails_wait_for_its_reader(fleet):
    """Stopping a follower wakes its tail: the wait for the reader's next message ends at once
    instead of at its next poll (the drain under the fence stops the follower)."""
    import threading

    prep = prepare_converged(fleet, (4,))
    d = prep.drainer
    with mysql_connect(prep.source, fleet.credentials) as src:
        d.drain_to(binlog_pos(src), 30)
    tailer = d._tailer
    # the reader sends a tick at each master heartbeat (every 250 ms): wake 30 ms after one arrived;
    # a busy box may delay the wake past the next tick, so a few tries
    woken = []
    for _ in range(5):
        assert tailer._receive(5.0)  # a tick (or more) just came
        tailer._pending.clear()
        threading.Timer(0.03, tailer.wake).start()
        t0 = time.monotonic()
        got = tailer._message_ready(20.0)
        woken.append((got, round(time.monotonic() - t0, 3)))
        if not got:
            break
    assert any(not got and waited < 10 for got, waited in woken), woken  # woken, not by the reader
