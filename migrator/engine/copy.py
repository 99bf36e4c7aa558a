"""The copy phase: schema first, then rows in primary-key chunks, resumably.

Runs inside RQ workers (``jobs.copy``) or in-process (``migrator copy --sync``
and tests). One unit of work is one table: its chunks are read in key order
(keyset pagination: ``WHERE key > last_key ORDER BY key LIMIT n``), so a
table's whole checkpoint is one key, and tables copy in parallel across
workers. Virtual shards keep tables small and numerous (4096 shards x a few
tables), so table-level parallelism fills every worker without splitting a
table into key ranges; small tables share a job and its connections
(:mod:`migrator.engine.copy_groups`).

Per table, in this order (the resume contract of :mod:`migrator.engine.migration`):

1. ``prepare`` creates the database on the target master (it replicates to
   the target standby) and each table with the source's ``SHOW CREATE
   TABLE`` (partitioning and ``AUTO_INCREMENT`` included), then a progress
   node ``copy/<db>.<table>``. The set of progress nodes is the set of tables
   to copy.
2. Before the table's first chunk read, the source ``@@gtid_binlog_pos`` is
   stored as the table's ``start_gtid`` (with ``@@gtid_binlog_state`` as its
   ``start_state``, which orders the starts in any GTID layout); catch-up
   tails from the earliest.
   No global lock: replaying the binlog from before a chunk's read over the
   chunk converges, because apply is idempotent by key.
3. Each chunk is loaded with ``LOAD DATA LOCAL INFILE ... REPLACE`` in one
   target transaction (:mod:`migrator.engine.copy_load`); only
   after the commit is ``last_key`` recorded, by compare-and-set on the
   progress node. A crash between the two redoes one chunk, harmlessly. Two
   workers on the same table (a duplicate enqueue after a resume) cannot both
   advance it: the one whose compare-and-set fails stops.
4. The last chunk (shorter than asked) marks the table ``done`` and carries the
   source's current ``AUTO_INCREMENT`` over.

Between chunks the worker obeys the pause flag and the phase (an abort stops
it), and the :class:`~migrator.engine.throttler.Throttler`.

How a chunk is read and loaded is in :mod:`migrator.engine.copy_load`; its key
and checkpoint encoding in :mod:`migrator.engine.chunks`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import pymysql
from kazoo.exceptions import BadVersionError

from migrator.engine import inspector, objects
from migrator.engine.chunks import CopyError, create_table_sql, decode_key, encode_key
from migrator.engine.copy_load import (
    PREPARE_THREADS,
    Links,
    ReadAhead,
    open_links,
    source_conn,
    target_conn,
    write_chunk,
)
from migrator.engine.eta import store_rate
from migrator.engine.inspector import TableInfo
from migrator.engine.migration import MigrationStore, Phase, Spec
from migrator.engine.plan import hold_maintenance_pause, moving_tables
from migrator.engine.preflight import PreflightFailed
from migrator.engine.preflight import run as run_preflight
from migrator.engine.records import TableProgress
from migrator.engine.sentinel import prepare_sentinels
from migrator.engine.throttler import ChunkSizer
from migrator.fleet.config import Credentials
from migrator.fleet.model import Host
from migrator.fleet.mysql import (
    connect,
    ident,
    qualified,
    start_point,
    tag,
)
from migrator.fleet.shard_map import HostRegistry
from migrator.fleet.zk import ZK

T = tag("copy")
PREFIX = "copy"


def progress_key(db: str, table: str) -> str:
    """The table's progress node: names percent-encoded, so a legal name holding ``/`` or ``.``
    (or any non-ASCII character) is still one node, distinct from every other table's."""
    return f"{PREFIX}/{_node_name(db)}.{_node_name(table)}"


def _node_name(name: str) -> str:
    return quote(name, safe="").replace(".", "%2E")


# -- hosts -------------------------------------------------------------------------------------

@dataclass
class Endpoints:
    source: Host
    target: Host
    target_passive: Host


