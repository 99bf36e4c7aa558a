"""The queue service over HTTP vs RQ, the same work on both sides (used by ``python -m bench.queue``).

Both sides: N no-op jobs are enqueued by the bench process, then W separate worker
processes take them until all N are done; the time is from the first enqueue to the
exit of the last worker (process start-up included on both sides).

* **queue service**: ``migrator queue serve --broker`` (the API with its dequeue
  broker, the way the fleet runs it); enqueue in batches of ``batch`` over HTTP;
  each worker process (``python -m bench.queue_http URL QUEUE BATCH``) dequeues up
  to ``batch`` jobs and acknowledges them in one call, until the queue holds no
  job is left (all N acknowledged).
* **RQ**: ``Queue.enqueue_many`` in batches of ``batch`` on the sandbox's Redis
  (its own db number), then W ``rq worker --burst --worker-class
  rq.worker.SimpleWorker`` processes (no fork per job) run the no-op job.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from migrator.queue.client import QueueClient
from migrator.queue.model import AckItem, EnqueueJob, QueueConfig
from migrator.sandbox import port_free

ROOT = Path(__file__).resolve().parents[1]
TOKEN_ENV = "MIGRATOR_BENCH_QUEUE_TOKEN"


def _free_port(start: int = 47000) -> int:
    for p in range(start, start + 2000):
        if port_free(p):
            return p
    raise RuntimeError("no free port for the queue server")


class Server:
    """``migrator queue serve --broker`` as a child process, stopped by pid."""

    def __init__(self, config_path: Path, token: str | None):
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token = token
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "migrator", "--config", str(config_path), "queue", "serve", "--broker",
             "--listen", f"127.0.0.1:{self.port}"],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"queue server exited: {self.proc.stderr.read()[-2000:]}")  # type: ignore[union-attr]
            try:
                if httpx.get(self.url + "/metrics", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError("queue server did not answer within 60 s")

    def client(self) -> QueueClient:
        return QueueClient(self.url, token=self.token)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def bench_http(server: Server, n: int, batch: int, workers: int, partitions: int) -> float:
    """Seconds for N jobs: enqueued over HTTP, then dequeued and acked by ``workers`` processes."""
    name = f"bench_{uuid.uuid4().hex[:6]}"
    with server.client() as c:
        c.create_queue(name, QueueConfig(partitions=partitions))
        try:
            env = {**os.environ, TOKEN_ENV: server.token or ""}
            t0 = time.perf_counter()
            for i in range(0, n, batch):
                c.enqueue(name, [EnqueueJob(body="{}") for _ in range(min(batch, n - i))])
            procs = [subprocess.Popen([sys.executable, "-m", "bench.queue_http", server.url, name, str(batch), str(n)],
                                      cwd=ROOT, env=env) for _ in range(workers)]
            codes = [p.wait() for p in procs]
            took = time.perf_counter() - t0
            assert codes == [0] * workers, codes
            counts = c.counts(name)
            assert counts["OK"] == n, counts
            return took
        finally:
            c.delete_queue(name)


def bench_rq(config: Any, n: int, batch: int, workers: int, db: int) -> float:
    """Seconds for N no-op RQ jobs: enqueue_many, then ``workers`` burst SimpleWorker processes
    (0: one SimpleWorker in this process)."""
    import redis
    from rq import Queue

    from migrator.fleet.redis_client import url_with_credentials

    url = url_with_credentials(config, db=db)
    r = redis.Redis.from_url(url)
    r.flushdb()
    try:
        q = Queue("bench", connection=r)
        t0 = time.perf_counter()
        for i in range(0, n, batch):
            q.enqueue_many([Queue.prepare_data("bench.queue.noop", result_ttl=3600) for _ in range(min(batch, n - i))])
        if workers == 0:  # one SimpleWorker in this process
            from rq import SimpleWorker

            SimpleWorker([q], connection=r).work(burst=True, logging_level="WARNING")
        else:
            rq_bin = str(Path(sys.executable).with_name("rq"))
            procs = [subprocess.Popen([rq_bin, "worker", "--burst", "--worker-class", "rq.worker.SimpleWorker",
                                       "--logging_level", "WARNING", "bench"], cwd=ROOT,
                                      env={**os.environ, "RQ_REDIS_URL": url},
                                      stdout=subprocess.DEVNULL) for _ in range(workers)]
            codes = [p.wait() for p in procs]
            assert codes == [0] * workers, codes
        took = time.perf_counter() - t0
        finished, failed = q.finished_job_registry.count, q.failed_job_registry.count
        assert finished == n and failed == 0, (finished, failed)
        return took
    finally:
        r.flushdb()
        r.close()


def work(url: str, queue: str, batch: int, total: int) -> int:
    """One worker process: take and acknowledge jobs until all ``total`` are done. Returns its share."""
    done = 0
    with QueueClient(url, token=os.environ.get(TOKEN_ENV) or None) as c:
        idle = 0
        while True:
            got = c.dequeue(queue, limit=batch)
            if got:
                idle = 0
                res = c.ack(queue, [AckItem(id=d.id, claim=d.claim) for d in got])
                done += sum(1 for x in res if x == "OK")
                continue
            idle += 1
            if idle >= 3:
                counts: dict[str, Any] = c.counts(queue)
                if counts.get("OK", 0) >= total:
                    return done
            time.sleep(0.01)


if __name__ == "__main__":
    work(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
