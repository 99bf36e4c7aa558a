"""Copy throughput: migrator's copy vs ``mariadb-dump | mariadb`` vs SELECT INTO OUTFILE + LOAD DATA.

Run with ``python -m bench.copy`` (not a test). On one sandbox, for each size
(``--sizes``, seed pins per shard; the copy moves two shards of five tables
each), every method copies the same shards from MySQL001A to the spare pair
``--runs`` times, each run starting from an empty target; the median run
counts. After every run each table's ``CHECKSUM TABLE`` on the target must
equal the source's.

* ``migrator copy``: the split's copy in-process (``command.run_copy``: schema,
  rows in checkpointed chunks, throttling, ``--workers`` tables at once).
  Preflight runs before the clock starts (it is not copy work).
* ``mariadb-dump | mariadb``: ``--single-transaction --quick --databases``
  piped into the target master.
* ``LOAD DATA``: schema via SHOW CREATE TABLE, each table exported with
  ``SELECT ... INTO OUTFILE`` on the source and loaded with ``LOAD DATA
  INFILE`` on the target (server-side files: no client in between).

Client tools run with ``--no-defaults``; the password goes through the
environment (MYSQL_PWD), not the command line. Prints a table per size and
ends with ``copy_vs_dump=... copy_vs_load_data=...`` (ratios of median
seconds at the largest size; > 1 means the migrator copy is faster).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import tls as bench_tls
from migrator.engine.migration import MigrationStore, Options, Phase
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
    return [tool, "--no-defaults", "-h", host.address, "-P", str(host.port), "-u", creds.mysql_user,
            *bench_tls.cli_args(host, creds)]


def _drop_target(sb: Sandbox, dbs: list[str]) -> None:
    for name in ("MySQL003A", "MySQL003B"):
        with sb.root_conn(name) as c, c.cursor() as cur:
            cur.execute("SET sql_log_bin = 0")
            for db in dbs:
                cur.execute(f"DROP DATABASE IF EXISTS {ident(db)}")


def checksums(host: Any, creds: Any, dbs: list[str]) -> dict[str, Any]:
    """``CHECKSUM TABLE`` of every base table of ``dbs`` (the sentinel table of a migration aside)."""
    conn = connect(host, creds)
    try:
        out: dict[str, Any] = {}
        with conn.cursor() as cur:
            for db in dbs:
                cur.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
                            "AND table_type = 'BASE TABLE' AND table_name NOT LIKE '\\_migrator%%'", (db,))
                for (t,) in cur.fetchall():
                    cur.execute(f"CHECKSUM TABLE {qualified(db, t)} EXTENDED")
                    out[f"{db}.{t}"] = cur.fetchone()[1]
        return out
    finally:
        conn.close()


def _rows(host: Any, creds: Any, dbs: list[str]) -> int:
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


#: what undoes the last migrator run once its copy was checked
ABORT: list[Callable[[], Any]] = []


def run_migrator(cfg: Any, workers: int, pipeline: bool = False) -> float:
    spec = command.plan_split(cfg, "MySQL001A", options=Options(copy_workers=workers)).spec
    res = command.preflight(cfg, spec.id)  # before the clock: preflight is not copy work
    if not res.ok:
        raise SystemExit("preflight failed: " + "; ".join(c.line() for c in res.failures))
    with zk_mod.connect(cfg, config_mod.load_credentials(cfg)) as zk:
        MigrationStore(zk).set_phase(spec.id, Phase.COPYING)
    t0 = time.perf_counter()
    out = command.run_copy(cfg, spec.id, pipeline=pipeline)
    took = time.perf_counter() - t0
    assert out["finished"], out
    ABORT.append(lambda: command.abort(cfg, spec.id, settle_s=0))  # after the check: locks and the copy go
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


def run_load_data(sb: Sandbox, dbs: list[str], tmp: Path) -> float:
    """Schema, then per table SELECT INTO OUTFILE on the source and LOAD DATA INFILE on the target
    (root: both need the FILE privilege; the servers share this machine's filesystem)."""
    out_dir = tmp / f"outfile-{uuid.uuid4().hex[:6]}"
    out_dir.mkdir()
    t0 = time.perf_counter()
    with sb.root_conn("MySQL001A") as sconn, sb.root_conn("MySQL003A") as tconn, \
            sconn.cursor() as sc, tconn.cursor() as tc:
        for db in dbs:
            tc.execute(f"CREATE DATABASE IF NOT EXISTS {ident(db)}")
            sc.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
                       "AND table_type = 'BASE TABLE'", (db,))
            for (t,) in sc.fetchall():
                sc.execute(f"SHOW CREATE TABLE {qualified(db, t)}")
                tc.execute(f"USE {ident(db)}")
                tc.execute(sc.fetchone()[1])
                path = str(out_dir / f"{db}.{t}.tsv")
                sc.execute(f"SELECT * INTO OUTFILE %s CHARACTER SET binary FROM {qualified(db, t)}", (path,))
                tc.execute(f"LOAD DATA INFILE %s INTO TABLE {qualified(db, t)} CHARACTER SET binary", (path,))
                tconn.commit()
    took = time.perf_counter() - t0
    shutil.rmtree(out_dir, ignore_errors=True)
    return took


