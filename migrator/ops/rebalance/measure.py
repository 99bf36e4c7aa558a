"""Each shard's cost on the live fleet: bytes, rows and row writes per second.

Bytes (data + index) and rows come from ``information_schema.tables`` on the
master the shard map names for each shard (InnoDB's row count is its estimate).
The write rate is sampled from each master's binlog over a short window: the
binlog reader (:class:`~migrator.engine.binlog.reader.LocalReader`) tails it from
the current position, keeping the shard databases the map gives that master, and
counts row events per database. All masters are measured at once, so the whole
measurement takes about one window.

Queue partitions (:func:`measure_partitions`) are measured the same way, per
table: on the master that serves them (their table route's, else their range's),
so a partition that moved on its own is weighed where it lives.
"""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from migrator.engine.binlog.reader import LocalReader
from migrator.errors import MigratorError
from migrator.fleet.config import Credentials
from migrator.fleet.ids import shard_db
from migrator.fleet.model import Host, ShardMap
from migrator.fleet.mysql import binlog_pos, connect, tag, tls_of
from migrator.ops.rebalance.planner import PartitionCost, ShardCost


class MeasureError(MigratorError):
    component = "rebalance"


@dataclass
class PairSample:
    master: str
    bytes: dict[int, int]
    rows: dict[int, int]
    writes: dict[int, float]
    window_s: float
    #: row events per second per (shard, table), for the tables asked for
    table_writes: dict[tuple[int, str], float] = field(default_factory=dict)
    table_sizes: dict[tuple[int, str], tuple[int, int]] = field(default_factory=dict)


def table_stats(host: Host, creds: Credentials, shards: list[int]) -> tuple[dict[int, int], dict[int, int]]:
    """(bytes, rows) per shard database on ``host``; a shard without a database weighs 0."""
    names = [shard_db(s) for s in shards]
    if not names:
        return {}, {}
    conn = connect(host, creds)
    try:
        with conn.cursor() as cur:
            marks = ",".join(["%s"] * len(names))
            cur.execute(tag("rebalance") + "SELECT table_schema, COALESCE(SUM(data_length + index_length), 0), "
                        "COALESCE(SUM(table_rows), 0) FROM information_schema.tables "
                        f"WHERE table_schema IN ({marks}) AND table_type = 'BASE TABLE' GROUP BY table_schema",
                        names)
            got = {db: (int(b), int(r)) for db, b, r in cur.fetchall()}
    finally:
        conn.close()
    return ({s: got.get(shard_db(s), (0, 0))[0] for s in shards},
            {s: got.get(shard_db(s), (0, 0))[1] for s in shards})


def table_sizes(host: Host, creds: Credentials,
                tables: list[tuple[int, str]]) -> dict[tuple[int, str], tuple[int, int]]:
    """(bytes, rows) of each (shard, table) on ``host``; a table not there weighs 0."""
    if not tables:
        return {}
    conn = connect(host, creds)
    try:
        with conn.cursor() as cur:
            marks = ",".join(["(%s, %s)"] * len(tables))
            cur.execute(tag("rebalance") + "SELECT table_schema, table_name, data_length + index_length, table_rows "
                        f"FROM information_schema.tables WHERE (table_schema, table_name) IN ({marks})",
                        [x for s, t in tables for x in (shard_db(s), t)])
            got = {(db, t): (int(b or 0), int(r or 0)) for db, t, b, r in cur.fetchall()}
    finally:
        conn.close()
    return {(s, t): got.get((shard_db(s), t), (0, 0)) for s, t in tables}


