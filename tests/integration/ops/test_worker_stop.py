"""An RQ worker of the migrator stops at once when its work is done (a burst) or it is told to.

A worker listens for stop and kill commands on a pub/sub thread. When that thread reads the reply to the
worker's unsubscribe before the worker tells it to stop (a race a burst or a SIGTERM loses about every
other time on this box with rq 2.12 and redis-py 8), rq's listener waited out its 60 s read first
(migrator.ops.worker). The race is made certain here: the listener has read the reply already.
"""

from __future__ import annotations

import time
import uuid

import pytest
from rq import Queue

from migrator.fleet import redis_client
from migrator.ops.worker import SimpleWorker, Worker


def _until(pred, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, "not in time"
        time.sleep(0.01)


@pytest.mark.parametrize("worker_class", [SimpleWorker, Worker], ids=["simple", "forking"])
def test_a_worker_whose_listener_read_the_unsubscribe_first_stops_at_once(zk_root, worker_class):
    cfg = zk_root[0]
    r = redis_client.connect(cfg)
    w = worker_class([Queue(f"stop-{uuid.uuid4().hex[:8]}", connection=r)], connection=r)
    w.subscribe()
    try:
        _until(lambda: w.pubsub.subscribed)
        w.pubsub.unsubscribe()  # the listener reads this reply before it is told to stop
        _until(lambda: not w.pubsub.subscribed)
    finally:
        t0 = time.monotonic()
        w.unsubscribe()  # what a stopping worker does
        took = time.monotonic() - t0
    assert took < 5, f"the worker took {took:.1f} s to stop its listener"
    assert not w.pubsub_thread.is_alive()
    r.close()
