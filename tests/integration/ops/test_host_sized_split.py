"""A split of more tables than the rename fence takes (300: 60 shards x 5 tables) under queue load.

``migrator split MySQL001A --yes`` on a fleet of its own (240 shards on two pairs, a spare pair),
RQ worker processes and the queue load running: the cutover fences the 300 tables with the write
gate (one DROP TABLE in the freeze, the renames to the tombstones after the flip), the freeze stays
under its budget, no acknowledged job is lost, every moved table equals its tombstone, and no gate
is left on either member of the old pair, which still replicates both ways.
(The host-sized version, 512 shards per host, runs on demand: ``python -m bench.hostsplit``.)
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from migrator.engine.migration import MigrationStore
from migrator.fleet import config as config_mod
from migrator.fleet import zk as zk_mod
from migrator.fleet.mysql import connect as mysql_connect
from migrator.fleet.shard_map import HostRegistry, ShardMapStore
from tests.conftest import own_sandbox
from tests.faults.harness import compare_moved
from tests.integration.engine.cutover_setup import gate_leftovers, pair_synced, replicating
from tests.integration.ops.operator_support import BackgroundLoad

SHARDS = 240  # 120 per pair; the split moves the upper half of MySQL001A's: 60 shards x 5 tables
BUDGET_MS = 3000  # a busy CI box; the freeze measured on a quiet one is in docs/performance.md


@pytest.fixture(scope="module")
def big_fleet():
    with own_sandbox("migrator-hostsplit-", pairs=2, spare_pairs=1, shards=SHARDS, rows=3) as sb:
        yield sb


def test_a_split_of_300_tables_is_fenced_by_the_gate(big_fleet, tmp_path):
    sb = big_fleet
    cfg = config_mod.load(sb.config_file)
    creds = config_mod.load_credentials(cfg)
    load = BackgroundLoad(cfg, "hostsplit", 100, tmp_path / "ledger.sqlite", partitions=4, consumers=2)
    workers = [subprocess.Popen([sys.executable, "-m", "migrator", "--config", str(sb.config_file), "worker",
                                 "--name", f"hs{i}"], stdout=(tmp_path / f"w{i}.log").open("w"),
                                stderr=subprocess.STDOUT) for i in range(2)]
    try:
        load.start()
        run = subprocess.run([sys.executable, "-m", "migrator", "--config", str(sb.config_file), "split",
                              "MySQL001A", "--yes", "--freeze-budget-ms", str(BUDGET_MS)],
                             env={**os.environ, "COLUMNS": "200"}, capture_output=True, text=True, timeout=1500)
    finally:
        load.stop()
        for w in workers:
            w.kill()
            w.wait()
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-3000:]
    mid = re.search(r"\bm-[0-9]{8}-[0-9]{6}-[0-9a-f]+", run.stdout).group(0)

    with zk_mod.connect(cfg, creds) as zk:
        store = MigrationStore(zk)
        spec = store.spec(mid)
        state, _ = store.state(mid)
        cut, _ = store.get_progress(mid, "cutover")
        smap = ShardMapStore(zk).read()
        hosts = HostRegistry(zk).all()
    assert len(spec.shards) == 60 and state.phase.value == "done"
    assert all(smap.master_of(s) == spec.target_master for s in spec.shards)
    # the gate fenced the 300 tables: no rename in the freeze, the renames after it
    assert "active_finish" in cut["steps_ms"] and cut["freeze_ms"] <= BUDGET_MS, json.dumps(cut)
    load.check()  # nothing acknowledged was lost
    # every moved table equals its tombstone (the source table at the fence)
    moved = compare_moved(hosts[spec.source_master], hosts[spec.target_master], creds, spec, cut["target_gtid"])
    assert len(moved) >= 300, len(moved)
    # the old pair: no gate left on either member, replicating both ways
    a = mysql_connect(hosts[spec.source_master], creds)
    b = mysql_connect(hosts[spec.source_slave], creds)
    try:
        assert gate_leftovers(a) == [] and gate_leftovers(b) == []
        pair_synced(a, b)
        replicating(a)
        replicating(b)
    finally:
        a.close()
        b.close()
