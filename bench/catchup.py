"""Benchmark: catch-up apply rate vs a native MariaDB replica and vs the write rate.

    python -m bench.catchup [--sandbox DIR] [--seconds 6] [--threads 4]

1. A multi-threaded writer (single-row transactions: job inserts, state
   changes that change the primary key, deletes, pin updates) writes to two
   moving shards on MySQL001A for ``--seconds``: its rate is the highest write
   rate it reaches on this machine.
2. The catch-up :class:`migrator.engine.catch_up.tailer.Tailer` applies exactly that binlog
   range (start -> end GTID) to MySQL003A (starting from a copy of the rows at
   the start position): with the defaults, without ``freeze_schema``, and
   with the background writer (``pipeline``); each the best of two runs.
3. A fresh native replica (a standalone mariadbd started here, same settings as
   the fleet: binlog + log_slave_updates, single SQL thread, replicate_do_db
   on the two shards) applies the same range: START SLAVE, then
   MASTER_GTID_WAIT(end).

Prints a table and ends with ``apply_vs_replica=... apply_vs_write_rate=...``.
Uses an existing sandbox (``--sandbox`` or ``$MIGRATOR_BENCH_SANDBOX``), or starts
a temporary one and removes it afterwards. Not a test: numbers vary with load.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import random
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pymysql

from migrator.engine.catch_up.tailer import Tailer
from migrator.fleet import mysql
from migrator.fleet.gtid import GtidPos
from migrator.fleet.model import even_layout
from migrator.sandbox import MARIADB_FLAGS, Sandbox, find_base_port, port_free, reset_fleet, stop_pid

SOURCE, TARGET = "MySQL001A", "MySQL003A"
SHARDS = ("db00002", "db00003")
JOBS = """CREATE TABLE IF NOT EXISTS jobs (
  local_id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
  state TINYINT NOT NULL,
  updated_at DATETIME(6) NOT NULL,
  body VARBINARY(255) NULL,
  attempts INT NOT NULL DEFAULT 0,
  PRIMARY KEY (local_id, state, updated_at)
) ENGINE=InnoDB
PARTITION BY RANGE COLUMNS(state, updated_at) (
  PARTITION pNEW VALUES LESS THAN (0, MAXVALUE), PARTITION pIPR VALUES LESS THAN (1, MAXVALUE),
  PARTITION pOK VALUES LESS THAN (2, MAXVALUE), PARTITION pREST VALUES LESS THAN (MAXVALUE, MAXVALUE))"""


def _pos(c: Any) -> GtidPos:
    with c.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.gtid_binlog_pos")
        return GtidPos.parse(cur.fetchone()[0])


# -- 1. the writer --------------------------------------------------------------------

def write_load(sb: Sandbox, seconds: float, threads: int) -> tuple[int, float]:
    """Row changes written and the wall time, by ``threads`` writers."""
    hosts, creds = sb.hosts(), sb.credentials()
    counts = [0] * threads
    stop = threading.Event()

    def run(i: int) -> None:
        rnd = random.Random(i)
        base = dt.datetime(2020, 1, 1)
        with mysql.connect(hosts[SOURCE], creds) as c, c.cursor() as cur:
            ids: list[tuple[int, int, dt.datetime]] = []
            while not stop.is_set():
                db = SHARDS[rnd.randrange(2)]
                r = rnd.random()
                try:
                    if r < 0.4 or len(ids) < 20:
                        at = base + dt.timedelta(seconds=rnd.randrange(10**6))
                        cur.execute(f"INSERT INTO `{db}`.jobs (state, updated_at, body) VALUES (0, %s, %s)",
                                    (at, b"payload-%d" % rnd.randrange(10**6)))
                        ids.append((db, cur.lastrowid, 0, at))  # type: ignore[arg-type]
                    elif r < 0.75:
                        db, lid, st, at = ids.pop(rnd.randrange(len(ids)))  # type: ignore[misc]
                        new_at = at + dt.timedelta(seconds=1)
                        cur.execute(f"UPDATE `{db}`.jobs SET state = %s, updated_at = %s, attempts = attempts + 1 "
                                    "WHERE local_id = %s AND state = %s AND updated_at = %s",
                                    (min(st + 1, 3), new_at, lid, st, at))
                        ids.append((db, lid, min(st + 1, 3), new_at))  # type: ignore[arg-type]
                    elif r < 0.85:
                        db, lid, st, at = ids.pop(rnd.randrange(len(ids)))  # type: ignore[misc]
                        cur.execute(f"DELETE FROM `{db}`.jobs WHERE local_id = %s AND state = %s AND updated_at = %s",
                                    (lid, st, at))
                    else:
                        cur.execute(f"UPDATE `{db}`.pins SET data = JSON_SET(data, '$.n', %s) WHERE local_id = %s",
                                    (rnd.randrange(10**6), rnd.randrange(1, 40)))
                    counts[i] += cur.rowcount
                except pymysql.err.OperationalError as exc:
                    if exc.args[0] not in (1213, 1205):
                        raise

    ts = [threading.Thread(target=run, args=(i,), daemon=True) for i in range(threads)]
    t0 = time.monotonic()
    for t in ts:
        t.start()
    time.sleep(seconds)
    stop.set()
    for t in ts:
        t.join()
    return sum(counts), time.monotonic() - t0


# -- 2. catch-up ---------------------------------------------------------------------------

def prepare_target(sb: Sandbox, start_rows: dict[str, list[tuple[Any, ...]]], host: str | None = None,
                   conn: Any = None) -> None:
    """The moving shards' tables on the target, with their rows as of the start position."""
    creds = sb.credentials()
    hosts = sb.hosts()
    with mysql.connect(hosts[SOURCE], creds) as src, src.cursor() as sc:
        dst = conn or mysql.connect(hosts[host or TARGET], creds)
        with dst.cursor() as dc:
            for db in SHARDS:
                dc.execute(f"DROP DATABASE IF EXISTS `{db}`")
                dc.execute(f"CREATE DATABASE `{db}`")
                sc.execute(f"SHOW TABLES FROM `{db}`")
                for (t,) in sc.fetchall():
                    sc.execute(f"SHOW CREATE TABLE `{db}`.`{t}`")
                    dc.execute(f"USE `{db}`")
                    dc.execute(sc.fetchone()[1])
                    rows = start_rows.get(f"{db}.{t}")
                    if rows:
                        marks = ",".join(["%s"] * len(rows[0]))
                        dc.executemany(f"INSERT INTO `{db}`.`{t}` VALUES ({marks})", rows)
        if conn is None:
            dst.close()


