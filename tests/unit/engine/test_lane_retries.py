"""How a catch-up lane waits before writing a part again, by cause."""

from __future__ import annotations

import pymysql
from tenacity import RetryCallState, Retrying

from migrator.engine.catch_up import lanes


def _state(exc: BaseException, attempt: int) -> RetryCallState:
    st = RetryCallState(Retrying(), fn=None, args=(), kwargs={})
    st.attempt_number = attempt
    st.set_exception((type(exc), exc, None))
    return st


DEADLOCK = pymysql.err.OperationalError(1213, "Deadlock found when trying to get lock; try restarting transaction")
GONE = pymysql.err.OperationalError(2013, "Lost connection to server during query")


def test_a_deadlock_victim_writes_again_almost_at_once_and_more_often():
    waits = [lanes._retry_wait(_state(DEADLOCK, n)) for n in range(1, 10)]
    assert max(waits[:3]) <= 0.008  # ms, not the 50 ms back-off of a lost connection
    assert not lanes._retry_stop(_state(DEADLOCK, 9)) and lanes._retry_stop(_state(DEADLOCK, 10))


def test_a_lost_connection_backs_off():
    assert lanes._retry_wait(_state(GONE, 1)) >= 0.05
    assert lanes._retry_wait(_state(GONE, 3)) >= 0.2
    assert not lanes._retry_stop(_state(GONE, 5)) and lanes._retry_stop(_state(GONE, 6))
