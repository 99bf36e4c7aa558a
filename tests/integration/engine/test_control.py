"""Pause/resume through RQ jobs, abort, dry runs, partition moves and the CLI."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rq import Queue
from rq.registry import FinishedJobRegistry

from migrator.engine.copy import table_progress
from migrator.engine.migration import MigrationStore, Options, Phase
from migrator.engine.plan import maintenance_paused
from migrator.errors import MigratorError
from migrator.fleet import redis_client
from migrator.fleet.mysql import qualified
from migrator.ops import command, steps
from migrator.ops.worker import SimpleWorker

MIGRATOR = str(Path(sys.executable).with_name("migrator"))


def _run_jobs_until(fleet, mid: str, done, limit: int = 500) -> None:
    """Run queued jobs in this process, one at a time, until ``done()`` (the
    catch-up job that follows the copy is left queued)."""
    r = redis_client.connect(fleet.config)
    w = SimpleWorker([Queue(steps.queue_of(fleet.config, mid), connection=r)], connection=r)
    for _ in range(limit):
        if done():
            return
        if not w.work(burst=True, max_jobs=1):
            break
    assert done(), "queued jobs ran out before the step finished"


def _phase(fleet, mid: str) -> Phase:
    return MigrationStore(fleet.zk).state(mid)[0].phase


@pytest.mark.parametrize("fleet", [800], indirect=True)
def test_pause_stops_between_chunks_and_resume_finishes_through_rq(fleet, conns):
    spec = command.plan_split(fleet.config, "MySQL001A",
                              options=Options(chunk_rows=50, chunk_max_rows=50, copy_workers=2)).spec
    chunks = []

    def after_chunk(prog):
        chunks.append(prog["table"])
        if len(chunks) == 5:
            command.pause(fleet.config, spec.id)
            # the copy looks at the pause at most every 0.25 s (control_interval_s): on a fast box the
            # rest of the copy fits in that; this worker's next look then sees the pause
            time.sleep(0.3)

    out = command.run_copy(fleet.config, spec.id, after_chunk=after_chunk)
    assert "paused" in out["statuses"] and out["phase"] == Phase.COPYING.value
    progress = table_progress(fleet.zk, spec.id)
    rows_at_pause = sum(p["rows"] for p in progress)
    assert 0 < rows_at_pause and not all(p["done"] for p in progress)
    # the pause holds: another run does nothing
    assert command.run_copy(fleet.config, spec.id)["rows"] == 0

    res = command.resume(fleet.config, spec.id)
    assert res["job"] and res["phase"] == Phase.COPYING.value
    _run_jobs_until(fleet, spec.id, lambda: _phase(fleet, spec.id) != Phase.COPYING)
    assert _phase(fleet, spec.id) == Phase.CATCHING_UP
    # the copy handed over to catch-up by enqueuing its job by name
    q = Queue(steps.migration_queue(spec), connection=redis_client.connect(fleet.config))
    assert [j.func_name for j in q.jobs] == ["jobs.catch_up.run_passes"]
    # table jobs recorded progress in job meta, and no secret went there
    reg = FinishedJobRegistry(queue=q)
    metas = [q.fetch_job(j).meta for j in reg.get_job_ids()]
    table_metas = [m for m in metas if m.get("step") == "copy"]
    assert table_metas and all({"rows", "bytes", "rows_per_s", "eta_s", "status"} <= set(m) for m in table_metas)
    blob = json.dumps(metas, default=str)
    assert fleet.credentials.mysql_password not in blob and fleet.credentials.zk_digest.split(":")[1] not in blob
    final = table_progress(fleet.zk, spec.id)
    assert sum(p["rows"] for p in final) <= 2 * 800 * 2 + 200 + 50 * len(final)  # nothing copied twice
    with conns("MySQL001A").cursor() as c1, conns("MySQL003A").cursor() as c2:
        for db in spec.databases:
            c1.execute(f"CHECKSUM TABLE {qualified(db, 'pins')}")
            c2.execute(f"CHECKSUM TABLE {qualified(db, 'pins')}")
            assert c1.fetchone()[1] == c2.fetchone()[1]


def test_abort_drops_the_target_copies_and_releases_locks_and_pause(fleet, conns):
    spec = command.plan_split(fleet.config, "MySQL001A").spec
    command.run_copy(fleet.config, spec.id)
    store = MigrationStore(fleet.zk)
    assert store.holders(spec.shards) == {2: spec.id, 3: spec.id}
    out = command.abort(fleet.config, spec.id, settle_s=0)
    assert out["dropped"] == ["db00002", "db00003"] and out["was"] == "catching_up"
    assert _phase(fleet, spec.id) == Phase.ABORTED
    assert store.holders(spec.shards) == {}
    assert all(maintenance_paused(fleet.zk, s) is None for s in spec.shards)
    fleet.sandbox.wait_pairs_converged()
    for host in ("MySQL003A", "MySQL003B"):
        with conns(host).cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name IN ('db00002', 'db00003')")
            assert cur.fetchone()[0] == 0, host
    with conns("MySQL001A").cursor() as cur:  # the source is untouched
        cur.execute("SELECT COUNT(*) FROM db00002.pins")
        assert cur.fetchone()[0] == 20
    with pytest.raises(MigratorError, match="aborted"):
        command.run_copy(fleet.config, spec.id)


def test_dry_run_estimates_and_touches_nothing(fleet):
    res = command.plan_split(fleet.config, "MySQL001A", dry_run=True)
    assert not res.stored
    est = res.estimate
    assert len(est.tables) == 10 and est.rows > 0 and est.bytes > 0 and est.rows_per_s > 0 and est.eta_s > 0
    assert est.rate_source == "sampled"
    assert MigrationStore(fleet.zk).list() == []
    assert MigrationStore(fleet.zk).holders(range(8)) == {}
    assert all(maintenance_paused(fleet.zk, s) is None for s in range(8))
    # after a finished copy, the dry run uses the measured rate
    spec = command.plan_move(fleet.config, [7], "MySQL003A").spec
    command.run_copy(fleet.config, spec.id)
    again = command.plan_split(fleet.config, "MySQL001A", dry_run=True).estimate
    assert again.rate_source == "stored" and again.rows_per_s > 0


def test_move_partition_copies_only_the_partition_table(fleet, conns):
    with conns("MySQL002A").cursor() as cur:
        cur.execute("CREATE TABLE db00005.jobs_mail_p1 (local_id BIGINT NOT NULL AUTO_INCREMENT, "
                    "state TINYINT NOT NULL, "
                    "updated_at DATETIME(6) NOT NULL, body BLOB, PRIMARY KEY (local_id, state, updated_at)) "
                    "PARTITION BY RANGE COLUMNS (state, updated_at) (PARTITION pNEW VALUES LESS THAN (0, MAXVALUE), "
                    "PARTITION p_CATCHALL VALUES LESS THAN (MAXVALUE, MAXVALUE))")
        cur.executemany("INSERT INTO db00005.jobs_mail_p1 (state, updated_at, body) VALUES (%s, NOW(6), %s)",
                        [(i % 3, f"job {i}".encode()) for i in range(300)])
    record = {"name": "mail", "config": {}, "partitions": [
        {"index": 0, "shard": 4, "table": "jobs_mail_p0"}, {"index": 1, "shard": 5, "table": "jobs_mail_p1"}]}
    fleet.zk.ensure(fleet.zk.path("queues"))
    fleet.zk.client.create(fleet.zk.path("queues", "mail"), json.dumps(record).encode())
    with pytest.raises(MigratorError, match="no partition 7"):
        command.plan_move_partition(fleet.config, "mail", 7, "MySQL003A")
    spec = command.plan_move_partition(fleet.config, "mail", 1, "MySQL003A").spec
    assert (spec.kind, spec.shards, spec.tables, spec.queue, spec.partition) == \
        ("queue_partition", (5,), ("jobs_mail_p1",), "mail", 1)
    assert maintenance_paused(fleet.zk, 5) == spec.id
    assert command.preflight(fleet.config, spec.id).ok
    out = command.run_copy(fleet.config, spec.id)
    assert out["finished"] and out["rows"] == 300
    with conns("MySQL003A").cursor() as cur:
        cur.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = 'db00005'")
        assert [r[0] for r in cur.fetchall()] == ["jobs_mail_p1"]
        cur.execute("SELECT COUNT(*) FROM db00005.jobs_mail_p1")
        assert cur.fetchone()[0] == 300
    assert command.abort(fleet.config, spec.id)["dropped"] == ["db00005.jobs_mail_p1"]


def test_cli_prints_one_line_errors_and_fails_preflight_with_an_exit_code(fleet, conns):
    def cli(*args):
        return subprocess.run([MIGRATOR, "--config", str(fleet.config_path), *args], capture_output=True, text=True,
                              timeout=120)

    r = cli("move", "--shards", "4-7", "--to", "MySQL009A")
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "MySQL009A" in r.stderr
    assert "Traceback" not in r.stderr
    with conns("MySQL001A").cursor() as cur:
        cur.execute("CREATE TABLE db00002.nokey (a INT)")
    r = cli("split", "MySQL001A", "--yes", "--no-start", "--json")
    assert r.returncode == 0, r.stderr
    mid = json.loads(r.stdout)["id"]
    r = cli("preflight", mid)
    assert r.returncode != 0 and "FAIL primary keys: db00002.nokey" in r.stdout
    r = cli("copy", mid, "--sync")
    assert r.returncode != 0 and "preflight" in r.stderr and "Traceback" not in r.stderr
    r = cli("status", mid)
    assert r.returncode == 0 and "preflight" in r.stdout
    r = cli("abort", mid, "--yes")
    assert r.returncode == 0 and "aborted" in r.stdout


def test_a_slice_shorter_than_the_setup_still_copies_a_chunk(fleet):
    """Each copy job copies at least one chunk before it checks its slice deadline,
    so even a tiny slice (or a slow setup under load) makes progress."""
    plan = command.plan_move(fleet.config, "2-3", "MySQL003A", options=Options(chunk_rows=200))
    mid = plan.spec.id
    command.start_copy(fleet.config, mid, slice_s=0.0001)
    _run_jobs_until(fleet, mid, lambda: _phase(fleet, mid) == Phase.CATCHING_UP, limit=200)
    assert all(p["done"] for p in table_progress(fleet.zk, mid))
