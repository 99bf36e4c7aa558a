"""A pipeline step that gives up lands in the migration record, and `split --yes` says so at once.

A real `migrator worker` runs the steps; the copy's first step fails (preflight:
the target already holds a moving shard), RQ's failure callback records it, and
the foreground `migrator split --yes` stops following and exits 3 (refused) with the
reason and the next step in one line, instead of waiting on a migration that will not go on.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time

from migrator.engine.migration import MigrationStore, Phase
from migrator.ops import command
from tests.integration.cli_helpers import assert_one_line_error, run_cli
from tests.integration.ops.operator_support import host_conn, stop_process


def test_a_failed_step_is_recorded_and_split_exits_at_once(fleet):
    with host_conn(fleet, "MySQL003A") as c, c.cursor() as cur:  # the target is not empty for db00002
        cur.execute("CREATE DATABASE IF NOT EXISTS db00002")
        cur.execute("CREATE TABLE IF NOT EXISTS db00002.pins (local_id BIGINT PRIMARY KEY, data TEXT)")
        cur.execute("INSERT INTO db00002.pins VALUES (1, 'in the way')")
    worker = subprocess.Popen([sys.executable, "-m", "migrator", "--config", str(fleet.config_path), "worker",
                               "--name", "stops-1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        t0 = time.monotonic()
        res = run_cli("move", "--shards", "2-3", "--to", "MySQL003A", "--yes", config=fleet.config_path, timeout=120)
        took = time.monotonic() - t0
    finally:
        stop_process(worker)
    assert res.returncode == 3, (res.stdout, res.stderr)
    assert_one_line_error(res, "stopped in copy-start", "next:")  # the plan printed on stdout, the verdict one line
    assert took < 60
    mids = [m["id"] for m in command.status(fleet.config)["migrations"]]
    assert len(mids) == 1
    st, _ = MigrationStore(fleet.zk).state(mids[0])
    assert st.stopped and st.stopped["step"] == "copy-start" and "migrator resume" in st.stopped["next"]
    assert st.phase in (Phase.PREFLIGHT, Phase.PLANNED)
    # resuming clears the verdict (the step runs again and would record a new one if it fails again)
    command.abort(fleet.config, mids[0])


def test_a_step_whose_worker_died_is_enqueued_again_then_stops_naming_where(fleet):
    """RQ's verdict on a job whose worker died (``AbandonedJobError``, no message) is not a stop: the failure
    callback enqueues the step again as it was, once however many workers' cleanups report it, and says so
    in the record; after the last retry the stop names the step and the death, not RQ's class name."""
    from rq import Queue
    from rq.exceptions import AbandonedJobError

    from jobs import failure
    from migrator.fleet import redis_client
    from migrator.ops import steps

    mid = command.plan_move(fleet.config, "2-3", "MySQL003A").spec.id
    store = MigrationStore(fleet.zk)
    conn = redis_client.connect(fleet.config)
    queue = Queue("abandoned", connection=conn)
    dead = steps.enqueue_finish(conn, mid, str(fleet.config_path), queue=queue.name, attempt=2, since=123.0)
    for _ in range(2):  # two workers' registry cleanups find it
        failure.record(dead, conn, AbandonedJobError, AbandonedJobError(), None)
    again = [j for j in queue.get_jobs() if j.id != dead.id]
    assert len(again) == 1, again
    assert again[0].func_name == "jobs.pipeline.finish" and again[0].kwargs == dead.kwargs
    assert again[0].meta["abandoned"] == 1 and again[0].meta["step"] == "finish"
    st = store.state(mid)[0]
    assert not st.stopped and "the worker running finish" in st.error and "enqueued again" in st.error, st.error
    last = again[0]
    last.meta["abandoned"] = failure.ABANDONED_RETRIES
    failure.record(last, conn, AbandonedJobError, AbandonedJobError(), None)
    st = store.state(mid)[0]
    assert st.stopped and st.stopped["step"] == "finish", st
    assert "the worker running finish" in st.stopped["reason"] and "AbandonedJobError" not in st.stopped["reason"]
    assert len(queue.get_jobs()) == 2  # not enqueued again
    command.abort(fleet.config, mid)


