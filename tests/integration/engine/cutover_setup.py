"""Test support for verify/cutover/rollback/cleanup: a migration brought to ``converged``.

``prepare_converged`` stores a migration record, copies the moving shard dbs to
the target master (schema and rows, the sentinel table included) and returns
a drainer: catch-up's own (:class:`~migrator.engine.verify.drainers.CatchUpDrainer`).
Also: a background writer that routes through :class:`ShardRouter` and records
every acknowledged write; ``migrator worker`` processes (:class:`Workers`); checks
of a source pair's replication and of gate leftovers on its passive member.
"""

from __future__ import annotations

import json
import random
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pymysql
from kazoo.exceptions import KazooException

from migrator.engine.migration import MigrationStore, Options, Phase, Spec, new_id
from migrator.engine.sentinel import ensure_sentinel
from migrator.engine.verify.checksums import moving_tables
from migrator.engine.verify.drainers import CatchUpDrainer
from migrator.fleet import redis_client
from migrator.fleet.config import Credentials
from migrator.fleet.gtid import Gtid, GtidState
from migrator.fleet.model import Host
from migrator.fleet.mysql import (
    ER_NO_SUCH_TABLE,
    ER_QUERY_INTERRUPTED,
    MOVED_CODES,
    binlog_pos,
    own_gtids,
    qualified,
    ssl_kwargs,
    wait_applied,
)
from migrator.fleet.mysql import connect as mysql_connect


def copy_dbs(source: Host, target: Host, creds: Credentials, dbs: list[str], tables: tuple[str, ...] = ()) -> None:
    """Schema + rows of ``dbs`` from source to target (tests only; the real copy is migrator.engine.copy)."""
    src = mysql_connect(source, creds)
    dst = mysql_connect(target, creds)
    try:
        with src.cursor() as s, dst.cursor() as d:
            s.execute("SET SESSION time_zone='+00:00'")
            d.execute("SET SESSION time_zone='+00:00'")
            for db in dbs:
                d.execute(f"CREATE DATABASE IF NOT EXISTS `{db}`")
                names = moving_tables(src, db, tables) + ["_migrator_sentinel"]
                for t in names:
                    s.execute(f"SHOW CREATE TABLE {qualified(db, t)}")
                    ddl = s.fetchone()[1]
                    d.execute(f"USE `{db}`")
                    d.execute(ddl.replace("CREATE TABLE", "CREATE TABLE IF NOT EXISTS", 1))
                    s.execute(f"SELECT * FROM {qualified(db, t)}")
                    rows = s.fetchall()
                    if rows:
                        marks = ", ".join(["%s"] * len(rows[0]))
                        d.executemany(f"REPLACE INTO {qualified(db, t)} VALUES ({marks})", rows)
    finally:
        src.close()
        dst.close()


#: drainers handed to tests; each owns a binlog reader process once used, closed after the test
OPEN_DRAINERS: list[Any] = []


@dataclass
class Prepared:
    spec: Spec
    store: MigrationStore
    drainer: Any
    source: Host
    target: Host


def prepare_converged(fleet: Any, shards: tuple[int, ...] = (2, 3), *, options: Options | None = None,
                      source_pair: tuple[str, str] | None = None, target_pair: tuple[str, str] | None = None,
                      kind: str = "shards", tables: tuple[str, ...] = (), batched: bool = False) -> Prepared:
    """A migration of ``shards`` to the spare pair, copied and caught up (phase converged); ``batched``:
    one that cuts over in batches (:mod:`migrator.ops.batched.handover`)."""
    smap = fleet.smap
    src_m = smap.master_of(shards[0])
    src_s = smap.range_of(shards[0]).passive
    if source_pair:
        src_m, src_s = source_pair
    if target_pair is None:
        target_pair = fleet.sandbox.pairs(spare=True)[0]
    spec = Spec(id=new_id("m"), kind=kind, source_master=src_m, source_passive=src_s,
                target_master=target_pair[0], target_passive=target_pair[1], shards=tuple(shards),
                tables=tables, options=options or Options(), batched=batched)
    store = MigrationStore(fleet.zk)
    store.create(spec)
    hosts = fleet.hosts
    source, target = hosts[src_m], hosts[target_pair[0]]
    creds = fleet.credentials
    conn = mysql_connect(source, creds)
    try:
        for db in spec.databases:
            ensure_sentinel(conn, db)
        start = binlog_pos(conn)
    finally:
        conn.close()
    copy_dbs(source, target, creds, spec.databases, spec.tables)
    store.put_progress(spec.id, "catchup", {"gtid": start})
    drainer = CatchUpDrainer(fleet.config, spec.id)
    for ph in (Phase.COPYING, Phase.CATCHING_UP, Phase.CONVERGED):
        store.set_phase(spec.id, ph)
    conn = mysql_connect(source, creds)
    try:
        drainer.drain_to(binlog_pos(conn), 30)
    finally:
        conn.close()
    drainer.close()  # one tailer at a time writes the checkpoint; the next opens on first use
    drainer = CatchUpDrainer(fleet.config, spec.id)
    OPEN_DRAINERS.append(drainer)  # closed after the test (tests/integration/engine/conftest.py)
    return Prepared(spec, store, drainer, source, target)


