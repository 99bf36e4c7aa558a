"""Benchmark: catch-up's memory and time on one huge source transaction, beside a native replica.

    python -m bench.bigtxn [--sandbox DIR] [--sizes 200000,1000000,5000000] [--lanes N]
                           [--row-bytes B] [--part-bytes P] [--path row,fast]

For each size N (row changes in one transaction):

1. a table ``big`` (``id`` primary key, ``v INT``, ``pad CHAR(100)``, and with ``--row-bytes B`` a
   ``data LONGBLOB`` of B bytes in every row: wide rows) of N rows in ``db00002`` on MySQL001A, a
   snapshot of it at the binlog position ``start``;
2. one transaction on the source: ``UPDATE big SET v = v + 1, pad = ...`` (N row changes, a backfill);
3. from the same snapshot, the same range ``start -> end`` applied by
   - the migrator's catch-up (:class:`~migrator.engine.catch_up.tailer.Tailer`: reader process + applier
     lanes) in a process of its own: its peak RSS and its reader process's (``VmHWM``, and sampled every
     20 ms), and the apply time;
   - a native replica with one SQL thread (:mod:`bench.replica`): the apply time.
   Each ends with ``CHECKSUM TABLE`` equal to the source. ``--path`` names the catch-up apply paths
   measured, each from the same snapshot in the same run: ``row`` (decoded rows as SQL through the
   lanes) and ``fast`` (the source's rows events through the target's own applier,
   :mod:`migrator.engine.catch_up.fast`); both by default.

Prints one row per size (with the CPU seconds of the apply process and of its reader process: which one
was the ceiling) and the last line ``peak_rss_mb=... apply_vs_replica=... load_avg_before=... load_avg_after=...``
(the largest peak over
every size and process; the slowest ratio of the migrator's apply time to the replica's). Target: peak RSS
under 400 MB for every size, apply time within 1.5x of the native replica. Wide rows: ``--sizes
400 --row-bytes 1048576`` and ``--sizes 20 --row-bytes 16777216`` must stay under the same peak as narrow
rows. With rows over a few MiB the bench raises ``max_allowed_packet`` on the source and the target to 1 GiB
while it runs (a row's REPLACE carries it as a hex literal: twice its size), and sets it back.
``--part-bytes`` sets ``MIGRATOR_CATCHUP_PART_BYTES`` (the byte bound of a part, a message, a round) for the
apply process.

Uses a running sandbox (``--sandbox`` or ``$MIGRATOR_BENCH_SANDBOX``) or starts a temporary one and
removes it afterwards. Not a test: numbers vary with the machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pymysql

from bench import replica
from bench.fleet import cpu_s
from migrator.fleet import mysql
from migrator.fleet.model import even_layout
from migrator.sandbox import Sandbox, find_base_port, reset_fleet

SOURCE, TARGET = "MySQL001A", "MySQL003A"
DB = "db00002"
TABLE = "big"


def checksum(conn: pymysql.connections.Connection) -> int:
    with conn.cursor() as cur:
        cur.execute(f"CHECKSUM TABLE `{DB}`.`{TABLE}`")
        return int(cur.fetchone()[1])


def _hwm_kb(pid: int) -> int:
    """The peak resident set (``VmHWM``) of a live process, in KiB (0 when it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


# -- the apply process -------------------------------------------------------------------------------

def apply_main(args: argparse.Namespace) -> None:
    """Runs in a process of its own: the tailer from ``start`` to ``end``; prints a JSON line."""
    from migrator.engine.catch_up.lanes import Pacer
    from migrator.engine.catch_up.tailer import Tailer
    from migrator.fleet.gtid import GtidPos, GtidState

    sb = Sandbox(args.sandbox)
    hosts, creds = sb.hosts(), sb.credentials()
    pacer = Pacer(lanes=args.lanes, adapt=False) if args.lanes else Pacer()
    tailer = Tailer(hosts[SOURCE], hosts[TARGET], creds, start=GtidPos.parse(args.start), schema_map={DB: DB},
                    pacer=pacer, path=args.path)
    reader_hwm, reader_cpu = 0, 0.0
    stop = threading.Event()

    def watch_reader() -> None:  # the reader process's peak and CPU time, read while it lives
        nonlocal reader_hwm, reader_cpu
        while not stop.wait(0.02):
            proc = tailer._proc
            if proc is not None:
                reader_hwm = max(reader_hwm, _hwm_kb(proc.pid))
                reader_cpu = max(reader_cpu, cpu_s(proc.pid))

    watcher = threading.Thread(target=watch_reader, daemon=True)
    watcher.start()
    try:
        t0, c0 = time.monotonic(), time.process_time()
        stats = tailer.apply_until(GtidState.parse(args.end), timeout_s=3600)
        elapsed, apply_cpu = time.monotonic() - t0, time.process_time() - c0
        stop.set()
        watcher.join()
        if tailer._proc is not None:
            reader_hwm = max(reader_hwm, _hwm_kb(tailer._proc.pid))
            reader_cpu = max(reader_cpu, cpu_s(tailer._proc.pid))
    finally:
        stop.set()
        tailer.close()
    print(json.dumps({"reached": stats.reached, "events": stats.events, "seconds": elapsed, "path": stats.path,
                      "fast_failure": stats.fast_failure,
                      "self_hwm_kb": _hwm_kb(os.getpid()), "reader_hwm_kb": reader_hwm,
                      "apply_cpu_s": apply_cpu, "reader_cpu_s": reader_cpu}), flush=True)


def run_migrator(sb: Sandbox, snap: Path, start: str, end: str, want: int, lanes: int,
                 path: str = "row") -> dict[str, Any]:
    hosts, creds = sb.hosts(), sb.credentials()
    with sb.root_conn(TARGET) as c, c.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {DB}")
        cur.execute("DROP DATABASE IF EXISTS `_migrator_fence`")  # a last run's applied position
    replica.load(replica.client(hosts[TARGET], creds), replica.env(creds), DB, snap)
    cmd = [sys.executable, "-m", "bench.bigtxn", "apply", "--sandbox", str(sb.dir), "--start", start, "--end", end,
           "--lanes", str(lanes), "--path", path]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
    sampled: dict[int, int] = {}
    import psutil

    while proc.poll() is None:
        try:
            tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
            for p in tree:
                sampled[p.pid] = max(sampled.get(p.pid, 0), p.memory_info().rss // 1024)
        except psutil.Error:
            pass
        time.sleep(0.02)
    out, _ = proc.communicate()
    assert proc.returncode == 0, f"the apply process failed ({proc.returncode})"
    got = json.loads(out.strip().splitlines()[-1])
    assert got["reached"], "catch-up did not reach the end position"
    assert got["path"] == path, f"the {path} path was asked for, the {got['path']} path applied: {got['fast_failure']}"
    with mysql.connect(hosts[TARGET], creds) as c:
        assert checksum(c) == want, "the migrator target differs from the source"
    got["sampled_max_kb"] = max(sampled.values(), default=0)
    got["peak_mb"] = max(got["self_hwm_kb"], got["reader_hwm_kb"], got["sampled_max_kb"]) / 1024
    return got


# -- one size -------------------------------------------------------------------------------------------

def one_size(sb: Sandbox, n: int, workdir: Path, lanes: int, row_bytes: int = 0,
             paths: tuple[str, ...] = ("row", "fast")) -> dict[str, Any]:
    hosts, creds = sb.hosts(), sb.credentials()
    wide = ", data LONGBLOB NOT NULL" if row_bytes else ""
    fill = f", REPEAT(CHAR(65 + seq % 26), {row_bytes})" if row_bytes else ""
    step = max(1, min(500_000, (256 << 20) // row_bytes)) if row_bytes else 500_000
    with mysql.connect(hosts[SOURCE], creds, read_timeout=3600) as c, c.cursor() as cur:
        cur.execute(f"DROP TABLE IF EXISTS `{DB}`.`{TABLE}`")
        cur.execute(f"CREATE TABLE `{DB}`.`{TABLE}` (id BIGINT PRIMARY KEY, v INT NOT NULL, pad CHAR(100) NOT NULL"
                    f"{wide}) ENGINE=InnoDB")
        for lo in range(1, n + 1, step):  # the fill, in parts: not itself the transaction measured
            hi = min(n, lo + step - 1)
            cur.execute(f"INSERT INTO `{DB}`.`{TABLE}` SELECT seq, 0, 'x'{fill} FROM `{DB}`.seq_{lo}_to_{hi}")
        start = mysql.binlog_pos(c)
    snap = workdir / f"big-{n}.sql"
    replica.snapshot(sb, SOURCE, DB, snap, [TABLE])
    with mysql.connect(hosts[SOURCE], creds, read_timeout=3600) as c, c.cursor() as cur:
        t0 = time.monotonic()
        cur.execute(f"UPDATE `{DB}`.`{TABLE}` SET v = v + 1, pad = 'y'")  # one transaction, n row changes
        write_s = time.monotonic() - t0
        end = mysql.binlog_pos(c)
        want = checksum(c)
    mine = {path: run_migrator(sb, snap, start, end, want, lanes, path) for path in paths}
    native = replica.run_replica(sb, SOURCE, DB, snap, start, end, workdir, checksum=checksum, want=want)
    snap.unlink()
    return {"rows": n, "row_bytes": row_bytes, "write_s": write_s, "paths": mine, "replica_s": native}


#: rows wider than this need a larger max_allowed_packet than the sandbox's 16 MiB (hex literals: 2x)
WIDE_PACKET = 6 << 20
BIG_PACKET = 1 << 30


def set_packet(sb: Sandbox, value: int | None) -> dict[str, int]:
    """Set ``max_allowed_packet`` on the source and the target pairs (None: leave it); returns what it was."""
    was = {}
    for host in (SOURCE, "MySQL001B", TARGET, "MySQL003B"):
        with sb.root_conn(host) as c, c.cursor() as cur:
            cur.execute("SELECT @@GLOBAL.max_allowed_packet")
            was[host] = int(cur.fetchone()[0])
            if value is not None:
                cur.execute(f"SET GLOBAL max_allowed_packet = {int(value)}")
    return was


def restore_packet(sb: Sandbox, was: dict[str, int]) -> None:
    for host, value in was.items():
        with sb.root_conn(host) as c, c.cursor() as cur:
            cur.execute(f"SET GLOBAL max_allowed_packet = {int(value)}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "apply":
        ap = argparse.ArgumentParser()
        ap.add_argument("apply")
        ap.add_argument("--sandbox", required=True)
        ap.add_argument("--start", required=True)
        ap.add_argument("--end", required=True)
        ap.add_argument("--lanes", type=int, default=0)
        ap.add_argument("--path", default="row")
        apply_main(ap.parse_args())
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sandbox", default=os.environ.get("MIGRATOR_BENCH_SANDBOX"))
    ap.add_argument("--sizes", default="200000,1000000,5000000", help="row changes per transaction, comma-separated")
    ap.add_argument("--lanes", type=int, default=0, help="fixed lane count (default: adapt)")
    ap.add_argument("--row-bytes", type=int, default=0, help="a LONGBLOB of this many bytes in every row (wide rows)")
    ap.add_argument("--part-bytes", type=int, default=0,
                    help="MIGRATOR_CATCHUP_PART_BYTES for the apply process (default: its own, 32 MiB)")
    ap.add_argument("--path", default="row,fast", help="apply paths measured side by side: row, fast (comma-separated)")
    args = ap.parse_args()
    paths = tuple(p.strip() for p in args.path.split(",") if p.strip())
    if not paths or any(p not in ("row", "fast") for p in paths):
        ap.error(f"--path {args.path!r}: name row, fast or both (comma-separated)")
    load_before = os.getloadavg()[0]
    if args.part_bytes:
        os.environ["MIGRATOR_CATCHUP_PART_BYTES"] = str(args.part_bytes)  # the apply process inherits it
    sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    tmp = Path(tempfile.mkdtemp(prefix="migrator-bench-bigtxn-"))
    own = args.sandbox is None
    sb = Sandbox(args.sandbox or tmp / "sandbox")
    results = []
    try:
        if not sb.running():
            sb.up(pairs=2, spare_pairs=1, shards=8, rows=20, base_port=find_base_port(100), log=lambda *_: None)
        assert sb.state is not None
        reset_fleet(sb, even_layout(sb.state.shards, sb.pairs(spare=False)), rows=20)
        packet = set_packet(sb, BIG_PACKET if args.row_bytes > WIDE_PACKET else None)
        try:
            for n in sizes:
                r = one_size(sb, n, tmp, args.lanes, args.row_bytes, paths)
                results.append(r)
                for path, m in r["paths"].items():
                    print(f"{n:>9} rows of {args.row_bytes or 'narrow'} B, {path} path: migrator {m['seconds']:.1f} s, "
                          f"peak RSS {m['peak_mb']:.0f} MB (apply process {m['self_hwm_kb'] / 1024:.0f} MB, reader "
                          f"{m['reader_hwm_kb'] / 1024:.0f} MB); native replica {r['replica_s']:.1f} s "
                          f"({m['seconds'] / r['replica_s']:.2f}x); source wrote it in {r['write_s']:.1f} s",
                          flush=True)
        finally:
            if args.row_bytes > WIDE_PACKET:
                restore_packet(sb, packet)
        for host in (SOURCE, "MySQL001B", TARGET, "MySQL003B"):
            with sb.root_conn(host) as c, c.cursor() as cur:
                cur.execute(f"DROP TABLE IF EXISTS `{DB}`.`{TABLE}`")
                cur.execute("FLUSH BINARY LOGS")
                cur.execute("PURGE BINARY LOGS BEFORE NOW()")
    finally:
        if own:
            sb.down(purge=True)
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{'rows':>9} {'row bytes':>10} {'data MB':>8} {'path':>5} {'migrator s':>11} {'replica s':>10} "
          f"{'ratio':>6} {'peak MB':>8} {'apply MB':>9} {'reader MB':>10} {'apply CPU s':>12} {'reader CPU s':>13}")
    for r in results:
        for path, m in r["paths"].items():
            print(f"{r['rows']:>9} {r['row_bytes']:>10} {r['rows'] * r['row_bytes'] / 2**20:>8.0f} {path:>5} "
                  f"{m['seconds']:>11.1f} {r['replica_s']:>10.1f} {m['seconds'] / r['replica_s']:>6.2f} "
                  f"{m['peak_mb']:>8.0f} {m['self_hwm_kb'] / 1024:>9.0f} {m['reader_hwm_kb'] / 1024:>10.0f} "
                  f"{m['apply_cpu_s']:>12.1f} {m['reader_cpu_s']:>13.1f}")
    for path in paths:
        peak = max(r["paths"][path]["peak_mb"] for r in results)
        ratio = max(r["paths"][path]["seconds"] / r["replica_s"] for r in results)
        print(f"path={path} peak_rss_mb={peak:.0f} apply_vs_replica={ratio:.2f} row_bytes={args.row_bytes} "
              f"load_avg_before={load_before:.2f} load_avg_after={os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