@contextlib.contextmanager
def _zookeeper_paused(fleet):
    """The sandbox's ZooKeeper stopped (SIGSTOP) inside the block: a connection is accepted and never answered."""
    pid = fleet.sandbox.state.procs["zookeeper"].pid
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def _run_scheduled(queue) -> list:
    """Run the jobs scheduled on ``queue`` now, in this process, as a worker whose scheduler found them due
    would; returns them."""
    from rq.job import Job

    registry = queue.scheduled_job_registry
    jobs = [Job.fetch(i, connection=queue.connection) for i in registry.get_job_ids()]
    for job in jobs:
        registry.remove(job)
        job.perform()
    return jobs


def test_a_dead_steps_callback_that_meets_zookeeper_away_enqueues_it_once_zookeeper_is_back(fleet, monkeypatch):
    """Two workers' registry cleanups report a dead ``finish`` job while ZooKeeper is paused (SIGSTOP), and a
    step of another migration fails meanwhile. No callback can read or write the record, and none drops its
    step: the one that claimed the death hands its work to a job on the step's queue, which, run while
    ZooKeeper is still away, tries again later; once ZooKeeper is back the dead step is enqueued again,
    once, with its death in the record, and the failed step's stop is recorded. Before, the callback took
    its 24 h claim, its reads failed, and the step was neither enqueued again nor stopped."""
    from rq import Queue
    from rq.exceptions import AbandonedJobError

    from jobs import failure
    from migrator.fleet import redis_client
    from migrator.ops import steps

    monkeypatch.setattr(failure, "CONNECT_S", 1.0)  # each try waits this long for a ZooKeeper that never answers
    died_mid = command.plan_move(fleet.config, "2-3", "MySQL003A").spec.id
    failed_mid = command.plan_move(fleet.config, "0-1", "MySQL003A").spec.id
    store = MigrationStore(fleet.zk)
    conn = redis_client.connect(fleet.config)
    queue = Queue("abandoned-zk", connection=conn)
    dead = steps.enqueue_finish(conn, died_mid, str(fleet.config_path), queue=queue.name)
    failed = steps.enqueue_finish(conn, failed_mid, str(fleet.config_path), queue=queue.name)
    with _zookeeper_paused(fleet):
        cleanups = [threading.Thread(target=failure.record, args=(dead, conn, AbandonedJobError, AbandonedJobError(),
                                                                   None)) for _ in range(2)]
        for t in cleanups:
            t.start()
        failure.record(failed, conn, RuntimeError, RuntimeError("the step's own failure"), None)
        for t in cleanups:
            t.join()
        assert {j.id for j in queue.get_jobs()} == {dead.id, failed.id}  # nothing enqueued again yet
        first = _run_scheduled(queue)  # ZooKeeper still away: each is tried again later
        assert sorted(j.meta["migration"] for j in first) == sorted([died_mid, failed_mid]), first
        assert {j.func_name for j in first} == {steps.RECORD_LATER_JOB}
        assert {j.id for j in queue.get_jobs()} == {dead.id, failed.id}
    monkeypatch.setattr(failure, "CONNECT_S", 10.0)
    second = _run_scheduled(queue)  # ZooKeeper is back
    assert sorted(j.meta["tries"] for j in second) == [2, 2], [j.meta for j in second]
    again = [j for j in queue.get_jobs() if j.id not in (dead.id, failed.id)]
    assert len(again) == 1 and again[0].func_name == steps.FINISH_JOB and again[0].args == (died_mid,), again
    assert again[0].meta["abandoned"] == 1 and again[0].kwargs == dead.kwargs
    st = store.state(died_mid)[0]
    assert not st.stopped and "the worker running finish" in st.error and again[0].id in st.error, st.error
    st = store.state(failed_mid)[0]
    assert st.stopped and st.stopped["step"] == "finish" and "the step's own failure" in st.stopped["reason"], st
    assert not queue.scheduled_job_registry.get_job_ids()  # nothing left to try
    for mid in (died_mid, failed_mid):
        command.abort(fleet.config, mid)
