"""The fault harness: a real split (or queue-partition move) of the sandbox under
queue load, a fault fired at a named phase, recovery, and three end checks.

It follows :mod:`migrator.ops.demo`: ``migrator worker`` subprocesses run the RQ
pipeline (``command.launch``), the queue load generator
(:func:`migrator.queue.load.run_load`) enqueues, dequeues and acks in a
background thread and writes a ledger. A cell reads::

    run = FaultRun(fleet, tmp_path).start()
    run.plan_split()
    run.launch()
    run.when(lambda st: st.phase == Phase.COPYING and run.copy_started(), run.kill_workers)
    run.start_workers(); run.resume()
    run.wait_phase(Phase.DONE)
    run.end_checks()

The three end checks
--------------------
1. **Ledger**: the load is stopped and drained, then
   :func:`migrator.queue.ledger.check_ledger` asks the queue (through the
   current shard map) for every acknowledged enqueue: 0 lost, 0 double-OK.

2. **Moved tables equal a justified snapshot.** After the flip the target
   keeps taking writes, so "source vs target" means nothing by then. What we
   can justify: the fence renamed the source tables into the tombstone schema
   while they were write-locked, and check 3 proves nothing wrote them after
   that; so each tombstone is exactly the source at the fence. The cutover
   recorded the target's binlog position right after draining to the fence
   (``cutover`` progress node, ``target_gtid``); nothing but catch-up wrote the
   moved tables on the target before the flip, and catch-up had stopped. So
   the target *at that position* must equal the tombstone. We read the target's
   binlog from that position to its head (after stopping the load) and collect
   every primary key written since. A table with no such key must give the
   same ``CHECKSUM TABLE`` on both sides (the seed tables: the queue load does
   not write them). A table written since (the queue's jobs and dedupe tables)
   is compared row by row on every key *not* written since; the keys written
   since are new work whose fate the ledger (check 1) accounts for. When the
   cutover was finished by ``reconcile`` (its worker died after the flip) the
   node is absent; the harness then uses a target position it recorded before
   the cutover started (:meth:`FaultRun.mark_target`), which only widens the
   set of keys left to the ledger.

3. **No write on a tombstone**: the source's binlog from the fence position
   (``cutover`` node ``fence_gtid``, or the flip's audit record) to its head
   has no row event in a moved db (the moved tables only, for a partition move)
   or in a tombstone schema.

Alongside: the map is flipped and nothing is left frozen, and the moved shards'
partition-maintenance pause was released (the queue's purges run again).

A cell whose fault stops the migration before the flip instead checks that
the map never changed for the moving shards, nothing is frozen, and the ledger
is clean (the source kept serving).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from migrator.engine.migration import MigrationStore, Options, Phase, Spec, State
from migrator.engine.names import SENTINEL_TABLE, tomb_db
from migrator.fleet import redis_client
from migrator.fleet.gtid import Gtid, GtidState
from migrator.fleet.model import Host
from migrator.fleet.mysql import binlog_pos, qualified, ssl_kwargs
from migrator.fleet.mysql import connect as mysql_connect
from migrator.fleet.shard_map import ShardMapStore
from migrator.ops import command, steps

QUEUE = "faults"
#: options for cells: a freeze budget with room for a 2-core CI box, small copy chunks
CELL_OPTIONS = dict(freeze_budget_ms=3000, chunk_rows=5, chunk_max_rows=5, copy_workers=2)
#: catch-up never converges with these (a pass must see no event at all): a cell holds the migration
#: in catch-up until :meth:`FaultRun.release_catch_up` restores the defaults
HOLD_CATCH_UP = dict(converge_events=0, converge_lag_s=0.0001)
#: from the death of the cutover's worker to a settled cutover (lease timeout + the settle), on a busy box
SETTLE_BOUND_S = 15.0


class FaultRun:
    """One migration under load with faults; see the module docstring."""

    def __init__(self, fleet: Any, tmp_path: Path, *, rate: float = 40.0, partitions: int = 8,
                 workers: int = 2, http: bool = False, producers: int = 1, consumers: int = 2):
        self.fleet = fleet
        self.cfg = fleet.config
        self.creds = fleet.credentials
        self.dir = Path(tmp_path)
        self.rate = rate
        self.partitions = partitions
        self.n_workers = workers
        #: the load as an independent client: ``migrator queue serve --broker`` in a process of its own,
        #: producers and consumers over HTTP with the queue token
        self.http = http
        self.producers, self.consumers = producers, consumers
        self.server: subprocess.Popen | None = None
        self.procs: list[subprocess.Popen] = []
        #: every worker ever started (each the leader of its own session): what close() ends, the dead
        #: ones' forks too (a worker killed -9 leaves its RQ scheduler process behind, in its group)
        self.started: list[subprocess.Popen] = []
        self.logs: list[Path] = []
        self.ledger_path = self.dir / "ledger.sqlite"
        self._stop = threading.Event()
        self._load_out: dict[str, Any] = {}
        self._loader: threading.Thread | None = None
        self.spec: Spec | None = None
        self.target_mark: str | None = None
        self.events: list[str] = []
        self.store = MigrationStore(fleet.zk)
        self.epoch0 = ShardMapStore(fleet.zk).read().epoch

    # -- set up ----------------------------------------------------------------------------
    def start(self, *, workers: bool = True) -> FaultRun:
        from migrator.queue.load import run_load

        client: dict[str, Any] = {"url": self._serve(), "token": self.creds.queue_token} if self.http else {}

        def load() -> None:
            try:
                self._load_out["result"] = run_load(self.cfg, QUEUE, self.rate, 3600, self.ledger_path, self._stop,
                                                    partitions=self.partitions, producers=self.producers,
                                                    consumers=self.consumers, lease_seconds=10,
                                                    drain_seconds=20, **client)
            except BaseException as exc:  # noqa: BLE001 - reported by stop_load
                self._load_out["error"] = exc

        self._loader = threading.Thread(target=load, name="fault-load", daemon=True)
        self._loader.start()
        self.wait(lambda: self.queue_exists() or "error" in self._load_out, 30, "the queue load to start")
        if "error" in self._load_out:
            raise self._load_out["error"]
        if workers:
            self.start_workers()
        return self

    def _serve(self) -> str:
        """``migrator queue serve --broker`` on a free port; its URL once /healthz answers."""
        import socket

        import httpx

        with socket.socket() as sk:
            sk.bind(("127.0.0.1", 0))
            port = sk.getsockname()[1]
        log = self.dir / "queue-serve.log"
        self.logs.append(log)
        self.server = subprocess.Popen(
            [sys.executable, "-m", "migrator", "--config", str(self.fleet.config_path), "queue", "serve", "--broker",
             "--listen", f"127.0.0.1:{port}"], stdout=open(log, "ab"), stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True, cwd=str(Path(__file__).resolve().parents[2]))
        url = f"http://127.0.0.1:{port}"

        def up() -> bool:
            assert self.server is not None and self.server.poll() is None, log.read_text()[-2000:]
            try:
                return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        self.wait(up, 60, "the queue server to answer", every=0.2)
        return url

    def queue_exists(self) -> bool:
        return bool(self.fleet.zk.client.exists(self.fleet.zk.path("queues", QUEUE)))

    def start_workers(self, n: int | None = None) -> None:
        for _ in range(n or self.n_workers):
            name = f"fault-{uuid.uuid4().hex[:8]}"
            log = self.dir / f"worker-{name}.log"
            self.logs.append(log)
            self.procs.append(subprocess.Popen(
                [sys.executable, "-m", "migrator", "--config", str(self.fleet.config_path), "worker", "--name", name],
                stdout=open(log, "ab"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, cwd=str(Path(__file__).resolve().parents[2])))
            self.started.append(self.procs[-1])

    def kill_workers(self, *_: Any) -> None:
        """kill -9 every worker and its work-horse (RQ puts a horse in a process group of its own, so it
        is found as a child, not by the worker's group): a lost machine."""
        for p in self.procs:
            signal_tree(p.pid, signal.SIGKILL)
            p.wait(10)
        self.procs = []
        self.events.append("workers killed")

    def a_worker_died(self) -> bool:
        """True once a worker process is gone; forgets the dead ones."""
        dead = [p for p in self.procs if p.poll() is not None]
        self.procs = [p for p in self.procs if p.poll() is None]
        if dead:
            self.events.append(f"{len(dead)} worker(s) died")
        return bool(dead)

    def close(self) -> None:
        self._stop.set()
        self.kill_workers()
        for p in self.started:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if self._loader is not None:
            self._loader.join(60)
        if self.server is not None:
            signal_tree(self.server.pid, signal.SIGTERM)
            try:
                self.server.wait(20)
            except subprocess.TimeoutExpired:
                signal_tree(self.server.pid, signal.SIGKILL)
                self.server.wait(10)
            self.server = None

    # -- the migration ------------------------------------------------------------------------
    def plan_split(self, source: str = "MySQL001A", **options: Any) -> Spec:
        opts = Options(**{**CELL_OPTIONS, **options})
        self.spec = command.plan_split(self.cfg, source, options=opts).spec
        return self.spec

    def plan_move(self, shards: str, target: str, **options: Any) -> Spec:
        opts = Options(**{**CELL_OPTIONS, **options})
        self.spec = command.plan_move(self.cfg, shards, target, options=opts).spec
        return self.spec

    def plan_move_partition(self, partition: int, target: str, **options: Any) -> Spec:
        opts = Options(**{**CELL_OPTIONS, **options})
        self.spec = command.plan_move_partition(self.cfg, QUEUE, partition, target, options=opts).spec
        return self.spec

    def partition_on(self, shard: int) -> int:
        from migrator.queue.catalog import QueueCatalog

        rec = QueueCatalog(self.fleet.zk).get(QUEUE, fresh=True)
        return rec.partitions_for_shard(shard)[0].index

    @property
    def mid(self) -> str:
        assert self.spec is not None
        return self.spec.id

    def launch(self, *, postpone: bool = False) -> None:
        if postpone:
            command.postpone(self.cfg, self.mid, on=True)
        command.launch(self.cfg, self.mid)

    def release_catch_up(self) -> None:
        command.set_options(self.cfg, self.mid, converge_events=1000, converge_lag_s=1.0)

    def resume(self) -> dict[str, Any]:
        return command.resume(self.cfg, self.mid)

    def state(self) -> State:
        return self.store.state(self.mid)[0]

    def copy_started(self) -> bool:
        from migrator.engine import copy as copy_mod

        tables = copy_mod.table_progress(self.fleet.zk, self.mid)
        return any(int(t.get("rows", 0)) > 0 for t in tables) and not all(t.get("done") for t in tables)

    def wait(self, cond: Callable[[], Any], timeout: float, what: str, every: float = 0.02) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            got = cond()
            if got:
                return got
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; "
                                     f"{self._describe()}")
            time.sleep(every)

    def _describe(self) -> str:
        if self.spec is None:
            return "no migration"
        st = self.state()
        tails = []
        for log in self.logs[-3:]:  # what the workers said last: why a job never ran, or how it failed
            try:
                lines = log.read_text(errors="replace").splitlines()[-8:]
            except OSError:
                continue
            tails.append(f"--- {log.name}\n" + "\n".join(lines))
        return (f"migration {self.mid} phase {st.phase.value} error {st.error!r}; events {self.events}"
                + ("\n" + "\n".join(tails) if tails else ""))

    def when(self, cond: Callable[[State], bool], fault: Callable[[], Any], *, timeout: float = 60,
             what: str = "the fault's phase") -> Phase:
        """Poll the record; fire ``fault`` as soon as ``cond(state)`` holds. Returns the phase it fired in."""
        st = self.wait(lambda: (lambda s: s if cond(s) else None)(self.state()), timeout, what, every=0.01)
        fault()
        self.events.append(f"fault fired in {st.phase.value}")
        return st.phase

    def wait_settled(self, phase: Phase) -> float:
        """The live worker settles a dead cutover by itself (nothing left frozen, ``phase``): returns how
        long it took, at most :data:`SETTLE_BOUND_S`."""
        t0 = time.monotonic()

        def settled() -> bool:
            smap = ShardMapStore(self.fleet.zk).read()
            return self.state().phase == phase and not smap.frozen and not any(rt.frozen for rt in smap.routes)

        self.wait(settled, 60, f"the live worker to settle the cutover to {phase.value}")
        took = time.monotonic() - t0
        self.events.append(f"settled to {phase.value} by a live worker in {took:.1f} s")
        assert took < SETTLE_BOUND_S, self.events
        return took

    def wait_phase(self, *phases: Phase, timeout: float = 90) -> State:
        return self.wait(lambda: (lambda s: s if s.phase in phases else None)(self.state()), timeout,
                         f"phase {[p.value for p in phases]}", every=0.1)

    def mark_target(self) -> str:
        """Record the target's binlog position now (before a cutover that may die)."""
        assert self.spec is not None
        with mysql_connect(self.fleet.hosts[self.spec.target_master], self.creds) as c:
            self.target_mark = binlog_pos(c)
        return self.target_mark

    def enqueue(self, func: str, *args: Any, **kwargs: Any) -> Any:
        from rq import Queue

        assert self.spec is not None
        q = Queue(steps.migration_queue(self.spec), connection=redis_client.connect(self.cfg))
        return q.enqueue(func, *args, job_timeout=600, **kwargs)

    # -- end checks ----------------------------------------------------------------------------
    def stop_load(self) -> Any:
        self._stop.set()
        assert self._loader is not None
        self._loader.join(120)
        assert not self._loader.is_alive(), "the queue load did not stop"
        if "error" in self._load_out:
            raise AssertionError(f"the queue load failed: {self._load_out['error']!r}")
        return self._load_out["result"]

    def check_ledger(self) -> Any:
        from migrator.queue.ledger import check_ledger

        rep = check_ledger(self.cfg, self.ledger_path)
        assert rep.enqueued > 0, "the load acknowledged nothing"
        assert rep.lost == 0, rep.to_text()
        assert rep.double_bug == 0, rep.to_text()
        return rep

    def end_checks(self, after_s: float = 2.0) -> dict[str, Any]:
        """The three end checks of a migration that flipped (see the module docstring)."""
        assert self.spec is not None
        spec = self.spec
        st = self.state()
        assert st.phase == Phase.DONE, self._describe()
        smap = ShardMapStore(self.fleet.zk).read()
        assert spec.moving.served_by(smap, spec.target_master), smap.to_wire()
        assert not smap.frozen and not any(rt.frozen for rt in smap.routes), smap.to_wire()
        from migrator.engine.plan import maintenance_paused

        # the cutover releases the pause just after it records phase done: give it a moment
        self.wait(lambda: not any(maintenance_paused(self.fleet.zk, s) for s in spec.shards), 15,
                  "the partition-maintenance pause of the moved shards to be released")
        time.sleep(after_s)  # the load keeps going on the new topology for a little while
        load = self.stop_load()
        ledger = self.check_ledger()
        node, _ = self.store.get_progress(self.mid, "cutover")
        fence_gtid = (node or {}).get("fence_gtid") or self._fence_from_audit()
        target_ref = (node or {}).get("target_gtid") or self.target_mark
        assert fence_gtid, "no fence position recorded (cutover node or flip audit record)"
        assert target_ref, "no target position from before the flip"
        source = self.fleet.hosts[spec.source_master]
        target = self.fleet.hosts[spec.target_master]
        tomb_writes = tombstone_writes(source, self.creds, spec, fence_gtid)
        assert not tomb_writes, f"row events on the source after the fence {fence_gtid}: {tomb_writes[:10]}"
        tables = compare_moved(source, target, self.creds, spec, target_ref)
        print(f"{self.mid}: {ledger.enqueued} acknowledged enqueues, lost {ledger.lost}; events {self.events}; "
              f"tables {tables}")
        return {"ledger": ledger, "load": load, "tables": tables, "fence_gtid": fence_gtid}

    def rollback_end_checks(self, after_s: float = 2.0) -> dict[str, Any]:
        """The three end checks of a migration rolled back: the same as after a flip, the roles of the
        pairs swapped (the new master's tables are the tombstones now, the old master serves). The
        rollback recorded its fence on the new master and the old master's position at the flip back
        (``rollback`` progress node)."""
        assert self.spec is not None
        spec = self.spec
        st = self.state()
        assert st.phase == Phase.ROLLED_BACK, self._describe()
        smap = ShardMapStore(self.fleet.zk).read()
        assert spec.moving.served_by(smap, spec.source_master), smap.to_wire()
        assert not smap.frozen and not any(rt.frozen for rt in smap.routes), smap.to_wire()
        time.sleep(after_s)  # the load keeps going on the old pair for a little while
        load = self.stop_load()
        ledger = self.check_ledger()
        node, _ = self.store.get_progress(self.mid, "rollback")
        assert node and node.get("fence_gtid") and node.get("target_gtid"), node
        new = self.fleet.hosts[spec.target_master]
        old = self.fleet.hosts[spec.source_master]
        tomb_writes = tombstone_writes(new, self.creds, spec, node["fence_gtid"])
        assert not tomb_writes, f"row events on the new master after the fence {node['fence_gtid']}: {tomb_writes[:10]}"
        tables = compare_moved(new, old, self.creds, spec, node["target_gtid"])
        print(f"{self.mid} rolled back: {ledger.enqueued} acknowledged enqueues, lost {ledger.lost}; "
              f"events {self.events}; tables {tables}")
        return {"ledger": ledger, "load": load, "tables": tables}

    def no_flip_checks(self) -> Any:
        """The migration stopped before the flip: the map never moved, the source served, nothing lost."""
        assert self.spec is not None
        smap = ShardMapStore(self.fleet.zk).read()
        assert self.spec.moving.served_by(smap, self.spec.source_master), smap.to_wire()
        assert not smap.frozen and not any(rt.frozen for rt in smap.routes), smap.to_wire()
        source = self.fleet.hosts[self.spec.source_master]
        with mysql_connect(source, self.creds) as c, c.cursor() as cur:
            for db in self.spec.databases:
                cur.execute("SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s",
                            (tomb_db(self.mid, db),))
                assert cur.fetchone()[0] == 0, f"tables in the tombstone of {db} without a flip"
        self.stop_load()
        return self.check_ledger()

    def _fence_from_audit(self) -> str | None:
        for rec in ShardMapStore(self.fleet.zk).history(limit=200):
            d = rec.get("details") or {}
            if d.get("migration") == self.mid and d.get("fence_gtid"):
                return str(d["fence_gtid"])
        return None


