"""Plan a migration: which shards (or which queue partition) move from which
pair to which pair, checked against the shard map, before anything is touched.

Runs in the CLI process (or a playbook step). Planning reads ZooKeeper (shard
map, host registry, queue records) and, for a dry run's estimate, the source
master's table statistics; storing a plan is one ZooKeeper transaction
(:meth:`MigrationStore.create` takes the shard locks with the record) followed
by the maintenance pause nodes of the moving shards.

Three shapes, one :class:`~migrator.engine.migration.Spec`:

* ``split MySQL001A``: the upper half of every range the master holds goes to
  a spare pair (registered hosts that hold no range) or to ``--to``.
* ``move --shards 4-7 --to PAIR``: any shards that share one source pair.
* ``move-partition --queue Q --partition K --to PAIR``: one queue partition's
  jobs table (in database ``db%05d`` of its shard).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from migrator.engine.eta import Estimate, TableEstimate
from migrator.engine.eta import fill as fill_estimate
from migrator.engine.inspector import describe, list_tables
from migrator.engine.migration import MigrationStore, Options, Spec, new_id
from migrator.errors import MigratorError, UnknownHost
from migrator.fleet import bounds
from migrator.fleet.config import Credentials
from migrator.fleet.ids import shard_db
from migrator.fleet.model import Host, ShardMap, shard_runs
from migrator.fleet.mysql import connect, ident
from migrator.fleet.shard_map import HostRegistry, ShardMapStore
from migrator.fleet.zk import ZK

QUEUES = "queues"
QUEUE_NAME_RE = bounds.QUEUE_NAME_RE
MAINTENANCE_PAUSED = "maintenance/paused"


class PlanError(MigratorError):
    component = "plan"
    exit_code = 2


# -- shard arithmetic (pure) --------------------------------------------------------------

def parse_shards(text: str) -> list[int]:
    """``"4-7,9"`` -> ``[4, 5, 6, 7, 9]``, bounded by the id format (:func:`migrator.fleet.bounds.shards`)."""
    try:
        return bounds.shards(text)
    except ValueError as exc:
        raise PlanError(f"shards {short_text(text)}: {exc}") from None


def short_text(text: str, limit: int = 40) -> str:
    """``text`` cut to ``limit`` characters for a message (a huge argument is not echoed)."""
    return text if len(text) <= limit else f"{text[:limit - 12]}... ({len(text)} characters)"


def upper_half(lo: int, hi: int) -> list[int]:
    """The upper half of [lo, hi]: floor(n/2) shards at the top (none for n=1)."""
    n = hi - lo + 1
    return list(range(hi - n // 2 + 1, hi + 1))


def split_shards(smap: ShardMap, master: str) -> list[int]:
    """The shards a split of ``master`` moves: the upper half of each of its ranges."""
    ranges = smap.ranges_on(master)
    if not ranges:
        passive_ranges = [r for r in smap.ranges if r.passive == master]
        if passive_ranges:
            r = passive_ranges[0]
            raise PlanError(f"{master} is the standby of range [{r.lo}, {r.hi}]; split its master {r.master} instead")
        raise PlanError(f"{master} holds no shard range: nothing to split (see `migrator topology show`)")
    shards = [s for r in ranges for s in upper_half(r.lo, r.hi)]
    if not shards:
        desc = ", ".join(f"[{r.lo}, {r.hi}]" for r in ranges)
        raise PlanError(f"{master} holds only single-shard ranges ({desc}); a shard cannot be split further")
    return shards


def spare_pairs(hosts: dict[str, Host], smap: ShardMap) -> list[tuple[str, str]]:
    """Registered pairs that hold no range, as (A, B) sorted by name."""
    used = {r.master for r in smap.ranges} | {r.passive for r in smap.ranges}
    pairs = set()
    for h in hosts.values():
        if h.name in used or h.partner in used or h.partner not in hosts:
            continue
        pairs.add(tuple(sorted((h.name, h.partner))))
    return sorted(pairs)  # type: ignore[arg-type]


def source_pair(smap: ShardMap, shards: list[int]) -> tuple[str, str]:
    """The one pair that holds all ``shards`` (its map master first)."""
    owners = {}
    for s in shards:
        r = smap.range_of(s)
        owners.setdefault((r.master, r.passive), []).append(s)
    if len(owners) != 1:
        desc = "; ".join(f"{m}: {_ranges_text(v)}" for (m, _), v in sorted(owners.items()))
        raise PlanError(f"the shards live on more than one pair ({desc}); plan one migration per source pair")
    return next(iter(owners))


def routed_to(smap: ShardMap, shards: list[int], target: tuple[str, str]) -> list[str]:
    """Tables of ``shards`` that a table route serves from the ``target`` pair (a queue partition
    moved there on its own): a move of those whole shards there would meet them in its databases."""
    return [f"{shard_db(rt.shard)}.{t}" for s in shards for rt in smap.routes_of(s)
            if rt.master in target or rt.passive in target for t in rt.tables]


def _refuse_routed_to(smap: ShardMap, shards: list[int], target: tuple[str, str]) -> None:
    there = routed_to(smap, shards, target)
    if there:
        raise PlanError(f"{target[0]}/{target[1]} already serves {', '.join(there)} (a queue partition moved there "
                        "on its own), in databases this move would create there: pick another target pair, or "
                        "move the partition elsewhere first (`migrator move-partition`)")


def target_pair(hosts: dict[str, Host], smap: ShardMap, source: tuple[str, str], target: str) -> tuple[str, str]:
    """Resolve ``--to NAME`` to (master, slave) and check it can receive shards."""
    if target not in hosts:
        raise UnknownHost(f"target host {target!r} is not in the host registry; register it first "
                          "(see `migrator topology show`)")
    h = hosts[target]
    if h.partner not in hosts:
        raise UnknownHost(f"{target}'s partner {h.partner!r} is not in the host registry; register the pair first")
    if target in source:
        raise PlanError(f"{target} is in the source pair {source[0]}/{source[1]}: pick another pair as target")
    for r in smap.ranges:
        if r.passive == target:
            raise PlanError(f"{target} is the standby of range [{r.lo}, {r.hi}]; name its master {r.master} as target")
    return target, h.partner


def _ranges_text(shards: list[int]) -> str:
    spec = Spec(id="x", source_master="a", source_passive="b", target_master="c", target_passive="d",
                shards=tuple(sorted(shards)))
    return shard_runs(spec.ranges())


# -- building specs ------------------------------------------------------------------------------

def plan_split(zk: ZK, source: str, target: str | None = None, *, options: Options | None = None,
               migration_id: str | None = None) -> Spec:
    smap = ShardMapStore(zk).read()
    hosts = HostRegistry(zk).all()
    if source not in hosts:
        raise UnknownHost(f"source host {source!r} is not in the host registry (see `migrator topology show`)")
    shards = split_shards(smap, source)
    src = source_pair(smap, shards)
    if target is None:
        spare = spare_pairs(hosts, smap)
        if not spare:
            raise PlanError("no spare pair (registered hosts holding no range): register a new pair, "
                            "or name one with --to")
        target = spare[0][0]
    tgt = target_pair(hosts, smap, src, target)
    _refuse_routed_to(smap, shards, tgt)
    return _spec(migration_id, "shards", src, tgt, shards, options)


def plan_move(zk: ZK, shards: list[int], target: str, *, options: Options | None = None,
              migration_id: str | None = None) -> Spec:
    smap = ShardMapStore(zk).read()
    hosts = HostRegistry(zk).all()
    for s in shards:
        if not 0 <= s < smap.num_shards:
            raise PlanError(f"shard {s} is outside 0..{smap.num_shards - 1}")
    src = source_pair(smap, shards)
    tgt = target_pair(hosts, smap, src, target)
    _refuse_routed_to(smap, shards, tgt)
    return _spec(migration_id, "shards", src, tgt, shards, options)


def read_queue(zk: ZK, queue: str) -> dict[str, Any]:
    """The queue service's record ``<root>/queues/<name>`` (read directly)."""
    if not QUEUE_NAME_RE.fullmatch(queue):
        raise PlanError(f"queue name {queue!r:.60} is not valid: use 1-40 letters, digits or underscores")
    try:
        data, _ = zk.client.get(zk.path(QUEUES, queue))
    except NoNodeError:
        raise PlanError(f"no queue {queue!r} at {zk.path(QUEUES, queue)} (see the queue service's list)") from None
    try:
        return json.loads(data)
    except ValueError:
        raise PlanError(f"queue record {queue!r} is not valid JSON") from None


