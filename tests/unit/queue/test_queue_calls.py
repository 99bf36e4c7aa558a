"""Calls that span partitions: call keys, per-item answers, partial errors and what the load and its ledger
make of them (pure)."""

from __future__ import annotations

import datetime as dt
import hashlib
import time

import pytest

from migrator.queue.errors import PartiallyApplied, QueueError, ShardUnavailable, UnknownQueue, from_wire
from migrator.queue.ledger import Ledger, check_ledger
from migrator.queue.load import LoadResult, _Run
from migrator.queue.model import (
    CALL_KEY_PREFIX,
    MAX_BATCH,
    MAX_DEDUPE_KEY,
    MAX_IDEMPOTENCY_KEY,
    EnqueueJob,
    EnqueueResult,
    call_dedupe_key,
    partition_of_key,
)
from migrator.queue.service import _answers, _enqueue_error, _partial_error
from migrator.queue.storage import Claim, answer_for


def test_a_dedupe_key_s_partition_is_the_one_it_always_was():
    # stored jobs depend on it: a key must keep finding its side table
    for key in ("a", "k17", "user@example.com"):
        assert partition_of_key(key, 7) == int.from_bytes(hashlib.md5(key.encode()).digest()[:8], "big") % 7
    assert partition_of_key("anything", 1) == 0


def test_call_keys_are_one_per_call_and_position_and_fit_the_side_table():
    keys = {call_dedupe_key(k, i) for k in ("c1", "c2", "C1", "c1 ") for i in range(3)}
    assert len(keys) == 12  # the column compares case- and trailing-blank-insensitively: hashed apart
    assert call_dedupe_key("c1", 0) == call_dedupe_key("c1", 0)
    longest = call_dedupe_key("x" * MAX_IDEMPOTENCY_KEY, MAX_BATCH - 1)
    assert longest.startswith(CALL_KEY_PREFIX) and len(longest) <= MAX_DEDUPE_KEY


def test_a_job_s_own_dedupe_key_cannot_pose_as_a_call_key():
    from migrator.queue.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="U\\+001E"):
        EnqueueJob(body="x", dedupe_key=call_dedupe_key("c1", 0))
    assert EnqueueJob(body="x", dedupe_key="plain").dedupe_key == "plain"


def test_why_an_ack_missed():
    claim = Claim("ab" * 16, dt.datetime(2026, 12, 1), 1)
    assert answer_for(claim, []) == "NOT_FOUND"
    assert answer_for(claim, [(2, claim.token)]) == "ALREADY_ACKED"  # acked OK by this claim
    assert answer_for(claim, [(0, claim.token)]) == "ALREADY_ACKED"  # a failure ack, back in NEW
    assert answer_for(claim, [(3, claim.token)]) == "ALREADY_ACKED"  # a failure ack with no attempt left
    assert answer_for(claim, [(1, "cd" * 16)]) == "STALE_CLAIM"  # claimed again
    assert answer_for(claim, [(0, None)]) == "STALE_CLAIM"  # reaped, or given back
    assert answer_for(claim, [(2, "cd" * 16)]) == "STALE_CLAIM"  # another claim's ack


def test_answers_leave_the_failed_partitions_items_open():
    groups = {0: [0, 2], 1: [1, 3]}
    assert _answers(4, groups, {0: [True, False], 1: ["ALREADY_ACKED", "NOT_FOUND"]}) == \
        ["OK", "ALREADY_ACKED", "STALE_CLAIM", "NOT_FOUND"]
    assert _answers(4, groups, {1: ["OK", "OK"]}) == [None, "OK", None, "OK"]


def _result(i: int, dup: bool = False) -> EnqueueResult:
    return EnqueueResult(id=1000 + i, partition=0, deduplicated=dup)


def test_a_failure_that_did_nothing_is_the_cause_itself():
    cause = ShardUnavailable("shard 4 stayed frozen")
    assert _partial_error(cause, [None, None], "acks", "retry") is cause
    assert _enqueue_error(cause, [None], [EnqueueJob(body="a")], None) is cause


