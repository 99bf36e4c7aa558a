"""The Tailer with an explicit mapping: db00002 on one host into a renamed
schema on another (what a rollback's reverse tail into tombstones needs)."""

from __future__ import annotations

import random

import pytest

from migrator.engine.catch_up.lanes import Pacer
from migrator.engine.catch_up.tailer import Tailer
from migrator.fleet.gtid import GtidPos
from tests.integration.engine import catchup_helpers as h


@pytest.mark.parametrize("lanes", [1, 4], ids=["one-lane", "four-lanes"])
def test_tailer_applies_into_a_renamed_schema(fleet, lanes):
    h.create_extra_tables(fleet, shards=(2,), rows=20)
    src_db, dst_db = "db00002", "tomb_db00002"
    with h.conn(fleet, h.SOURCE) as src, h.conn(fleet, h.TARGET) as dst, src.cursor() as sc, dst.cursor() as dc:
        start = h.binlog_pos(src)
        dc.execute(f"CREATE DATABASE `{dst_db}`")
        dc.execute(f"USE `{dst_db}`")
        sc.execute(f"SHOW TABLES FROM `{src_db}`")
        tables = [r[0] for r in sc.fetchall()]
        for t in tables:
            sc.execute(f"SHOW CREATE TABLE `{src_db}`.`{t}`")
            dc.execute(sc.fetchone()[1])
            sc.execute(f"SELECT * FROM `{src_db}`.`{t}`")
            rows = sc.fetchall()
            if rows:
                dc.executemany(f"INSERT INTO `{t}` VALUES ({','.join(['%s'] * len(rows[0]))})", rows)
        rnd = random.Random(5)
        sc.execute(f"USE `{src_db}`")
        for i in range(40):
            sc.execute(*h.edge_insert(rnd, 100 + i))
            sc.execute(*h.job_insert(rnd))
        sc.execute("UPDATE jobs SET state = 2, updated_at = '2020-01-02' ORDER BY local_id LIMIT 15")
        sc.execute("UPDATE edge_cases SET k2 = CONCAT(k2, 'x') ORDER BY k1 LIMIT 10")
        sc.execute("DELETE FROM edge_cases ORDER BY k1 DESC LIMIT 5")
        sc.execute(h.DROP_PARTITION)
        sc.execute(h.REORGANIZE_PARTITION)
        sc.execute(*h.job_insert(rnd))
        head = h.binlog_pos(src)
    hosts = fleet.hosts
    with Tailer(hosts[h.SOURCE], hosts[h.TARGET], fleet.credentials, start=GtidPos.parse(start),
                schema_map={src_db: dst_db}, pacer=Pacer(lanes=lanes, round_rows=50, adapt=False)) as tailer:
        stats = tailer.apply_until(GtidPos.parse(head), timeout_s=30)
    assert stats.reached and stats.statements == 2
    with h.conn(fleet, h.SOURCE) as src, h.conn(fleet, h.TARGET) as dst:
        for t in tables:
            assert h.table_facts(src, src_db, t) == h.table_facts(dst, dst_db, t), t
        with dst.cursor() as cur:
            cur.execute("SHOW DATABASES LIKE 'db00002'")
            assert cur.fetchone() is None
