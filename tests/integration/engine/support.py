"""Helpers of the engine's integration tests: a background writer on the moving
shards, table snapshots, and source/target comparisons."""

from __future__ import annotations

import json
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pymysql

from migrator.fleet.ids import TYPE_BOARD, TYPE_PIN, encode, shard_db
from migrator.fleet.model import Host
from migrator.fleet.mysql import connect, qualified


@dataclass
class Writer:
    """Writes, updates and deletes rows in pins and board_has_pins of the moving
    shards until stopped; remembers every key it touched."""

    host: Host
    creds: Any
    shards: list[int]
    seed: int
    pause_s: float = 0.002
    touched: set[tuple[str, str, tuple[Any, ...]]] = field(default_factory=set)
    ops: int = 0
    inserted: int = 0  # rows inserted (pins and board_has_pins)
    error: BaseException | None = None

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="writer", daemon=True)
        self._lock = threading.Lock()

    def start(self) -> Writer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)
        if self.error:
            raise self.error

    def _touch(self, db: str, table: str, key: tuple[Any, ...]) -> None:
        with self._lock:
            self.touched.add((db, table, key))

    def _run(self) -> None:
        rnd = random.Random(self.seed)
        try:
            conn = connect(self.host, self.creds)
            cur = conn.cursor()
            maxid = {}
            for s in self.shards:
                cur.execute(f"SELECT COALESCE(MAX(local_id), 1) FROM {qualified(shard_db(s), 'pins')}")
                maxid[s] = int(cur.fetchone()[0])
            while not self._stop.is_set():
                s = rnd.choice(self.shards)
                db = shard_db(s)
                op = rnd.random()
                pid = rnd.randint(1, maxid[s])
                if op < 0.3:
                    cur.execute(f"INSERT INTO {qualified(db, 'pins')} (data) VALUES (%s)",
                                (json.dumps({"w": rnd.random()}),))
                    self._touch(db, "pins", (cur.lastrowid,))
                    bid, pin = encode(s, TYPE_BOARD, 1), encode(s, TYPE_PIN, cur.lastrowid)
                    self._touch(db, "board_has_pins", (bid, pin))
                    cur.execute(f"INSERT INTO {qualified(db, 'board_has_pins')} VALUES (%s, %s, %s)", (bid, pin, 7))
                    self.inserted += 2
                elif op < 0.65:
                    self._touch(db, "pins", (pid,))
                    cur.execute(f"UPDATE {qualified(db, 'pins')} SET data = %s WHERE local_id = %s",
                                (json.dumps({"u": rnd.random()}), pid))
                    cur.execute(f"SELECT board_id, pin_id FROM {qualified(db, 'board_has_pins')} "
                                "WHERE pin_id = %s", (encode(s, TYPE_PIN, pid),))
                    for bid, pin in cur.fetchall():
                        self._touch(db, "board_has_pins", (bid, pin))
                        cur.execute(f"UPDATE {qualified(db, 'board_has_pins')} SET sequence = sequence + 1 "
                                    "WHERE board_id = %s AND pin_id = %s", (bid, pin))
                else:
                    self._touch(db, "pins", (pid,))
                    cur.execute(f"SELECT board_id, pin_id FROM {qualified(db, 'board_has_pins')} "
                                "WHERE pin_id = %s", (encode(s, TYPE_PIN, pid),))
                    for bid, pin in cur.fetchall():
                        self._touch(db, "board_has_pins", (bid, pin))
                    cur.execute(f"DELETE FROM {qualified(db, 'board_has_pins')} WHERE pin_id = %s",
                                (encode(s, TYPE_PIN, pid),))
                    cur.execute(f"DELETE FROM {qualified(db, 'pins')} WHERE local_id = %s", (pid,))
                self.ops += 1
                if self.pause_s:
                    time.sleep(self.pause_s)
            conn.close()
        except BaseException as exc:  # surfaced by stop()
            self.error = exc


def key_columns(conn: pymysql.connections.Connection, db: str, table: str) -> list[str]:
    from migrator.engine.inspector import copy_key

    return list(copy_key(conn, db, table)[0])


def snapshot(conn: pymysql.connections.Connection, db: str, table: str) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    """Every row of ``db.table`` by key (values as the server renders them)."""
    key = key_columns(conn, db, table)
    with conn.cursor() as cur:
        cur.execute("SET SESSION time_zone = '+00:00'")
        cur.execute(f"SELECT * FROM {qualified(db, table)}")
        names = [d[0] for d in cur.description]
        idx = [names.index(k) for k in key]
        return {tuple(r[i] for i in idx): tuple(r) for r in cur.fetchall()}


def tables_of(conn: pymysql.connections.Connection, db: str) -> list[str]:
    with conn.cursor() as cur:
        cur.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
                    "AND table_type = 'BASE TABLE' ORDER BY table_name", (db,))
        return [r[0] for r in cur.fetchall()]


def snapshot_dbs(conn: pymysql.connections.Connection, dbs: list[str]) -> dict[tuple[str, str], dict]:
    return {(db, t): snapshot(conn, db, t) for db in dbs for t in tables_of(conn, db)}


def missing_or_different(before: dict[tuple[str, str], dict], target: pymysql.connections.Connection,
                         touched: set[tuple[str, str, tuple[Any, ...]]]) -> list[str]:
    """Rows present before the copy and never touched by the writer that are not
    identical on the target."""
    problems = []
    for (db, t), rows in before.items():
        after = snapshot(target, db, t)
        for k, row in rows.items():
            if (db, t, k) in touched:
                continue
            got = after.get(k)
            if got != row:
                problems.append(f"{db}.{t} key {k}: source {row!r} target {got!r}")
    return problems


def strip_auto_increment(create_sql: str) -> str:
    import re

    return re.sub(r" AUTO_INCREMENT=\d+", "", create_sql)


def gtid_seqs(pos: str) -> dict[int, int]:
    """'1-1-28,2-2-5' -> {1: 28, 2: 5} (domain -> sequence number)."""
    out = {}
    for part in filter(None, pos.split(",")):
        dom, _, seq = part.strip().split("-")
        out[int(dom)] = int(seq)
    return out