def plan_move_partition(zk: ZK, queue: str, partition: int, target: str, *, options: Options | None = None,
                        migration_id: str | None = None) -> Spec:
    rec = read_queue(zk, queue)
    parts = {p.get("index"): p for p in rec.get("partitions", [])}
    if partition not in parts:
        raise PlanError(f"queue {queue!r} has no partition {partition} (it has {sorted(parts)})")
    part = parts[partition]
    shard, table = int(part["shard"]), str(part["table"])
    ident(table)
    # "tables" (when present) lists every table of the partition: the jobs table and its dedupe side table
    tables = tuple(str(t) for t in part.get("tables") or [table])
    for t in tables:
        ident(t)
    smap = ShardMapStore(zk).read()
    hosts = HostRegistry(zk).all()
    # the partition's tables are served by their route (a partition that moved before), else by the range
    src = smap.pair_of_table(shard, tables[0])
    tgt = target_pair(hosts, smap, src, target)
    return _spec(migration_id, "queue_partition", src, tgt, [shard], options, tables=tables, queue=queue,
                 partition=partition)


def _spec(migration_id: str | None, kind: str, src: tuple[str, str], tgt: tuple[str, str], shards: list[int],
          options: Options | None, **extra: Any) -> Spec:
    return Spec(id=migration_id or new_id(), kind=kind, source_master=src[0], source_passive=src[1],
                target_master=tgt[0], target_passive=tgt[1], shards=tuple(sorted(shards)),
                options=options or Options(), **extra)


