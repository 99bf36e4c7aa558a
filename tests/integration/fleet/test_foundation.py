"""The foundation on real servers: pairs replicate both ways, the shard map is
compare-and-set and ACL-protected, the router follows it, the CLI fails cleanly."""

from __future__ import annotations

import json
import threading
import time

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError

from migrator.errors import ShardMapConflict
from migrator.fleet import zk as zk_mod
from migrator.fleet.mysql import own_gtids, wait_applied
from migrator.fleet.router import ShardRouter
from migrator.fleet.shard_map import HostRegistry, ShardMapStore
from tests.integration.cli_helpers import assert_one_line_error, run_cli


def test_each_pair_replicates_both_ways(sandbox):
    for a, b in sandbox.pairs():
        for writer, reader in ((a, b), (b, a)):
            db = f"t_repl_{writer.lower()}"
            with sandbox.root_conn(writer) as c, c.cursor() as cur:
                cur.execute(f"CREATE DATABASE IF NOT EXISTS {db}")
                cur.execute(f"CREATE TABLE IF NOT EXISTS {db}.t (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(20))")
                cur.execute(f"INSERT INTO {db}.t (v) VALUES ('from-{writer}')")
                own = own_gtids(c)
            with sandbox.root_conn(reader) as c, c.cursor() as cur:
                assert wait_applied(c, own, 10), f"{reader} did not receive {writer}'s write"
                cur.execute(f"SELECT v FROM {db}.t")
                assert (f"from-{writer}",) in cur.fetchall()
            with sandbox.root_conn(writer) as c, c.cursor() as cur:
                cur.execute(f"DROP DATABASE {db}")
    for row in sandbox.status():
        if row["kind"] == "mariadb":
            assert row["replication"]["ok"], row


def test_auto_increment_offsets_differ_within_pair(sandbox):
    a, b = sandbox.pairs()[0]
    seen = {}
    for h in (a, b):
        with sandbox.root_conn(h) as c, c.cursor() as cur:
            cur.execute("SELECT @@auto_increment_increment, @@auto_increment_offset, @@server_id, "
                        "@@binlog_format, @@binlog_row_image, @@binlog_row_metadata, @@log_slave_updates")
            seen[h] = cur.fetchone()
    assert seen[a][0] == seen[b][0] == 2
    assert {seen[a][1], seen[b][1]} == {1, 2}
    assert seen[a][2] != seen[b][2]
    for h in (a, b):
        assert seen[h][3:] == ("ROW", "FULL", "FULL", 1)


def test_shard_databases_only_on_owning_pair(fleet):
    smap = fleet.smap
    for name in fleet.hosts:
        with fleet.sandbox.root_conn(name) as c, c.cursor() as cur:
            cur.execute("SHOW DATABASES LIKE 'db%'")
            dbs = {r[0] for r in cur.fetchall()}
        owned = {f"db{s:05d}" for r in smap.ranges if name in (r.master, r.passive) for s in r.shards}
        assert dbs == owned, name
        if owned:
            with fleet.sandbox.root_conn(name) as c, c.cursor() as cur:
                cur.execute(f"SELECT COUNT(*) FROM {sorted(owned)[0]}.pins")
                assert cur.fetchone()[0] == 20


def test_concurrent_map_edit_is_refused(fleet):
    store = ShardMapStore(fleet.zk)
    first = store.read()
    second = store.read()
    assert first.epoch == second.epoch == 0
    store.cas(first.with_frozen(0, 1), first.epoch, reason="editor one")
    with pytest.raises(ShardMapConflict, match="concurrent edit"):
        store.cas(second.with_frozen(2, 3), second.epoch, reason="editor two")
    with pytest.raises(ShardMapConflict, match="not the expected"):
        store.update(lambda m: m.with_frozen(2, 3), reason="stale", expected_epoch=0)
    now = store.read()
    assert now.epoch == 1 and now.frozen == ((0, 1),)
    # both attempts are in the audit trail only if they landed: one record for init, one for the edit
    hist = store.history()
    assert [(h["old_epoch"], h["new_epoch"]) for h in hist] == [(None, 0), (0, 1)]
    assert hist[-1]["reason"] == "editor one" and hist[-1]["who"]


