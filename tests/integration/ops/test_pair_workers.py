"""Workers near their data: ``migrator worker --pairs`` on a fleet of its own (4 pairs: two migrations
on disjoint pairs), its Redis requiring a password that only the secrets file holds.

Each migration's jobs, from the first copy job to the cleanup the scheduler enqueues at the end of
the retention, run on the worker of its source pair and nowhere else; nothing lands on the general
queue, which neither worker serves.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from redis import Redis
from rq import Queue
from rq.job import Job
from rq.registry import FinishedJobRegistry

from migrator.engine.migration import MigrationStore, Options, Phase
from migrator.fleet import config as config_mod
from migrator.fleet import redis_client
from migrator.fleet import zk as zk_mod
from migrator.ops import command, steps
from tests.conftest import own_sandbox
from tests.integration.ops.operator_support import stop_process

#: pair of each worker: (its --pairs, the move whose source it serves)
WORKERS = {"near1": ("MySQL001A,MySQL003A", "2-3", "MySQL003A"),
           "near2": ("MySQL002B,MySQL004A", "6-7", "MySQL004A")}  # a pair named by its B member works too


@pytest.fixture(scope="module")
def fleet4():
    with own_sandbox("migrator-pairs-", pairs=2, spare_pairs=2, shards=8, rows=20) as sb:
        yield sb


def _secure_redis(sb) -> str:
    """The sandbox's Redis requires a password; only its secrets file has it."""
    return config_mod.load_redis_credentials(sb.config()).password


def test_each_migration_runs_only_on_its_pairs_worker(fleet4, tmp_path, monkeypatch):
    for k in ("MIGRATOR_REDIS_PASSWORD", "MIGRATOR_REDIS_USERNAME"):
        monkeypatch.delenv(k, raising=False)
    sb = fleet4
    password = _secure_redis(sb)
    cfg = config_mod.load(sb.config_file)
    with pytest.raises(Exception, match="(?i)auth"):
        Redis.from_url(cfg.redis.url).ping()  # the URL alone no longer gets in
    r = redis_client.connect(cfg)
    assert r.ping()

    opts = Options(retention_s=1)
    mids = {name: command.plan_move(cfg, shards, target, options=opts).spec.id
            for name, (_, shards, target) in WORKERS.items()}
    procs = {}
    try:
        for name, (pairs, _, _) in WORKERS.items():
            log = (tmp_path / f"{name}.log").open("w")
            procs[name] = subprocess.Popen(
                [sys.executable, "-m", "migrator", "--config", str(sb.config_file), "worker", "--pairs", pairs,
                 "--name", name], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=str(Path(__file__).resolve().parents[3]))
            log.close()
        for mid in mids.values():
            command.launch(cfg, mid)
        deadline = time.monotonic() + 400
        with zk_mod.connect(cfg, config_mod.load_credentials(cfg)) as zk:
            store = MigrationStore(zk)
            while time.monotonic() < deadline:
                phases = {name: store.state(mid)[0].phase for name, mid in mids.items()}
                if all(p == Phase.CLEANED for p in phases.values()):
                    break
                if any(p in (Phase.FAILED, Phase.ABORTED) or (p == Phase.DONE and store.state(mids[n])[0].error)
                       for n, p in phases.items()):
                    break  # a step gave up for good: the assertion below shows why (a cutover retried is not)
                assert all(p.poll() is None for p in procs.values()), "a worker exited"
                time.sleep(0.5)
            errors = {name: store.state(mid)[0].error for name, mid in mids.items()}
            specs = {name: store.spec(mid) for name, mid in mids.items()}
    finally:
        for p in procs.values():
            stop_process(p, timeout=30)
    logs = {name: (tmp_path / f"{name}.log").read_text() for name in WORKERS}
    assert phases == {name: Phase.CLEANED for name in WORKERS}, (phases, errors, {k: v[-3000:] for k, v in
                                                                                  logs.items()})

    # every finished job, by the queue it ran from and the worker that ran it
    ran: dict[str, list[tuple[str, str, str]]] = {name: [] for name in WORKERS}
    queues = steps.worker_queues(sb.hosts(), None)
    for qname in queues:
        for jid in FinishedJobRegistry(queue=Queue(qname, connection=r)).get_job_ids():
            job = Job.fetch(jid, connection=r)
            owner = next(n for n, mid in mids.items() if job.meta.get("migration") == mid)
            ran[owner].append((qname, job.worker_name, job.meta.get("step")))
    for name in WORKERS:
        queue = steps.migration_queue(specs[name])
        assert {(q, w) for q, w, _ in ran[name]} == {(queue, name)}, ran[name]
        assert {"copy-start", "copy", "catch-up", "finish", "cleanup"} <= {s for _, _, s in ran[name]}, ran[name]
    assert steps.migration_queue(specs["near1"]) == steps.pair_queue("MySQL001A")
    assert steps.migration_queue(specs["near2"]) == steps.pair_queue("MySQL002A")
    assert Queue(steps.QUEUE, connection=r).count == 0
    assert not FinishedJobRegistry(queue=Queue(steps.QUEUE, connection=r)).get_job_ids()
    # the worker said what it serves; no secret in its output
    assert "serving migrator.pair.MySQL001A, migrator.pair.MySQL003A" in logs["near1"]
    assert "serving migrator.pair.MySQL002A, migrator.pair.MySQL004A" in logs["near2"]
    assert all(password not in text for text in logs.values())


def test_a_worker_for_an_unknown_pair_is_refused_in_one_line(fleet4):
    res = subprocess.run([sys.executable, "-m", "migrator", "--config", str(fleet4.config_file), "worker",
                          "--pairs", "MySQL009A", "--burst"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    assert "no pair has a host named 'MySQL009A'" in res.stderr and "MySQL001A, MySQL002A" in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
