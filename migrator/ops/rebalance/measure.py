"""Each shard's cost on the live fleet: bytes, rows and row writes per second.

Bytes (data + index) and rows come from ``information_schema.tables`` on the
master the shard map names for each shard (InnoDB's row count is its estimate).
The write rate is sampled from each master's binlog over a short window: the
binlog reader (:class:`~migrator.engine.binlog.reader.LocalReader`) tails it from
the current position, keeping the shard databases the map gives that master, and
counts row events per database. All masters are measured at once, so the whole
measurement takes about one window.
"""

from __future__ import annotations

import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from migrator.engine.binlog.reader import LocalReader
from migrator.errors import MigratorError
from migrator.fleet.config import Credentials
from migrator.fleet.ids import shard_db
from migrator.fleet.model import Host, ShardMap
from migrator.fleet.mysql import binlog_pos, connect, tag, tls_of
from migrator.ops.rebalance.planner import ShardCost


class MeasureError(MigratorError):
    component = "rebalance"


@dataclass
class PairSample:
    master: str
    bytes: dict[int, int]
    rows: dict[int, int]
    writes: dict[int, float]
    window_s: float


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


def write_rates(host: Host, creds: Credentials, shards: list[int], window_s: float) -> dict[int, float]:
    """Row events per second per shard database, read from ``host``'s binlog for ``window_s``."""
    if not shards or window_s <= 0:
        return {s: 0.0 for s in shards}
    conn = connect(host, creds)
    try:
        start = binlog_pos(conn)
    finally:
        conn.close()
    by_db = {shard_db(s): s for s in shards}
    counts: Counter[int] = Counter()
    schema_of: dict[int, str] = {}
    t0 = time.monotonic()
    with LocalReader(host.address, host.port, creds.mysql_user, creds.mysql_password, start, sorted(by_db),
                     tls=tls_of(host, creds)) as rd:
        for txn in rd.transactions(deadline=t0 + window_s):
            for sh in rd.reader.take_shapes():
                schema_of[sh.id] = sh.schema
            if txn is None:
                continue
            for change in txn.changes:
                db = schema_of.get(change[0])
                if db in by_db:
                    counts[by_db[db]] += 1
    took = max(time.monotonic() - t0, 1e-3)
    return {s: counts[s] / took for s in shards}


def sample_pair(host: Host, creds: Credentials, shards: list[int], window_s: float) -> PairSample:
    try:
        nbytes, rows = table_stats(host, creds, shards)
        writes = write_rates(host, creds, shards, window_s)
    except MigratorError:
        raise
    except Exception as exc:  # noqa: BLE001 - a host that cannot be read is named, with what to do
        raise MeasureError(f"cannot measure the shards of {host.name} ({host.address}:{host.port}): {exc}; "
                           "check that the host is up and the migrator user may read its binlog") from None
    return PairSample(host.name, nbytes, rows, writes, window_s)


def measure(smap: ShardMap, hosts: dict[str, Host], creds: Credentials, *,
            window_s: float = 5.0) -> list[ShardCost]:
    """The cost of every shard of the map, measured on the masters the map names."""
    masters = smap.masters()
    missing = [m for m in masters if m not in hosts]
    if missing:
        raise MeasureError(f"masters {', '.join(missing)} are in the map but not in the host registry: "
                           "register them (`migrator topology show`)")
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(masters))), thread_name_prefix="measure") as pool:
        samples = list(pool.map(lambda m: sample_pair(hosts[m], creds, smap.shards_on(m), window_s), masters))
    out = [ShardCost() for _ in range(smap.num_shards)]
    for smp in samples:
        for s, b in smp.bytes.items():
            out[s] = ShardCost(bytes=b, rows=smp.rows.get(s, 0), writes=round(smp.writes.get(s, 0.0), 3))
    return out