def endpoints(zk: ZK, spec: Spec) -> Endpoints:
    reg = HostRegistry(zk)
    return Endpoints(reg.get(spec.source_master), reg.get(spec.target_master), reg.get(spec.target_passive))


# -- begin: preflight, phase, prepare ------------------------------------------------------------

def begin(zk: ZK, spec: Spec, creds: Credentials) -> list[tuple[str, str]]:
    """Start or resume the copy: preflight (first time only), phase COPYING,
    schema and progress nodes. Returns the tables still to copy."""
    store = MigrationStore(zk)
    st, _ = store.state(spec.id)
    if st.phase in (Phase.PLANNED, Phase.PREFLIGHT):
        store.set_phase(spec.id, Phase.PREFLIGHT)
        res = run_preflight(zk, spec, creds, phase=st.phase)
        if not res.ok:
            store.set_phase(spec.id, Phase.PREFLIGHT, error="; ".join(c.line() for c in res.failures)[:2000])
            raise PreflightFailed(res)
        store.set_phase(spec.id, Phase.COPYING)
    elif st.phase != Phase.COPYING:
        raise CopyError(f"migration {spec.id} is in phase {st.phase.value}: there is nothing to copy "
                        "(`migrator status ID`)", phase="copy")
    if getattr(st, "copy_began_at", None) is None:  # the copy's whole time, for the next dry run's ETA
        now = time.time()
        store.update(spec.id, lambda s: _began(s, now))
    # The cutover's sentinel table must exist before any table records its start position: the copy
    # then carries it like any table, and catch-up never meets its CREATE TABLE.
    prepare_sentinels(zk, spec, creds)
    return prepare(zk, spec, creds)


def _began(st: Any, now: float) -> Any:
    if getattr(st, "copy_began_at", None) is None:
        st.copy_began_at = now
    return st


# -- prepare: schema + progress nodes -------------------------------------------------------------

def prepare(zk: ZK, spec: Spec, creds: Credentials) -> list[tuple[str, str]]:
    """Create databases and tables on the target master and a progress node per
    table (idempotent). Returns the tables not yet done, in copy order (largest
    first, so the longest table does not start last)."""
    store = MigrationStore(zk)
    st, _ = store.state(spec.id)
    if st.phase != Phase.COPYING:  # an abort may have dropped the target copies: do not recreate them
        raise CopyError(f"migration {spec.id} is in phase {st.phase.value}, not copying", phase="copy")
    ep = endpoints(zk, spec)
    hold_maintenance_pause(zk, spec)
    src = source_conn(ep.source, creds)
    tgt = target_conn(ep.target, creds)
    try:
        tables = moving_tables(src, spec)
        infos = []
        created: dict[tuple[str, str], bool] = {}
        for db in sorted({db for db, _ in tables} | (set(spec.databases) if spec.kind == "shards" else set())):
            charset, collation = inspector.database_charset(src, db)
            with tgt.cursor() as cur:
                cur.execute(T + f"CREATE DATABASE IF NOT EXISTS {ident(db)} "
                            f"CHARACTER SET {ident(charset)} COLLATE {ident(collation)}")
        slices = [tables[i::PREPARE_THREADS] for i in range(PREPARE_THREADS) if tables[i::PREPARE_THREADS]]

        def make(part: list[tuple[str, str]]) -> list[tuple[TableInfo, bool]]:
            return _prepare_tables(store, spec, ep, creds, part)

        # DDL waits on the disk, not the CPU: a few connections create the tables side by side
        with ThreadPoolExecutor(max_workers=max(1, len(slices)), thread_name_prefix="prepare") as pool:
            for made in pool.map(make, slices):
                for info, was_created in made:
                    infos.append(info)
                    created[(info.db, info.table)] = was_created
        if spec.kind == "shards":  # views and routines, once every table they may read is there
            objects.carry(src, tgt, list(spec.databases))
    finally:
        src.close()
        tgt.close()
    pending = []
    for info in sorted(infos, key=lambda i: -i.data_bytes):
        if created[(info.db, info.table)]:  # a node this call created is not done: no need to read it
            pending.append((info.db, info.table))
            continue
        prog, _ = store.get_progress(spec.id, progress_key(info.db, info.table))
        if prog and not TableProgress.parse(prog).done:
            pending.append((info.db, info.table))
    return pending