def snapshot(sb: Sandbox) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of the moving shards (taken at the start position, before the writes)."""
    out: dict[str, list[tuple[Any, ...]]] = {}
    with mysql.connect(sb.hosts()[SOURCE], sb.credentials()) as c, c.cursor() as cur:
        for db in SHARDS:
            cur.execute(f"SHOW TABLES FROM `{db}`")
            for (t,) in cur.fetchall():
                cur.execute(f"SELECT * FROM `{db}`.`{t}`")
                out[f"{db}.{t}"] = list(cur.fetchall())
    return out


def tail(sb: Sandbox, start_rows: dict[str, list[tuple[Any, ...]]], start: GtidPos, end: GtidPos,
         freeze: bool, pipeline: bool = False) -> tuple[int, float]:
    prepare_target(sb, start_rows)
    hosts, creds = sb.hosts(), sb.credentials()
    best: tuple[int, float] | None = None
    for attempt in range(2):  # best of two: the box is shared, timings are noisy
        if attempt:
            prepare_target(sb, start_rows)
        tailer = Tailer(hosts[SOURCE], hosts[TARGET], creds, start=start, schema_map={d: d for d in SHARDS},
                        freeze_schema=freeze, pipeline=pipeline)
        try:
            stats = tailer.apply_until(end, timeout_s=600)
        finally:
            tailer.close()
        assert stats.reached, "catch-up did not reach the end position"
        if best is None or stats.duration_s < best[1]:
            best = (stats.events, stats.duration_s)
    assert best is not None
    return best


# -- 3. a native replica ----------------------------------------------------------------------

def native_replica(sb: Sandbox, start_rows: dict[str, list[tuple[Any, ...]]], start: GtidPos, end: GtidPos,
                   workdir: Path) -> float:
    """Seconds a fresh single-threaded replica takes to apply start -> end."""
    port = find_base_port(1, start=int(os.environ.get("BENCH_REPLICA_PORT", "45000")))
    assert port_free(port)
    d = workdir / "replica"
    for sub in ("data", "tmp", "binlog"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    lines = ["[mariadbd]", "user=root", f"datadir={d / 'data'}", f"socket={d / 'mysqld.sock'}",
             f"pid-file={d / 'mysqld.pid'}", f"port={port}", "bind-address=127.0.0.1", f"tmpdir={d / 'tmp'}",
             f"log-error={d / 'error.log'}", "server-id=99", "gtid-domain-id=99",
             f"log-bin={d / 'binlog' / 'mysql-bin'}", f"relay-log={d / 'binlog' / 'relay-bin'}",
             "replicate-do-db=" + SHARDS[0], "replicate-do-db=" + SHARDS[1]]
    lines += [k if v is None else f"{k}={v}" for k, v in MARIADB_FLAGS.items()]
    cnf = d / "my.cnf"
    cnf.write_text("\n".join(lines) + "\n")
    subprocess.run(["mariadb-install-db", f"--defaults-file={cnf}", "--auth-root-authentication-method=normal",
                    "--skip-test-db"], check=True, capture_output=True)
    log = open(d / "stdout.log", "ab")
    proc = subprocess.Popen(["mariadbd", f"--defaults-file={cnf}"], stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        conn = None
        for _ in range(200):
            try:
                conn = pymysql.connect(unix_socket=str(d / "mysqld.sock"), user="root", autocommit=True)
                break
            except pymysql.err.MySQLError:
                time.sleep(0.1)
        assert conn is not None, "the bench replica did not start"
        prepare_target(sb, start_rows, conn=conn)
        creds = sb.credentials()
        src = sb.hosts()[SOURCE]
        with conn.cursor() as cur:
            cur.execute("RESET MASTER")  # its own schema DDL must not count as a GTID domain
            cur.execute("SET GLOBAL gtid_slave_pos = %s", (str(start),))
            cur.execute("CHANGE MASTER TO MASTER_HOST=%s, MASTER_PORT=%s, MASTER_USER=%s, MASTER_PASSWORD=%s, "
                        "MASTER_USE_GTID=slave_pos", (src.address, src.port, creds.mysql_user, creds.mysql_password))
            t0 = time.monotonic()
            cur.execute("START SLAVE")
            cur.execute("SELECT MASTER_GTID_WAIT(%s, 300)", (str(end),))
            if cur.fetchone()[0] != 0:
                cur.execute("SHOW SLAVE STATUS")
                st = cur.fetchone()
                raise SystemExit(f"the bench replica did not reach {end}: {st}")
            elapsed = time.monotonic() - t0
            cur.execute("STOP SLAVE")
        conn.close()
        return elapsed
    finally:
        stop_pid(proc.pid, timeout=30)


# -- main ----------------------------------------------------------------------------------------

def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sandbox", default=os.environ.get("MIGRATOR_BENCH_SANDBOX"))
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--threads", type=int, default=4)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="migrator-bench-"))
    own = args.sandbox is None
    sb = Sandbox(args.sandbox or tmp / "sandbox")
    try:
        if not sb.running():
            sb.up(pairs=2, spare_pairs=1, shards=8, rows=20, base_port=find_base_port(100), log=lambda *_: None)
        assert sb.state is not None
        reset_fleet(sb, even_layout(sb.state.shards, sb.pairs(spare=False)), rows=40)
        with mysql.connect(sb.hosts()[SOURCE], sb.credentials()) as c, c.cursor() as cur:
            for db in SHARDS:
                cur.execute(f"USE `{db}`")
                cur.execute(JOBS)
            start = _pos(c)
        start_rows = snapshot(sb)
        written, write_s = write_load(sb, args.seconds, args.threads)
        with mysql.connect(sb.hosts()[SOURCE], sb.credentials()) as c:
            end = _pos(c)
        write_rate = written / write_s
        applied, tail_s = tail(sb, start_rows, start, end, freeze=True)
        applied_nf, tail_nf_s = tail(sb, start_rows, start, end, freeze=False)
        applied_np, tail_np_s = tail(sb, start_rows, start, end, freeze=True, pipeline=True)
        replica_s = native_replica(sb, start_rows, start, end, tmp)
        # tidy the target
        with mysql.connect(sb.hosts()[TARGET], sb.credentials()) as c, c.cursor() as cur:
            for db in SHARDS:
                cur.execute(f"DROP DATABASE IF EXISTS `{db}`")
    finally:
        if own:
            sb.down(purge=True)
        shutil.rmtree(tmp, ignore_errors=True)
    rate = applied / tail_s
    rate_nf = applied_nf / tail_nf_s
    rate_np = applied_np / tail_np_s
    replica_rate = applied / replica_s
    rows = [
        ("writer", f"{args.threads} threads, single-row txns", written, write_s, write_rate),
        ("catch-up apply", "default (freeze_schema=True)", applied, tail_s, rate),
        ("catch-up apply", "freeze_schema=False", applied_nf, tail_nf_s, rate_nf),
        ("catch-up apply", "pipeline=True (background writes)", applied_np, tail_np_s, rate_np),
        ("native replica", "1 SQL thread, replicate_do_db", applied, replica_s, replica_rate),
    ]
    print(f"{'what':<16} {'how':<34} {'events':>8} {'seconds':>8} {'events/s':>9}")
    for what, how, n, s, r in rows:
        print(f"{what:<16} {how:<34} {n:>8} {s:>8.2f} {r:>9.0f}")
    print(f"binlog range {start} -> {end}")
    print(f"apply_events_per_s={rate:.0f} replica_events_per_s={replica_rate:.0f} write_events_per_s={write_rate:.0f} "
          f"apply_vs_replica={rate / replica_rate:.2f} apply_vs_write_rate={rate / write_rate:.2f}")


if __name__ == "__main__":
    main()
