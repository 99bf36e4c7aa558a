"""Test-side helpers for catch-up tests: edge-case tables, a simple copy that
records ``start_gtid`` the way the copy phase does, a background writer, and a
source-vs-target comparison (CHECKSUM TABLE, row counts, partitions).

Not a conftest: imported explicitly by the catch-up tests.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pymysql

from migrator.engine.migration import MigrationStore, Options, Phase, Spec, new_id
from migrator.fleet import mysql
from migrator.fleet.mysql import binlog_state, own_gtids, wait_applied

SOURCE, SOURCE_SLAVE = "MySQL001A", "MySQL001B"
TARGET, TARGET_SLAVE = "MySQL003A", "MySQL003B"
#: moving shards live on MySQL001A; shard 0 stays (its writes must be filtered out)
MOVING = (2, 3)
STAYING = 0
PARTNER_BOARD_BASE = 9_000_000_000_000_000  # board ids written on the passive partner only

EXTRA_TABLES = [
    """CREATE TABLE IF NOT EXISTS edge_cases (
      k1 BIGINT NOT NULL,
      k2 VARBINARY(16) NOT NULL,
      fixed BINARY(8) NULL,
      s VARCHAR(64) CHARACTER SET utf8mb4 NULL,
      bl BLOB NULL,
      n INT NULL,
      j JSON NULL,
      at DATETIME(6) NULL,
      ts TIMESTAMP(6) NULL DEFAULT NULL,
      d DECIMAL(12,3) NULL,
      flags SET('a','b','c') NULL,
      kind ENUM('x','y') NULL,
      PRIMARY KEY (k1, k2)
    ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4""",
    """CREATE TABLE IF NOT EXISTS jobs (
      local_id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
      state TINYINT NOT NULL,
      updated_at DATETIME(6) NOT NULL,
      body VARBINARY(255) NULL,
      attempts INT NOT NULL DEFAULT 0,
      PRIMARY KEY (local_id, state, updated_at)
    ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4
    PARTITION BY RANGE COLUMNS(state, updated_at) (
      PARTITION pNEW_a VALUES LESS THAN (0, '2020-01-10 00:00:00'),
      PARTITION pNEW_FUTURE VALUES LESS THAN (0, MAXVALUE),
      PARTITION pIPR_FUTURE VALUES LESS THAN (1, MAXVALUE),
      PARTITION pOK_a VALUES LESS THAN (2, '2020-01-10 00:00:00'),
      PARTITION pOK_b VALUES LESS THAN (2, '2020-01-20 00:00:00'),
      PARTITION pOK_FUTURE VALUES LESS THAN (2, MAXVALUE),
      PARTITION pFAIL_FUTURE VALUES LESS THAN (3, MAXVALUE),
      PARTITION p_CATCHALL VALUES LESS THAN (MAXVALUE, MAXVALUE)
    )""",
]

DROP_PARTITION = "ALTER TABLE jobs DROP PARTITION pOK_a"
REORGANIZE_PARTITION = (
    "ALTER TABLE jobs REORGANIZE PARTITION pNEW_FUTURE INTO ("
    "PARTITION pNEW_b VALUES LESS THAN (0, '2020-01-20 00:00:00'), "
    "PARTITION pNEW_FUTURE VALUES LESS THAN (0, MAXVALUE))"
)

BASE_TIME = dt.datetime(2020, 1, 1)


def conn(fleet: Any, host: str, db: str | None = None, **kw: Any) -> pymysql.connections.Connection:
    c = mysql.connect(fleet.hosts[host], fleet.credentials, database=db, **kw)
    with c.cursor() as cur:
        cur.execute("SET SESSION time_zone = '+00:00'")
    return c


def binlog_pos(c: pymysql.connections.Connection) -> str:
    with c.cursor() as cur:
        cur.execute("SELECT @@GLOBAL.gtid_binlog_pos")
        return cur.fetchone()[0]


def create_extra_tables(fleet: Any, shards: tuple[int, ...] = (*MOVING, STAYING), rows: int = 30) -> None:
    """The edge-case and jobs tables on the source, with some rows."""
    rnd = random.Random(7)
    with conn(fleet, SOURCE) as c, c.cursor() as cur:
        for s in shards:
            db = f"db{s:05d}"
            for ddl in EXTRA_TABLES:
                cur.execute(f"USE `{db}`")
                cur.execute(ddl)
            for i in range(rows):
                cur.execute(*edge_insert(rnd, i))
                cur.execute(*job_insert(rnd))


def edge_row(rnd: random.Random, k1: int) -> tuple[Any, ...]:
    k2 = bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 6)))
    fixed = None if rnd.random() < 0.2 else bytes([rnd.randrange(256)]) + b"\0" * rnd.randrange(0, 4)
    s = rnd.choice([None, "", "plain", "héllo wörld ✓", "emoji 🎉🚀", "trailing  "])
    bl = None if rnd.random() < 0.2 else bytes(rnd.randrange(256) for _ in range(rnd.randrange(0, 300)))
    n = None if rnd.random() < 0.3 else rnd.randrange(-1000, 1000)
    j = None if rnd.random() < 0.2 else json.dumps({"a": rnd.randrange(100), "s": "✓ ü", "l": [1, None, True]})
    at = None if rnd.random() < 0.2 else BASE_TIME + dt.timedelta(seconds=rnd.randrange(10**7),
                                                                  microseconds=rnd.randrange(10**6))
    ts = None if rnd.random() < 0.2 else dt.datetime(2021, 1, 1) + dt.timedelta(seconds=rnd.randrange(10**7),
                                                                                microseconds=rnd.randrange(10**6))
    d = None if rnd.random() < 0.2 else f"{rnd.randrange(-10**6, 10**6)}.{rnd.randrange(1000):03d}"
    flags = rnd.choice([None, "", "a", "a,c", "a,b,c"])
    kind = rnd.choice([None, "x", "y"])
    return (k1, k2, fixed, s, bl, n, j, at, ts, d, flags, kind)


def edge_insert(rnd: random.Random, k1: int) -> tuple[str, tuple[Any, ...]]:
    return ("REPLACE INTO edge_cases VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)", edge_row(rnd, k1))


def job_insert(rnd: random.Random) -> tuple[str, tuple[Any, ...]]:
    at = BASE_TIME + dt.timedelta(seconds=rnd.randrange(30 * 86400), microseconds=rnd.randrange(10**6))
    return ("INSERT INTO jobs (state, updated_at, body) VALUES (0, %s, %s)",
            (at, b"job\0" + bytes([rnd.randrange(256)])))


# -- the migration record and a simple copy ------------------------------------------------

def create_migration(fleet: Any, *, kind: str = "shards", tables: tuple[str, ...] = (),
                     shards: tuple[int, ...] = MOVING, **options: Any) -> Spec:
    spec = Spec(id=new_id(), kind=kind, source_master=SOURCE, source_passive=SOURCE_SLAVE,
                target_master=TARGET, target_passive=TARGET_SLAVE, shards=shards, tables=tables,
                options=Options(**options))
    store = MigrationStore(fleet.zk)
    store.create(spec)
    store.set_phase(spec.id, Phase.COPYING)
    return spec


def moving_tables(fleet: Any, spec: Spec) -> list[tuple[str, str]]:
    out = []
    with conn(fleet, SOURCE) as c, c.cursor() as cur:
        for db in spec.databases:
            cur.execute("SELECT table_name FROM information_schema.tables WHERE table_schema=%s ORDER BY 1", (db,))
            for (t,) in cur.fetchall():
                if not spec.tables or t in spec.tables:
                    out.append((db, t))
    return out


def copy_tables(fleet: Any, spec: Spec, chunk: int = 500) -> None:
    """Copy each moving table the way the copy phase does: record the source
    position first, then schema and rows (REPLACE, in key order chunks)."""
    store = MigrationStore(fleet.zk)
    with conn(fleet, SOURCE) as src, conn(fleet, TARGET) as dst, src.cursor() as sc, dst.cursor() as dc:
        for db, table in moving_tables(fleet, spec):
            state = binlog_state(src)  # before the position, as the copy reads them
            start = binlog_pos(src)
            sc.execute(f"SHOW CREATE TABLE `{db}`.`{table}`")
            ddl = sc.fetchone()[1]
            dc.execute(f"CREATE DATABASE IF NOT EXISTS `{db}`")
            dc.execute(f"USE `{db}`")
            dc.execute(ddl)
            sc.execute(f"SELECT * FROM `{db}`.`{table}`")
            rows = sc.fetchall()
            for i in range(0, len(rows), chunk):
                part = rows[i:i + chunk]
                marks = ",".join(["%s"] * len(part[0]))
                dc.executemany(f"REPLACE INTO `{db}`.`{table}` VALUES ({marks})", part)
            store.put_progress(spec.id, f"copy/{db}.{table}",
                               {"start_gtid": start, "start_state": str(state), "done": True, "rows": len(rows),
                                "last_key": None})


# -- comparison --------------------------------------------------------------------------------

def table_facts(c: pymysql.connections.Connection, db: str, table: str) -> dict[str, Any]:
    with c.cursor() as cur:
        cur.execute(f"CHECKSUM TABLE `{db}`.`{table}`")
        checksum = cur.fetchone()[1]
        cur.execute(f"SELECT COUNT(*) FROM `{db}`.`{table}`")
        count = cur.fetchone()[0]
        cur.execute("SELECT partition_name FROM information_schema.partitions WHERE table_schema=%s "
                    "AND table_name=%s ORDER BY partition_ordinal_position", (db, table))
        parts = [r[0] for r in cur.fetchall() if r[0]]
    return {"checksum": checksum, "count": count, "partitions": parts}


def compare(fleet: Any, spec: Spec) -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Per moving table: (source facts, target facts) where they differ."""
    diffs = {}
    with conn(fleet, SOURCE) as src, conn(fleet, TARGET) as dst:
        for db, table in moving_tables(fleet, spec):
            a, b = table_facts(src, db, table), table_facts(dst, db, table)
            if a != b:
                diffs[f"{db}.{table}"] = (a, b)
    return diffs


def wait_target_slave(fleet: Any, timeout: float = 30) -> None:
    with conn(fleet, TARGET) as t:
        own = own_gtids(t)
    with conn(fleet, TARGET_SLAVE, read_timeout=timeout + 5) as s:
        assert wait_applied(s, own, timeout), "target standby did not catch up"


# -- background writes ----------------------------------------------------------------------

@dataclass
class Writer:
    """Random writes to the moving shards (and one staying shard) while catch-up runs.

    Inserts, updates, deletes and key-changing updates on pins, board_has_pins,
    edge_cases and the partitioned jobs table, in small transactions; with
    ``partner`` also writes on the passive partner (its own board id range),
    which reach the source binlog in the partner's GTID domain.
    """

    fleet: Any
    seed: int
    partner: bool = True
    pause_s: float = 0.002
    ops: int = 0
    partner_ops: int = 0
    retries: int = 0
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _hold: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> Writer:
        self._threads = [threading.Thread(target=self._run_main, daemon=True)]
        if self.partner:
            self._threads.append(threading.Thread(target=self._run_partner, daemon=True))
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        """Stop writing and wait until the source applied the partner's writes
        (so no replicated write is in flight when the next test resets the fleet)."""
        self._stop.set()
        for t in self._threads:
            t.join(60)
        if self.partner:
            wait_source_has_partner_writes(self.fleet)
        assert not self.errors, self.errors

    def paused(self) -> Any:
        """``with writer.paused():`` holds the main writer between transactions."""
        return self._hold

    def _run_main(self) -> None:
        rnd = random.Random(self.seed)
        try:
            with conn(self.fleet, SOURCE, autocommit=False) as c, c.cursor() as cur:
                next_k1 = 10_000
                while not self._stop.is_set():
                    with self._hold:
                        shard = rnd.choice([*MOVING, *MOVING, STAYING])
                        cur.execute(f"USE `db{shard:05d}`")
                        try:
                            for _ in range(rnd.randrange(1, 4)):
                                next_k1 += 1
                                self._one(cur, rnd, next_k1)
                            c.commit()
                            self.ops += 1
                        except pymysql.err.OperationalError as exc:
                            if exc.args[0] not in (1213, 1205):  # deadlock / lock wait: the app retries
                                raise
                            c.rollback()
                            self.retries += 1
                    if self.pause_s:
                        time.sleep(self.pause_s)
        except Exception as exc:  # noqa: BLE001 - reported by stop()
            self.errors.append(f"writer: {exc!r}")

    def _one(self, cur: Any, rnd: random.Random, k1: int) -> None:
        r = rnd.random()
        if r < 0.10:
            cur.execute("INSERT INTO pins (data) VALUES (%s)", (json.dumps({"n": k1, "t": "pin ✓"}),))
        elif r < 0.16:
            cur.execute("UPDATE pins SET data = JSON_SET(data, '$.n', %s) ORDER BY RAND() LIMIT 2", (k1,))
        elif r < 0.19:
            cur.execute("DELETE FROM pins ORDER BY RAND() LIMIT 1")
        elif r < 0.27:
            cur.execute("INSERT INTO board_has_pins VALUES (%s, %s, %s)", (rnd.randrange(1, 10**6), k1, k1))
        elif r < 0.33:
            # key change of a mapping row (this writer's board range only)
            cur.execute("UPDATE IGNORE board_has_pins SET pin_id = pin_id + 7000000 WHERE board_id < %s "
                        "ORDER BY RAND() LIMIT 1", (PARTNER_BOARD_BASE,))
        elif r < 0.36:
            cur.execute("DELETE FROM board_has_pins WHERE board_id < %s ORDER BY RAND() LIMIT 1", (PARTNER_BOARD_BASE,))
        elif r < 0.46:
            cur.execute(*edge_insert(rnd, k1))
        elif r < 0.52:
            cur.execute("UPDATE edge_cases SET s = %s, n = n + 1, j = JSON_SET(COALESCE(j, '{}'), '$.u', %s), "
                        "flags = 'b', bl = %s ORDER BY RAND() LIMIT 1",
                        (rnd.choice(["ü", "🎉", None, "x" * 60]), k1, bytes([rnd.randrange(256)]) * 5))
        elif r < 0.56:
            cur.execute("UPDATE edge_cases SET k2 = %s ORDER BY RAND() LIMIT 1", (b"\0k" + k1.to_bytes(6, "big"),))
        elif r < 0.59:
            cur.execute("DELETE FROM edge_cases ORDER BY RAND() LIMIT 1")
        elif r < 0.72:
            cur.execute(*job_insert(rnd))
        elif r < 0.92:
            # a state change is a primary-key change (state and updated_at are in the key)
            at = BASE_TIME + dt.timedelta(seconds=rnd.randrange(30 * 86400), microseconds=rnd.randrange(10**6))
            cur.execute("UPDATE jobs SET state = LEAST(state + 1 + (RAND() < 0.2), 3), updated_at = %s, "
                        "attempts = attempts + 1 WHERE state < 2 ORDER BY RAND() LIMIT %s",
                        (at, rnd.randrange(1, 4)))
        else:
            cur.execute("DELETE FROM jobs WHERE state >= 2 ORDER BY RAND() LIMIT 1")

    def _run_partner(self) -> None:
        rnd = random.Random(self.seed + 1)
        mine: list[tuple[int, int]] = []
        try:
            with conn(self.fleet, SOURCE_SLAVE, autocommit=True) as c, c.cursor() as cur:
                n = 0
                while not self._stop.is_set():
                    db = f"db{rnd.choice(MOVING):05d}"
                    n += 1
                    r = rnd.random()
                    if r < 0.6 or not mine:
                        key = (PARTNER_BOARD_BASE + n, n)
                        cur.execute(f"INSERT INTO `{db}`.board_has_pins VALUES (%s, %s, %s)", (*key, n))
                        mine.append((db, *key))  # type: ignore[arg-type]
                    elif r < 0.8:
                        db, b, p = mine.pop(rnd.randrange(len(mine)))  # type: ignore[misc]
                        cur.execute(f"UPDATE `{db}`.board_has_pins SET pin_id = %s, sequence = sequence + 1 "
                                    "WHERE board_id = %s AND pin_id = %s", (p + 10**9, b, p))
                        mine.append((db, b, p + 10**9))  # type: ignore[arg-type]
                    else:
                        db, b, p = mine.pop(rnd.randrange(len(mine)))  # type: ignore[misc]
                        cur.execute(f"DELETE FROM `{db}`.board_has_pins WHERE board_id = %s AND pin_id = %s", (b, p))
                    self.partner_ops += 1
                    time.sleep(0.01)
        except Exception as exc:  # noqa: BLE001 - reported by stop()
            self.errors.append(f"partner writer: {exc!r}")


def wait_source_has_partner_writes(fleet: Any, timeout: float = 30) -> str:
    """Wait until the source master applied everything its partner wrote itself (in any GTID layout);
    returns the source's binlog state then (which names the partner's server)."""
    with conn(fleet, SOURCE_SLAVE) as b:
        own = own_gtids(b)
    with conn(fleet, SOURCE, read_timeout=timeout + 5) as a:
        assert wait_applied(a, own, timeout), "source master did not apply its partner's writes"
        return str(binlog_state(a))


@contextmanager
def catchup_process(fleet: Any, migration_id: str, env: dict[str, str]) -> Iterator[subprocess.Popen]:
    """``migrator catchup ID --passes 1 --sync`` in a process group of its own, with ``env`` added to the
    environment; killed -9 (the whole group) at the end if still running."""
    proc = subprocess.Popen([sys.executable, "-m", "migrator", "--config", str(fleet.config_path), "catchup",
                             migration_id, "--passes", "1", "--sync"],
                            env={**os.environ, "PYTHONPATH": os.getcwd(), **env}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        yield proc
    finally:
        kill_9(proc)


def kill_9(proc: subprocess.Popen) -> None:
    """kill -9 a process started by :func:`catchup_process` and its children (its reader process)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