def _prepare_tables(store: MigrationStore, spec: Spec, ep: Endpoints, creds: Credentials,
                    tables: list[tuple[str, str]]) -> list[tuple[TableInfo, bool]]:
    """Describe, create on the target and give a progress node to each of ``tables``."""
    src = source_conn(ep.source, creds)
    tgt = target_conn(ep.target, creds)
    out = []
    try:
        for db, table in tables:
            t0 = time.monotonic()
            info = inspector.describe(src, db, table)
            if not info.key:
                raise CopyError(f"{db}.{table} has no primary key and no NOT NULL unique key: the copy cannot "
                                "page it; add a primary key, then `migrator copy ID` again", phase="copy")
            with tgt.cursor() as cur:
                cur.execute(T + f"USE {ident(db)}")
                cur.execute(create_table_sql(info.create_sql))
            tgt.commit()
            was_created = store.create_progress(spec.id, progress_key(db, table), {
                "db": db, "table": table, "key": list(info.key), "done": False, "last_key": None,
                "start_gtid": None, "rows": 0, "bytes": 0, "chunks": 0, "est_rows": info.est_rows,
                "est_bytes": info.data_bytes, "prepare_s": round(time.monotonic() - t0, 4),
            })
            out.append((info, was_created))
    finally:
        src.close()
        tgt.close()
    return out


def table_progress(zk: ZK, migration_id: str) -> list[dict[str, Any]]:
    """Every table's progress node, as stored (what ``status`` shows)."""
    store = MigrationStore(zk)
    out = []
    for name in store.progress_keys(migration_id, PREFIX):
        prog, _ = store.get_progress(migration_id, f"{PREFIX}/{name}")
        if prog is not None:
            out.append(prog)
    return out


def table_records(zk: ZK, migration_id: str) -> list[TableProgress]:
    """Every table's progress node, read as a :class:`TableProgress`."""
    return TableProgress.parse_list(table_progress(zk, migration_id))



# -- one table ---------------------------------------------------------------------------------------

@dataclass
class TableResult:
    db: str
    table: str
    status: str  # done | sliced (time slice used up) | paused | stopped (phase changed) | superseded
    rows: int = 0  # rows copied by this call
    bytes: int = 0
    seconds: float = 0.0
    progress: dict[str, Any] = field(default_factory=dict)


def control_check(zk: ZK, migration_id: str) -> Callable[[], str | None]:
    """A between-chunks check: 'paused', 'stopped' (phase is no longer copying) or None."""
    store = MigrationStore(zk)

    def check() -> str | None:
        st, _ = store.state(migration_id)
        if st.phase != Phase.COPYING:
            return "stopped"
        if st.paused:
            return "paused"
        return None

    return check


