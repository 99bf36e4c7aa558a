"""Workers: handlers by name, failure retries, lease heartbeats, graceful stop."""

from __future__ import annotations

import json
import threading
import time

import pytest

from migrator.queue.errors import InvalidArgument
from migrator.queue.model import EnqueueJob, QueueConfig
from migrator.queue.worker import load_handler, run_worker


def test_worker_runs_handlers_and_retries_failures(qs):
    qs.create_queue("wk", QueueConfig(default_attempts=2))
    ids = [r.id for r in qs.enqueue("wk", [EnqueueJob(body=str(i)) for i in range(6)])]
    stats = run_worker(qs, "wk", load_handler("tests.integration.queue.handlers:flaky"), concurrency=3,
                       max_jobs=12, poll_seconds=0.3)
    assert stats.succeeded == 6 and stats.failed == 6
    assert qs.counts("wk") == {"NEW": 0, "IPR": 0, "OK": 6, "FAIL": 0}
    assert qs.lookup("wk", ids[0]).custom_status == "second try"


def test_heartbeat_keeps_a_long_job_leased(qs):
    qs.create_queue("wh", QueueConfig(lease_seconds=0.6, default_attempts=1))
    qs.enqueue("wh", [EnqueueJob(body=json.dumps({"sleep": 1.5}))])
    reaper_stop = threading.Event()

    def reap():  # someone reaps aggressively meanwhile
        while not reaper_stop.is_set():
            qs.reap("wh")
            time.sleep(0.1)

    t = threading.Thread(target=reap)
    t.start()
    try:
        stats = run_worker(qs, "wh", load_handler("tests.integration.queue.handlers:slow"), max_jobs=1,
                           poll_seconds=0.3)
    finally:
        reaper_stop.set()
        t.join()
    assert stats.succeeded == 1 and stats.stale == 0 and stats.heartbeats >= 2
    assert qs.counts("wh")["OK"] == 1


def test_graceful_shutdown_finishes_running_jobs(qs):
    qs.create_queue("wg")
    qs.enqueue("wg", [EnqueueJob(body=json.dumps({"sleep": 0.8})) for _ in range(2)])
    stop = threading.Event()
    out = {}
    t = threading.Thread(target=lambda: out.update(s=run_worker(
        qs, "wg", load_handler("tests.integration.queue.handlers:slow"), concurrency=2, stop_event=stop,
        poll_seconds=0.2)))
    t.start()
    time.sleep(0.4)
    stop.set()
    t.join(10)
    assert not t.is_alive()
    assert out["s"].succeeded == 2
    assert qs.counts("wg") == {"NEW": 0, "IPR": 0, "OK": 2, "FAIL": 0}


def test_bad_handler_spec():
    for spec in ("nomodule", "no.such.module:f", "json:nope"):
        with pytest.raises(InvalidArgument):
            load_handler(spec)