def write_rates(host: Host, creds: Credentials, shards: list[int], window_s: float,
                tables: list[tuple[int, str]] = ()) -> tuple[dict[int, float], dict[tuple[int, str], float]]:
    """Row events per second per shard database in ``shards``, and per (shard, table) of ``tables``,
    read from ``host``'s binlog for ``window_s``."""
    if (not shards and not tables) or window_s <= 0:
        return {s: 0.0 for s in shards}, {t: 0.0 for t in tables}
    conn = connect(host, creds)
    try:
        start = binlog_pos(conn)
    finally:
        conn.close()
    by_db = {shard_db(s): s for s in shards}
    want = {(shard_db(s), t): (s, t) for s, t in tables}
    counts: Counter[int] = Counter()
    per_table: Counter[tuple[int, str]] = Counter()
    schema_of: dict[int, tuple[str, str]] = {}
    t0 = time.monotonic()
    dbs = sorted(set(by_db) | {db for db, _ in want})
    with LocalReader(host.address, host.port, creds.mysql_user, creds.mysql_password, start, dbs,
                     tls=tls_of(host, creds)) as rd:
        for txn in rd.transactions(deadline=t0 + window_s):
            for sh in rd.reader.take_shapes():
                schema_of[sh.id] = (sh.schema, sh.table)
            if txn is None:
                continue
            for change in txn.changes:
                db, table = schema_of.get(change[0], ("", ""))
                if db in by_db:
                    counts[by_db[db]] += 1
                if (db, table) in want:
                    per_table[want[(db, table)]] += 1
    took = max(time.monotonic() - t0, 1e-3)
    return {s: counts[s] / took for s in shards}, {t: per_table[t] / took for t in tables}


def sample_pair(host: Host, creds: Credentials, shards: list[int], window_s: float,
                tables: list[tuple[int, str]] = ()) -> PairSample:
    try:
        nbytes, rows = table_stats(host, creds, shards)
        writes, table_writes = write_rates(host, creds, shards, window_s, list(tables))
        sizes = table_sizes(host, creds, list(tables))
    except MigratorError:
        raise
    except Exception as exc:  # noqa: BLE001 - a host that cannot be read is named, with what to do
        raise MeasureError(f"cannot measure the shards of {host.name} ({host.address}:{host.port}): {exc}; "
                           "check that the host is up and the migrator user may read its binlog") from None
    return PairSample(host.name, nbytes, rows, writes, window_s, table_writes, sizes)


def measure(smap: ShardMap, hosts: dict[str, Host], creds: Credentials, *,
            window_s: float = 5.0) -> list[ShardCost]:
    """The cost of every shard of the map, measured on the masters the map names."""
    return measure_partitions(smap, hosts, creds, [], window_s=window_s)[0]


def measure_partitions(smap: ShardMap, hosts: dict[str, Host], creds: Credentials,
                       partitions: list[tuple[str, int, int, tuple[str, ...]]], *,
                       window_s: float = 5.0) -> tuple[list[ShardCost], list[PartitionCost]]:
    """Every shard's cost and every queue partition's, ``partitions`` given as (queue, index, shard,
    tables), each measured on the master serving it, all in one window."""
    serving = {(q, i): smap.master_of_table(s, tabs[0]) for q, i, s, tabs in partitions}
    masters = sorted(set(smap.masters()) | set(serving.values()))
    missing = [m for m in masters if m not in hosts]
    if missing:
        raise MeasureError(f"masters {', '.join(missing)} are in the map but not in the host registry: "
                           "register them (`migrator topology show`)")
    on: dict[str, list[tuple[int, str]]] = {m: [] for m in masters}
    for q, i, s, tabs in partitions:
        on[serving[(q, i)]] += [(s, t) for t in tabs]
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(masters))), thread_name_prefix="measure") as pool:
        samples = list(pool.map(lambda m: sample_pair(hosts[m], creds, smap.shards_on(m), window_s, on[m]),
                                masters))
    out = [ShardCost() for _ in range(smap.num_shards)]
    tw: dict[tuple[int, str], float] = {}
    sizes: dict[tuple[int, str], tuple[int, int]] = {}
    for smp in samples:
        for s, b in smp.bytes.items():
            out[s] = ShardCost(bytes=b, rows=smp.rows.get(s, 0), writes=round(smp.writes.get(s, 0.0), 3))
        tw.update(smp.table_writes)
        sizes.update(smp.table_sizes)
    parts = [PartitionCost(queue=q, partition=i, shard=s, tables=tuple(tabs), pair=serving[(q, i)],
                           bytes=sum(sizes.get((s, t), (0, 0))[0] for t in tabs),
                           rows=sum(sizes.get((s, t), (0, 0))[1] for t in tabs),
                           writes=round(sum(tw.get((s, t), 0.0) for t in tabs), 3),
                           routed=smap.route_of(s, tabs[0]) is not None)
             for q, i, s, tabs in partitions]
    return out, parts
