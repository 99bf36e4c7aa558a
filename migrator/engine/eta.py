"""How long a copy will take: a fixed cost per table plus the bytes at a per-stream rate.

The copy's time on a fleet is modelled as

    eta = overhead_s + tables x prepare_s / PREPARE_THREADS
          + (tables x per_table_s + est_bytes / stream_bytes_per_s) / streams

where ``est_bytes`` is the tables' ``data_length + index_length`` (what the
dry run can see without reading), ``streams`` is how many tables copy at once
(``min(copy_workers, tables)``), ``stream_bytes_per_s`` what one copy stream
moves, ``per_table_s`` what a table costs besides its bytes (metadata, the
checkpoints, carrying AUTO_INCREMENT over) and ``prepare_s`` what creating
its schema and progress node costs (done first, ``PREPARE_THREADS`` tables at a time);
``overhead_s`` is what a copy costs once (its sessions, connections, the
sentinel tables, the phase changes).

Where the two rates come from, best first (``Estimate.method`` says which, in
words the dry run prints):

* ``stored``: the last finished copy on this fleet fitted them from its tables'
  progress records (time in chunks vs time per table, by estimated bytes);
* ``sampled``: one chunk of the largest moving table is read with the copy's
  own read statement (the source renders it exactly as the copy would), and
  the load, which the copy overlaps with the next read, is taken to cost
  ``LOAD_COST_FACTOR`` reads; ``per_table_s`` and ``prepare_s`` are
  ``DEFAULT_TABLE_S`` and ``DEFAULT_PREPARE_S``. The constants were measured with ``python -m bench.copy``
  (docs/performance.md, "Constants measured by the benchmarks").
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from kazoo.exceptions import NodeExistsError, NoNodeError

from migrator.engine.copy_load import PREPARE_THREADS, chunk_read_sql, prepare_reader
from migrator.engine.inspector import TableInfo
from migrator.engine.records import Record, TableProgress
from migrator.fleet.zk import ZK

COPY_RATE = "stats/copy_rate"
#: one stream's time per chunk against the sampled read of it alone: the LOAD DATA on the target
#: master (with its binlog) costs about 3 reads, and the streams share the hosts' cores
#: (measured: docs/performance.md, "Constants measured by the benchmarks")
LOAD_COST_FACTOR = 6.0
#: seconds a table costs besides its bytes when no finished copy measured it
DEFAULT_TABLE_S = 0.03
#: seconds the schema and progress node of a table cost when no finished copy measured it
DEFAULT_PREPARE_S = 0.04
#: seconds a copy costs once, when no finished copy measured it
DEFAULT_OVERHEAD_S = 0.8
#: rows the sampled read asks for
SAMPLE_ROWS = 5000
#: bytes/s of one copy stream when no sample can be taken (measured: docs/performance.md, "Constants
#: measured by the benchmarks")
DEFAULT_STREAM_BYTES_PER_S = 1.3e6


@dataclass
class TableEstimate:
    db: str
    table: str
    rows: int
    bytes: int


@dataclass
class Estimate:
    tables: list[TableEstimate] = field(default_factory=list)
    stream_bytes_per_s: float = 0.0
    per_table_s: float = DEFAULT_TABLE_S
    prepare_s: float = DEFAULT_PREPARE_S
    overhead_s: float = DEFAULT_OVERHEAD_S
    streams: int = 1
    rate_source: str = ""  # "stored" (a finished copy measured it) or "sampled" (a timed chunk read)
    method: str = ""  # how the estimate was made, in words

    @property
    def rows(self) -> int:
        return sum(t.rows for t in self.tables)

    @property
    def bytes(self) -> int:
        return sum(t.bytes for t in self.tables)

    @property
    def eta_s(self) -> float:
        return copy_eta(len(self.tables), self.bytes, self.stream_bytes_per_s, self.per_table_s, self.streams,
                        prepare_s=self.prepare_s, overhead_s=self.overhead_s)

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.eta_s if self.eta_s > 0 and self.eta_s != float("inf") else 0.0

    @property
    def bytes_per_s(self) -> float:
        return self.bytes / self.eta_s if self.eta_s > 0 and self.eta_s != float("inf") else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"tables": [asdict(t) for t in self.tables], "rows": self.rows, "bytes": self.bytes,
                "rows_per_s": round(self.rows_per_s, 1), "bytes_per_s": round(self.bytes_per_s, 1),
                "stream_bytes_per_s": round(self.stream_bytes_per_s, 1), "per_table_s": round(self.per_table_s, 4),
                "prepare_s": round(self.prepare_s, 4), "streams": self.streams, "eta_s": round(self.eta_s, 1),
                "overhead_s": round(self.overhead_s, 3), "rate_source": self.rate_source,
                "method": self.method}


def copy_eta(tables: int, est_bytes: int, stream_bytes_per_s: float, per_table_s: float, streams: int,
             prepare_s: float = 0.0, overhead_s: float = 0.0) -> float:
    """The model above; ``inf`` when there are bytes but no rate."""
    if tables <= 0:
        return 0.0
    if est_bytes > 0 and stream_bytes_per_s <= 0:
        return float("inf")
    work = tables * per_table_s + (est_bytes / stream_bytes_per_s if est_bytes > 0 else 0.0)
    return overhead_s + tables * prepare_s / PREPARE_THREADS + work / max(1, min(streams, tables))


def _mb(n: float) -> str:
    return f"{n / 1e6:.1f} MB"


def fill(est: Estimate, zk: ZK, conn: Any, infos: list[TableInfo], workers: int) -> Estimate:
    """Set the rates of ``est`` from the stored model, else from a sampled chunk read."""
    est.streams = max(1, min(workers, len(infos)))
    stored = stored_rate(zk)
    if stored and stored.stream_bytes_per_s:
        est.stream_bytes_per_s = stored.stream_bytes_per_s
        est.per_table_s = stored.per_table_s
        est.prepare_s = stored.prepare_s
        est.overhead_s = stored.overhead_s
        est.rate_source = "stored"
        est.method = (f"fitted to the last finished copy on this fleet (migration {stored.migration}: "
                      f"{stored.tables} tables, {_mb(stored.est_bytes)}): "
                      f"{_mb(est.stream_bytes_per_s)}/s per stream, {est.per_table_s * 1000:.0f} ms per table, "
                      f"{est.prepare_s * 1000:.0f} ms of schema per table, {est.overhead_s:.1f} s once, "
                      f"{est.streams} streams at once")
        return est
    est.rate_source = "sampled"
    sample = max(infos, key=lambda i: i.data_bytes, default=None)
    if sample is None or not sample.key or not sample.est_rows:
        est.stream_bytes_per_s = 0.0
        est.method = f"no data to sample; {est.per_table_s * 1000:.0f} ms per table assumed"
        return est
    max_bytes = prepare_reader(conn)
    sql, args = chunk_read_sql(sample, None, min(SAMPLE_ROWS, max(1, sample.est_rows)))
    t0 = time.perf_counter()
    with conn.cursor() as cur:
        cur.execute(sql, args)
        row = cur.fetchone()
    took = max(time.perf_counter() - t0, 1e-4)
    got = int(row[0]) if row else 0
    if not got or (row and len(row[-1] or b"") >= max_bytes):
        # nothing read, or one chunk too large to be read whole (very large rows): the measured default
        est.stream_bytes_per_s = DEFAULT_STREAM_BYTES_PER_S
        est.method = (f"a chunk of {sample.name} could not be sampled (rows too large for one read): "
                      f"{_mb(DEFAULT_STREAM_BYTES_PER_S)}/s per stream assumed (bench.copy on 2 cores), "
                      f"{est.per_table_s * 1000:.0f} ms per table, {est.streams} streams at once")
        return est
    per_row = sample.data_bytes / sample.est_rows
    read_rate = got * per_row / took
    est.stream_bytes_per_s = read_rate / LOAD_COST_FACTOR
    est.method = (f"sampled: {got} rows of {sample.name} read with the copy's own statement in "
                  f"{took * 1000:.0f} ms ({_mb(read_rate)}/s), the load taken as {LOAD_COST_FACTOR:g}x the "
                  f"read, {est.per_table_s * 1000:.0f} ms per table and {est.prepare_s * 1000:.0f} ms of schema "
                  f"per table and {est.overhead_s:.1f} s once (measured by bench.copy), {est.streams} streams at once "
                  "(no finished copy on this fleet to fit the model to yet)")
    return est


class CopyRate(Record):
    """The model fitted to the last finished copy on the fleet (``stats/copy_rate``)."""

    rows_per_s: float = 0.0
    bytes_per_s: float = 0.0
    stream_bytes_per_s: float = 0.0
    per_table_s: float = DEFAULT_TABLE_S
    prepare_s: float = DEFAULT_PREPARE_S
    overhead_s: float = DEFAULT_OVERHEAD_S
    est_bytes: int = 0
    tables: int | None = None
    migration: str | None = None


def stored_rate(zk: ZK) -> CopyRate | None:
    try:
        data, _ = zk.client.get(zk.path(COPY_RATE))
        rec = CopyRate.parse(json.loads(data))
        if rec.rows_per_s > 0:
            return rec
    except (NoNodeError, ValueError):
        pass
    return None


def store_rate(zk: ZK, migration_id: str, progress: list[TableProgress], seconds: float, *,
               total_s: float | None = None, streams: int = 1) -> None:
    """Fit the model to a finished copy's progress records and keep it for the next dry run
    (``total_s``: the copy's whole time from its first job, which sets ``overhead_s``)."""
    progress = TableProgress.parse_list(progress)
    rows = sum(p.rows for p in progress)
    est_bytes = sum(p.est_bytes for p in progress)
    copy_s = sum(p.copy_s for p in progress)
    fixed_s = sum(max(0.0, p.wall_s - p.copy_s) for p in progress)
    if rows <= 0 or seconds <= 0 or copy_s <= 0:
        return
    tables = len(progress)
    per_table_s = fixed_s / max(1, tables)
    prepare_s = sum(p.prepare_s for p in progress) / max(1, tables)
    rate = est_bytes / copy_s
    overhead_s = DEFAULT_OVERHEAD_S
    if total_s:
        model = copy_eta(tables, est_bytes, rate, per_table_s, streams, prepare_s=prepare_s)
        fitted = max(0.0, total_s - model)
        if fitted <= max(5.0, model):  # more means the copy was paused or resumed later: not a cost
            overhead_s = fitted
    rec = json.dumps({"rows_per_s": rows / seconds, "bytes_per_s": est_bytes / seconds, "rows": rows,
                      "est_bytes": est_bytes, "tables": tables, "seconds": seconds, "total_s": total_s,
                      "stream_bytes_per_s": rate, "per_table_s": per_table_s, "prepare_s": prepare_s,
                      "overhead_s": overhead_s,
                      "read_s": round(sum(p.read_s for p in progress), 3),
                      "load_s": round(sum(p.load_s for p in progress), 3),
                      "migration": migration_id, "at": time.time()}).encode()
    path = zk.path(COPY_RATE)
    try:
        zk.client.set(path, rec)
    except NoNodeError:
        zk.ensure(zk.path("stats"))
        try:
            zk.client.create(path, rec, acl=zk.protected_acl())
        except NodeExistsError:
            zk.client.set(path, rec)
