"""Verify: chunked checksums of the moving tables, source against target.

Runs in the migration worker (``migrator verify ID``, the verify job) while
catch-up keeps the target following the source, and again inside the cutover
freeze for the rows changed since the last full check.

How a table is compared
-----------------------
* The source's primary key is walked in keyset chunks of ``chunk_rows`` rows
  (:func:`chunk_bounds`); a chunk is ``(lo, hi]`` (``lo``/``hi`` may be open).
* Each side computes, in SQL, ``COUNT(*)``, ``BIT_XOR`` and ``SUM`` of
  ``CRC32`` over a row image of every row in the chunk (:func:`chunk_checksum_sql`).
  The row image is ``CONCAT_WS('#', LENGTH(c1), c1, LENGTH(c2), c2, ...,
  CONCAT(ISNULL(c1), ISNULL(c2), ...))`` with every column cast to BINARY: the
  lengths make ``('a#', 'b')`` differ from ``('a', '#b')``, the ISNULL flags make
  NULL differ from ``''`` (``CONCAT_WS`` skips NULLs), and the binary cast makes
  columns of different character sets comparable byte for byte. Both sessions
  use ``time_zone = '+00:00'`` so TIMESTAMP columns print the same.
* A chunk that differs is compared again row by row (primary key + CRC32)
  after catch-up has drained to the source head. A differing row that the
  source binlog shows changed since the pass began is *in flight* (a live
  write): it is left to the cutover's check under the fence. Every other
  differing row is re-copied: REPLACE the source rows into the target and
  DELETE the target rows of the range that the source does not have.

Why a repair outside the freeze is safe: the full pass records the source
position it started from (``verified_gtid``). A repair can only lose a race
with the applier for a row the source changed *after* that position, and every
such row is checked again inside the cutover freeze (:func:`check_rows`), where
the source is fenced and the comparison exact. The keys changed since
``verified_gtid`` come from the binlog: :func:`changed_keys` reads a segment,
:class:`ChangeTracker` keeps reading in the background, and a drainer that is a
:class:`KeyCollector` hands over the keys its own drain applied (the cheapest:
no second reader). So the freeze check grows with the write rate, not with the
shard size.

Progress node ``verify`` of the migration record holds the last full check:
``{"verified_gtid", "suspect_chunks", "at", "chunks", "mismatched", "repaired"}``.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import pymysql

from migrator.fleet.config import Config, Credentials, load_credentials
from migrator.errors import MigratorError
from migrator.fleet.model import Host
from migrator.fleet.gtid import Gtid, GtidPos
from migrator.fleet.mysql import connect as mysql_connect
from migrator.fleet.mysql import ident, qualified, query, scalar, tag

SENTINEL_TABLE = "_migrator_sentinel"
VERIFY_NODE = "verify"
TAG = tag("verify")


class VerifyError(MigratorError):
    component = "verify"


class Drainer(Protocol):
    """Applies the source binlog to the target up to a GTID position (catch-up)."""

    def drain_to(self, gtid: str, timeout: float) -> None: ...


# -- table metadata ----------------------------------------------------------------

@dataclass(frozen=True)
class TableInfo:
    """Columns and primary key of one table, as the source has them."""

    db: str
    table: str
    columns: tuple[str, ...]
    pk: tuple[str, ...]
    #: columns a REPLACE may write (generated columns excluded)
    writable: tuple[str, ...] = ()

    def on(self, db: str) -> TableInfo:
        """The same table in another schema (a tombstone, a renamed db)."""
        return TableInfo(db, self.table, self.columns, self.pk, self.writable)

    @property
    def name(self) -> str:
        return f"{self.db}.{self.table}"


def table_info(conn: pymysql.connections.Connection, db: str, table: str) -> TableInfo:
    """Read columns and primary key from information_schema."""
    cols = query(
        conn,
        TAG + "SELECT COLUMN_NAME, IS_GENERATED FROM information_schema.COLUMNS "
        "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s ORDER BY ORDINAL_POSITION",
        (db, table),
    )
    if not cols:
        raise VerifyError(f"table {db}.{table} does not exist on the source", phase="verify")
    pk = query(
        conn,
        TAG + "SELECT COLUMN_NAME FROM information_schema.STATISTICS "
        "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s AND INDEX_NAME = 'PRIMARY' ORDER BY SEQ_IN_INDEX",
        (db, table),
    )
    if not pk:
        raise VerifyError(f"table {db}.{table} has no primary key; it cannot be verified by chunks", phase="verify")
    columns = tuple(c[0] for c in cols)
    for c in columns:
        ident(c)
    writable = tuple(c[0] for c in cols if (c[1] or "NEVER") == "NEVER")
    return TableInfo(db, table, columns, tuple(p[0] for p in pk), writable)


def moving_tables(conn: pymysql.connections.Connection, db: str, only: Sequence[str] = ()) -> list[str]:
    """Base tables of ``db`` that move (``only`` if given), the sentinel excluded."""
    rows = query(
        conn,
        TAG + "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
        "AND TABLE_TYPE = 'BASE TABLE' ORDER BY TABLE_NAME",
        (db,),
    )
    names = [r[0] for r in rows if r[0] != SENTINEL_TABLE]
    if only:
        missing = [t for t in only if t not in names]
        if missing:
            raise VerifyError(f"tables {missing} are not in {db} on the source", phase="verify")
        names = [t for t in names if t in only]
    return names


def load_tables(conn: pymysql.connections.Connection, databases: Sequence[str], only: Sequence[str] = (),
                db_of: Callable[[str], str] = lambda db: db) -> list[TableInfo]:
    """TableInfo of every moving table, named by its logical db, read from ``db_of(db)``."""
    out = []
    for db in databases:
        for name in moving_tables(conn, db_of(db), only):
            out.append(table_info(conn, db_of(db), name).on(db))
    return out


# -- SQL builders (pure; unit-tested) --------------------------------------------------------

def row_image_sql(columns: Sequence[str]) -> str:
    """The CRC32 of one row's image: lengths + bytes of each column, then NULL flags."""
    parts = []
    for c in columns:
        q = f"CAST({ident(c)} AS BINARY)"
        parts.append(f"LENGTH({q})")
        parts.append(q)
    flags = "CONCAT(" + ", ".join(f"ISNULL({ident(c)})" for c in columns) + ")"
    return f"CRC32(CONCAT_WS('#', {', '.join(parts)}, {flags}))"


