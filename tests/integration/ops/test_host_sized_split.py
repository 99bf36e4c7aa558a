"""A split of more tables than one rename fence takes (300: 60 shards x 5 tables) under queue load.

``migrator split MySQL001A --yes`` on a fleet of its own (240 shards on two pairs, a spare pair),
RQ worker processes and the queue load running: the split is one migration, copied and tailed
once, that hands its shards to batches of consecutive shards, each a migration of its own with a
rename-fenced cutover of at most 200 tables, one after another; every batch's freeze stays under
the budget, no acknowledged job is lost, every moved table equals its tombstone, queue
maintenance is paused on no moved shard, and no gate is left on either member of the old pair,
which still replicates both ways.
(The host-sized version, 512 shards per host, runs on demand: ``python -m bench.hostsplit``.)
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from migrator.engine.cutover.rename_fence import MAX_TABLES
from migrator.engine.migration import MigrationStore
from migrator.engine.plan import maintenance_paused
from migrator.fleet import config as config_mod
from migrator.fleet import zk as zk_mod
from migrator.fleet.shard_map import HostRegistry, ShardMapStore
from migrator.ops import command
from migrator.ops.command import CommandError
from migrator.ops.rebalance.record import RecordStore
from tests.conftest import own_sandbox
from tests.faults.harness import compare_moved_batches
from tests.integration.engine.cutover_setup import source_pair_left_clean
from tests.integration.ops.operator_support import BackgroundLoad

SHARDS = 240  # 120 per pair; the split moves the upper half of MySQL001A's: 60 shards x 5 tables
BUDGET_MS = 3000  # a busy CI box; batches sized for 500 ms on a busy box: docs/performance.md


@pytest.fixture(scope="module")
def big_fleet():
    with own_sandbox("migrator-hostsplit-", pairs=2, spare_pairs=1, shards=SHARDS, rows=3) as sb:
        yield sb


def test_a_split_of_300_tables_runs_as_batched_rename_fenced_cutovers(big_fleet, tmp_path):
    sb = big_fleet
    cfg = config_mod.load(sb.config_file)
    creds = config_mod.load_credentials(cfg)
    cli = [sys.executable, "-m", "migrator", "--config", str(sb.config_file)]
    env = {**os.environ, "COLUMNS": "200"}
    # the dry run summarises the 300 tables by name and shows the batches
    dry = subprocess.run([*cli, "split", "MySQL001A", "--dry-run", "--freeze-budget-ms", str(BUDGET_MS)],
                         env=env, capture_output=True, text=True, timeout=300)
    assert dry.returncode == 0, dry.stdout[-3000:] + dry.stderr[-3000:]
    assert "batches of at most" in dry.stdout and "tables to copy, by name (300 tables" in dry.stdout, dry.stdout
    assert dry.stdout.count("db00") < 10, dry.stdout  # not one line per table

    # a plan without --yes stores the batches, paused, and starts nothing; abort drops it
    planned = subprocess.run([*cli, "split", "MySQL001A", "--yes", "--no-start", "--freeze-budget-ms", str(BUDGET_MS)],
                             env=env, capture_output=True, text=True, timeout=300)
    assert planned.returncode == 0 and "not started" in planned.stdout, planned.stdout + planned.stderr
    prid = re.search(r"\brb-[0-9]{8}-[0-9]{6}-[0-9a-f]+", planned.stdout).group(0)
    dropped = subprocess.run([*cli, "abort", prid, "--yes"], env=env, capture_output=True, text=True, timeout=300)
    assert dropped.returncode == 0, dropped.stdout + dropped.stderr
    with zk_mod.connect(cfg, creds) as zk:
        prec, _ = RecordStore(zk).get(prid)
        assert prec["phase"] == "aborted" and {m["state"] for m in prec["moves"]} == {"cancelled"}
        assert not [m for m in MigrationStore(zk).list() if m.startswith(prid)]
    # the plan function alone refuses it, naming the way to run it
    with pytest.raises(CommandError, match="batches"):
        command.plan_split(cfg, "MySQL001A")

    load = BackgroundLoad(cfg, "hostsplit", 100, tmp_path / "ledger.sqlite", partitions=4, consumers=2)
    workers = [subprocess.Popen([*cli, "worker", "--name", f"hs{i}"], stdout=(tmp_path / f"w{i}.log").open("w"),
                                stderr=subprocess.STDOUT) for i in range(2)]
    try:
        load.start()
        run = subprocess.run([*cli, "split", "MySQL001A", "--yes", "--freeze-budget-ms", str(BUDGET_MS)],
                             env=env, capture_output=True, text=True, timeout=1500)
    finally:
        load.stop()
        for w in workers:
            w.kill()
            w.wait()
    found = re.search(r"\brb-[0-9]{8}-[0-9]{6}-[0-9a-f]+", run.stdout)
    if run.returncode != 0 and found:  # say which batch stopped, and why
        with zk_mod.connect(cfg, creds) as zk:
            rec, _ = RecordStore(zk).get(found.group(0))
            tried = {m["migration"]: MigrationStore(zk).get_progress(m["migration"], "cutover_attempts")[0]
                     for m in rec["moves"] if m["state"] == "failed"}
        pytest.fail(json.dumps([{k: m.get(k) for k in ("index", "tables", "state", "error", "freeze_ms", "steps_ms")}
                                for m in rec["moves"] if m["state"] != "waiting"]) + json.dumps(tried)
                    + run.stdout[-2000:])
    assert run.returncode == 0 and found, run.stdout[-4000:] + run.stderr[-3000:]
    rid = found.group(0)

    with zk_mod.connect(cfg, creds) as zk:
        rec, _ = RecordStore(zk).get(rid)
        store = MigrationStore(zk)
        (lead,) = [m for m in rec["moves"] if m.get("batched")]
        batch_moves = [m for m in rec["moves"] if m.get("batch_of") == lead["index"]]
        parent, (pstate, _) = store.spec(lead["migration"]), store.state(lead["migration"])
        specs = [store.spec(m["migration"]) for m in batch_moves]
        states = [store.state(m["migration"])[0] for m in batch_moves]
        cuts = [store.get_progress(m["migration"], "cutover")[0] for m in batch_moves]
        tries = [store.get_progress(m["migration"], "cutover_attempts")[0]["attempts"] for m in batch_moves]
        copied = [store.progress_keys(m["migration"], "copy") for m in batch_moves]
        smap = ShardMapStore(zk).read()
        hosts = HostRegistry(zk).all()
        paused = {s: maintenance_paused(zk, s) for sp in specs for s in sp.shards}
    assert rec["phase"] == "done" and rec["kind"] == "split"
    assert all(m["state"] == "done" for m in rec["moves"]), json.dumps(rec["moves"])
    # one migration copied and tailed the 300 tables once; it handed its shards to the batches and ended
    assert parent.batched and parent.shards == () and pstate.phase.value == "cleaned"
    assert [h["to"] for h in pstate.history].count("copying") == 1
    assert pstate.batches == [m["migration"] for m in batch_moves] and len(batch_moves) >= 2
    assert all(sp.parent == parent.id for sp in specs) and copied == [[] for _ in specs]  # no copy of their own
    assert all(st.history[0]["to"] == "converged" and st.history[0]["handed_by"] == parent.id for st in states)
    moved_shards = sorted(s for sp in specs for s in sp.shards)
    assert len(moved_shards) == 60 and len(set(moved_shards)) == 60
    assert all(st.phase.value == "done" for st in states)
    assert all(smap.master_of(s) == specs[0].target_master for s in moved_shards)
    # queue maintenance resumed on every moved shard: no pause node is left behind
    assert {s: p for s, p in paused.items() if p is not None} == {}, paused
    # each batch: at most one fence's tables, fenced by the rename fence, its freeze under the budget
    for m, cut in zip(batch_moves, cuts, strict=True):
        assert m["tables"] <= MAX_TABLES
        assert "release" in cut["steps_ms"] and "active_finish" not in cut["steps_ms"], json.dumps(cut)
        assert cut["freeze_ms"] <= BUDGET_MS, json.dumps(cut)
    # a batch handed over once a batch before it had frozen predicts from the fleet's recent freezes (with two
    # batches in flight at once, the second is handed over while the first prepares: from the third on)
    assert all(t[0]["predicted"]["fixed_from"] == "fleet" for t in tries[2:]), json.dumps(tries[-1])
    load.check()  # nothing acknowledged was lost
    # every moved table equals its tombstone (the source table at its batch's fence)
    moved = compare_moved_batches(hosts[specs[0].source_master], hosts[specs[0].target_master], creds,
                                  [(sp, cut["target_gtid"]) for sp, cut in zip(specs, cuts, strict=True)])
    assert len(moved) >= 300, len(moved)
    # the old pair: no passive gate left on either member, replicating both ways
    source_pair_left_clean(creds, hosts[specs[0].source_master], hosts[specs[0].source_passive])

    # the batched split rolls back as a whole: every batch, last finished first
    back = subprocess.run([*cli, "rollback", rid, "--sync", "--yes"], env=env, capture_output=True, text=True,
                          timeout=900)
    assert back.returncode == 0, back.stdout[-3000:] + back.stderr[-3000:]
    assert back.stdout.count("rolled back rb-") == len(batch_moves), back.stdout
    with zk_mod.connect(cfg, creds) as zk:
        smap = ShardMapStore(zk).read()
        phases = {MigrationStore(zk).state(m["migration"])[0].phase.value for m in batch_moves}
    assert phases == {"rolled_back"}
    assert all(smap.master_of(s) == specs[0].source_master for s in moved_shards)
    again = subprocess.run([*cli, "rollback", rid, "--sync", "--yes"], env=env, capture_output=True, text=True,
                           timeout=300)
    assert again.returncode != 0 and "no finished move left" in again.stdout + again.stderr