def copy_table(
    zk: ZK,
    spec: Spec,
    db: str,
    table: str,
    creds: Credentials,
    *,
    deadline: float | None = None,
    control: Callable[[], str | None] | None = None,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
    control_interval_s: float = 0.25,
    after_chunk: Callable[[dict[str, Any]], None] | None = None,
    links: Links | None = None,
    pipeline: bool = False,
) -> TableResult:
    """Copy ``db.table`` from its checkpoint until done, the ``deadline``
    (time.monotonic) passes, or ``control`` says stop. ``links``: connections
    kept across tables by the caller (opened and closed here when absent)."""
    store = MigrationStore(zk)
    key = progress_key(db, table)
    stored, version = store.get_progress(spec.id, key)
    if stored is None:
        raise CopyError(f"{db}.{table} has no progress node: the copy was not prepared (`migrator copy ID`)",
                        phase="copy")
    result = TableResult(db, table, "done", progress=stored)
    prog = TableProgress.parse(stored)
    if prog.done:
        return result
    control = control or control_check(zk, spec.id)
    reason = control()
    if reason:
        result.status = reason
        return result
    opts = spec.options
    own = links is None
    if links is None:
        links = open_links(endpoints(zk, spec), creds, opts)
    t_start = time.monotonic()
    reader: ReadAhead | None = None
    try:
        src, throttler = links.source, links.throttler
        info = inspector.describe(src, db, table)
        if not info.key:
            raise CopyError(f"{db}.{table} has no usable key", phase="copy")
        if prog.start_gtid is None:
            # recorded before the first chunk read: catch-up replays from here. (Recording it only with
            # the first checkpoint would lose it when a worker dies between that chunk's load and its
            # checkpoint: the retry's later position would skip deletes the loaded rows still need.)
            gtid, state = start_point(src)
            prog = prog.model_copy(update={"start_gtid": gtid, "start_state": state, "started_at": time.time()})
            try:
                version = store.put_progress(spec.id, key, prog.dump(), version)
            except BadVersionError:
                result.status = "superseded"
                return result
        sizer = ChunkSizer(prog.chunk_rows or opts.chunk_rows, opts.chunk_target_ms / 1000.0,
                           min_rows=min(10, opts.chunk_max_rows), max_rows=opts.chunk_max_rows)
        reader = ReadAhead(links, info, decode_key(prog.last_key), lambda: sizer.rows, pipeline=pipeline)
        last_control = time.monotonic()
        wall_before = prog.wall_s
        chunks_this_call = 0
        throttled_before = throttler.throttled_s
        t_prev = time.monotonic()
        while True:
            # at least one chunk per call: a slice shorter than the setup above must still progress
            if deadline is not None and chunks_this_call and time.monotonic() >= deadline:
                result.status = "sliced"
                break
            if chunks_this_call and time.monotonic() - last_control >= control_interval_s:
                last_control = time.monotonic()
                reason = control()
                if reason:
                    result.status = reason
                    break
            throttler.wait(should_stop=lambda: control() is not None)
            chunk = reader.next()
            t_load = time.monotonic()
            if chunk.rows:
                write_chunk(links, info, chunk)
            now = time.monotonic()
            took, t_prev = now - t_prev, now
            n, nbytes = chunk.rows, len(chunk.blob)
            done = n < chunk.asked
            step = dict(last_key=encode_key(chunk.last if n else decode_key(prog.last_key)),
                        rows=prog.rows + n, bytes=prog.bytes + nbytes,
                        chunks=prog.chunks + (1 if n else 0), chunk_rows=sizer.observe(n, took),
                        copy_s=round(prog.copy_s + took, 3),
                        wall_s=round(wall_before + time.monotonic() - t_start, 3),
                        read_s=round(prog.read_s + chunk.read_s, 3),
                        load_s=round(prog.load_s + now - t_load, 3),
                        throttled_s=round(prog.throttled_s + throttler.throttled_s - throttled_before, 3))
            throttled_before = throttler.throttled_s
            if done:
                carry_auto_increment(src, links.target, info)
                step.update(done=True, finished_at=time.time())
            new = prog.model_copy(update=step)
            try:
                version = store.put_progress(spec.id, key, new.dump(), version)
            except BadVersionError:
                result.status = "superseded"  # another worker advanced this table: it owns it now
                break
            prog = new
            chunks_this_call += 1
            result.rows += n
            result.bytes += nbytes
            result.progress = prog.dump()
            if on_progress:
                on_progress(progress_view(prog, time.monotonic() - t_start, result))
            if after_chunk:
                after_chunk(result.progress)
            if done:
                result.status = "done"
                break
    finally:
        result.seconds = time.monotonic() - t_start
        if reader is not None:
            reader.close()
        if own:
            links.close()
    return result