def after_key_sql(pk: Sequence[str]) -> str:
    """``(pk) > (%s, ...)`` expanded so the optimizer uses a range on the key."""
    ors = []
    for i in range(len(pk)):
        eqs = [f"{ident(c)} = %s" for c in pk[:i]]
        ors.append("(" + " AND ".join([*eqs, f"{ident(pk[i])} > %s"]) + ")")
    return "(" + " OR ".join(ors) + ")"


def upto_key_sql(pk: Sequence[str]) -> str:
    """``(pk) <= (%s, ...)`` expanded."""
    ors = []
    for i in range(len(pk)):
        eqs = [f"{ident(c)} = %s" for c in pk[:i]]
        ors.append("(" + " AND ".join([*eqs, f"{ident(pk[i])} < %s"]) + ")")
    ors.append("(" + " AND ".join(f"{ident(c)} = %s" for c in pk) + ")")
    return "(" + " OR ".join(ors) + ")"


def _after_args(key: Sequence[Any]) -> list[Any]:
    out: list[Any] = []
    for i in range(len(key)):
        out.extend(key[: i + 1])
    return out


def _upto_args(key: Sequence[Any]) -> list[Any]:
    return _after_args(key) + list(key)


def range_where(pk: Sequence[str], lo: Sequence[Any] | None, hi: Sequence[Any] | None) -> tuple[str, list[Any]]:
    """WHERE clause (and its arguments) for the chunk ``(lo, hi]``; None is open."""
    conds: list[str] = []
    args: list[Any] = []
    if lo is not None:
        conds.append(after_key_sql(pk))
        args += _after_args(lo)
    if hi is not None:
        conds.append(upto_key_sql(pk))
        args += _upto_args(hi)
    return (" AND ".join(conds) if conds else "1=1"), args


def chunk_checksum_sql(t: TableInfo, lo: Sequence[Any] | None, hi: Sequence[Any] | None) -> tuple[str, list[Any]]:
    """One statement giving ``(rows, bit_xor, sum)`` of the row CRCs in ``(lo, hi]``."""
    where, args = range_where(t.pk, lo, hi)
    sql = (
        f"{TAG}SELECT COUNT(*), COALESCE(BIT_XOR(h), 0), COALESCE(SUM(h), 0) FROM "
        f"(SELECT {row_image_sql(t.columns)} AS h FROM {qualified(t.db, t.table)} WHERE {where}) AS c"
    )
    return sql, args


