"""Skewed shard data for the rebalance tests: pins of ~2 KB, a number per shard, then ANALYZE
TABLE so information_schema's sizes are current."""

from __future__ import annotations

from migrator.fleet.ids import shard_db
from migrator.fleet.mysql import connect, qualified

PAYLOAD = "x" * 2000


def add_pins(host, creds, shard: int, n: int, batch: int = 100) -> None:
    conn = connect(host, creds)
    try:
        with conn.cursor() as cur:
            for i in range(0, n, batch):
                k = min(batch, n - i)
                cur.execute(f"INSERT INTO {qualified(shard_db(shard), 'pins')} (data) VALUES "
                            + ",".join(["(JSON_OBJECT('pad', %s, 'i', %s))"] * k),
                            [v for j in range(k) for v in (PAYLOAD, i + j)])
            conn.commit()
            cur.execute(f"ANALYZE TABLE {qualified(shard_db(shard), 'pins')}")
            cur.fetchall()
    finally:
        conn.close()


def skew(smap, hosts, creds, rows_by_master: dict[str, int]) -> None:
    """Add ``rows_by_master[m]`` pins to every shard the map gives master ``m``."""
    for r in smap:
        n = rows_by_master.get(r.master, 0)
        if n:
            for s in r.shards:
                add_pins(hosts[r.master], creds, s, n)