def row_events_after(host: Host, creds: Credentials, since: str, schemas: list[str]) -> list[tuple[str, str, str]]:
    """(schema, table, event type) of every row event in ``host``'s binlog after ``since``
    that touches one of ``schemas`` (read up to the head at call time)."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.event import MariadbGtidEvent, QueryEvent, XidEvent
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    with mysql_connect(host, creds) as c:
        head = GtidState.parse(binlog_pos(c))
    seen = GtidState.parse(since)  # per (domain, server): exact in every GTID layout
    out: list[tuple[str, str, str]] = []
    if seen.reaches(head):
        return out
    stream = BinLogStreamReader(
        connection_settings={"host": host.address, "port": host.port, "user": creds.mysql_user,
                             "password": creds.mysql_password, **ssl_kwargs(host, creds)},
        server_id=random.randint(10_000_000, 1_000_000_000), is_mariadb=True, auto_position=since,
        blocking=True, slave_heartbeat=0.2,
        only_events=[MariadbGtidEvent, XidEvent, QueryEvent, WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent])
    pending = None
    deadline = time.monotonic() + 30
    try:
        for ev in stream:
            if isinstance(ev, MariadbGtidEvent):
                pending = Gtid(ev.domain_id, ev.server_id, ev.gtid_seq_no)
            elif isinstance(ev, (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)):
                if ev.schema in schemas:
                    out.append((ev.schema, ev.table, type(ev).__name__))
            elif isinstance(ev, XidEvent) or (isinstance(ev, QueryEvent) and ev.query.strip().upper() != "BEGIN"):
                if pending is not None:
                    seen = seen.with_gtid(pending)
                    pending = None
                if seen.reaches(head):
                    break
            if time.monotonic() > deadline:
                raise TimeoutError("binlog scan did not reach the head")
    finally:
        stream.close()
    return out


# -- a background writer through the router ---------------------------------------------------

@dataclass
class Ack:
    shard: int
    local_id: int
    data: str


@dataclass
class Writer:
    """Inserts and updates pins in the given shards through a ShardRouter.

    Each write: route by shard; on 1146/1049/1317 (the table moved) refresh the map
    and retry on the new master. It does not wait for unfrozen shards: it acts
    as a client with a stale map, the worst case for the fence.
    """

    router: Any
    shards: tuple[int, ...]
    pause_s: float = 0.002
    #: keep retrying a write refused with 1146/1049/1317 this long (a settle after a crash), else 50 tries
    patience_s: float = 0.0
    acks: dict[tuple[int, int], str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    retries: int = 0
    latencies: list[tuple[float, float]] = field(default_factory=list)  # (start monotonic, seconds)
    hosts_used: dict[str, int] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _conns: dict[tuple[str, int], Any] = field(default_factory=dict)

    def start(self) -> Writer:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(30)
        for c in self._conns.values():
            try:
                c.close()
            except Exception:
                pass

    def _conn(self, shard: int) -> tuple[Any, str]:
        host = self.router.master_for(shard)
        key = (host.name, shard)
        if key not in self._conns:
            self._conns[key] = mysql_connect(host, self.router.credentials, read_timeout=30)
        return self._conns[key], host.name

    def _write_once(self, shard: int, rng: random.Random) -> None:
        data = json.dumps({"w": rng.random()})
        mine = [k for k in self.acks if k[0] == shard]
        update = mine and rng.random() < 0.4
        until = time.monotonic() + self.patience_s
        attempt = 0
        while attempt < 50 or time.monotonic() < until:
            attempt += 1
            if attempt > 50:
                time.sleep(0.05)
            conn, hname = self._conn(shard)
            try:
                with conn.cursor() as cur:
                    if update:
                        lid = rng.choice(mine)[1]
                        cur.execute(f"UPDATE `db{shard:05d}`.pins SET data = %s WHERE local_id = %s", (data, lid))
                    else:
                        cur.execute(f"INSERT INTO `db{shard:05d}`.pins (data) VALUES (%s)", (data,))
                        lid = cur.lastrowid
                self.acks[(shard, lid)] = data
                self.hosts_used[hname] = self.hosts_used.get(hname, 0) + 1
                return
            except pymysql.err.MySQLError as exc:
                code = exc.args[0] if exc.args else None
                if code in MOVED_CODES:
                    self.retries += 1
                    try:
                        self.router.refresh()
                    except KazooException:  # ZooKeeper unreachable for now: a client tries again later
                        time.sleep(0.1)
                    continue
                if code in (2006, 2013):
                    self._conns.pop((hname, shard), None)
                    self.retries += 1
                    continue
                self.errors.append(f"{code}: {exc}")
                return
        self.errors.append(f"gave up after {attempt} attempts")

    def _run(self) -> None:
        rng = random.Random(1234)
        while not self._stop.is_set():
            shard = rng.choice(self.shards)
            t0 = time.monotonic()
            self._write_once(shard, rng)
            self.latencies.append((t0, time.monotonic() - t0))
            time.sleep(self.pause_s)


@dataclass
class PassiveWriter:
    """Writes pins straight into the passive member, as a misrouted client would."""

    host: object
    creds: object
    shards: tuple[int, ...]
    acks: dict[tuple[int, int], str] = field(default_factory=dict)
    refused: int = 0
    other_errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> PassiveWriter:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(30)

    def _run(self) -> None:
        rng = random.Random(99)
        conn = mysql_connect(self.host, self.creds, read_timeout=30)
        try:
            while not self._stop.is_set():
                shard = rng.choice(self.shards)
                data = json.dumps({"passive": rng.random()})
                mine = [k for k in self.acks if k[0] == shard]
                try:
                    with conn.cursor() as cur:
                        if mine and rng.random() < 0.4:
                            lid = rng.choice(mine)[1]
                            cur.execute(f"UPDATE `db{shard:05d}`.pins SET data = %s WHERE local_id = %s", (data, lid))
                        else:
                            cur.execute(f"INSERT INTO `db{shard:05d}`.pins (data) VALUES (%s)", (data,))
                            lid = cur.lastrowid
                    self.acks[(shard, lid)] = data
                except pymysql.err.MySQLError as exc:
                    if exc.args and exc.args[0] in (ER_NO_SUCH_TABLE, ER_QUERY_INTERRUPTED):
                        self.refused += 1  # the gate, the renamed table or the fence's sweep: never a silent write
                    else:
                        self.other_errors.append(str(exc))
                time.sleep(0.002)
        finally:
            conn.close()


# -- the source pair after a cutover -------------------------------------------------------------

def replicating(conn: Any) -> None:
    """Both replication threads of this server run, with no error."""
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute("SHOW ALL SLAVES STATUS")
        rows = cur.fetchall()
    assert rows
    for st in rows:
        assert st["Slave_IO_Running"] == "Yes" and st["Slave_SQL_Running"] == "Yes", st.get("Last_SQL_Error")
        assert not st["Last_SQL_Errno"], st["Last_SQL_Error"]


def pair_synced(a: Any, b: Any, timeout: float = 30) -> None:
    """Each member of a pair has applied everything the other has written (itself: in any GTID layout)."""
    for x, y in ((a, b), (b, a)):
        assert wait_applied(y, own_gtids(x), timeout)


def gate_leftovers(conn: Any, dbs: Any = ()) -> list:  # noqa: ARG001 - every gate on the server counts
    """Passive-gate triggers and gate tables left on this server."""
    from migrator.engine.cutover.trigger_gate import GATE_SCHEMA, TRIGGER_PREFIX

    with conn.cursor() as cur:
        cur.execute("SELECT TRIGGER_SCHEMA, TRIGGER_NAME FROM information_schema.TRIGGERS WHERE TRIGGER_NAME LIKE %s",
                    (f"{TRIGGER_PREFIX}%",))
        trig = list(cur.fetchall())
        cur.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s", (GATE_SCHEMA,))
        return trig + list(cur.fetchall())


def tables_in(conn: Any, db: str) -> set[str]:
    with conn.cursor() as cur:
        cur.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s", (db,))
        return {r[0] for r in cur.fetchall()}


# -- migrator worker processes ------------------------------------------------------------------

class Workers:
    """``migrator worker`` processes on a queue of their own (each leads its own session)."""

    def __init__(self, config_path: Any, log_dir: Any, queue: str | None = None):
        import uuid

        self.config_path = str(config_path)
        self.log_dir = log_dir
        self.queue = queue or f"t-{uuid.uuid4().hex[:8]}"
        self.procs: list[Any] = []

    def start(self, n: int = 1) -> Workers:
        import subprocess
        import sys
        import uuid
        from pathlib import Path

        for _ in range(n):
            name = f"w-{uuid.uuid4().hex[:8]}"
            log = open(Path(self.log_dir) / f"worker-{name}.log", "ab")  # noqa: SIM115 - the process keeps it
            self.procs.append(subprocess.Popen(
                [sys.executable, "-m", "migrator", "--config", self.config_path, "worker", "--queue", self.queue,
                 "--name", name],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                cwd=str(Path(__file__).resolve().parents[3])))
            log.close()
        return self

    def enqueue(self, config: Any, func: str, *args: Any) -> Any:
        from rq import Queue

        return Queue(self.queue, connection=redis_client.connect(config)).enqueue(func, *args, job_timeout=600)

    def dead(self) -> list[Any]:
        return [p for p in self.procs if p.poll() is not None]

    def logs(self) -> str:
        from pathlib import Path

        return "\n".join(f"--- {f.name}\n{f.read_text(errors='replace')[-3000:]}"
                         for f in sorted(Path(self.log_dir).glob("worker-*.log")))

    @staticmethod
    def session(sid: int) -> list[Any]:
        """The live processes of the session ``sid``: a worker started here leads one, and its RQ
        work-horse stays in it (RQ gives the horse a process group of its own, not a session), even
        once the worker died and the horse was re-parented. Zombies run nothing and are left out."""
        import os

        import psutil

        out = []
        for proc in psutil.process_iter():
            try:
                if os.getsid(proc.pid) == sid and proc.status() != psutil.STATUS_ZOMBIE:
                    out.append(proc)
            except (OSError, psutil.Error):
                pass  # gone meanwhile
        return out

    def stop(self) -> None:
        """kill -9 every worker and its work-horse; then none of their processes may be left."""
        import signal

        import psutil

        for p in self.procs:
            procs = self.session(p.pid)
            for proc in procs:
                try:
                    proc.send_signal(signal.SIGKILL)
                except psutil.NoSuchProcess:
                    pass
            if p.poll() is None:
                p.wait(10)
            psutil.wait_procs(procs, timeout=10)
        left = [f"{proc.pid} {proc.cmdline()}" for p in self.procs for proc in self.session(p.pid)
                if proc.is_running()]
        self.procs = []
        assert not left, f"worker processes left after stop: {left}"


def missing_acks(fleet: Any, acks: dict[tuple[int, int], str]) -> list[tuple[int, int]]:
    """Acknowledged pin writes not on the master the shard map names now (or with another value)."""
    from migrator.fleet.shard_map import ShardMapStore

    smap = ShardMapStore(fleet.zk).read()
    conns: dict[str, Any] = {}
    missing = []
    try:
        for (shard, lid), data in acks.items():
            host = fleet.hosts[smap.master_of(shard)]
            if host.name not in conns:
                conns[host.name] = mysql_connect(host, fleet.credentials)
            with conns[host.name].cursor() as cur:
                cur.execute(f"SELECT data FROM db{shard:05d}.pins WHERE local_id = %s", (lid,))
                row = cur.fetchone()
            if row is None or row[0] != data:
                missing.append((shard, lid))
    finally:
        for c in conns.values():
            c.close()
    return missing


def source_pair_left_clean(credentials: Credentials, master: Any, passive: Any) -> None:
    """After a cutover of the source pair: no gate object left on either member, the pair in sync, and both
    directions replicating."""
    a = mysql_connect(master, credentials)
    b = mysql_connect(passive, credentials)
    try:
        assert gate_leftovers(a) == [] and gate_leftovers(b) == []
        pair_synced(a, b)
        replicating(a)
        replicating(b)
    finally:
        a.close()
        b.close()
