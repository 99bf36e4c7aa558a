"""The console without servers: the fleet view and a rebalance's loads from a map and a measurement,
the page and its assets shipped in the package, and the token the JSON endpoints demand."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from migrator.errors import MigratorError
from migrator.fleet import config as config_mod
from migrator.fleet.model import Host, ShardMap, ShardRange
from migrator.ops.console import data
from migrator.ops.console.app import STATIC, ConsoleError, create_app
from migrator.ops.rebalance.planner import ShardCost

A, B, C = "MySQL001A", "MySQL002A", "MySQL003A"


def smap(frozen=()) -> ShardMap:
    return ShardMap(num_shards=8, epoch=7, frozen=frozen,
                    ranges=(ShardRange(lo=0, hi=1, master=A, passive="MySQL001B"),
                            ShardRange(lo=2, hi=5, master=B, passive="MySQL002B"),
                            ShardRange(lo=6, hi=7, master=A, passive="MySQL001B")))


def hosts() -> dict[str, Host]:
    names = [(A, "MySQL001B"), (B, "MySQL002B"), (C, "MySQL003B")]
    out = {}
    for i, (m, s) in enumerate(names):
        out[m] = Host(name=m, port=4000 + 2 * i, partner=s)
        out[s] = Host(name=s, port=4001 + 2 * i, partner=m)
    return out


COSTS = [ShardCost(bytes=100 * (s + 1), rows=10 * (s + 1), writes=float(s)) for s in range(8)]


def test_fleet_view_sums_per_pair_and_marks_frozen_ranges():
    audit = [{"new_epoch": e, "old_epoch": e - 1, "when": 1000.0 + e, "who": "op@h", "reason": f"change {e}",
              "details": {"migration": "m-1"} if e == 7 else {}} for e in range(1, 30)]
    v = data.fleet_view(smap(frozen=((6, 7),)), hosts(), COSTS, audit)
    assert v["epoch"] == 7 and v["num_shards"] == 8 and v["frozen"] == [[6, 7]] and v["measured"]
    a, b = v["pairs"]
    assert (a["master"], a["slave"], a["shards"]) == (A, "MySQL001B", 4)
    assert [(r["lo"], r["hi"], r["frozen"]) for r in a["ranges"]] == [(0, 1, False), (6, 7, True)]
    assert a["bytes"] == 100 + 200 + 700 + 800 and a["rows"] == 10 + 20 + 70 + 80
    assert a["writes_per_s"] == 0 + 1 + 6 + 7
    assert b["bytes"] == 300 + 400 + 500 + 600 and not any(r["frozen"] for r in b["ranges"])
    assert v["spare_pairs"] == [[C, "MySQL003B"]]
    assert len(v["epoch_history"]) == data.EPOCH_HISTORY and v["epoch_history"][-1]["epoch"] == 29
    assert [h["migration"] for h in v["epoch_history"] if h["epoch"] == 7] == []  # older than the last 20
    unmeasured = data.fleet_view(smap(), hosts(), None, [])
    assert not unmeasured["measured"] and unmeasured["pairs"][0]["bytes"] is None
    # a measurement of another shard count (the map grew since) is not summed against this map
    assert data.fleet_view(smap(), hosts(), COSTS[:4], [])["pairs"][0]["bytes"] is None


def test_rebalance_loads_put_moved_shards_back_for_before():
    # today's map: shards 6-7 already moved from A to C (done); 4-5 are moving from B to C; 0 was cancelled
    now = ShardMap(num_shards=8, ranges=(ShardRange(lo=0, hi=1, master=A, passive="MySQL001B"),
                                         ShardRange(lo=2, hi=5, master=B, passive="MySQL002B"),
                                         ShardRange(lo=6, hi=7, master=C, passive="MySQL003B")))
    rec = {"id": "rb-1", "phase": "running", "objective": "bytes", "moves": [
        {"index": 1, "wave": 0, "source": B, "target": C, "runs": [[4, 5]], "bytes": 1100, "state": "running",
         "migration": "rb-1-m001"},
        {"index": 0, "wave": 0, "source": A, "target": C, "runs": [[6, 7]], "bytes": 1500, "state": "done",
         "migration": "rb-1-m000"},
        {"index": 2, "wave": 1, "source": A, "target": B, "runs": [[0, 0]], "bytes": 100, "state": "cancelled",
         "migration": "rb-1-m002"},
    ]}
    out = data.rebalance_loads(rec, now, COSTS)
    assert out["pairs"] == [A, B, C] and out["measured"]
    assert out["load_before"] == {A: 100 + 200 + 700 + 800, B: 300 + 400 + 500 + 600, C: 0}
    assert out["load_after"] == {A: 100 + 200, B: 300 + 400, C: 500 + 600 + 700 + 800}
    assert [m["index"] for m in out["moves"]] == [0, 1, 2]
    writes = data.rebalance_loads({**rec, "objective": "writes"}, now, COSTS)
    assert writes["load_after"][C] == 4 + 5 + 6 + 7


def test_the_page_ships_in_the_package_and_needs_no_other_host():
    names = {p.name for p in STATIC.iterdir()}
    assert {"index.html", "console.js", "console.css"} <= names
    for p in STATIC.iterdir():
        text = p.read_text()
        assert "http://" not in text.replace("http://www.w3.org/2000/svg", "") and "https://" not in text, p.name


def test_json_endpoints_demand_the_token():
    cfg = config_mod.parse({"zookeeper": {"hosts": "127.0.0.1:1", "root": "/r"}})
    app = create_app(cfg, token="s3cret", measurements=data.Measurements(cfg))
    client = TestClient(app)  # not entered: the measurement thread does not start
    page = client.get("/")
    assert page.status_code == 200 and "/static/console.js" in page.text
    assert client.get("/static/console.js").status_code == 200
    for path in ("/api/fleet", "/api/status", "/api/status/m-1", "/api/rebalances", "/api/rebalances/rb-1/plan",
                 "/api/plan"):
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "s3cret"}):
            r = client.get(path, headers=headers)
            assert r.status_code == 401, (path, headers, r.status_code)
            assert r.json()["error"]["code"] == "UNAUTHORIZED"
    bad = client.get("/api/plan?objective=money", headers={"Authorization": "Bearer s3cret"})
    assert bad.status_code == 422


def test_no_console_without_a_token():
    cfg = config_mod.parse({})
    with pytest.raises(ConsoleError, match="needs a token"):
        create_app(cfg, token=None, measurements=data.Measurements(cfg))
    with pytest.raises(MigratorError, match="positive"):
        data.Measurements(cfg, every_s=0)


def test_the_fleet_view_shows_each_queue_partition_where_it_lives():
    from migrator.fleet.model import MovingSet
    from migrator.queue.model import PartitionRecord, QueueConfig, QueueRecord

    q = QueueRecord(name="hq", config=QueueConfig(partitions=2), partitions=[
        PartitionRecord(index=0, shard=1, table="jobs_hq_p0", tables=["jobs_hq_p0", "jobs_hq_p0_dedupe"]),
        PartitionRecord(index=1, shard=3, table="jobs_hq_p1", tables=["jobs_hq_p1", "jobs_hq_p1_dedupe"])])
    m = MovingSet((3,), ("jobs_hq_p1", "jobs_hq_p1_dedupe")).flip(smap(), C, "MySQL003B")
    v = data.fleet_view(m, hosts(), None, [], [q])
    parts = v["queues"][0]["partitions"]
    assert [(p["index"], p["master"], p["routed"], p["frozen"]) for p in parts] == \
        [(0, A, False, False), (1, C, True, False)]
    assert [p["master"] for p in v["pairs"]] == [A, B]  # the route moves no range
