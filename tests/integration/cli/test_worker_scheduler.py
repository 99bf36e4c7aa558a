"""A delayed job runs soon after the worker holding RQ's scheduler lock dies.

Delayed steps (the pipeline's re-checks, a rebalance's advances) are moved onto the queue by the
scheduler of one ``migrator worker``. When that worker is killed, its lock lives on in Redis for
61 s; after that another live worker must take the scheduler over within seconds (RQ's default is
its maintenance, every 10 minutes). The lock's expiry is played here by deleting the key.
"""

from __future__ import annotations

import datetime as dt
import signal
import time

from rq import Queue, Worker

from migrator.fleet import redis_client
from tests.faults.harness import signal_tree
from tests.integration.engine.cutover_setup import Workers

#: from the lock's expiry to the delayed job done: a maintenance interval + a dequeue wait, on a busy box
BOUND_S = 40.0


def test_a_live_worker_takes_the_scheduler_over(zk_root, tmp_path):
    cfg, cfg_path, _creds, _zk = zk_root
    redis = redis_client.connect(cfg)
    workers = Workers(cfg_path, tmp_path)
    lock = f"rq:scheduler-lock:{workers.queue}"
    try:
        holder = workers.start(1).procs[0]
        deadline = time.monotonic() + 30
        while not redis.exists(lock):
            assert time.monotonic() < deadline, workers.logs()
            time.sleep(0.1)
        workers.start(1)  # the second worker finds the lock taken: it runs no scheduler
        queue = Queue(workers.queue, connection=redis)
        while len(Worker.all(queue=queue)) < 2:
            assert time.monotonic() < deadline + 30, workers.logs()
            time.sleep(0.1)
        time.sleep(1)
        assert workers.logs().count("Acquired scheduler lock") == 1, workers.logs()
        signal_tree(holder.pid, signal.SIGKILL)
        holder.wait(10)
        redis.delete(lock)  # what Redis does 61 s after the holder died
        t0 = time.monotonic()
        job = queue.enqueue_in(dt.timedelta(seconds=1), "time.time")
        while job.get_status(refresh=True) != "finished":
            assert time.monotonic() - t0 < BOUND_S, f"the delayed job is {job.get_status()}\n{workers.logs()}"
            time.sleep(0.5)
        print(f"delayed job done {time.monotonic() - t0:.1f} s after the scheduler lock expired")
    finally:
        workers.stop()
        redis.delete(lock)
        redis.close()
