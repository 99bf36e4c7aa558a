"""Topology commands: show the map with sizes, store a first map, read history.

Plain functions that the CLI, jobs and playbooks call alike.
"""

from __future__ import annotations

import datetime as dt
import json
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from typing import Any

from migrator.errors import MigratorError, ShardMapError
from migrator.fleet import zk as zk_mod
from migrator.fleet.config import Config, load_credentials
from migrator.fleet.ids import TYPE_BOARD, TYPE_PIN, encode, shard_db
from migrator.fleet.model import Host, ShardMap
from migrator.fleet.mysql import connect as mysql_connect
from migrator.fleet.mysql import ident
from migrator.fleet.shard_map import HostRegistry, ShardMapStore


def shard_sizes(host: Host, credentials: Any, shards: list[int]) -> dict[int, int]:
    """Data + index bytes of each shard database on ``host`` (information_schema)."""
    if not shards:
        return {}
    names = [shard_db(s) for s in shards]
    conn = mysql_connect(host, credentials)
    try:
        with conn.cursor() as cur:
            marks = ",".join(["%s"] * len(names))
            cur.execute(
                "/* migrator:topology */ SELECT table_schema, COALESCE(SUM(data_length + index_length), 0) "
                f"FROM information_schema.tables WHERE table_schema IN ({marks}) GROUP BY table_schema",
                names,
            )
            return {int(db[2:]): int(size) for db, size in cur.fetchall()}
    finally:
        conn.close()


def show(config: Config, *, with_sizes: bool = True) -> dict[str, Any]:
    creds = load_credentials(config)
    with zk_mod.connect(config, creds) as zk:
        smap = ShardMapStore(zk).read()
        hosts = HostRegistry(zk).all()
    ranges = []
    for r in smap:
        size: int | None = None
        if with_sizes and r.master in hosts:
            sizes = shard_sizes(hosts[r.master], creds, list(r.shards))
            size = sum(sizes.values())
        ranges.append({
            "range": [r.lo, r.hi], "master": r.master, "slave": r.passive, "shards": r.count,
            "bytes": size, "frozen": any(r.overlaps(lo, hi) for lo, hi in smap.frozen),
        })
    used = {r.master for r in smap.ranges} | {r.passive for r in smap.ranges}
    spare = sorted({tuple(sorted((h.name, h.partner))) for h in hosts.values() if h.name not in used})
    return {"epoch": smap.epoch, "num_shards": smap.num_shards, "ranges": ranges,
            "frozen": [list(f) for f in smap.frozen], "spare_pairs": [list(p) for p in spare]}


def load_map_file(path: Path) -> ShardMap:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ShardMapError(f"cannot read map file {path}: {exc.strerror}") from None
    return ShardMap.from_json(text)