def test_router_sees_map_change_within_seconds(fleet):
    router = ShardRouter(fleet.zk, fleet.credentials).start()
    other = zk_mod.connect(fleet.config, fleet.credentials)  # a separate session edits
    try:
        shard = fleet.smap.ranges[0].hi
        assert router.master_for(shard).name == "MySQL001A"
        assert not router.is_frozen(shard)
        t0 = time.monotonic()
        stored = ShardMapStore(other).update(
            lambda m: m.reassign(shard, shard, "MySQL003A", "MySQL003B").with_frozen(shard, shard), reason="test")
        assert router.wait_for_epoch(stored.epoch, timeout=5.0)  # a watch: well under a second on a quiet box
        elapsed = time.monotonic() - t0
        assert elapsed < 5.0
        assert router.master_for(shard).name == "MySQL003A"
        assert router.is_frozen(shard)
        # a frozen shard blocks writers for a bounded time, then releases on unfreeze
        released = threading.Event()

        def writer():
            router.wait_unfrozen(shard, timeout=5)
            released.set()

        t = threading.Thread(target=writer)
        t.start()
        time.sleep(0.2)
        assert not released.is_set()
        ShardMapStore(other).update(lambda m: m.without_frozen(shard, shard), reason="unfreeze")
        t.join(3)
        assert released.is_set()
        conn = router.connect(0)
        with conn.cursor() as cur:
            cur.execute("SELECT DATABASE(), COUNT(*) FROM pins")
            assert cur.fetchone() == ("db00000", 20)
        conn.close()
    finally:
        other.close()


def test_anonymous_and_wrong_identity_cannot_write(fleet):
    path = ShardMapStore(fleet.zk).path
    hosts = fleet.config.zookeeper.hosts
    for auth in (None, [("digest", "intruder:guess")]):
        c = KazooClient(hosts=hosts, auth_data=auth)
        c.start(timeout=5)
        try:
            data, _ = c.get(path)  # the world may read
            assert json.loads(data)["ranges"]
            with pytest.raises(NoAuthError):
                c.set(path, b'{"ranges": []}')
            with pytest.raises(NoAuthError):
                c.set(f"{HostRegistry(fleet.zk).base}/MySQL001A", b"{}")
            with pytest.raises(NoAuthError):
                c.create(f"{HostRegistry(fleet.zk).base}/Evil", b"{}")
        finally:
            c.stop()
            c.close()
    assert ShardMapStore(fleet.zk).read().epoch == 0


def test_credentials_never_reach_zookeeper(fleet):
    secret = fleet.credentials.mysql_password
    digest_pw = fleet.credentials.zk_digest.split(":", 1)[1]
    seen = []

    def walk(p):
        data, _ = fleet.zk.client.get(p)
        seen.append(data or b"")
        for ch in fleet.zk.client.get_children(p):
            walk(f"{p}/{ch}")

    walk(fleet.root)
    blob = b"\n".join(seen)
    assert b"MySQL001A" in blob
    assert secret.encode() not in blob and digest_pw.encode() not in blob


def test_sandbox_up_twice_is_a_no_op(sandbox):
    from migrator.sandbox import Sandbox

    msgs = []
    assert Sandbox(sandbox.dir).up(log=msgs.append) is False
    assert "already running" in msgs[0]


def test_cli_topology_and_ids(fleet, tmp_path):
    res = run_cli("topology", "show", "--json", config=fleet.config_path)
    assert res.returncode == 0, res.stderr
    view = json.loads(res.stdout)
    assert view["epoch"] == 0 and [r["shards"] for r in view["ranges"]] == [4, 4]
    assert all(r["bytes"] > 0 for r in view["ranges"])
    assert view["spare_pairs"] == [["MySQL003A", "MySQL003B"]]
    res = run_cli("topology", "show", config=fleet.config_path)
    assert res.returncode == 0 and "MySQL001A" in res.stdout
    res = run_cli("id", "decode", "241294492511762325")
    assert res.returncode == 0 and "shard 3429" in res.stdout and "local 7075733" in res.stdout


