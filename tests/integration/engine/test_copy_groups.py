"""Many small tables copy in a few RQ jobs (groups), each table with its own checkpoint."""

from __future__ import annotations

import pytest
from rq import Queue
from rq.registry import FinishedJobRegistry

from migrator.engine.copy import table_progress
from migrator.engine.migration import MigrationStore, Options, Phase
from migrator.fleet import redis_client
from migrator.fleet.mysql import qualified
from migrator.ops import command, steps
from migrator.ops.steps import COPY_GROUP_JOB
from migrator.ops.worker import SimpleWorker

SMALL = 120


@pytest.mark.parametrize("fleet", [200], indirect=True)
def test_small_tables_share_a_few_jobs_and_keep_per_table_checkpoints(fleet, conns):
    src = conns("MySQL001A")
    with src.cursor() as cur:
        for i in range(SMALL):
            t = qualified(f"db{2 + i % 2:05d}", f"small_{i:03d}")
            cur.execute(f"CREATE TABLE {t} (id INT NOT NULL PRIMARY KEY, v VARCHAR(20)) ENGINE=InnoDB")
            if i % 3:
                cur.execute(f"INSERT INTO {t} VALUES (1, 'a'), (2, NULL), (3, '')")
    workers = 3
    spec = command.plan_split(fleet.config, "MySQL001A", options=Options(copy_workers=workers)).spec
    command.start_copy(fleet.config, spec.id, slice_s=60.0)
    r = redis_client.connect(fleet.config)
    q = Queue(steps.migration_queue(spec), connection=r)
    w = SimpleWorker([q], connection=r)
    for _ in range(50):
        if MigrationStore(fleet.zk).state(spec.id)[0].phase == Phase.CATCHING_UP:
            break
        if not w.work(burst=True, max_jobs=1):
            break
    assert MigrationStore(fleet.zk).state(spec.id)[0].phase == Phase.CATCHING_UP
    finished = [q.fetch_job(j) for j in FinishedJobRegistry(queue=q).get_job_ids()]
    copy_jobs = [j for j in finished if j is not None and j.func_name == COPY_GROUP_JOB]
    # the seed's large tables and the small ones: a handful of jobs, not one per table
    tables = table_progress(fleet.zk, spec.id)
    assert len(tables) >= SMALL + 10
    assert len(copy_jobs) <= workers + 2, [j.args[1][:2] for j in copy_jobs]
    assert all(p["done"] and p["start_gtid"] for p in tables)
    tgt = conns("MySQL003A")
    with src.cursor() as c1, tgt.cursor() as c2:
        for i in range(SMALL):
            t = qualified(f"db{2 + i % 2:05d}", f"small_{i:03d}")
            c1.execute(f"CHECKSUM TABLE {t}")
            c2.execute(f"CHECKSUM TABLE {t}")
            assert c1.fetchone()[1] == c2.fetchone()[1], t
    rows = {(p["db"], p["table"]): p["rows"] for p in tables}
    assert rows[("db00003", "small_001")] == 3 and rows[("db00002", "small_000")] == 0