def checked(name: str, fn: Callable[[], float], sb: Sandbox, tgt: Any, creds: Any, dbs: list[str],
            want: dict[str, Any]) -> float:
    """One run of a method: timed, then its copy compared table by table, then dropped."""
    took = fn()
    got = checksums(tgt, creds, dbs)
    if got != want:
        bad = sorted(k for k in set(want) | set(got) if want.get(k) != got.get(k))
        raise SystemExit(f"{name}: CHECKSUM TABLE differs from the source for {bad[:5]}")
    while ABORT:
        ABORT.pop()()
    sb.wait_pairs_converged()
    _drop_target(sb, dbs)
    return took


def add_small_tables(sb: Sandbox, dbs: list[str], n: int) -> None:
    """``n`` near-empty tables (3 rows each) spread over the moving databases: the fixed cost per table."""
    with sb.root_conn("MySQL001A") as c, c.cursor() as cur:
        for i in range(n):
            t = qualified(dbs[i % len(dbs)], f"small_{i:05d}")
            cur.execute(f"CREATE TABLE {t} (id INT NOT NULL PRIMARY KEY, v VARCHAR(20)) ENGINE=InnoDB")
            cur.execute(f"INSERT INTO {t} VALUES (1, 'a'), (2, NULL), (3, '')")
    sb.wait_pairs_converged()


def fresh_config(sb: Sandbox, tmp: Path) -> tuple[Any, Any]:
    """The sandbox's config under a ZooKeeper root of its own (a fresh map per size)."""
    cfg = sb.config().with_root(f"/bench{uuid.uuid4().hex[:8]}")
    cfg.credentials.file = str(sb.secrets_file)
    cfg_path = tmp / f"migrator-{uuid.uuid4().hex[:6]}.toml"
    cfg_path.write_text(config_mod.dump(cfg))
    cfg = config_mod.load(cfg_path)
    return cfg, config_mod.load_credentials(cfg)


