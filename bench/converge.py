"""Benchmark: a real split converges while an ordinary writer keeps writing into a moving shard.

    python -m bench.converge [--dir DIR] [--threads 4] [--rate 0] [--rows 500] [--workers 2]

Starts a fresh sandbox (two pairs holding 16 shards, one spare pair), prepares
sysbench ``oltp_write_only`` tables (4 x 20,000 rows) in ``db00004`` on MySQL001A
(a shard that ``split MySQL001A`` moves), starts ``--workers`` RQ workers, then
runs ``migrator split MySQL001A --yes`` (plan -> preflight -> copy -> catch-up
passes -> verify -> fenced cutover) while sysbench writes unthrottled
(``--rate 0``) with ``--threads`` threads, over TCP as a client. sysbench keeps
writing to MySQL001A after the flip (it ignores the 1146 of the renamed tables).
When the split ends, sysbench stops and every moved table on the new master is
compared with its tombstone on MySQL001A (CHECKSUM TABLE).

Last line: ``converged=yes|no passes=N freeze_ms=... sysbench_tps=... tables_differing=N``.
Not a test: the numbers depend on the machine's load.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import sysbench
from migrator.engine.names import tomb_db
from migrator.fleet import mysql
from migrator.ops import command, watch
from migrator.sandbox import Sandbox, find_base_port, stop_pid

SOURCE = "MySQL001A"
DB = "db00004"


def moved_tables_differing(sb: Sandbox, migration_id: str, spec: Any) -> tuple[int, int]:
    """(tables compared, tables whose CHECKSUM TABLE differs) between the new master and the tombstones."""
    creds = sb.credentials()
    hosts = sb.hosts()
    compared = differing = 0
    with mysql.connect(hosts[spec.source_master], creds) as old, mysql.connect(hosts[spec.target_master], creds) as new:
        for db in spec.databases:
            tomb = tomb_db(migration_id, db)
            with old.cursor() as cur:
                cur.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s", (tomb,))
                tables = [r[0] for r in cur.fetchall()]
            for t in tables:
                sums = []
                for conn, schema in ((old, tomb), (new, db)):
                    with conn.cursor() as cur:
                        cur.execute(f"CHECKSUM TABLE `{schema}`.`{t}`")
                        sums.append(cur.fetchone()[1])
                compared += 1
                differing += sums[0] != sums[1]
    return compared, differing


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=None, help="sandbox directory (default: a temporary one, removed after)")
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--rate", type=int, default=0, help="sysbench transactions/s (0: unthrottled)")
    ap.add_argument("--rows", type=int, default=500, help="rows per seed table per shard")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=900)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="migrator-bench-converge-"))
    sb = Sandbox(args.dir or tmp / "sandbox")
    if sb.state is not None:
        sb.down(purge=True)
        sb = Sandbox(args.dir or tmp / "sandbox")
    sb.up(pairs=2, spare_pairs=1, shards=16, rows=args.rows, base_port=find_base_port(100), log=lambda *_: None)
    try:
        cfg = sb.config()
        hosts, creds = sb.hosts(), sb.credentials()
        sysbench.prepare(hosts[SOURCE], creds, DB)
        procs = []
        for i in range(args.workers):
            log = open(sb.dir / f"worker-{i}.log", "ab")  # noqa: SIM115 - the worker writes it until it stops
            procs.append(subprocess.Popen([sys.executable, "-m", "migrator", "--config", str(sb.config_file), "worker",
                                           "--name", f"converge-{i}"], stdout=log, stderr=subprocess.STDOUT,
                                          stdin=subprocess.DEVNULL, start_new_session=True))
        writer = sysbench.Background(hosts[SOURCE], creds, DB, threads=args.threads, rate=args.rate)
        t0 = time.monotonic()
        st: dict[str, Any] = {}
        try:
            time.sleep(3.0)  # the writer is at speed before the split starts
            plan = command.plan_split(cfg, SOURCE)
            migration_id = plan.spec.id
            command.launch(cfg, migration_id)
            st = watch.follow(cfg, migration_id, timeout=args.timeout, until={"done", "aborted", "failed"})
        finally:
            result = writer.stop()
            for p in procs:
                stop_pid(p.pid, timeout=15)
        seconds = time.monotonic() - t0
        done = st.get("phase") == "done"
        passes = st.get("passes") or []
        compared, differing = moved_tables_differing(sb, migration_id, plan.spec) if done else (0, -1)
        print(f"split {migration_id}: phase {st.get('phase')} after {seconds:.0f}s; {len(passes)} catch-up passes; "
              f"{compared} moved tables compared with their tombstones")
        if passes:
            last = passes[-1]
            print(f"last pass: {last.get('events')} events, apply {last.get('apply_rate'):.0f}/s, "
                  f"source writes {last.get('write_rate'):.0f}/s, "
                  f"predicted freeze {last.get('predicted_freeze_ms')} ms")
        if st.get("stopped"):
            print(f"stopped in {st['stopped'].get('step')}: {st['stopped'].get('reason')}")
        for a in st.get("cutover_attempts") or []:
            steps = ", ".join(f"{k} {v:.0f}" for k, v in (a.get("steps_ms") or {}).items())
            rounds = " / ".join(f"{r['rows']} rows {r['s']:.2f}s" for r in a.get("refresh_rounds") or [])
            pred = ", ".join(f"{k} {v}" for k, v in (a.get("predicted") or {}).items())
            print(f"cutover attempt: {a.get('outcome')}; freeze {a.get('freeze_ms')} ms ({steps}); "
                  f"pre-freeze re-check rounds: {rounds}; predicted: {pred}")
    finally:
        sb.down(purge=True)  # every process of the sandbox, by pid, even when the run failed
        shutil.rmtree(tmp, ignore_errors=True)
    freeze = st.get("freeze_ms")
    print(f"converged={'yes' if done else 'no'} passes={len(passes)} "
          f"freeze_ms={freeze if freeze is None else round(freeze, 1)} sysbench_tps={result.tps:.0f} "
          f"tables_differing={differing}")


if __name__ == "__main__":
    main()