def store(zk: ZK, spec: Spec) -> None:
    """Store the plan (record + shard locks, atomically) and pause partition
    maintenance on the moving shards."""
    MigrationStore(zk).create(spec)
    hold_maintenance_pause(zk, spec)


# -- partition maintenance pause ---------------------------------------------------------------
# The queue's maintenance drops and reorganises partitions; those statements
# reach the binlog as DDL, not row events, so they must not run on a moving
# shard. The queue service skips a shard while <root>/maintenance/paused/<shard>
# exists; cutover or abort removes the nodes. A batched migration's nodes move to
# each batch with its shards (in the hand-over's transaction).

def hold_maintenance_pause(zk: ZK, spec: Spec) -> None:
    base = zk.path(MAINTENANCE_PAUSED)
    zk.ensure(base)
    for s in spec.shards:
        try:
            zk.client.create(f"{base}/{s}", spec.id.encode(), acl=zk.protected_acl())
        except NodeExistsError:
            pass  # ours from an earlier try, or another holder's: removing it is theirs to do


def release_maintenance_pause(zk: ZK, spec: Spec) -> int:
    """Remove the pause nodes this migration created (cutover, abort and cleanup call this);
    returns how many it removed. A batched migration's spec loses the shards it hands over (their
    nodes go to the batch with them: :func:`maintenance_pauses`), so for it every pause node is
    looked at: whatever still carries its id is released, whichever shard it is on."""
    base = zk.path(MAINTENANCE_PAUSED)
    removed = 0
    shards: Sequence[int | str] = spec.shards
    if spec.batched:
        try:
            shards = zk.client.get_children(base)
        except NoNodeError:
            shards = ()
    for s in shards:
        try:
            data, stat = zk.client.get(f"{base}/{s}")
            if data.decode() == spec.id:
                zk.client.delete(f"{base}/{s}", version=stat.version)
                removed += 1
        except (NoNodeError, BadVersionError):
            pass
    return removed


def maintenance_pauses(zk: ZK, holder: str, shards: Sequence[int]) -> dict[str, int]:
    """The pause nodes of ``shards`` that carry ``holder``'s id: path -> version (for a hand-over,
    which gives them to the batch in its transaction, so that the batch's flip, abort or cleanup
    releases them). A node carrying another id (an operator's pause, another migration's) is left."""
    base = zk.path(MAINTENANCE_PAUSED)
    held: dict[str, int] = {}
    for s in shards:
        try:
            data, stat = zk.client.get(f"{base}/{s}")
        except NoNodeError:
            continue
        if data.decode() == holder:
            held[f"{base}/{s}"] = stat.version
    return held


def maintenance_paused(zk: ZK, shard: int) -> str | None:
    try:
        data, _ = zk.client.get(zk.path(MAINTENANCE_PAUSED, str(shard)))
        return data.decode()
    except NoNodeError:
        return None


# -- estimate (dry run, preflight's retention check) --------------------------------------------

def moving_tables(conn: Any, spec: Spec) -> list[tuple[str, str]]:
    if spec.kind == "queue_partition":
        return [(shard_db(spec.shards[0]), t) for t in spec.tables]
    return [(db, t) for db in spec.databases for t in list_tables(conn, db)]


def estimate(zk: ZK, spec: Spec, credentials: Credentials) -> Estimate:
    """Rows, bytes and the copy's ETA for the moving tables (reads the source only; the model
    and where its rates come from are in :mod:`migrator.engine.eta`)."""
    hosts = HostRegistry(zk).all()
    conn = connect(hosts[spec.source_master], credentials)
    try:
        est = Estimate()
        infos = []
        for db, t in moving_tables(conn, spec):
            info = describe(conn, db, t)
            infos.append(info)
            est.tables.append(TableEstimate(db, t, info.est_rows, info.data_bytes))
        return fill_estimate(est, zk, conn, infos, spec.options.copy_workers)
    finally:
        conn.close()