def progress_view(prog: TableProgress, elapsed: float, result: TableResult) -> dict[str, Any]:
    """Progress as job meta shows it: rows, bytes, rate, ETA (no secrets, small)."""
    rate = result.rows / elapsed if elapsed > 0 else 0.0
    brate = result.bytes / elapsed if elapsed > 0 else 0.0
    return {"db": prog.db, "table": prog.table, "rows": prog.rows, "bytes": prog.bytes,
            "est_rows": prog.est_rows, "rows_per_s": round(rate, 1), "bytes_per_s": round(brate, 1),
            "eta_s": round(prog.rows_left / rate, 1) if rate > 0 and not prog.done else 0.0,
            "chunk_rows": prog.chunk_rows, "done": prog.done}


def carry_auto_increment(src: pymysql.connections.Connection, tgt: pymysql.connections.Connection,
                         info: TableInfo) -> None:
    """Raise the target table's AUTO_INCREMENT to the source's, so the new pair
    never reuses ids (InnoDB ignores a value below max(key)+1). A table without
    an AUTO_INCREMENT column (``info`` has no counter) costs no query."""
    if info.auto_increment is None:
        return
    cur_src = inspector.auto_increment(src, info.db, info.table)
    if cur_src is None:
        return
    cur_tgt = inspector.auto_increment(tgt, info.db, info.table)
    tgt.commit()
    if cur_tgt is None or cur_tgt < cur_src:
        with tgt.cursor() as cur:
            cur.execute(T + f"ALTER TABLE {qualified(info.db, info.table)} AUTO_INCREMENT = %s" % int(cur_src))
        tgt.commit()


# -- completion ---------------------------------------------------------------------------------------

def finish_if_complete(zk: ZK, migration_id: str) -> bool:
    """If every table is done, move COPYING -> CATCHING_UP. True only for the
    one caller whose compare-and-set made the transition."""
    progress = table_records(zk, migration_id)
    if not progress or not all(p.done for p in progress):
        return False
    store = MigrationStore(zk)
    moved = []

    def change(st: Any) -> Any:
        if st.phase != Phase.COPYING:
            return None
        st.history.append({"who": "copy", "when": time.time(), "from": st.phase.value,
                           "to": Phase.CATCHING_UP.value})
        st.phase = Phase.CATCHING_UP
        st.error = None
        rows = sum(p.rows for p in progress)
        nbytes = sum(p.bytes for p in progress)
        started = min((p.started_at or time.time()) for p in progress)
        finished = max((p.finished_at or time.time()) for p in progress)
        st.copy = {"rows": rows, "bytes": nbytes, "tables": len(progress), "seconds": round(finished - started, 3)}
        began = getattr(st, "copy_began_at", None)
        moved.append(dict(st.copy, total_s=finished - began if began else None))
        return st

    store.update(migration_id, change)
    if moved:
        c = moved[-1]
        # the next dry run's ETA is fitted to this copy
        store_rate(zk, migration_id, progress, c["seconds"], total_s=c["total_s"],
                   streams=store.spec(migration_id).options.copy_workers)
    return bool(moved)


def earliest_start_gtids(zk: ZK, migration_id: str) -> list[str]:
    """Every table's recorded ``start_gtid`` (catch-up starts from the earliest)."""
    return sorted({p.start_gtid for p in table_records(zk, migration_id) if p.start_gtid is not None})


# -- abort helper ----------------------------------------------------------------------------------------

def drop_target_copies(zk: ZK, spec: Spec, creds: Credentials) -> list[str]:
    """Drop what the copy created on the target master (it replicates to the
    standby): the moving databases, or for a partition move the one table.
    Only objects with a progress node are ours; anything else is left alone."""
    ours = table_records(zk, spec.id)
    if not ours:
        return []
    ep = endpoints(zk, spec)
    tgt = connect(ep.target, creds)
    dropped = []
    try:
        with tgt.cursor() as cur:
            if spec.kind == "queue_partition":
                for p in ours:
                    cur.execute(T + f"DROP TABLE IF EXISTS {qualified(p.db, p.table)}")
                    dropped.append(f"{p.db}.{p.table}")
            else:
                for db in sorted({p.db for p in ours}):
                    if db in spec.databases:
                        cur.execute(T + f"DROP DATABASE IF EXISTS {ident(db)}")
                        dropped.append(db)
    finally:
        tgt.close()
    return dropped