def test_a_partly_done_enqueue_says_whether_a_retry_repeats_it():
    cause = ShardUnavailable("shard 4 stayed frozen")
    jobs = [EnqueueJob(body="a"), EnqueueJob(body="k", dedupe_key="k"), EnqueueJob(body="b")]
    results = [_result(0), None, _result(2)]
    # unkeyed jobs stored and no idempotency key: a retry would store them again
    exc = _enqueue_error(cause, results, jobs, None)
    assert isinstance(exc, PartiallyApplied) and not exc.retryable and exc.status == 409
    assert exc.results == results and "2 of 3 jobs" in exc.message and "positions 0, 2" in exc.message
    # the same with an idempotency key: the cause's code, retryable, with what was stored
    exc = _enqueue_error(cause, results, jobs, "call-1")
    assert type(exc) is ShardUnavailable and exc.retryable and exc.results == results
    # only keyed jobs stored: their dedupe keys make the retry safe
    exc = _enqueue_error(cause, [None, _result(1), None], jobs, None)
    assert type(exc) is ShardUnavailable and exc.retryable and "2 of 3" not in exc.message
    # a cause that is not a queue error keeps its meaning on the wire
    exc = _partial_error(UnknownQueue("queue q does not exist"), ["OK", None], "acks", "retry")
    assert type(exc) is UnknownQueue and exc.results == ["OK", None]
    exc = _partial_error(RuntimeError("boom"), ["OK", None], "acks", "retry")
    assert type(exc) is QueueError and not exc.retryable and "boom" in exc.message


def test_results_travel_on_the_wire():
    exc = ShardUnavailable("frozen")
    assert "results" not in exc.to_wire()
    exc.results = [_result(0), None]
    wire = exc.to_wire()
    assert wire["results"] == [{"id": 1000, "partition": 0, "deduplicated": False}, None]
    back = from_wire(wire)
    assert type(back) is ShardUnavailable and back.retryable and back.results == wire["results"]
    back = from_wire({"code": "PARTIALLY_APPLIED", "message": "m", "retryable": False, "results": ["OK"]})
    assert isinstance(back, PartiallyApplied) and back.results == ["OK"]


class _StoresPart:
    """An enqueue that stores the first and last job of each call, then fails (as a frozen partition does)."""

    def __init__(self, run: list[_Run]):
        self.run = run
        self.calls = 0

    def enqueue(self, queue: str, jobs: list[EnqueueJob]) -> list[EnqueueResult]:
        self.calls += 1
        self.run[0].stop_producing.set()
        exc = PartiallyApplied("2 of 3 jobs were enqueued")
        exc.results = [_result(0), None, _result(2)]
        raise exc


def test_the_load_ledger_records_what_a_failed_enqueue_stored(tmp_path):
    ledger = Ledger(tmp_path / "l.db")
    holder: list[_Run] = []
    api = _StoresPart(holder)
    run = _Run(api, "q", ledger, LoadResult(queue="q", ledger_path=str(tmp_path / "l.db")), None)
    holder.append(run)
    run.produce(rate=0, batch=3, deadline=time.monotonic() + 5)
    ledger.close()
    assert api.calls == 1, "a PARTIALLY_APPLIED enqueue is not retried as a whole"
    assert run.result.enqueued == 2 and len(run.outstanding) == 2
    assert run.result.errors["PARTIALLY_APPLIED"] == 1
    import sqlite3

    db = sqlite3.connect(tmp_path / "l.db")
    assert sorted(j for (j,) in db.execute("SELECT job_id FROM enqueued")) == [1000, 1002]
    db.close()


def test_the_ledger_counts_an_already_acked_execution_as_done(tmp_path):
    path = tmp_path / "l.db"
    ledger = Ledger(path)
    ledger.set_meta(queue="q", started=1.0, ended=10.0)
    ledger.enqueued([("k1", 1, 1.0, 1.1), ("k2", 2, 1.0, 1.1), ("k3", 3, 1.0, 1.1)])
    ledger.executed([("k1", 1, "c1", 1, 2.0, 3.0, "OK"), ("k2", 2, "c2", 1, 2.0, 3.0, "ALREADY_ACKED"),
                     ("k3", 3, "c3", 1, 2.0, 3.0, "OK"), ("k3", 3, "c4", 2, 4.0, 5.0, "ALREADY_ACKED")])
    ledger.close()
    # every key has a done execution: the queue is not asked (no service, no config needed)
    rep = check_ledger(None, path)  # type: ignore[arg-type]
    assert rep.completed == 3 and rep.lost == 0 and rep.e2e_p50_ms is not None
    assert rep.double_bug == 1 and not rep.ok  # two executions each told their ack was done