def load_hosts_file(path: Path) -> list[Host]:
    try:
        data = json.loads(path.read_text())
    except OSError as exc:
        raise MigratorError(f"cannot read hosts file {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise MigratorError(f"hosts file {path} is not valid JSON: {exc}") from None
    if not isinstance(data, list):
        raise MigratorError(f"hosts file {path} must hold a JSON list of hosts")
    try:
        return [Host(**h) for h in data]
    except Exception as exc:
        raise MigratorError(f"hosts file {path}: {exc}".splitlines()[0]) from None


def init_from_file(config: Config, map_file: Path, hosts_file: Path | None = None) -> ShardMap:
    """Store the first map of ``map_file``, registering the hosts of ``hosts_file`` with it. Both files are
    read and checked before the fleet is asked, and the map against the registry before anything is
    written: a refused init (a map already stored, an unknown host) changes no host entry."""
    smap = load_map_file(map_file)  # validates layout before touching anything
    new_hosts = load_hosts_file(hosts_file) if hosts_file else []
    creds = load_credentials(config)
    with zk_mod.connect(config, creds) as zk:
        return ShardMapStore(zk).init(smap, HostRegistry(zk).all(), register=new_hosts,
                                      reason=f"topology init --from {map_file.name}")


def shard_schema_statements() -> list[str]:
    """The CREATE TABLE statements of one virtual shard (the seed schema)."""
    text = resources.files("migrator.fleet").joinpath("shard_schema.sql").read_text()
    return [s for s in (x.strip() for x in text.split(";")) if "CREATE" in s]


def create_shards(smap: ShardMap, hosts: dict[str, Host], creds: Any, *, rows: int = 0,
                  only_missing: bool = False) -> list[int]:
    """Create ``dbNNNNN`` with the seed schema on each shard's master, seeding ``rows`` pins.

    Runs on the masters only; the pair's replication carries it to the slaves.
    With ``only_missing`` existing shard databases are left alone. Returns the
    shards created.
    """
    statements = shard_schema_statements()
    created: list[int] = []

    def one_range(master: str, shard_list: list[int]) -> list[int]:
        done = []
        conn = mysql_connect(hosts[master], creds, autocommit=False)
        try:
            with conn.cursor() as cur:
                cur.execute("SHOW DATABASES LIKE 'db%%'")
                existing = {r[0] for r in cur.fetchall()}
                for shard in shard_list:
                    db = shard_db(shard)
                    if only_missing and db in existing:
                        continue
                    cur.execute(f"/* migrator:topology */ CREATE DATABASE IF NOT EXISTS {ident(db)}")
                    cur.execute(f"USE {ident(db)}")
                    for st in statements:
                        cur.execute(st)
                    seed_rows(cur, shard, rows)
                    conn.commit()
                    done.append(shard)
        finally:
            conn.close()
        return done

    with ThreadPoolExecutor(max_workers=4) as pool:
        for f in [pool.submit(one_range, r.master, list(r.shards)) for r in smap]:
            created += f.result()
    return sorted(created)


def create_shards_command(config: Config, rows: int = 0) -> list[int]:
    creds = load_credentials(config)
    with zk_mod.connect(config, creds) as zk:
        smap = ShardMapStore(zk).read()
        hosts = HostRegistry(zk).all()
    smap.validate_hosts(hosts)
    return create_shards(smap, hosts, creds, rows=rows, only_missing=True)


def seed_rows(cur: Any, shard: int, rows: int) -> None:
    """Some users, boards, pins and mappings in one shard (deterministic)."""
    if rows <= 0:
        return
    cur.executemany("INSERT INTO users (data) VALUES (%s)",
                    [(json.dumps({"username": f"user{shard}_{i}",
                                  "email": f"u{i}@example.com"}),) for i in range(max(1, rows // 10))])
    cur.executemany("INSERT INTO boards (data) VALUES (%s)",
                    [(json.dumps({"name": f"board {i}", "shard": shard}),) for i in range(max(1, rows // 10))])
    cur.executemany("INSERT INTO pins (data) VALUES (%s)",
                    [(json.dumps({"details": f"pin {i} ✓",
                                  "link": f"http://example.com/{shard}/{i}"}),) for i in range(rows)])
    cur.execute("SELECT local_id FROM boards ORDER BY local_id")
    boards = [r[0] for r in cur.fetchall()]
    cur.execute("SELECT local_id FROM pins ORDER BY local_id")
    pins = [r[0] for r in cur.fetchall()]
    maps = [(encode(shard, TYPE_BOARD, boards[i % len(boards)]), encode(shard, TYPE_PIN, pid), 1_600_000_000 + i)
            for i, pid in enumerate(pins)]
    cur.executemany("INSERT INTO board_has_pins (board_id, pin_id, sequence) VALUES (%s, %s, %s)", maps)



def history(config: Config, limit: int = 20) -> list[dict[str, Any]]:
    with zk_mod.connect(config) as zk:
        recs = ShardMapStore(zk).history(limit)
    for r in recs:
        r["when_iso"] = dt.datetime.fromtimestamp(r["when"], dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
    return recs


def _replicates_from(conn: Any, peer: Host) -> str | None:
    """None when this server replicates from ``peer`` with both threads running, else why not."""
    with conn.cursor() as cur:
        cur.execute("/* migrator:topology */ SHOW ALL SLAVES STATUS")
        cols = [d[0] for d in cur.description]
        rows = [dict(zip(cols, r)) for r in cur.fetchall()]
    if not rows:
        return "it does not replicate from anything"
    for st in rows:
        if int(st.get("Master_Port") or 0) == peer.port:
            if st.get("Slave_IO_Running") != "Yes" or st.get("Slave_SQL_Running") != "Yes":
                return f"its replication from {peer.name} is not running ({st.get('Last_SQL_Error') or 'stopped'})"
            return None
    return f"it does not replicate from {peer.name} (port {peer.port})"


def add_pair(config: Config, master: Host, passive: Host) -> dict[str, Any]:
    """Register a new, empty master-master pair: a split, move or rebalance target.

    Refuses (one line, what to do) a name already registered, a host the
    migration identity cannot reach, a pair whose members do not replicate
    from each other or share a server id, and a host that already holds shard
    databases. Nothing is registered unless every check passes.
    """
    creds = load_credentials(config)
    if master.partner != passive.name or passive.partner != master.name:
        raise MigratorError(f"{master.name} and {passive.name} must name each other as partner")
    with zk_mod.connect(config, creds) as zk:
        reg = HostRegistry(zk)
        known = reg.all()
        taken = [h.name for h in (master, passive) if h.name in known]
        if taken:
            raise MigratorError(f"{', '.join(taken)} already registered (see `migrator topology show`); "
                                "pick new names")
        ids: dict[int, str] = {}
        for host, peer in ((master, passive), (passive, master)):
            try:
                conn = mysql_connect(host, creds)
            except Exception as exc:  # noqa: BLE001 - any connect failure is the operator's to fix
                err = MigratorError(f"cannot connect to {host.name} at {host.address}:{host.port} "
                                    f"with the migration identity: {exc}; check the address and grants")
                # the cause's exit code: 4 for a host that does not answer, 5 for refused credentials
                err.exit_code = getattr(exc, "exit_code", MigratorError.exit_code)
                raise err from None
            try:
                with conn.cursor() as cur:
                    cur.execute("/* migrator:topology */ SELECT @@server_id")
                    sid = int(cur.fetchone()[0])
                    cur.execute("/* migrator:topology */ SELECT SCHEMA_NAME FROM information_schema.SCHEMATA "
                                "WHERE SCHEMA_NAME REGEXP '^db[0-9]{5}$' LIMIT 3")
                    held = [r[0] for r in cur.fetchall()]
                problem = _replicates_from(conn, peer)
            finally:
                conn.close()
            if sid in ids:
                raise MigratorError(f"{host.name} and {ids[sid]} share server_id {sid}; give each its own")
            ids[sid] = host.name
            if held:
                raise MigratorError(f"{host.name} already holds shard databases ({', '.join(held)}...): "
                                    "a new pair must be empty")
            if problem:
                raise MigratorError(f"{host.name}: {problem}; set up master-master replication first")
        reg.register(master)
        reg.register(passive)
    return {"registered": [master.name, passive.name], "server_ids": {v: k for k, v in ids.items()}}
