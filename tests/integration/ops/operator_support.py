"""Helpers of the operator tests: a migration brought to a phase, RQ in-process, rows on a host."""

from __future__ import annotations

import subprocess
import time
from typing import Any

from redis import Redis
from rq import Queue
from rq.job import Job
from rq.registry import FinishedJobRegistry

from migrator.engine.migration import MigrationStore, Options
from migrator.fleet import redis_client
from migrator.fleet.mysql import connect as mysql_connect
from migrator.fleet.mysql import qualified
from migrator.ops import command, steps
from migrator.ops.worker import SimpleWorker


def redis_of(fleet) -> Redis:
    return redis_client.connect(fleet.config)


def planned(fleet, shards: str = "2-3", target: str = "MySQL003A", **options: Any) -> str:
    res = command.plan_move(fleet.config, shards, target, options=Options(**options) if options else None)
    return res.spec.id


def copied(fleet, **options: Any) -> str:
    mid = planned(fleet, **options)
    command.run_copy(fleet.config, mid)
    return mid


def queues(fleet) -> list[Queue]:
    """The queues a plain ``migrator worker`` serves: the general one and every pair's."""
    r = redis_of(fleet)
    return [Queue(q, connection=r) for q in steps.worker_queues(fleet.hosts, None)]


def work(fleet, *, max_jobs: int | None = None) -> int:
    """Run queued jobs in this process; returns how many ran."""
    r = redis_of(fleet)
    w = SimpleWorker(queues(fleet), connection=r)
    w.work(burst=True, max_jobs=max_jobs)
    return w.successful_job_count + w.failed_job_count


def finished_jobs(fleet) -> list[Job]:
    r = redis_of(fleet)
    jobs = [Job.fetch(j, connection=r) for q in queues(fleet) for j in FinishedJobRegistry(queue=q).get_job_ids()]
    return sorted(jobs, key=lambda j: j.ended_at or j.enqueued_at)


def queued(fleet) -> int:
    return sum(q.count for q in queues(fleet))


def host_conn(fleet, name: str, db: str | None = None):
    return mysql_connect(fleet.hosts[name], fleet.credentials, database=db)


def count(fleet, host: str, db: str, table: str) -> int | None:
    conn = host_conn(fleet, host)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME=%s", (db,))
            if not cur.fetchone()[0]:
                return None
            cur.execute(f"SELECT COUNT(*) FROM {qualified(db, table)}")
            return int(cur.fetchone()[0])
    finally:
        conn.close()


def insert_pins(fleet, host: str, db: str, n: int) -> None:
    conn = host_conn(fleet, host)
    try:
        with conn.cursor() as cur:
            for i in range(n):
                cur.execute(f"INSERT INTO {qualified(db, 'pins')} (data) VALUES (%s)", (f'{{"op": {i}}}',))
    finally:
        conn.close()


def phase(fleet, mid: str) -> str:
    return MigrationStore(fleet.zk).state(mid)[0].phase.value


def wait_for(pred, timeout: float = 30.0, every: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(every)
    raise AssertionError("condition not met in time")


def stop_process(proc: subprocess.Popen, timeout: float = 10) -> None:
    """TERM a process a test started, KILL it if it does not go within ``timeout``."""
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class BackgroundLoad:
    """The queue load (:func:`migrator.queue.load.run_load`) in a thread until :meth:`stop`, with its ledger."""

    def __init__(self, cfg, queue: str, rate: float, ledger, **kw):
        import threading

        self.cfg, self.ledger = cfg, ledger
        self.stop_event = threading.Event()
        self.out: dict = {}
        self._thread = threading.Thread(target=self._run, args=(queue, rate, kw), daemon=True)

    def _run(self, queue: str, rate: float, kw: dict) -> None:
        from migrator.queue.load import run_load

        try:
            self.out["result"] = run_load(self.cfg, queue, rate, 3600, self.ledger, self.stop_event, **kw)
        except BaseException as exc:  # reported by stop()
            self.out["error"] = exc

    def start(self) -> BackgroundLoad:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stop_event.set()
        self._thread.join(120)

    def check(self) -> None:
        """The load ran without error and its ledger lost nothing acknowledged."""
        from migrator.queue.ledger import check_ledger

        assert "error" not in self.out, self.out.get("error")
        report = check_ledger(self.cfg, self.ledger)
        assert report.enqueued > 0 and report.lost == 0, report