def row_hashes_sql(t: TableInfo, lo: Sequence[Any] | None, hi: Sequence[Any] | None) -> tuple[str, list[Any]]:
    """Primary key + row CRC of every row in ``(lo, hi]``."""
    where, args = range_where(t.pk, lo, hi)
    pk = ", ".join(ident(c) for c in t.pk)
    sql = f"{TAG}SELECT {pk}, {row_image_sql(t.columns)} FROM {qualified(t.db, t.table)} WHERE {where}"
    return sql, args


def keys_where(pk: Sequence[str], n: int) -> str:
    """``(pk) IN ((%s, ...), ...)`` for ``n`` keys, written as ORs of equalities."""
    one = "(" + " AND ".join(f"{ident(c)} = %s" for c in pk) + ")"
    return "(" + " OR ".join([one] * n) + ")"


def boundary_sql(t: TableInfo, after: Sequence[Any] | None, step: int) -> tuple[str, list[Any]]:
    """The key ``step`` rows after ``after`` (the inclusive end of the next chunk)."""
    where, args = range_where(t.pk, after, None)
    pk = ", ".join(ident(c) for c in t.pk)
    sql = (f"{TAG}SELECT {pk} FROM {qualified(t.db, t.table)} WHERE {where} "
           f"ORDER BY {pk} LIMIT 1 OFFSET {int(step) - 1}")
    return sql, args


# -- comparisons --------------------------------------------------------------------------

Key = tuple[Any, ...]


@dataclass
class ChunkResult:
    table: str
    lo: Key | None
    hi: Key | None
    source: tuple[int, int, int]
    target: tuple[int, int, int]

    @property
    def equal(self) -> bool:
        return self.source == self.target


@dataclass
class RowDiff:
    table: str
    key: Key
    kind: str  # "changed" | "missing_on_target" | "extra_on_target"

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table, "key": [_plain(k) for k in self.key], "kind": self.kind}


@dataclass
class VerifyReport:
    """What a check found and did."""

    migration_id: str
    verified_gtid: str | None = None
    tables: int = 0
    chunks: int = 0
    rows_checked: int = 0
    mismatched_chunks: list[dict[str, Any]] = field(default_factory=list)
    differing_rows: list[RowDiff] = field(default_factory=list)
    repaired_rows: int = 0
    #: rows that differed only because the source changed them during the pass (checked again at cutover)
    in_flight_rows: int = 0
    #: chunks that still differed after repair (a live write, re-checked in the freeze)
    suspect_chunks: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.suspect_chunks and (not self.differing_rows or self.repaired_rows >= len(self.differing_rows))

    def to_dict(self) -> dict[str, Any]:
        return {
            "migration_id": self.migration_id,
            "verified_gtid": self.verified_gtid,
            "tables": self.tables,
            "chunks": self.chunks,
            "rows_checked": self.rows_checked,
            "mismatched_chunks": self.mismatched_chunks,
            "differing_rows": [d.to_dict() for d in self.differing_rows],
            "repaired_rows": self.repaired_rows,
            "in_flight_rows": self.in_flight_rows,
            "suspect_chunks": self.suspect_chunks,
            "seconds": round(self.seconds, 3),
            "ok": self.ok,
        }


def _plain(v: Any) -> Any:
    if isinstance(v, (bytes, bytearray)):
        return v.hex()
    if isinstance(v, (int, float, str)) or v is None:
        return v
    return str(v)


def _key(row: Sequence[Any], n: int) -> Key:
    return tuple(row[:n])


def prepare_session(conn: pymysql.connections.Connection) -> None:
    """Same TIMESTAMP rendering on both sides."""
    with conn.cursor() as cur:
        cur.execute(TAG + "SET SESSION time_zone = '+00:00'")


def chunk_bounds(conn: pymysql.connections.Connection, t: TableInfo, step: int) -> Iterator[tuple[Key | None, Key | None]]:
    """Walk the source key in chunks of ``step`` rows: yields ``(lo, hi]`` pairs."""
    lo: Key | None = None
    n = len(t.pk)
    while True:
        sql, args = boundary_sql(t, lo, step)
        rows = query(conn, sql, args)
        if not rows:
            yield lo, None
            return
        hi = _key(rows[0], n)
        yield lo, hi
        lo = hi


def checksum(conn: pymysql.connections.Connection, t: TableInfo, lo: Key | None, hi: Key | None) -> tuple[int, int, int]:
    sql, args = chunk_checksum_sql(t, lo, hi)
    row = query(conn, sql, args)[0]
    return int(row[0]), int(row[1]), int(row[2])


def row_hashes(conn: pymysql.connections.Connection, t: TableInfo, lo: Key | None, hi: Key | None) -> dict[Key, int]:
    sql, args = row_hashes_sql(t, lo, hi)
    n = len(t.pk)
    return {_key(r, n): int(r[n]) for r in query(conn, sql, args)}


