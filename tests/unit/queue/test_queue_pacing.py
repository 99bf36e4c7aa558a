"""Backoff, rate limiting, claims and request models (pure)."""

from __future__ import annotations

import datetime as dt

import pytest

from migrator.queue.errors import BodyTooLarge, InvalidArgument, RateLimited, from_wire
from migrator.queue.model import (
    MAX_BODY_BYTES,
    EnqueueJob,
    JobState,
    QueueConfig,
    check_queue_name,
    job_id,
    split_job_id,
)
from migrator.queue.pacing import BACKOFF_CAP, TokenBucket, backoff_seconds
from migrator.queue.storage import Claim


def test_backoff_is_capped_exponential_with_jitter():
    assert backoff_seconds(1, rand=lambda: 0.0) == 0.5
    assert backoff_seconds(1, rand=lambda: 1.0) == 1.0
    assert backoff_seconds(4, rand=lambda: 1.0) == 8.0
    assert backoff_seconds(4, rand=lambda: 0.0) == 4.0
    assert backoff_seconds(50, rand=lambda: 1.0) == BACKOFF_CAP
    assert backoff_seconds(10_000, rand=lambda: 0.0) == BACKOFF_CAP / 2
    assert backoff_seconds(0, rand=lambda: 1.0) == 1.0
    vals = {backoff_seconds(3) for _ in range(50)}
    assert len(vals) > 1 and all(2.0 <= v <= 4.0 for v in vals)


def test_token_bucket():
    now = [0.0]
    b = TokenBucket(10, clock=lambda: now[0])
    assert b.take(25) == 10
    assert b.take(1) == 0
    now[0] += 0.5
    assert b.take(10) == 5
    b.give_back(3)
    assert b.take(10) == 3
    assert TokenBucket(0).take(1000) == 1000  # unlimited
    b.configure(100)
    now[0] += 10
    assert b.take(1000) == 100


def test_claim_round_trip_and_garbage():
    c = Claim("ab" * 16, dt.datetime(2026, 11, 22, 15, 0, 1, 123456), 2)
    assert Claim.parse(c.encode()) == c
    for bad in ("", "zzz", "x.y.z", "ab" * 16 + ".2026.1"):
        with pytest.raises(InvalidArgument):
            Claim.parse(bad)


def test_job_ids_and_names():
    jid = job_id(5, 123)
    assert split_job_id(jid) == (5, 123)
    with pytest.raises(InvalidArgument):
        split_job_id(123)  # type 0: not a job
    with pytest.raises(InvalidArgument):
        split_job_id(-1)
    assert check_queue_name("emails_2") == "emails_2"
    for bad in ("", "a-b", "a b", "x" * 41, "é"):
        with pytest.raises(InvalidArgument):
            check_queue_name(bad)


def test_request_models():
    with pytest.raises(BodyTooLarge):
        EnqueueJob(body="x" * (MAX_BODY_BYTES + 1))
    with pytest.raises(ValueError):
        EnqueueJob(priority=4)
    with pytest.raises(ValueError):
        EnqueueJob(run_after=1.0, delay_seconds=1.0)
    with pytest.raises(ValueError):
        QueueConfig(fifo=True, partitions=3)
    assert JobState.parse("pending") is JobState.NEW and JobState.parse(3) is JobState.FAIL
    err = from_wire({"code": "RATE_LIMITED", "message": "slow down"})
    assert isinstance(err, RateLimited) and err.retryable
