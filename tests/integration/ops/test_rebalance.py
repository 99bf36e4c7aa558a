"""``migrator rebalance`` on a real fleet of its own: 3 pairs with skewed data (the first ~3x the bytes
of the third) plus one added empty pair, RQ worker processes, the queue load running throughout (its
ledger: 0 acknowledged jobs lost), the CLI run as an operator would.

The fleet is this module's own (the shared one has 2 pairs and a spare: two moves at once need four
pairs), started once for the module.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from migrator.engine.migration import MigrationStore
from migrator.fleet import config as config_mod
from migrator.fleet import zk as zk_mod
from migrator.fleet.shard_map import HostRegistry, ShardMapStore
from migrator.ops.rebalance import command as rebalance
from migrator.ops.rebalance.measure import measure
from tests.conftest import own_sandbox
from tests.faults.harness import compare_moved
from tests.integration.ops.operator_support import BackgroundLoad
from tests.integration.ops.rebalance_support import skew

THRESHOLD = 0.15


@pytest.fixture(scope="module")
def fleet4():
    with own_sandbox("migrator-rebalance-", pairs=3, spare_pairs=1, shards=24, rows=5) as sb:
        yield sb


def cli(cfg_path: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "migrator", "--config", str(cfg_path), *args], env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_rebalance_yes_evens_out_the_fleet_with_moves_at_once(fleet4, tmp_path):
    sb = fleet4
    cfg_path = sb.config_file
    cfg = config_mod.load(cfg_path)
    creds = config_mod.load_credentials(cfg)
    with zk_mod.connect(cfg, creds) as zk:
        smap = ShardMapStore(zk).read()
        hosts = HostRegistry(zk).all()
    skew(smap, hosts, creds, {"MySQL001A": 1800, "MySQL002A": 1200, "MySQL003A": 600})
    before = measure(smap, hosts, creds, window_s=0.5)
    load = {m: sum(before[s].bytes for s in smap.shards_on(m)) for m in smap.masters()}
    assert load["MySQL001A"] > 2.5 * load["MySQL003A"], load

    # the dry run prints the plan and stores nothing
    dry = cli(cfg_path, "rebalance", "--add-pair", "MySQL004A", "--threshold", str(THRESHOLD), "--dry-run",
              "--window", "1")
    assert dry.returncode == 0, dry.stderr
    assert "moves" in dry.stdout and "ranges after" in dry.stdout and "MySQL004A (new)" in dry.stdout
    with zk_mod.connect(cfg, creds) as zk:
        assert MigrationStore(zk).list() == []

    workers = [subprocess.Popen([sys.executable, "-m", "migrator", "--config", str(cfg_path), "worker", "--name",
                                 f"rb{i}"], stdout=(tmp_path / f"w{i}.log").open("w"), stderr=subprocess.STDOUT)
               for i in range(3)]
    # the queue keeps running through the whole rebalance
    load = BackgroundLoad(cfg, "rebalance", 60, tmp_path / "ledger.sqlite", partitions=6, consumers=2).start()
    try:
        run = cli(cfg_path, "rebalance", "--add-pair", "MySQL004A", "--threshold", str(THRESHOLD), "--yes",
                  "--window", "1", "--freeze-budget-ms", "3000")
    finally:
        load.stop()
        for w in workers:
            w.kill()
            w.wait()
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    load.check()
    rid = next(w for w in run.stdout.split() if w.startswith("rb-"))

    status = cli(cfg_path, "status", rid, "--json")
    assert status.returncode == 0, status.stderr
    out = json.loads(status.stdout)
    assert out["phase"] == "done" and out["done"] == out["moves"] >= 2, out
    assert out["max_running"] >= 2, "no two moves ran at once"

    with zk_mod.connect(cfg, creds) as zk:
        after_map = ShardMapStore(zk).read()
        specs = [MigrationStore(zk).spec(m["migration"]) for m in out["record"]["moves"]]
        cut = {s.id: MigrationStore(zk).get_progress(s.id, "cutover")[0] for s in specs}
    # every pair within the threshold of the mean, the new pair included, by the cost the plan was made from:
    # the shards' bytes as measured before (re-measured now, a moved table is smaller: the copy loads it in
    # key order, without the page splits of the source's random inserts, so its bytes are not the same cost)
    load = {m: sum(before[s].bytes for s in after_map.shards_on(m)) for m in after_map.masters()}
    assert set(load) == {"MySQL001A", "MySQL002A", "MySQL003A", "MySQL004A"}
    mean = sum(load.values()) / 4
    for m, v in load.items():
        assert abs(v - mean) <= THRESHOLD * mean * 1.02, (m, v / mean, load)
    # every moved table equals its tombstone (the source table at the fence)
    for spec in specs:
        assert all(after_map.master_of(s) == spec.target_master for s in spec.shards)
        tables = compare_moved(hosts[spec.source_master], hosts[spec.target_master], creds, spec,
                               cut[spec.id]["target_gtid"])
        assert len(tables) == 5 * len(spec.shards), tables
    # (a second live plan is not asserted empty: the moved tables measure smaller than they did on the
    # source, see above, so a plan by measured bytes may propose a small move again)


def test_added_pair_and_control_of_a_whole_rebalance(fleet4):
    """`sandbox add-pair` registers an empty pair; a rebalance onto it, started detached (no workers),
    is paused, resumed and aborted as a whole by its id."""
    from migrator.sandbox.grow import add_pair

    sb = fleet4
    cfg_path = sb.config_file
    cfg = config_mod.load(cfg_path)
    creds = config_mod.load_credentials(cfg)
    # a new pair of servers, registered the way a real one is: checked, then registered by the CLI
    a, b = add_pair(sb, log=lambda *_: None, register=False)
    hosts = sb.hosts()
    spec = {n: f"{n}={hosts[n].address}:{hosts[n].port}" for n in (a, b)}
    # the new master and a host that is not its partner: refused, nothing registered
    one = hosts["MySQL001A"]
    wrong = cli(cfg_path, "topology", "add-pair", spec[a].replace(a, "MySQL077A"),
                f"MySQL077B={one.address}:{one.port}")
    assert wrong.returncode != 0 and "does not replicate from MySQL077B" in wrong.stderr, wrong.stderr
    assert "Traceback" not in wrong.stderr
    taken = cli(cfg_path, "topology", "add-pair", f"MySQL001A={hosts[a].address}:{hosts[a].port}", spec[b])
    assert taken.returncode != 0 and "already registered" in taken.stderr, taken.stderr
    reg = cli(cfg_path, "topology", "add-pair", spec[a], spec[b], "--json")
    assert reg.returncode == 0 and json.loads(reg.stdout)["registered"] == [a, b], reg.stdout + reg.stderr
    with zk_mod.connect(cfg, creds) as zk:
        assert {a, b} <= set(HostRegistry(zk).all())
        assert HostRegistry(zk).get(a).partner == b
        epoch = ShardMapStore(zk).read().epoch
    bad = cli(cfg_path, "rebalance", "--add-pair", "MySQL099A", "--dry-run", "--window", "0")
    assert bad.returncode != 0 and "MySQL099A" in bad.stderr and "register" in bad.stderr

    run = cli(cfg_path, "rebalance", "--add-pair", a, "--yes", "--detach", "--window", "0")
    assert run.returncode == 0, run.stdout + run.stderr
    rid = next(w for w in run.stdout.split() if w.startswith("rb-"))
    out = rebalance.status(cfg, rid)
    assert out["phase"] == "running" and out["running"] >= 1, out
    running = [m["migration"] for m in out["record"]["moves"] if m["state"] == "running"]
    pairs = [p for m in out["record"]["moves"] if m["state"] == "running" for p in (m["source"], m["target"])]
    assert len(pairs) == len(set(pairs)), "a pair in two running moves"

    assert cli(cfg_path, "pause", rid).returncode == 0
    with zk_mod.connect(cfg, creds) as zk:
        assert all(MigrationStore(zk).state(m)[0].paused for m in running)
    assert rebalance.advance(cfg, rid)["paused"] is True
    res = cli(cfg_path, "resume", rid)
    assert res.returncode == 0, res.stderr
    with zk_mod.connect(cfg, creds) as zk:
        assert not any(MigrationStore(zk).state(m)[0].paused for m in running)

    ab = cli(cfg_path, "abort", rid, "--yes")
    assert ab.returncode == 0, ab.stderr
    out = rebalance.status(cfg, rid)
    assert out["phase"] == "aborted" and out["running"] == 0 and out["waiting"] == 0, out
    with zk_mod.connect(cfg, creds) as zk:
        store = MigrationStore(zk)
        assert all(store.state(m)[0].phase.value == "aborted" for m in running)
        assert not set(store.holders(list(range(24))).values()) & set(running)  # its shard locks released
        assert ShardMapStore(zk).read().epoch == epoch  # nothing flipped
    listing = cli(cfg_path, "status")
    assert rid in listing.stdout