def row_hashes_for(conn: pymysql.connections.Connection, t: TableInfo, keys: Sequence[Key], batch: int = 200) -> dict[Key, int]:
    out: dict[Key, int] = {}
    n = len(t.pk)
    pk = ", ".join(ident(c) for c in t.pk)
    for i in range(0, len(keys), batch):
        part = keys[i:i + batch]
        args = [v for k in part for v in k]
        sql = (f"{TAG}SELECT {pk}, {row_image_sql(t.columns)} FROM {qualified(t.db, t.table)} "
               f"WHERE {keys_where(t.pk, len(part))}")
        for r in query(conn, sql, args):
            out[_key(r, n)] = int(r[n])
    return out


def diff_hashes(table: str, src: dict[Key, int], dst: dict[Key, int]) -> list[RowDiff]:
    out = []
    for k, h in src.items():
        if k not in dst:
            out.append(RowDiff(table, k, "missing_on_target"))
        elif dst[k] != h:
            out.append(RowDiff(table, k, "changed"))
    for k in dst:
        if k not in src:
            out.append(RowDiff(table, k, "extra_on_target"))
    return sorted(out, key=lambda d: (d.kind, repr(d.key)))


def repair_rows(src: pymysql.connections.Connection, dst: pymysql.connections.Connection,
                s_t: TableInfo, d_t: TableInfo, diffs: Sequence[RowDiff], batch: int = 200) -> int:
    """Re-copy ``diffs``: REPLACE the source image, DELETE rows the source lacks."""
    if not diffs:
        return 0
    copy_keys = [d.key for d in diffs if d.kind != "extra_on_target"]
    drop_keys = [d.key for d in diffs if d.kind == "extra_on_target"]
    cols = s_t.writable or s_t.columns
    col_sql = ", ".join(ident(c) for c in cols)
    done = 0
    with dst.cursor() as dcur:
        for i in range(0, len(copy_keys), batch):
            part = copy_keys[i:i + batch]
            rows = query(src, f"{TAG}SELECT {col_sql} FROM {qualified(s_t.db, s_t.table)} "
                              f"WHERE {keys_where(s_t.pk, len(part))}", [v for k in part for v in k])
            present = {tuple(r[cols.index(c)] for c in s_t.pk) for r in rows}
            gone = [k for k in part if k not in present]  # deleted on the source since the check
            drop_keys.extend(gone)
            if rows:
                marks = "(" + ", ".join(["%s"] * len(cols)) + ")"
                dcur.executemany(f"{TAG}REPLACE INTO {qualified(d_t.db, d_t.table)} ({col_sql}) VALUES {marks}",
                                 [tuple(r) for r in rows])
                done += len(rows)
        for i in range(0, len(drop_keys), batch):
            part = drop_keys[i:i + batch]
            dcur.execute(f"{TAG}DELETE FROM {qualified(d_t.db, d_t.table)} WHERE {keys_where(d_t.pk, len(part))}",
                         [v for k in part for v in k])
            done += len(part)
    if not dst.get_autocommit():
        dst.commit()
    return done


# -- the pieces a check is made of -------------------------------------------------------------

@dataclass
class Side:
    """One end of a comparison: a connection and the schema the tables live in."""

    conn: pymysql.connections.Connection
    db_of: Callable[[str], str] = lambda db: db


def compare_chunks(src: Side, dst: Side, tables: Sequence[TableInfo], step: int) -> tuple[list[ChunkResult], int]:
    """Checksum every chunk of every table; returns (all chunk results, rows seen on the source)."""
    results: list[ChunkResult] = []
    rows = 0
    for t in tables:
        s_t, d_t = t.on(src.db_of(t.db)), t.on(dst.db_of(t.db))
        for lo, hi in chunk_bounds(src.conn, s_t, step):
            s = checksum(src.conn, s_t, lo, hi)
            d = checksum(dst.conn, d_t, lo, hi)
            rows += s[0]
            results.append(ChunkResult(t.name, lo, hi, s, d))
    return results, rows


def check_chunk(src: Side, dst: Side, t: TableInfo, lo: Key | None, hi: Key | None, *,
                repair: bool) -> tuple[list[RowDiff], int]:
    """Row-level diff of one chunk, optionally re-copied; returns (diffs, rows repaired)."""
    s_t, d_t = t.on(src.db_of(t.db)), t.on(dst.db_of(t.db))
    diffs = diff_hashes(t.name, row_hashes(src.conn, s_t, lo, hi), row_hashes(dst.conn, d_t, lo, hi))
    fixed = repair_rows(src.conn, dst.conn, s_t, d_t, diffs) if (repair and diffs) else 0
    return diffs, fixed


