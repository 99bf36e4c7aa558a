"""Catch-up survives kill -9 of a real RQ worker mid-pass: re-running resumes
from the checkpoint and ends with source == target. The backlog spans many
binlog files (max_binlog_size at its minimum while it is written)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from rq import Queue

from migrator.engine import catch_up
from migrator.engine.catch_up.lanes import STAGGER_ENV
from migrator.engine.migration import MigrationStore, Phase
from migrator.fleet import redis_client
from migrator.fleet.gtid import GtidPos
from migrator.ops import steps
from migrator.ops.worker import SimpleWorker
from tests.conftest import SEED
from tests.integration.cli_helpers import rq_env
from tests.integration.engine import catchup_helpers as h

QUEUE = "catchup-test"


def _backlog(fleet, statements: int = 150, rows: int = 120) -> None:
    """Multi-row transactions on the moving shards, over many small binlog files."""
    with fleet.sandbox.root_conn(h.SOURCE) as c, c.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.max_binlog_size")
        old = cur.fetchone()[0]
        cur.execute("SET GLOBAL max_binlog_size = 65536")
        try:
            for i in range(statements):
                db = f"db{h.MOVING[i % 2]:05d}"
                cur.execute(f"INSERT INTO `{db}`.jobs (state, updated_at, body) "
                            f"SELECT 0, '2020-01-03', REPEAT('x', 40) FROM `{db}`.seq_1_to_{rows}")
                cur.execute(f"UPDATE `{db}`.jobs SET state = 1, updated_at = '2020-01-04' "
                            f"WHERE state = 0 ORDER BY local_id LIMIT {rows // 2}")
        finally:
            cur.execute("SET GLOBAL max_binlog_size = %s", (old,))


def test_kill_9_of_the_worker_mid_catch_up_then_resume(fleet):
    h.create_extra_tables(fleet, rows=10)
    spec = h.create_migration(fleet, converge_events=3000)
    h.copy_tables(fleet, spec)
    store = MigrationStore(fleet.zk)
    start = catch_up.copy_start(store, spec.id)[0]
    writer = h.Writer(fleet, seed=SEED, pause_s=0.01).start()
    worker = None
    try:
        _backlog(fleet)
        with h.conn(fleet, h.SOURCE) as c:
            head = GtidPos.parse(h.binlog_pos(c))
        job_id = steps.enqueue_passes(fleet.config, spec.id, queue=QUEUE)
        # lanes that wait before each round: the pass takes seconds however fast the box, so the kill
        # lands inside it (the applier outruns a 27k-event backlog in well under a second otherwise)
        env = {**rq_env(fleet.config), "PYTHONPATH": os.getcwd(), "MIGRATOR_CATCHUP_LANES": "4", STAGGER_ENV: "200"}
        worker = subprocess.Popen(
            # a SimpleWorker runs the job in its own process (a forking worker's horse
            # leaves the process group), so SIGKILL hits the process doing the work
            [sys.executable, "-m", "rq.cli", "worker", "--burst", "--worker-class", "migrator.ops.worker.SimpleWorker",
             QUEUE],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, env=env,
        )
        # wait until the worker checkpointed some batches, but not the whole backlog
        deadline = time.monotonic() + 60
        killed_at = None
        while time.monotonic() < deadline:
            node, _ = store.get_progress(spec.id, "catchup")
            if node and node.get("gtid") and GtidPos.parse(node["gtid"]) != start:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait(10)
                killed_at = GtidPos.parse(store.get_progress(spec.id, "catchup")[0]["gtid"])
                break
            time.sleep(0.02)
        assert killed_at is not None, "the worker never checkpointed"
        assert not killed_at.contains(head), "the pass finished before the kill: make the backlog bigger"
        assert store.get_progress(spec.id, "catchup")[0]["passes"] == []  # killed inside its first pass
        # resume: a new job, run by a worker in this process until converged
        r = redis_client.connect(fleet.config)
        steps.enqueue_passes(fleet.config, spec.id, queue=QUEUE)
        SimpleWorker([Queue(QUEUE, connection=r)], connection=r).work(burst=True)
        node = store.get_progress(spec.id, "catchup")[0]
        assert node["passes"], f"no pass recorded after resume (first job {job_id})"
        first = node["passes"][0]
        assert killed_at.contains(first["from_gtid"]) and GtidPos.parse(first["from_gtid"]) != start
        assert node["converged"] and MigrationStore(fleet.zk).state(spec.id)[0].phase == Phase.CONVERGED
    finally:
        if worker is not None and worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(10)
        writer.stop()
    final = h.wait_source_has_partner_writes(fleet)
    catch_up.drain_to(fleet.config, spec.id, final, timeout=60)
    assert h.compare(fleet, spec) == {}
