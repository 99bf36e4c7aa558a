"""Copy throughput: migrator's chunked copy vs ``mariadb-dump | mariadb`` vs LOAD DATA.

Run with ``python -m bench.copy`` (not a test). On one sandbox and the same
data (the shards a split of MySQL001A moves), each method copies those shards
to the spare pair, starting from an empty target each time:

* ``migrator copy``: plan + ``command.run_copy`` in-process (threads, one per
  table at a time, ``--workers``), with preflight, checkpoints and throttling;
* ``mariadb-dump | mariadb``: ``--single-transaction --databases`` piped into
  the target master;
* ``LOAD DATA``: schema via SHOW CREATE TABLE, rows exported with ``mariadb -B``
  to TSV files and loaded with ``LOAD DATA LOCAL INFILE`` (export + load timed).

Client tools run with ``--no-defaults``; the password goes through the
environment (MYSQL_PWD), not the command line. Prints a table and ends with
``copy_vs_dump=... copy_vs_load_data=...`` (ratios of rows/s; > 1 means the
migrator copy is faster).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from migrator.engine.migration import Options
from migrator.fleet import config as config_mod
from migrator.fleet import zk as zk_mod
from migrator.fleet.model import even_layout
from migrator.fleet.mysql import connect, ident, qualified
from migrator.fleet.shard_map import HostRegistry, ShardMapStore
from migrator.ops import command
from migrator.sandbox import Sandbox, find_base_port, reset_fleet


def _env(creds: Any) -> dict[str, str]:
    return {**os.environ, "MYSQL_PWD": creds.mysql_password}


def _client(host: Any, creds: Any, tool: str = "mariadb") -> list[str]:
    return [tool, "--no-defaults", "-h", host.address, "-P", str(host.port), "-u", creds.mysql_user]


def _drop_target(sb: Sandbox, dbs: list[str]) -> None:
    for name in ("MySQL003A", "MySQL003B"):
        with sb.root_conn(name) as c, c.cursor() as cur:
            cur.execute("SET sql_log_bin = 0")
            for db in dbs:
                cur.execute(f"DROP DATABASE IF EXISTS {ident(db)}")


def _count(host: Any, creds: Any, dbs: list[str]) -> int:
    conn = connect(host, creds)
    try:
        n = 0
        with conn.cursor() as cur:
            for db in dbs:
                cur.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (db,))
                for (t,) in cur.fetchall():
                    cur.execute(f"SELECT COUNT(*) FROM {qualified(db, t)}")
                    n += cur.fetchone()[0]
        return n
    finally:
        conn.close()


def _source_bytes(host: Any, creds: Any, dbs: list[str]) -> int:
    conn = connect(host, creds)
    try:
        with conn.cursor() as cur:
            marks = ",".join(["%s"] * len(dbs))
            cur.execute(f"SELECT COALESCE(SUM(data_length), 0) FROM information_schema.tables "
                        f"WHERE table_schema IN ({marks})", dbs)
            return int(cur.fetchone()[0])
    finally:
        conn.close()


def run_migrator(cfg: Any, workers: int) -> float:
    spec = command.plan_split(cfg, "MySQL001A", options=Options(copy_workers=workers)).spec
    t0 = time.perf_counter()
    out = command.run_copy(cfg, spec.id)
    took = time.perf_counter() - t0
    assert out["finished"], out
    command.abort(cfg, spec.id, settle_s=0)  # releases locks; drops the copy for the next method
    return took


def run_dump(src: Any, tgt: Any, creds: Any, dbs: list[str]) -> float:
    t0 = time.perf_counter()
    dump = subprocess.Popen([*_client(src, creds, "mariadb-dump"), "--single-transaction", "--quick",
                             "--skip-lock-tables", "--databases", *dbs], stdout=subprocess.PIPE, env=_env(creds))
    load = subprocess.run(_client(tgt, creds), stdin=dump.stdout, env=_env(creds), capture_output=True)
    dump.stdout.close()  # type: ignore[union-attr]
    if dump.wait() != 0 or load.returncode != 0:
        raise SystemExit(f"dump | load failed: {load.stderr.decode()[-500:]}")
    return time.perf_counter() - t0


def run_load_data(src: Any, tgt: Any, creds: Any, dbs: list[str], tmp: Path) -> tuple[float, float]:
    """(export + load seconds, load-only seconds)."""
    t0 = time.perf_counter()
    sconn = connect(src, creds)
    tconn = connect(tgt, creds, local_infile=True)
    files = []
    try:
        with sconn.cursor() as sc, tconn.cursor() as tc:
            for db in dbs:
                tc.execute(f"CREATE DATABASE IF NOT EXISTS {ident(db)}")
                sc.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (db,))
                for (t,) in sc.fetchall():
                    sc.execute(f"SHOW CREATE TABLE {qualified(db, t)}")
                    tc.execute(f"USE {ident(db)}")
                    tc.execute(sc.fetchone()[1])
                    path = tmp / f"{db}.{t}.tsv"
                    with path.open("wb") as out:
                        subprocess.run([*_client(src, creds), "-B", "-N", "-e", f"SELECT * FROM {qualified(db, t)}"],
                                       stdout=out, env=_env(creds), check=True)
                    files.append((db, t, path))
            t1 = time.perf_counter()
            for db, t, path in files:
                tc.execute(f"LOAD DATA LOCAL INFILE %s INTO TABLE {qualified(db, t)} CHARACTER SET utf8mb4",
                           (str(path),))
        return time.perf_counter() - t0, time.perf_counter() - t1
    finally:
        sconn.close()
        tconn.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20000, help="seed pins per shard (board_has_pins as many)")
    ap.add_argument("--workers", type=int, default=4, help="tables copied at once by the migrator copy")
    ap.add_argument("--sandbox", help="reuse a running sandbox directory (its data is reset)")
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="bench-copy-"))
    own = args.sandbox is None
    sb = Sandbox(args.sandbox or tmp / "sandbox")
    try:
        if own or not sb.running():
            sb.up(pairs=2, spare_pairs=1, shards=8, rows=20, base_port=find_base_port(100), log=lambda *_: None)
        base = sb.config()
        cfg = base.with_root(f"/bench{uuid.uuid4().hex[:8]}")
        cfg.credentials.file = str(sb.secrets_file)
        cfg_path = tmp / "migrator.toml"
        cfg_path.write_text(config_mod.dump(cfg))
        cfg = config_mod.load(cfg_path)
        creds = config_mod.load_credentials(cfg)
        hosts = sb.hosts()
        smap = even_layout(sb.state.shards, sb.pairs(spare=False))  # type: ignore[union-attr]
        print(f"seeding {args.rows} pins per shard ...", flush=True)
        reset_fleet(sb, smap, rows=args.rows)
        with zk_mod.connect(cfg, creds) as zk:
            for h in hosts.values():
                HostRegistry(zk).register(h)
            ShardMapStore(zk).init(smap, hosts, reason="bench")
        dbs = ["db00002", "db00003"]
        src, tgt = hosts["MySQL001A"], hosts["MySQL003A"]
        rows = _count(src, creds, dbs)
        nbytes = _source_bytes(src, creds, dbs)
        results = []

        took = run_migrator(cfg, args.workers)
        results.append(("migrator copy", took))
        sb.wait_pairs_converged()
        _drop_target(sb, dbs)

        took = run_dump(src, tgt, creds, dbs)
        assert _count(tgt, creds, dbs) == rows
        results.append(("mariadb-dump | mariadb", took))
        sb.wait_pairs_converged()
        _drop_target(sb, dbs)

        took, load_only = run_load_data(src, tgt, creds, dbs, tmp)
        assert _count(tgt, creds, dbs) == rows
        results.append(("LOAD DATA (export + load)", took))
        results.append(("LOAD DATA (load only)", load_only))
        sb.wait_pairs_converged()
        _drop_target(sb, dbs)

        print(f"\n{rows:,} rows, {nbytes / 1e6:.1f} MB (source data_length) in {len(dbs)} shards\n")
        print(f"{'method':<28} {'seconds':>9} {'rows/s':>11} {'MB/s':>8}")
        for name, s in results:
            print(f"{name:<28} {s:>9.2f} {rows / s:>11,.0f} {nbytes / 1e6 / s:>8.2f}")
        copy_s = results[0][1]
        print(f"\ncopy_vs_dump={results[1][1] / copy_s:.2f} copy_vs_load_data={results[2][1] / copy_s:.2f} "
              f"copy_vs_load_only={results[3][1] / copy_s:.2f} rows={rows} copy_rows_per_s={rows / copy_s:.0f}")
    finally:
        if own:
            sb.down()
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