def test_cli_topology_init_from_file(zk_root, sandbox, tmp_path):
    cfg, cfg_path, creds, zk = zk_root
    hosts_file = tmp_path / "hosts.json"
    hosts_file.write_text(json.dumps([h.model_dump() for h in sandbox.hosts().values()]))
    good = tmp_path / "map.json"
    good.write_text(json.dumps([
        {"range": [0, 3], "master": "MySQL001A", "slave": "MySQL001B"},
        {"range": [4, 7], "master": "MySQL002A", "slave": "MySQL002B"},
    ]))
    res = run_cli("topology", "init", "--from", str(good), "--hosts", str(hosts_file), config=cfg_path)
    assert res.returncode == 0, res.stderr
    assert ShardMapStore(zk).read().num_shards == 8
    again = run_cli("topology", "init", "--from", str(good), config=cfg_path)
    assert_one_line_error(again, "already exists")


def test_cli_errors_are_one_line(zk_root, tmp_path):
    cfg, cfg_path, creds, zk = zk_root
    overlap = tmp_path / "overlap.json"
    overlap.write_text(json.dumps([
        {"range": [0, 5], "master": "MySQL001A", "slave": "MySQL001B"},
        {"range": [4, 7], "master": "MySQL002A", "slave": "MySQL002B"},
    ]))
    assert_one_line_error(run_cli("topology", "init", "--from", str(overlap), config=cfg_path), "overlap")
    bad = tmp_path / "bad.json"
    bad.write_text("{ranges: oops")
    assert_one_line_error(run_cli("topology", "init", "--from", str(bad), config=cfg_path), "not valid JSON")
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps([{"range": [0, 7], "master": "MySQL404A", "slave": "MySQL404B"}]))
    assert_one_line_error(run_cli("topology", "init", "--from", str(unknown), config=cfg_path), "MySQL404A")
    # nothing was stored by any of the refused commands
    assert not ShardMapStore(zk).exists()
    assert_one_line_error(run_cli("id", "decode", "not-an-id"), "not an integer")
    assert_one_line_error(run_cli("id", "encode", "--shard", "70000", "--type", "1", "--local", "1"), "out of range")


def test_cli_unreachable_servers(fleet, tmp_path):
    from migrator.fleet import config as config_mod
    from migrator.fleet.model import Host
    from migrator.sandbox import find_base_port

    dead = find_base_port(2)
    cfg = fleet.config.model_copy(deep=True)
    cfg.zookeeper.hosts = f"127.0.0.1:{dead}"
    cfg.credentials.file = str(fleet.sandbox.secrets_file)
    p = tmp_path / "deadzk.toml"
    p.write_text(config_mod.dump(cfg))
    res = run_cli("topology", "show", config=p, timeout=60)
    assert_one_line_error(res, "cannot reach ZooKeeper")
    # a registered master whose MySQL does not answer
    HostRegistry(fleet.zk).register(Host(name="MySQL001A", port=dead + 1, partner="MySQL001B"))
    res = run_cli("topology", "show", config=fleet.config_path)
    assert_one_line_error(res, "cannot connect to MySQL001A")
    assert_one_line_error(run_cli("topology", "show", config=tmp_path / "missing.toml"), "does not exist")


def test_cli_create_shards_fills_only_missing(fleet):
    with fleet.sandbox.root_conn("MySQL001A") as c, c.cursor() as cur:
        cur.execute("DROP DATABASE db00003")
    res = run_cli("topology", "create-shards", "--rows", "5", config=fleet.config_path)
    assert res.returncode == 0, res.stderr
    assert "created 1 shard databases" in res.stdout
    fleet.sandbox.wait_pairs_converged()
    for host, expect in (("MySQL001A", 5), ("MySQL001B", 5)):
        with fleet.sandbox.root_conn(host) as c, c.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM db00003.pins")
            assert cur.fetchone()[0] == expect
            cur.execute("SELECT COUNT(*) FROM db00002.pins")
            assert cur.fetchone()[0] == 20  # untouched