def check_rows(src: Side, dst: Side, t: TableInfo, keys: Iterable[Key], *,
               repair: bool) -> tuple[list[RowDiff], int]:
    """Compare (and optionally re-copy) the given rows by primary key."""
    keys = sorted(set(keys), key=repr)
    if not keys:
        return [], 0
    s_t, d_t = t.on(src.db_of(t.db)), t.on(dst.db_of(t.db))
    s = row_hashes_for(src.conn, s_t, keys)
    d = row_hashes_for(dst.conn, d_t, keys)
    diffs = diff_hashes(t.name, s, d)
    fixed = repair_rows(src.conn, dst.conn, s_t, d_t, diffs) if (repair and diffs) else 0
    return diffs, fixed


# -- the binlog segment: which rows changed between two positions ------------------------------

def binlog_pos(conn: pymysql.connections.Connection) -> str:
    return str(scalar(conn, TAG + "SELECT @@gtid_binlog_pos") or "")


def changed_keys(host: Host, creds: Credentials, tables: Sequence[TableInfo], since: str, until: str, *,
                 timeout: float = 10.0) -> dict[str, set[Key]]:
    """Primary keys of ``tables`` that row events touched in ``(since, until]`` of ``host``'s binlog.

    Reads only that binlog segment (python-mysql-replication, blocking with a
    heartbeat, stopping at the commit that reaches ``until``), so its cost
    follows the writes since ``since``, not the table sizes.
    """
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.event import MariadbGtidEvent, QueryEvent, XidEvent
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    target = GtidPos.parse(until)
    seen = GtidPos.parse(since)
    out: dict[str, set[Key]] = {t.name: set() for t in tables}
    if seen.contains(target):
        return out
    by_name = {(t.db, t.table): t for t in tables}
    stream = BinLogStreamReader(
        connection_settings={"host": host.address, "port": host.port, "user": creds.mysql_user,
                             "password": creds.mysql_password},
        server_id=random.randint(1_000_000, 2_000_000_000),
        is_mariadb=True,
        auto_position=since,
        blocking=True,
        slave_heartbeat=0.5,
        only_schemas=sorted({t.db for t in tables}),
        only_events=[MariadbGtidEvent, XidEvent, QueryEvent, WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
    )
    deadline = time.monotonic() + timeout
    pending: Gtid | None = None
    try:
        for ev in stream:
            if isinstance(ev, MariadbGtidEvent):
                pending = Gtid(ev.domain_id, ev.server_id, ev.gtid_seq_no)
                continue
            if isinstance(ev, (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)):
                t = by_name.get((ev.schema, ev.table))
                if t is not None:
                    for row in ev.rows:
                        for image in ("values", "before_values", "after_values"):
                            if image in row:
                                out[t.name].add(tuple(row[image][c] for c in t.pk))
                continue
            committed = isinstance(ev, XidEvent) or (
                isinstance(ev, QueryEvent) and ev.query.strip().upper() not in ("BEGIN", "")
            )
            if committed and pending is not None:
                seen = seen.with_gtid(pending)
                pending = None
                if seen.contains(target):
                    break
            if time.monotonic() > deadline:
                raise VerifyError(f"reading the binlog of {host.name} up to {until} took over {timeout:.1f}s",
                                  phase="verify")
    finally:
        stream.close()
    return out


class ChangeTracker:
    """:func:`changed_keys` kept running: a binlog reader started before a freeze.

    Started from ``since`` on a thread of its own; it collects the primary keys
    of row events of ``tables`` and the position read so far. Inside the freeze,
    :meth:`keys_until` only waits for the reader to pass the fence position
    (milliseconds), instead of opening a binlog connection and reading the
    segment then. Uses ``freeze_schema`` (no schema lookups per table map): the
    moving tables take no DDL during a cutover (catch-up refuses it and
    partition maintenance is paused on moving shards).
    """

    def __init__(self, host: Host, creds: Credentials, tables: Sequence[TableInfo], since: str):
        self.host = host
        self.creds = creds
        self.tables = list(tables)
        self.since = since
        self.pos = GtidPos.parse(since)
        self.keys: dict[str, set[Key]] = {t.name: set() for t in self.tables}
        self.error: BaseException | None = None
        self._cond = threading.Condition()
        self._stop = False
        self._stream: Any = None
        self._thread: Any = None

    def start(self) -> ChangeTracker:
        from pymysqlreplication import BinLogStreamReader
        from pymysqlreplication.event import MariadbGtidEvent, QueryEvent, XidEvent
        from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

        self._stream = BinLogStreamReader(
            connection_settings={"host": self.host.address, "port": self.host.port, "user": self.creds.mysql_user,
                                 "password": self.creds.mysql_password},
            server_id=random.randint(1_000_000, 2_000_000_000),
            is_mariadb=True,
            auto_position=self.since,
            blocking=True,
            slave_heartbeat=0.1,
            freeze_schema=True,
            only_schemas=sorted({t.db for t in self.tables}),
            only_events=[MariadbGtidEvent, XidEvent, QueryEvent, WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
        )
        by_name = {(t.db, t.table): t for t in self.tables}
        row_events = (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)

        def run() -> None:
            pending: Gtid | None = None
            try:
                for ev in self._stream:
                    if self._stop:
                        return
                    if isinstance(ev, MariadbGtidEvent):
                        pending = Gtid(ev.domain_id, ev.server_id, ev.gtid_seq_no)
                        continue
                    if isinstance(ev, row_events):
                        t = by_name.get((ev.schema, ev.table))
                        if t is not None:
                            got = set()
                            for row in ev.rows:
                                for image in ("values", "before_values", "after_values"):
                                    if image in row:
                                        got.add(tuple(row[image][c] for c in t.pk))
                            with self._cond:
                                self.keys[t.name] |= got
                        continue
                    committed = isinstance(ev, XidEvent) or (
                        isinstance(ev, QueryEvent) and ev.query.strip().upper() not in ("BEGIN", ""))
                    if committed and pending is not None:
                        with self._cond:
                            self.pos = self.pos.with_gtid(pending)
                            self._cond.notify_all()
                        pending = None
            except BaseException as exc:  # reported to the waiter
                if not self._stop:
                    with self._cond:
                        self.error = exc
                        self._cond.notify_all()

        self._thread = threading.Thread(target=run, name=f"change-tracker-{self.host.name}", daemon=True)
        self._thread.start()
        return self

    def keys_until(self, until: str, timeout: float) -> dict[str, set[Key]]:
        """Keys changed in ``(since, until]`` (and possibly a little after): waits for the reader."""
        target = GtidPos.parse(until)
        with self._cond:
            ok = self._cond.wait_for(lambda: self.error is not None or self.pos.contains(target), timeout)
            if self.error is not None:
                raise VerifyError(f"the binlog reader on {self.host.name} failed: {self.error}", phase="verify")
            if not ok:
                raise VerifyError(f"the binlog reader on {self.host.name} did not reach {until} within "
                                  f"{timeout:.2f}s (at {self.pos})", phase="verify")
            return {k: set(v) for k, v in self.keys.items()}

    def stop(self) -> None:
        self._stop = True
        if self._stream is not None:
            try:
                self._stream.close()
            except Exception:  # closing under a blocked read
                pass
        if self._thread is not None:
            self._thread.join(timeout=2)


# -- the command -----------------------------------------------------------------------------------

def verify_migration(config: Config, migration_id: str, *, repair: bool = True, chunk_rows: int | None = None,
                     drainer: Drainer | None = None, drain_timeout: float = 60.0,
                     record: bool = True) -> VerifyReport:
    """Checksum every moving table source vs target; re-check and re-copy differing chunks.

    With a ``drainer`` (catch-up), the target is drained to the source head
    before the pass and again before each re-check. Without one (catch-up not
    running) the re-check happens at once. The result is stored in the
    migration's ``verify`` progress node (unless ``record`` is False).
    """
    from migrator.fleet import zk as zk_mod
    from migrator.engine.migration import MigrationStore, Phase
    from migrator.fleet.shard_map import HostRegistry

    creds = load_credentials(config)
    t0 = time.monotonic()
    with zk_mod.connect(config, creds) as zk:
        store = MigrationStore(zk)
        spec = store.spec(migration_id)
        state, _ = store.state(migration_id)
        if state.phase in (Phase.CUTOVER, Phase.DONE, Phase.ROLLED_BACK, Phase.CLEANED, Phase.ABORTED):
            raise VerifyError(f"migration {migration_id} is {state.phase.value}: verify compares the source with "
                              "the target before the cutover (a rollback verifies the tombstones itself)",
                              phase="verify")
        reg = HostRegistry(zk)
        src_host, dst_host = reg.get(spec.source_master), reg.get(spec.target_master)
        own_drainer = drainer is None
        if drainer is None:
            drainer = default_drainer(config, migration_id, state.phase)
        src = mysql_connect(src_host, creds, read_timeout=600)
        dst = mysql_connect(dst_host, creds, read_timeout=600)
        try:
            prepare_session(src)
            prepare_session(dst)
            tables = load_tables(src, spec.databases, spec.tables)

            def changes(since: str, until: str) -> dict[str, set[Key]]:
                return changed_keys(src_host, creds, tables, since, until, timeout=drain_timeout)

            report = run_full_check(Side(src), Side(dst), tables, migration_id, changes=changes,
                                    step=chunk_rows or spec.options.chunk_rows, repair=repair,
                                    drainer=drainer, drain_timeout=drain_timeout)
        finally:
            src.close()
            dst.close()
            if own_drainer and drainer is not None and hasattr(drainer, "close"):
                drainer.close()
        report.seconds = time.monotonic() - t0
        if record:
            store.put_progress(migration_id, VERIFY_NODE, {
                "verified_gtid": report.verified_gtid,
                "suspect_chunks": report.suspect_chunks,
                "at": time.time(),
                "chunks": report.chunks,
                "mismatched": len(report.mismatched_chunks),
                "repaired": report.repaired_rows,
            })
    return report


ChangesFn = Callable[[str, str], dict[str, set[Key]]]


def run_full_check(src: Side, dst: Side, tables: Sequence[TableInfo], migration_id: str, *, step: int,
                   repair: bool, drainer: Drainer | None, drain_timeout: float,
                   changes: ChangesFn | None = None) -> VerifyReport:
    """The full pass on open connections (what :func:`verify_migration` runs).

    ``changes(since, until)`` gives the keys the source binlog touched between
    two positions; with it, a row that differs only because the source changed
    it after the pass began (a live write catch-up has not applied yet) is
    counted as in flight, not repaired: the cutover checks it again under its
    fence. Every other difference is real and is re-copied.
    """
    report = VerifyReport(migration_id, tables=len(tables))
    start = report.verified_gtid = binlog_pos(src.conn)
    if drainer is not None:
        drainer.drain_to(start, drain_timeout)
    by_name = {t.name: t for t in tables}
    results, rows = compare_chunks(src, dst, tables, step)
    report.chunks, report.rows_checked = len(results), rows
    bad = [r for r in results if not r.equal]
    report.mismatched_chunks = [_chunk_dict(r) for r in bad]
    if not bad:
        return report
    if drainer is not None:
        drainer.drain_to(binlog_pos(src.conn), drain_timeout)
    per_chunk: list[tuple[ChunkResult, list[RowDiff]]] = []
    for r in bad:
        t = by_name[r.table]
        s_t, d_t = t.on(src.db_of(t.db)), t.on(dst.db_of(t.db))
        diffs = diff_hashes(t.name, row_hashes(src.conn, s_t, r.lo, r.hi), row_hashes(dst.conn, d_t, r.lo, r.hi))
        if diffs:
            per_chunk.append((r, diffs))
    moved: dict[str, set[Key]] = {}
    if per_chunk and changes is not None:
        moved = changes(start, binlog_pos(src.conn))  # read after the diffs: covers every write they saw
    for r, diffs in per_chunk:
        t = by_name[r.table]
        real = [d for d in diffs if d.key not in moved.get(t.name, set())]
        report.in_flight_rows += len(diffs) - len(real)
        report.differing_rows.extend(real)
        if not real:
            continue
        s_t, d_t = t.on(src.db_of(t.db)), t.on(dst.db_of(t.db))
        if repair:
            report.repaired_rows += repair_rows(src.conn, dst.conn, s_t, d_t, real)
        left = check_rows(src, dst, t, [d.key for d in real], repair=False)[0] if repair else real
        if left:
            report.suspect_chunks.append(_chunk_dict(r))
    return report


def _chunk_dict(r: ChunkResult) -> dict[str, Any]:
    return {
        "table": r.table,
        "lo": None if r.lo is None else [_plain(v) for v in r.lo],
        "hi": None if r.hi is None else [_plain(v) for v in r.hi],
        "source_rows": r.source[0],
        "target_rows": r.target[0],
    }


def default_drainer(config: Config, migration_id: str, phase: Any = None) -> Drainer | None:
    """How to get the target to a source position, given the migration's phase.

    While copy or catch-up passes run (their worker owns the ``catchup``
    checkpoint), wait for that worker's checkpoint: a second tailer would
    fight it for the checkpoint. Once converged (passes stopped), tail
    ourselves. None when the catch-up module is not installed.
    """
    try:
        from migrator.engine import catch_up
    except ImportError:
        return None
    from migrator.engine.migration import Phase

    if phase in (Phase.COPYING, Phase.CATCHING_UP):
        return CheckpointWaiter(config, migration_id)
    if getattr(catch_up, "open_tailer", None) is None:
        return None
    return CatchUpDrainer(config, migration_id)


class CheckpointWaiter:
    """:class:`Drainer` that waits for the running catch-up worker's checkpoint to pass a position."""

    def __init__(self, config: Config, migration_id: str, poll_s: float = 0.1):
        self.config = config
        self.migration_id = migration_id
        self.poll_s = poll_s

    def drain_to(self, gtid: str, timeout: float) -> None:
        from migrator.fleet import zk as zk_mod
        from migrator.engine.migration import MigrationStore

        target = GtidPos.parse(gtid)
        deadline = time.monotonic() + timeout
        with zk_mod.connect(self.config, load_credentials(self.config)) as zk:
            store = MigrationStore(zk)
            while True:
                node, _ = store.get_progress(self.migration_id, "catchup")
                at = GtidPos.parse((node or {}).get("gtid") or "")
                if at.contains(target):
                    return
                if time.monotonic() > deadline:
                    raise VerifyError(f"catch-up of {self.migration_id} did not reach {gtid} within {timeout:.0f}s "
                                      f"(its checkpoint is at {at or 'nothing'}); is the catch-up job running? "
                                      "(`migrator status ID`)", phase="verify")
                time.sleep(self.poll_s)

    def close(self) -> None:
        pass


class KeyCollector:
    """Collects the primary keys of the row events a catch-up tailer applies.

    Mixed into the drainers that own a :class:`~migrator.engine.catch_up.passes.Tailer`: the
    cutover starts collecting right after its last drain before the freeze,
    and the drain under the fence then yields exactly the keys changed since,
    with no second binlog reader. The cutover checks that the sentinel row it
    wrote is among them before trusting the set.
    """

    _tailer: Any
    _collecting: dict[tuple[str, str], tuple[tuple[str, ...], set[Key]]] | None = None

    @property
    def position(self) -> str | None:
        """Everything up to here is applied (None before the first drain)."""
        return None if self._tailer is None else str(self._tailer.applied)

    def collect(self, keys: dict[tuple[str, str], tuple[str, ...]]) -> bool:
        """Start collecting keys of ``{(schema, table): pk columns}``; False if not possible."""
        applier = getattr(self._tailer, "applier", None)
        if applier is None or not hasattr(applier, "add"):
            return False
        self._collecting = {k: (pk, set()) for k, pk in keys.items()}
        if not getattr(applier, "_keys_wrapped", False):
            inner = applier.add

            def add(events: Iterable[Any]) -> int:
                events = list(events)
                self._note(events)
                return inner(events)

            applier.add = add
            applier._keys_wrapped = True
        return True

    def _note(self, events: list[Any]) -> None:
        coll = self._collecting
        if coll is None:
            return
        for ev in events:
            entry = coll.get((ev.schema, ev.table))
            if entry is None:
                continue
            pk, out = entry
            for row in ev.rows:
                for image in ("values", "before_values", "after_values"):
                    if image in row:
                        out.add(tuple(row[image][c] for c in pk))

    def collected(self) -> dict[tuple[str, str], set[Key]]:
        return {k: set(v[1]) for k, v in (self._collecting or {}).items()}


class CatchUpDrainer(KeyCollector):
    """:class:`Drainer` over a catch-up :class:`~migrator.engine.catch_up.passes.Tailer`, opened
    on first use and kept open (the cutover warms it before its freeze, so no
    connection is opened inside the freeze budget)."""

    def __init__(self, config: Config, migration_id: str):
        self.config = config
        self.migration_id = migration_id
        self._tailer: Any = None

    def open(self) -> CatchUpDrainer:
        if self._tailer is None:
            from migrator.engine import catch_up

            self._tailer = catch_up.open_tailer(self.config, self.migration_id)
            # A queue-partition tail keeps only the partition's tables; the cutover's
            # sentinel row lives beside them in the same db and must come through too.
            streamer = self._tailer.streamer
            if streamer.tables is not None and SENTINEL_TABLE not in streamer.tables:
                streamer.tables = sorted({*streamer.tables, SENTINEL_TABLE})
        return self

    def drain_to(self, gtid: str, timeout: float) -> None:
        self.open()
        self._tailer.drain_to(gtid, timeout)

    def close(self) -> None:
        if self._tailer is not None:
            self._tailer.close()
            self._tailer = None
