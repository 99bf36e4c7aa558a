"""What the console shows, assembled from the shard map, its audit trail and a cached measurement.

Measuring every shard (:func:`migrator.ops.rebalance.measure.measure`: sizes from
information_schema, writes/s from a window of each master's binlog) is not free,
so :class:`Measurements` runs it in a background thread every ``every_s`` seconds
and the endpoints read the last result. A shard's cost does not depend on which
pair holds it, so a measurement stays meaningful across map changes: pair totals
are always summed over the current map.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from typing import Any

from migrator.engine.records import AuditEntry
from migrator.errors import MigratorError
from migrator.fleet.config import Config
from migrator.fleet.model import Host, ShardMap
from migrator.fleet.shard_map import HostRegistry, ShardMapStore
from migrator.ops import command
from migrator.ops.rebalance import command as rebalance
from migrator.ops.rebalance.measure import measure
from migrator.ops.rebalance.planner import ShardCost
from migrator.ops.rebalance.record import Rebalance
from migrator.queue.catalog import QueueCatalog
from migrator.queue.model import QueueRecord

log = logging.getLogger(__name__)

#: audit records of the map shown as its recent history
EPOCH_HISTORY = 20
#: move states whose shards end on the target (failed and cancelled moves leave them where they are)
MOVING = ("waiting", "running", "done")


class Measurements:
    """The last per-shard measurement of the fleet, refreshed in a background thread."""

    def __init__(self, config: Config, *, every_s: float = 30.0, window_s: float = 2.0):
        if every_s <= 0 or window_s <= 0:
            raise MigratorError("the measurement interval and window must be positive seconds", component="console")
        self.config = config
        self.every_s = every_s
        self.window_s = window_s
        self._lock = threading.Lock()
        self._costs: list[ShardCost] | None = None
        self._at: float | None = None
        self._took: float | None = None
        self._error: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def refresh(self) -> None:
        """Measure now (blocking, about one window); a failure is kept as the error shown."""
        t0 = time.monotonic()
        try:
            with command.session(self.config) as (zk, creds):
                smap = ShardMapStore(zk).read()
                hosts = HostRegistry(zk).all()
                costs = measure(smap, hosts, creds, window_s=self.window_s)
        except Exception as exc:  # noqa: BLE001 - shown on the page; the next round tries again
            log.warning("measuring the fleet failed: %s", exc)
            with self._lock:
                self._error = str(exc)
            return
        with self._lock:
            self._costs, self._at, self._error = costs, time.time(), None
            self._took = round(time.monotonic() - t0, 3)

    def costs(self) -> list[ShardCost] | None:
        with self._lock:
            return self._costs

    def info(self) -> dict[str, Any]:
        with self._lock:
            return {"measured_at": self._at, "took_s": self._took, "error": self._error,
                    "every_s": self.every_s, "window_s": self.window_s}

    def start(self) -> Measurements:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="console-measure", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.is_set():
            self.refresh()
            self._stop.wait(self.every_s)


# -- the fleet -------------------------------------------------------------------------------------

def owners(smap: ShardMap) -> list[str]:
    """The master holding each shard, by shard number."""
    out = [""] * smap.num_shards
    for r in smap:
        for s in r.shards:
            out[s] = r.master
    return out


def loads(owner: Iterable[str], costs: list[ShardCost] | None, objective: str) -> dict[str, float]:
    """The objective summed per pair (named by its master); 0 for every pair while nothing is measured."""
    out: dict[str, float] = {}
    for s, p in enumerate(owner):
        out[p] = out.get(p, 0.0) + (costs[s].get(objective) if costs and s < len(costs) else 0.0)
    return out


def queue_view(smap: ShardMap, queues: Iterable[QueueRecord]) -> list[dict[str, Any]]:
    """Every queue partition and where it lives: the master serving its tables (its own table route, or
    its shard's range), whether it is routed on its own and whether a cutover has it frozen."""
    out = []
    for q in queues:
        parts = []
        for p in q.partitions:
            tables = list(p.tables or [p.table])
            master, passive = smap.pair_of_table(p.shard, tables[0])
            parts.append({"index": p.index, "shard": p.shard, "tables": tables, "master": master, "slave": passive,
                          "routed": smap.route_of(p.shard, tables[0]) is not None,
                          "frozen": smap.is_table_frozen(p.shard, tables[0])})
        out.append({"name": q.name, "partitions": parts})
    return out


def fleet_view(smap: ShardMap, hosts: dict[str, Host], costs: list[ShardCost] | None,
               audit: list[dict[str, Any]], queues: Iterable[QueueRecord] = ()) -> dict[str, Any]:
    """Each pair with its ranges (frozen ones marked), shard count, bytes, rows and write rate; the map's
    epoch and its recent changes; the registered pairs that hold nothing; the queues' partitions and
    where each lives."""
    measured = costs is not None and len(costs) == smap.num_shards
    pairs: dict[str, dict[str, Any]] = {}
    for r in smap:
        p = pairs.setdefault(r.master, {"master": r.master, "slave": r.passive, "ranges": [], "shards": 0,
                                        "bytes": None, "rows": None, "writes_per_s": None})
        p["ranges"].append({"lo": r.lo, "hi": r.hi, "shards": r.count,
                            "frozen": any(r.overlaps(lo, hi) for lo, hi in smap.frozen)})
        p["shards"] += r.count
    if measured:
        for p in pairs.values():
            shards = smap.shards_on(p["master"])
            p["bytes"] = sum(costs[s].bytes for s in shards)
            p["rows"] = sum(costs[s].rows for s in shards)
            p["writes_per_s"] = round(sum(costs[s].writes for s in shards), 3)
    used = set(pairs) | {p["slave"] for p in pairs.values()}
    spare = sorted({tuple(sorted((h.name, h.partner))) for h in hosts.values() if h.name not in used and h.partner})
    history = [{"epoch": a.new_epoch, "old_epoch": a.old_epoch, "when": a.when, "who": a.who, "reason": a.reason,
                "migration": a.details.migration} for a in AuditEntry.parse_list(audit[-EPOCH_HISTORY:])]
    return {"epoch": smap.epoch, "num_shards": smap.num_shards, "frozen": [list(f) for f in smap.frozen],
            "pairs": list(pairs.values()), "spare_pairs": [list(p) for p in spare], "epoch_history": history,
            "measured": measured, "queues": queue_view(smap, queues)}


def fleet(config: Config, measurements: Measurements) -> dict[str, Any]:
    with command.session(config) as (zk, _):
        store = ShardMapStore(zk)
        smap = store.read()
        hosts = HostRegistry(zk).all()
        audit = store.history(limit=EPOCH_HISTORY)
        queues = QueueCatalog(zk).all()
    return {**fleet_view(smap, hosts, measurements.costs(), audit, queues), "measurement": measurements.info()}


# -- rebalances ------------------------------------------------------------------------------------

def rebalance_loads(rec: dict[str, Any], smap: ShardMap, costs: list[ShardCost] | None) -> dict[str, Any]:
    """A stored rebalance's load per pair before it started and after its moves, on today's measurement:
    the shards of finished moves are put back on their source for "before", and the shards of every
    move not failed or cancelled go to their target for "after"."""
    objective = Rebalance.parse(rec).objective or "bytes"
    now = owners(smap)
    before, after = list(now), list(now)
    for m in rec["moves"]:
        shards = [s for lo, hi in m["runs"] for s in range(lo, hi + 1) if s < len(now)]
        for s in shards:
            if m["state"] == "done":
                before[s] = m["source"]
            if m["state"] in MOVING:
                after[s] = m["target"]
    pairs = sorted(set(before) | set(after) | {p for m in rec["moves"] for p in (m["source"], m["target"])})
    lb, la = loads(before, costs, objective), loads(after, costs, objective)
    moves = [{k: m.get(k) for k in ("index", "wave", "source", "target", "runs", "bytes", "rows", "writes",
                                    "eta_s", "state", "migration", "error", "freeze_ms")}
             for m in sorted(rec["moves"], key=lambda m: m["index"])]
    return {"id": rec["id"], "phase": rec["phase"], "objective": objective, "pairs": pairs,
            "measured": costs is not None and len(costs) == smap.num_shards,
            "load_before": {p: lb.get(p, 0.0) for p in pairs}, "load_after": {p: la.get(p, 0.0) for p in pairs},
            "moves": moves}


def rebalance_plan(config: Config, rid: str, measurements: Measurements) -> dict[str, Any]:
    rec = rebalance.status(config, rid)["record"]
    with command.session(config) as (zk, _):
        smap = ShardMapStore(zk).read()
    return rebalance_loads(rec, smap, measurements.costs())


def plan_preview(config: Config, measurements: Measurements, *, objective: str = "bytes",
                 threshold: float = 0.10, add_pairs: list[str] = (), drain: list[str] = ()) -> dict[str, Any]:
    """``migrator rebalance --dry-run --json`` on the cached measurement (measured now when there is none)."""
    live = rebalance.plan_live(config, objective=objective, threshold=threshold, add_pairs=list(add_pairs),
                               drain=list(drain), window_s=measurements.window_s, costs=measurements.costs())
    return live.as_dict()
