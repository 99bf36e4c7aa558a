"""A native MariaDB replica as a baseline: a fresh standalone ``mariadbd`` started here with the fleet's
settings, loaded with a snapshot, replicating one database from a sandbox master from a GTID position to
another, timed from START SLAVE until ``MASTER_GTID_WAIT(end)``.

Used by ``bench.catchup`` (a sysbench backlog) and ``bench.bigtxn`` (one huge transaction). ``parallel``
turns on MariaDB's optimistic parallel replication with that many applier threads (what a user would set
instead of a migrator): the stronger baseline.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pymysql

from bench import tls as bench_tls
from migrator.sandbox import MARIADB_FLAGS, Sandbox, find_base_port, port_free, stop_pid


def client(sock_or_host: Any, creds: Any | None = None) -> list[str]:
    """The ``mariadb`` client command line for a unix socket (root) or a fleet host (the migrator's user)."""
    if isinstance(sock_or_host, str):
        return ["mariadb", "--no-defaults", "--max-allowed-packet=1G", "-uroot", "-S", sock_or_host]
    return ["mariadb", "--no-defaults", "--max-allowed-packet=1G", "-h", sock_or_host.address,
            "-P", str(sock_or_host.port), "-u", creds.mysql_user, *bench_tls.cli_args(sock_or_host, creds)]


def env(creds: Any) -> dict[str, str]:
    return {**os.environ, "MYSQL_PWD": creds.mysql_password}


def snapshot(sb: Sandbox, source: str, db: str, path: Path, tables: list[str] | None = None) -> None:
    """``mariadb-dump --single-transaction`` of ``db`` (or some of its tables) on ``source`` into ``path``."""
    host, creds = sb.hosts()[source], sb.credentials()
    with open(path, "wb") as f:
        subprocess.run(["mariadb-dump", "--no-defaults", "--max-allowed-packet=1G", "-h", host.address,
                        "-P", str(host.port), "-u", creds.mysql_user, *bench_tls.cli_args(host, creds),
                        "--single-transaction", "--skip-add-locks", "--skip-triggers", db, *(tables or [])],
                       stdout=f, check=True, env=env(creds))


def load(cmd: list[str], environ: dict[str, str], db: str, path: Path) -> None:
    """Drop and create ``db`` through the client ``cmd``, then load the snapshot into it."""
    subprocess.run([*cmd, "-e", f"DROP DATABASE IF EXISTS {db}; CREATE DATABASE {db}"], check=True, env=environ)
    with open(path, "rb") as f:
        subprocess.run([*cmd, db], stdin=f, check=True, env=environ)


def run_replica(sb: Sandbox, source: str, db: str, snap: Path, start: str, end: str, workdir: Path, *,
                checksum: Callable[[pymysql.connections.Connection], Any], want: Any, parallel: int = 0,
                timeout_s: int = 1800) -> float:
    """Seconds a fresh replica of ``db`` takes to apply ``start`` -> ``end`` of ``source``'s binlog (its
    start-up and snapshot load not timed); it must then hold ``want`` (``checksum(conn)``)."""
    port = find_base_port(1, start=int(os.environ.get("BENCH_REPLICA_PORT", "20000")))
    assert port_free(port)
    d = workdir / f"replica-{port}"
    for sub in ("data", "tmp", "binlog"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    lines = ["[mariadbd]", "user=root", f"datadir={d / 'data'}", f"socket={d / 'mysqld.sock'}",
             f"pid-file={d / 'mysqld.pid'}", f"port={port}", "bind-address=127.0.0.1", f"tmpdir={d / 'tmp'}",
             f"log-error={d / 'error.log'}", "server-id=99", "gtid-domain-id=99",
             f"log-bin={d / 'binlog' / 'mysql-bin'}", f"relay-log={d / 'binlog' / 'relay-bin'}",
             f"replicate-do-db={db}"]
    lines += [k if v is None else f"{k}={v}" for k, v in MARIADB_FLAGS.items()]
    lines.append("max-allowed-packet=1G")  # a snapshot of wide rows (bench.bigtxn --row-bytes) loads whole
    if parallel:
        lines += [f"slave-parallel-threads={parallel}", "slave-parallel-mode=optimistic"]
    cnf = d / "my.cnf"
    cnf.write_text("\n".join(lines) + "\n")
    subprocess.run(["mariadb-install-db", f"--defaults-file={cnf}", "--auth-root-authentication-method=normal",
                    "--skip-test-db"], check=True, capture_output=True)
    log = open(d / "stdout.log", "ab")  # noqa: SIM115 - closed after the server stops
    proc = subprocess.Popen(["mariadbd", f"--defaults-file={cnf}"], stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        conn = None
        for _ in range(300):
            try:
                conn = pymysql.connect(unix_socket=str(d / "mysqld.sock"), user="root", autocommit=True,
                                       read_timeout=timeout_s + 60)
                break
            except pymysql.err.MySQLError:
                time.sleep(0.1)
        assert conn is not None, "the bench replica did not start"
        load(client(str(d / "mysqld.sock")), dict(os.environ), db, snap)
        creds, src = sb.credentials(), sb.hosts()[source]
        with conn.cursor() as cur:
            cur.execute("SELECT @@slave_parallel_threads, @@slave_parallel_mode")
            threads, mode = cur.fetchone()
            assert int(threads) == parallel and (not parallel or mode == "optimistic"), \
                f"the bench replica runs {threads} applier threads in {mode} mode, not {parallel or 'one'}"
            cur.execute("RESET MASTER")  # its own schema DDL must not count as a GTID domain
            cur.execute("SET GLOBAL gtid_slave_pos = %s", (start,))
            ssl_sql, ssl_args = bench_tls.change_master(src, creds)
            cur.execute("CHANGE MASTER TO MASTER_HOST=%s, MASTER_PORT=%s, MASTER_USER=%s, MASTER_PASSWORD=%s, "
                        "MASTER_USE_GTID=slave_pos" + ssl_sql,
                        (src.address, src.port, creds.mysql_user, creds.mysql_password, *ssl_args))
            t0 = time.monotonic()
            cur.execute("START SLAVE")
            cur.execute("SELECT MASTER_GTID_WAIT(%s, %s)", (end, timeout_s))
            reached = cur.fetchone()[0] == 0
            elapsed = time.monotonic() - t0
            cur.execute("STOP SLAVE")
        assert reached, "the bench replica did not reach the end position"
        assert checksum(conn) == want, "the native replica differs from the source"
        conn.close()
        return elapsed
    finally:
        stop_pid(proc.pid, timeout=30)
        log.close()
        shutil.rmtree(d, ignore_errors=True)