METHODS = ("migrator copy", "mariadb-dump | mariadb", "SELECT INTO OUTFILE + LOAD DATA")
#: ``--ablate`` adds: the same copy reading each table's next chunk while the current one loads
READ_AHEAD = "migrator, read-ahead"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10000,40000,160000", help="seed pins per shard, one run set each")
    ap.add_argument("--rows", type=int, help="one size only (same as --sizes N)")
    ap.add_argument("--runs", type=int, default=3, help="runs of each method per size (the median counts)")
    ap.add_argument("--workers", type=int, default=4, help="tables copied at once by the migrator copy")
    ap.add_argument("--sandbox", help="reuse a running sandbox directory (its data is reset)")
    ap.add_argument("--ablate", action="store_true", help="also run the copy with read-ahead")
    ap.add_argument("--small-tables", type=int, default=0,
                    help="add this many near-empty tables to the moving shards (fixed costs per table)")
    args = ap.parse_args()
    sizes = [args.rows] if args.rows else [int(x) for x in args.sizes.split(",") if x.strip()]

    tmp = Path(tempfile.mkdtemp(prefix="bench-copy-"))
    tmp.chmod(0o777)
    own = args.sandbox is None
    sb = Sandbox(args.sandbox or tmp / "sandbox")
    try:
        if own or not sb.running():
            sb.up(pairs=2, spare_pairs=1, shards=8, rows=20, base_port=find_base_port(100), log=lambda *_: None)
        hosts = sb.hosts()
        smap = even_layout(sb.state.shards, sb.pairs(spare=False))  # type: ignore[union-attr]
        dbs = ["db00002", "db00003"]
        src, tgt = hosts["MySQL001A"], hosts["MySQL003A"]
        table: list[tuple[int, int, int, dict[str, float]]] = []
        for size in sizes:
            print(f"seeding {size} pins per shard ...", flush=True)
            reset_fleet(sb, smap, rows=size)
            if args.small_tables:
                add_small_tables(sb, dbs, args.small_tables)
            cfg, creds = fresh_config(sb, tmp)
            with zk_mod.connect(cfg, creds) as zk:
                for h in hosts.values():
                    HostRegistry(zk).register(h)
                ShardMapStore(zk).init(smap, hosts, reason="bench")
            rows, nbytes = _rows(src, creds, dbs), _source_bytes(src, creds, dbs)
            want = checksums(src, creds, dbs)
            methods = METHODS + ((READ_AHEAD,) if args.ablate else ())
            etas: dict[str, float] = {}
            runs: dict[str, list[float]] = {m: [] for m in methods}
            fns: dict[str, Callable[[], float]] = {
                METHODS[0]: lambda cfg=cfg: run_migrator(cfg, args.workers),
                METHODS[1]: lambda creds=creds: run_dump(src, tgt, creds, dbs),
                METHODS[2]: lambda: run_load_data(sb, dbs, tmp),
                READ_AHEAD: lambda cfg=cfg: run_migrator(cfg, args.workers, pipeline=True),
            }
            for i in range(args.runs):  # interleaved: a slow moment of the machine hits every method alike
                if i < 2:  # the dry run's ETA: sampled before the first copy, fitted to it before the second
                    est = command.plan_split(cfg, "MySQL001A", dry_run=True).estimate
                    assert est is not None
                    etas[est.rate_source] = est.eta_s
                for m in methods:
                    runs[m].append(checked(m, fns[m], sb, tgt, creds, dbs, want))
                print(f"  run {i + 1}: " + "  ".join(f"{m}={runs[m][-1]:.2f}s" for m in methods), flush=True)
            table.append((size, rows, nbytes, {m: statistics.median(v) for m, v in runs.items()}))
            actual = statistics.median(runs[METHODS[0]])
            print("  dry-run ETA vs the copy's median: " + "  ".join(
                f"{how} {eta:.1f}s ({eta / actual:.2f}x)" for how, eta in etas.items()), flush=True)

        extra = f", plus {args.small_tables} near-empty tables" if args.small_tables else ""
        print(f"\nmedian of {args.runs} runs per method; rows = all rows of the two moving shards{extra}\n")
        print(f"{'pins/shard':>10} {'rows':>9} {'MB':>6}  " + "  ".join(f"{m[:22]:>22}" for m in METHODS)
              + f"  {'vs_dump':>7} {'vs_load':>7} {'copy rows/s':>11}")
        for size, rows, nbytes, med in table:
            c = med[METHODS[0]]
            print(f"{size:>10,} {rows:>9,} {nbytes / 1e6:>6.1f}  "
                  + "  ".join(f"{med[m]:>21.2f}s" for m in METHODS)
                  + f"  {med[METHODS[1]] / c:>7.2f} {med[METHODS[2]] / c:>7.2f} {rows / c:>11,.0f}")
        if args.ablate:
            print("\nread-ahead speed-up: " + "  ".join(f"{size:,} pins/shard: {med[METHODS[0]] / med[READ_AHEAD]:.2f}x"
                                                for size, _, _, med in table))
        size, rows, _, med = table[-1]
        c = med[METHODS[0]]
        print(f"\ncopy_vs_dump={med[METHODS[1]] / c:.2f} copy_vs_load_data={med[METHODS[2]] / c:.2f} "
              f"rows={rows} copy_rows_per_s={rows / c:.0f}")
    finally:
        if own:
            sb.down()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
