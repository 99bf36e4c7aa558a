"""A pipeline step that gives up lands in the migration record, and `split --yes` says so at once.

A real `migrator worker` runs the steps; the copy's first step fails (preflight:
the target already holds a moving shard), RQ's failure callback records it, and
the foreground `migrator split --yes` stops following and exits 3 (refused) with the
reason and the next step in one line, instead of waiting on a migration that will not go on.
"""

from __future__ import annotations

import subprocess
import sys
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
