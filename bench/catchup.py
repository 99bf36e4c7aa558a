"""Benchmark: catch-up apply rate vs an ordinary writer and vs native MariaDB replicas (1 and 4 threads).

    python -m bench.catchup [--sandbox DIR] [--seconds 15] [--repeat 3] [--lanes N] [--fence on|off|both]
                            [--path row,fast]

1. sysbench ``oltp_write_only`` (4 threads, unthrottled, over TCP as a client)
   writes into ``db00002`` on MySQL001A for ``--seconds``: the write rate is the
   backlog's row changes divided by the time sysbench wrote.
2. The same backlog (start -> end GTID, every row change of the four sbtest
   tables) is applied ``--repeat`` times by each of the three below, interleaved
   (the order rotates from one run to the next, so no kind always goes first),
   every run from the same snapshot of the tables (taken at the start position):
   - the migrator catch-up :class:`~migrator.engine.catch_up.tailer.Tailer`
     (reader process + applier lanes) into MySQL003A, with its fencing token
     (every lane transaction checks it on the target, as a migration's tail
     does; ``--fence off`` leaves it out, ``--fence both`` runs both, side by side), once per apply
     path of ``--path`` (``row``: decoded rows as SQL through the lanes; ``fast``: the source's rows events
     through the target's own applier, as a migration's tail applies once verified; both by default);
   - a fresh native replica (a standalone mariadbd started here with the
     fleet's settings, one SQL thread, ``replicate_do_db``): ``START SLAVE``
     until ``MASTER_GTID_WAIT(end)`` (its start-up and snapshot load not timed);
   - the same fresh native replica with MariaDB's parallel replication on
     (``slave_parallel_threads=4``, ``slave_parallel_mode=optimistic``, server
     options; nothing else differs), timed the same way: the stronger baseline.
   Each run ends with CHECKSUM TABLE of every sbtest table equal to the source.
3. Prints every run (with the CPU seconds of the reader process and of the coordinator and
   lanes: which one was the ceiling) and the medians; the last line is
   ``path=... apply_vs_write_rate=... apply_vs_replica=... apply_events_per_s=...
   apply_vs_parallel_replica=... parallel_replica_events_per_s=... load_avg_before=... load_avg_after=...``
   once per path
   (``apply_vs_replica`` is against the one-thread replica; the load averages are the
   1-minute ones before the bench started its servers and at its end).

Uses a running sandbox (``--sandbox`` or ``$MIGRATOR_BENCH_SANDBOX``) or starts a
temporary one and removes it afterwards. Binlogs of the hosts it loaded are
purged at the end. Not a test: numbers vary with the machine's load.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import pymysql

from bench import replica, sysbench
from bench.fleet import cpu_s
from migrator.engine.catch_up.lanes import Epoch, Pacer
from migrator.engine.catch_up.tailer import Tailer
from migrator.fleet import mysql
from migrator.fleet.gtid import GtidPos, GtidState
from migrator.fleet.model import even_layout
from migrator.sandbox import Sandbox, find_base_port, reset_fleet

SOURCE, TARGET = "MySQL001A", "MySQL003A"
DB = "db00002"
TABLES = [f"sbtest{i}" for i in range(1, 5)]


def snapshot(sb: Sandbox, path: Path) -> None:
    replica.snapshot(sb, SOURCE, DB, path)


def load(client: list[str], env: dict[str, str], path: Path) -> None:
    replica.load(client, env, DB, path)


def checksums(conn: pymysql.connections.Connection) -> list[int]:
    with conn.cursor() as cur:
        cur.execute("CHECKSUM TABLE " + ", ".join(f"`{DB}`.`{t}`" for t in TABLES))
        return [int(r[1]) for r in cur.fetchall()]


# -- the migrator tailer ---------------------------------------------------------------------

def run_tailer(sb: Sandbox, snap: Path, start: str, end: str, want: list[int], lanes: int | None,
               fenced: bool = True, path: str = "row") -> tuple[int, float, float, float]:
    """(row events, seconds, CPU seconds of this process's coordinator and lanes, CPU seconds of the
    reader process) of one tail from ``start`` to ``end``."""
    hosts, creds = sb.hosts(), sb.credentials()
    with sb.root_conn(TARGET) as c, c.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS {DB}")
        cur.execute("DROP DATABASE IF EXISTS `_migrator_fence`")  # the last run's token and applied position
    load(replica.client(hosts[TARGET], creds), replica.env(creds), snap)
    pacer = Pacer(lanes=lanes, adapt=False) if lanes else Pacer()
    epoch = Epoch("bench-catchup", time.time_ns(), "bench") if fenced else None  # a larger token every run
    tailer = Tailer(hosts[SOURCE], hosts[TARGET], creds, start=GtidPos.parse(start), schema_map={DB: DB},
                    pacer=pacer, epoch=epoch, path=path)
    try:
        t0, c0 = time.monotonic(), time.process_time()  # the reader process starts inside the timing
        stats = tailer.apply_until(GtidState.parse(end), timeout_s=900)
        elapsed, apply_cpu = time.monotonic() - t0, time.process_time() - c0
        reader_cpu = cpu_s(tailer._proc.pid) if tailer._proc is not None else 0.0
    finally:
        tailer.close()
    assert stats.reached, "catch-up did not reach the end position"
    assert stats.path == path, f"the {path} path was asked for, the {stats.path} path applied: {stats.fast_failure}"
    with mysql.connect(hosts[TARGET], creds) as c:
        assert checksums(c) == want, "the migrator target differs from the source"
    return stats.events, elapsed, apply_cpu, reader_cpu


# -- a native replica ------------------------------------------------------------------------

#: applier threads of the parallel replica (``slave_parallel_threads``, optimistic mode)
PARALLEL_THREADS = 4


def run_replica(sb: Sandbox, snap: Path, start: str, end: str, want: list[int], workdir: Path,
                parallel: int = 0) -> float:
    """Seconds a fresh replica takes to apply start -> end: one SQL thread, or ``parallel`` optimistic
    parallel applier threads."""
    return replica.run_replica(sb, SOURCE, DB, snap, start, end, workdir, checksum=checksums, want=want,
                               parallel=parallel)


def purge(sb: Sandbox, names: tuple[str, ...]) -> None:
    for name in names:
        with sb.root_conn(name) as c, c.cursor() as cur:
            cur.execute("FLUSH BINARY LOGS")
            cur.execute("PURGE BINARY LOGS BEFORE NOW()")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sandbox", default=os.environ.get("MIGRATOR_BENCH_SANDBOX"))
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--lanes", type=int, default=0, help="fixed lane count (default: adapt)")
    ap.add_argument("--fence", choices=("on", "off", "both"), default="on",
                    help="the tail's fencing token: with it (as in a migration), without, or both side by side")
    ap.add_argument("--path", default="row,fast", help="apply paths measured side by side: row, fast (comma-separated)")
    args = ap.parse_args()
    paths = tuple(p.strip() for p in args.path.split(",") if p.strip())
    if not paths or any(p not in ("row", "fast") for p in paths):
        ap.error(f"--path {args.path!r}: name row, fast or both (comma-separated)")
    load_before = os.getloadavg()[0]  # the box before the bench adds its own load: a busy box's figures say little
    tmp = Path(tempfile.mkdtemp(prefix="migrator-bench-catchup-"))
    own = args.sandbox is None
    sb = Sandbox(args.sandbox or tmp / "sandbox")
    try:
        if not sb.running():
            sb.up(pairs=2, spare_pairs=1, shards=8, rows=20, base_port=find_base_port(100), log=lambda *_: None)
        assert sb.state is not None
        reset_fleet(sb, even_layout(sb.state.shards, sb.pairs(spare=False)), rows=20)
        hosts, creds = sb.hosts(), sb.credentials()
        sysbench.prepare(hosts[SOURCE], creds, DB)
        snap = tmp / "snapshot.sql"
        with mysql.connect(hosts[SOURCE], creds) as c:
            start = str(mysql.binlog_pos(c))
        snapshot(sb, snap)
        writer = sysbench.run(hosts[SOURCE], creds, DB, seconds=args.seconds, threads=args.threads)
        with mysql.connect(hosts[SOURCE], creds) as c:
            end = str(mysql.binlog_pos(c))
            want = checksums(c)
        mine: dict[str, list[tuple[int, float, float, float]]] = {p: [] for p in paths}
        bare: dict[str, list[tuple[int, float, float, float]]] = {p: [] for p in paths}
        native: list[float] = []
        parallel: list[float] = []

        def tail(i: int) -> None:
            for k in range(len(paths)):  # the paths' order rotates too
                path = paths[(i + k) % len(paths)]
                if args.fence == "both" and i % 2:  # every other run without the token first: no order effect
                    bare[path].append(run_tailer(sb, snap, start, end, want, args.lanes or None, False, path))
                mine[path].append(run_tailer(sb, snap, start, end, want, args.lanes or None, args.fence != "off",
                                             path))
                if args.fence == "both" and not i % 2:
                    bare[path].append(run_tailer(sb, snap, start, end, want, args.lanes or None, False, path))

        kinds = [tail, lambda _i: native.append(run_replica(sb, snap, start, end, want, tmp)),
                 lambda _i: parallel.append(run_replica(sb, snap, start, end, want, tmp, PARALLEL_THREADS))]
        for i in range(args.repeat):
            for k in range(len(kinds)):  # the order rotates: each kind runs first, second and third in turn
                kinds[(i + k) % len(kinds)](i)
            for path in paths:
                extra = ""
                if bare[path]:
                    b = bare[path][-1]
                    extra = f", without the token {b[0] / b[1]:.0f} events/s ({b[1]:.2f} s)"
                m = mine[path][-1]
                n = m[0]
                print(f"run {i + 1}: migrator, {path} path, {n / m[1]:.0f} events/s ({m[1]:.2f} s; CPU s: reader "
                      f"{m[3]:.2f}, coordinator and appliers {m[2]:.2f}){extra}", flush=True)
            print(f"run {i + 1}: native replica {n / native[-1]:.0f} events/s ({native[-1]:.2f} s), "
                  f"parallel replica {n / parallel[-1]:.0f} events/s ({parallel[-1]:.2f} s)", flush=True)
        with sb.root_conn(TARGET) as c, c.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {DB}")
            cur.execute("DROP DATABASE IF EXISTS `_migrator_fence`")  # the runs' fencing tokens
        purge(sb, ("MySQL001A", "MySQL001B", "MySQL003A", "MySQL003B"))
    finally:
        if own:
            sb.down(purge=True)
        shutil.rmtree(tmp, ignore_errors=True)
    events = mine[paths[0]][0][0]
    write_rate = events / writer.seconds
    apply_rates = {p: statistics.median(n / s for n, s, *_ in mine[p]) for p in paths}
    replica_rate = statistics.median(events / s for s in native)
    parallel_rate = statistics.median(events / s for s in parallel)
    print(f"{'what':<16} {'how':<52} {'events':>8} {'seconds':>8} {'events/s':>9}")
    print(f"{'writer':<16} {f'sysbench oltp_write_only, {args.threads} threads, {writer.tps:.0f} tps':<52} "
          f"{events:>8} {writer.seconds:>8.2f} {write_rate:>9.0f}")
    how = "fencing token" if args.fence != "off" else "no fencing token"
    for path in paths:
        print(f"{'catch-up':<16} {f'{path} path, {how}, median of {args.repeat}':<52} {events:>8} "
              f"{statistics.median(s for _, s, *_ in mine[path]):>8.2f} {apply_rates[path]:>9.0f}")
        if bare[path]:
            bare_rate = statistics.median(n / s for n, s, *_ in bare[path])
            print(f"{'catch-up':<16} {f'{path} path, no token, median of {args.repeat}':<52} {events:>8} "
                  f"{statistics.median(s for _, s, *_ in bare[path]):>8.2f} {bare_rate:>9.0f}")
            print(f"path={path} fenced_vs_unfenced={apply_rates[path] / bare_rate:.2f}")
    print(f"{'native replica':<16} {'1 SQL thread, median of ' + str(args.repeat):<52} {events:>8} "
          f"{statistics.median(native):>8.2f} {replica_rate:>9.0f}")
    how = f"{PARALLEL_THREADS} threads, optimistic, median of {args.repeat}"
    print(f"{'parallel replica':<16} {how:<52} {events:>8} {statistics.median(parallel):>8.2f} {parallel_rate:>9.0f}")
    print(f"binlog range {start} -> {end}")
    for path in paths:
        rate = apply_rates[path]
        print(f"path={path} apply_vs_write_rate={rate / write_rate:.2f} apply_vs_replica={rate / replica_rate:.2f} "
              f"apply_events_per_s={rate:.0f} apply_vs_parallel_replica={rate / parallel_rate:.2f} "
              f"parallel_replica_events_per_s={parallel_rate:.0f} load_avg_before={load_before:.2f} "
              f"load_avg_after={os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