def signal_tree(pid: int, sig: int) -> None:
    """Send ``sig`` to ``pid`` and every process below it (children first looked up, then signalled)."""
    import psutil

    try:
        procs = [psutil.Process(pid)]
        procs += procs[0].children(recursive=True)
    except psutil.NoSuchProcess:
        return
    for proc in procs:
        try:
            proc.send_signal(sig)
        except psutil.NoSuchProcess:
            pass


def host_answers(fleet: Any, name: str) -> bool:
    try:
        with mysql_connect(fleet.hosts[name], fleet.credentials):
            return True
    except Exception:  # noqa: BLE001 - not up yet
        return False


def restart_host(fleet: Any, name: str, run: FaultRun, down_s: float = 1.0) -> None:
    """Stop mysqld ``name`` (a clean shutdown), keep it down ``down_s``, start it and wait until it answers."""
    fleet.sandbox.stop_host(name)
    run.events.append(f"{name} stopped")
    time.sleep(down_s)
    fleet.sandbox.start_host(name)
    run.events.append(f"{name} started")
    run.wait(lambda: host_answers(fleet, name), 60, f"{name} to answer")


# -- binlog and table comparisons ----------------------------------------------------------------

def row_events(host: Host, creds: Any, since: str, keep: Callable[[str, str], bool],
               gtids: list[Any] | None = None) -> list[tuple[str, str, str, list]]:
    """(schema, table, event, rows) of every row event in ``host``'s binlog after ``since`` up to its
    head now, for which ``keep(schema, table)``; ``gtids`` (if given) gets each one's transaction GTID."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.event import MariadbGtidEvent, QueryEvent, XidEvent
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    with mysql_connect(host, creds) as c:
        head = GtidState.parse(binlog_pos(c))
    seen = GtidState.parse(since)  # per (domain, server): exact in every GTID layout
    out: list[tuple[str, str, str, list]] = []
    if seen.reaches(head):
        return out
    stream = BinLogStreamReader(
        connection_settings={"host": host.address, "port": host.port, "user": creds.mysql_user,
                             "passwd": creds.mysql_password, **ssl_kwargs(host, creds)},
        server_id=random.randint(10_000_000, 1_000_000_000), is_mariadb=True, auto_position=since,
        blocking=True, slave_heartbeat=0.2,
        only_events=[MariadbGtidEvent, XidEvent, QueryEvent, WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent])
    pending: Gtid | None = None
    deadline = time.monotonic() + 60
    try:
        for ev in stream:
            if isinstance(ev, MariadbGtidEvent):
                pending = Gtid(ev.domain_id, ev.server_id, ev.gtid_seq_no)
            elif isinstance(ev, (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)):
                if keep(ev.schema, ev.table):
                    out.append((ev.schema, ev.table, type(ev).__name__, list(ev.rows)))
                    if gtids is not None:
                        gtids.append(pending)
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


def moved_tables(conn: Any, spec: Spec) -> list[tuple[str, str]]:
    """(db, table) of every table that moved: what is in the tombstone schemas."""
    out = []
    with conn.cursor() as cur:
        for db in spec.databases:
            cur.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
                        "AND TABLE_TYPE = 'BASE TABLE' ORDER BY TABLE_NAME", (tomb_db(spec.id, db),))
            out += [(db, r[0]) for r in cur.fetchall()]
    return out


def tombstone_writes(source: Host, creds: Any, spec: Spec, fence_gtid: str) -> list[tuple[str, str, str]]:
    tombs = {tomb_db(spec.id, db) for db in spec.databases}
    dbs = set(spec.databases)

    def keep(schema: str, table: str) -> bool:
        if schema in tombs:
            return True
        if schema in dbs and table != SENTINEL_TABLE:
            return not spec.tables or table in spec.tables
        return False

    return [(s, t, e) for s, t, e, _ in row_events(source, creds, fence_gtid, keep)]


def _pk(conn: Any, db: str, table: str) -> list[str]:
    with conn.cursor() as cur:
        cur.execute("SELECT COLUMN_NAME FROM information_schema.STATISTICS WHERE TABLE_SCHEMA = %s "
                    "AND TABLE_NAME = %s AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX", (db, table))
        return [r[0] for r in cur.fetchall()]


def _checksum(conn: Any, db: str, table: str) -> int:
    with conn.cursor() as cur:
        cur.execute(f"CHECKSUM TABLE {qualified(db, table)} EXTENDED")
        return int(cur.fetchone()[1] or 0)


def _rows(conn: Any, db: str, table: str, pk: list[str]) -> dict[tuple, tuple]:
    with conn.cursor() as cur:
        cur.execute("SET SESSION time_zone = '+00:00'")
        cur.execute(f"SELECT * FROM {qualified(db, table)}")
        names = [d[0] for d in cur.description]
        idx = [names.index(k) for k in pk]
        return {tuple(r[i] for i in idx): tuple(r) for r in cur.fetchall()}


def compare_moved(source: Host, target: Host, creds: Any, spec: Spec, target_ref: str) -> dict[str, str]:
    """Every moved table: target vs tombstone (see check 2). Returns table -> how it was compared."""
    return compare_moved_batches(source, target, creds, [(spec, target_ref)])


def compare_moved_batches(source: Host, target: Host, creds: Any,
                          batches: list[tuple[Spec, str]]) -> dict[str, str]:
    """:func:`compare_moved` for migrations of one source and target (the batches of a split, in the
    order they flipped): the target's binlog is read once, from the first one's position, and each
    table counts the keys written after its own migration's position."""
    src = mysql_connect(source, creds)
    dst = mysql_connect(target, creds)
    try:
        ref_of: dict[tuple[str, str], GtidState] = {}
        listed = []
        for spec, ref in batches:
            tables = moved_tables(src, spec)
            assert tables, f"no tombstone tables of {spec.id}: nothing moved?"
            if spec.tables:
                assert {t for _, t in tables} == set(spec.tables), (tables, spec.tables)
            ref_of.update({k: GtidState.parse(ref) for k in tables})
            listed.append((spec, tables))
        pks = {k: _pk(dst, *k) for k in ref_of}
        touched: dict[tuple[str, str], set[tuple]] = {k: set() for k in ref_of}
        gtids: list[Any] = []
        events = row_events(target, creds, batches[0][1], lambda s, t: (s, t) in ref_of, gtids)
        for (db, t, _e, rows), gtid in zip(events, gtids, strict=True):
            if gtid is not None and ref_of[(db, t)].reaches(gtid):
                continue  # before this table's own flip: the applier's copy of a source write
            pk = pks[(db, t)]
            for row in rows:
                for img in ("values", "before_values", "after_values"):
                    if img in row:
                        touched[(db, t)].add(tuple(row[img][c] for c in pk))
        how: dict[str, str] = {}
        for spec, tables in listed:
            for db, t in tables:
                tomb = tomb_db(spec.id, db)
                if not touched[(db, t)]:
                    a, b = _checksum(dst, db, t), _checksum(src, tomb, t)
                    assert a == b, f"CHECKSUM TABLE {db}.{t}: target {a} != tombstone {b}"
                    how[f"{db}.{t}"] = "checksum"
                    continue
                pk = pks[(db, t)]
                before = _rows(src, tomb, t, pk)
                after = _rows(dst, db, t, pk)
                bad = [k for k, row in before.items() if k not in touched[(db, t)] and after.get(k) != row]
                extra = [k for k in after if k not in before and k not in touched[(db, t)]]
                assert not bad and not extra, (f"{db}.{t}: {len(bad)} rows differ from the tombstone, {len(extra)} "
                                               f"unexplained extra rows (first {bad[:3]} {extra[:3]})")
                how[f"{db}.{t}"] = f"rows ({len(before)} in tombstone, {len(touched[(db, t)])} keys written since)"
        return how
    finally:
        src.close()
        dst.close()
