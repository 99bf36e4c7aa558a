"""How a chunk travels: rendered by the source as one LOAD DATA blob, loaded with ``LOAD DATA LOCAL INFILE``.

The source does all the per-value work. One statement reads a chunk (keyset
pagination after the last key) and returns one row: the row count, the last
key of the chunk, and every row as a line of the LOAD DATA text format joined
by ``GROUP_CONCAT`` into one binary string. Python never sees a row: it writes
the blob into an in-memory file (``memfd``) and the target reads it with
``LOAD DATA LOCAL INFILE ... REPLACE`` in one transaction (REPLACE keeps a
chunk idempotent: a chunk redone after a crash changes nothing).

The text format, value by value (lines end with ``\\n``, fields with ``\\t``,
the file is loaded ``CHARACTER SET binary`` so no byte is converted):

* every value is cast to its own bytes (``CAST(.. AS BINARY)``: a latin1
  column stays latin1, binary data stays raw), then ``\\``, TAB and newline are
  escaped (values over ``ESCAPE_MAX_BYTES`` travel as hex instead); NULL is
  ``\\N``, so NULL and the empty string stay apart;
* numbers, dates and times travel as their text (DECIMAL exact, DATETIME(6)
  with its fraction, FLOAT widened to DOUBLE so its value survives);
* ENUM and SET travel as their number (index, bit set) and are loaded as
  that number: a label cannot tell the member ``''`` from the invalid value
  (index 0);
* BIT and GEOMETRY travel as their stored bytes, like any binary value;
* generated columns are not in the column list (the target computes them).

The chunk's last key is read exactly (:func:`migrator.engine.values.read_expr`:
a FLOAT as DOUBLE, an ENUM as its index, text as its bytes), so the next
chunk starts exactly after it: an ENUM compared by label, or text converted
to utf8mb4, could skip rows.

The target session keeps explicit zero ids (``NO_AUTO_VALUE_ON_ZERO``); a
load that raises any warning (a value changed on the way) fails the chunk,
but for the one warning an exact copy raises: an ENUM's invalid value
(index 0) is stored with "Data truncated", as it was on the source.
Hex literals (``X'5C'``) make the read independent of the source's sql_mode.
"""

from __future__ import annotations

import os
import queue
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Any

import pymysql
from tenacity import retry, retry_if_exception, stop_after_attempt, wait_exponential

from migrator.engine.chunks import CopyError, after_key_clause
from migrator.engine.inspector import TableInfo
from migrator.engine.throttler import Throttler
from migrator.engine.values import max_expr, read_expr
from migrator.fleet.config import Credentials
from migrator.fleet.model import Host
from migrator.fleet.mysql import ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT, connect, ident, qualified, tag

T = tag("copy")
#: types whose text never holds a backslash, a TAB or a newline: no escaping needed
PLAIN_TYPES = frozenset({"tinyint", "smallint", "mediumint", "int", "bigint", "decimal", "double", "float",
                         "date", "datetime", "timestamp", "time", "year", "enum", "set"})
#: types that travel as their number and are loaded as one (not as a label)
NUMBERED_TYPES = frozenset({"enum", "set"})
#: a chunk's blob stays under this share of the source's max_allowed_packet
PACKET_SHARE = 0.5
#: session of the reading connection: GROUP_CONCAT may return a whole chunk
#: longer string values travel as hex (see :func:`field_expr`)
ESCAPE_MAX_BYTES = 4096
READ_SESSION = "SET SESSION time_zone = '+00:00', group_concat_max_len = %d"


def _escaped(expr: str) -> str:
    return f"REPLACE(REPLACE(REPLACE({expr}, X'5C', X'5C5C'), X'09', X'5C74'), X'0A', X'5C6E')"


def escaped_type(data_type: str) -> bool:
    """Whether values of this type are strings that need escaping (and may be long)."""
    return data_type not in PLAIN_TYPES


def field_expr(column: str, data_type: str) -> str:
    """SQL rendering ``column`` as LOAD DATA fields (bytes, escaped, ``\\N`` for NULL).

    A string value travels escaped when at most ``ESCAPE_MAX_BYTES`` long and
    as hex in a second field when longer (MariaDB's REPLACE() moves the rest
    of the string at every match: escaping a 3 MB blob took minutes). So a
    string column is two fields, ``raw`` and ``hex``, one of them ``\\N``.
    """
    c = ident(column)
    if data_type == "float":
        return f"IFNULL(CAST(CAST({c} AS DOUBLE) AS BINARY), X'5C4E')"
    if data_type in NUMBERED_TYPES:
        return f"IFNULL(CAST({c} + 0 AS BINARY), X'5C4E')"
    if not escaped_type(data_type):
        return f"IFNULL(CAST({c} AS BINARY), X'5C4E')"
    # text in its own character set, and raw bytes: BLOBs, BIT, GEOMETRY's stored form
    value = f"CAST({c} AS BINARY)"
    long = f"LENGTH({value}) > {ESCAPE_MAX_BYTES}"
    return (f"IFNULL(IF({long}, NULL, {_escaped(value)}), X'5C4E'), "
            f"IFNULL(IF({long}, HEX({value}), NULL), X'5C4E')")


def line_expr(info: TableInfo) -> str:
    return "CONCAT_WS(X'09', " + ", ".join(field_expr(c, info.types.get(c, "")) for c in info.columns) + ")"


def chunk_read_sql(info: TableInfo, last: tuple[Any, ...] | None, limit: int) -> tuple[str, list[Any]]:
    """One statement: (rows, last key values..., blob) of the next ``limit`` rows after ``last``.

    A one-column key's last value is ``MAX(key)``; a composite key's is taken
    with ``LAST_VALUE`` over the chunk in key order (a per-column MAX is not
    the last tuple). The key columns are ordered as they are and read exactly
    (:func:`migrator.engine.values.read_expr`).
    """
    where, params = after_key_clause(info.key, last)
    order = ", ".join(ident(c) for c in info.key)
    types = [info.types.get(c, "") for c in info.key]
    keys = ", ".join(f"{ident(c)} AS _k{i}" for i, c in enumerate(info.key))
    inner = (f"SELECT {keys}, {line_expr(info)} AS _line FROM {qualified(info.db, info.table)} "
             f"WHERE {where} ORDER BY {order} LIMIT %s")
    blob = "GROUP_CONCAT(_line SEPARATOR X'0A')"
    if len(info.key) == 1:
        sql = f"SELECT COUNT(*), {max_expr('_k0', types[0])}, {blob} FROM ({inner}) AS _chunk"
    else:
        n = len(info.key)
        korder = ", ".join(f"_k{i}" for i in range(n))
        lasts = ", ".join(f"LAST_VALUE({read_expr(f'_k{i}', types[i])}) OVER _w AS _l{i}" for i in range(n))
        sql = (f"SELECT COUNT(*), {', '.join(f'MAX(_l{i})' for i in range(n))}, {blob} FROM ("
               f"SELECT _line, {lasts} FROM ({inner}) AS _chunk "
               f"WINDOW _w AS (ORDER BY {korder} ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)"
               f") AS _lasts")
    return T + sql, [*params, int(limit)]


def load_sql(info: TableInfo, path: str) -> str:
    """``LOAD DATA LOCAL INFILE path REPLACE`` of the fields :func:`line_expr` renders.

    With string, ENUM or SET columns every field goes to a user variable and
    every column is set from one: a ``SET`` clause that leaves the
    AUTO_INCREMENT column out makes MariaDB 10.11 give an explicit id 0 a new id
    despite ``NO_AUTO_VALUE_ON_ZERO``; setting it too keeps the 0. BIT and
    GEOMETRY carry their stored bytes, which are stored as they are; an ENUM or
    SET is set from its number (``CAST(@v AS UNSIGNED)``: a string would be
    taken for a label first).
    """
    head = (T + f"LOAD DATA LOCAL INFILE {pymysql.converters.escape_string(path)!r} REPLACE INTO TABLE "
            f"{qualified(info.db, info.table)} CHARACTER SET binary "
            f"FIELDS TERMINATED BY '\\t' ENCLOSED BY '' ESCAPED BY '\\\\' LINES TERMINATED BY '\\n' ")
    if not any(escaped_type(info.types.get(c, "")) or info.types.get(c) in NUMBERED_TYPES for c in info.columns):
        return head + f"({', '.join(ident(c) for c in info.columns)})"
    fields: list[str] = []
    sets: list[str] = []
    for i, c in enumerate(info.columns):
        if escaped_type(info.types.get(c, "")):
            fields += [f"@r{i}", f"@h{i}"]
            sets.append(f"{ident(c)} = IF(@h{i} IS NULL, @r{i}, UNHEX(@h{i}))")
        elif info.types.get(c) in NUMBERED_TYPES:
            fields.append(f"@v{i}")
            sets.append(f"{ident(c)} = CAST(@v{i} AS UNSIGNED)")
        else:
            fields.append(f"@v{i}")
            sets.append(f"{ident(c)} = @v{i}")
    return head + f"({', '.join(fields)}) SET " + ", ".join(sets)


# -- reading ---------------------------------------------------------------------------------------

@dataclass
class Chunk:
    rows: int
    last: tuple[Any, ...] | None  # the chunk's last key (None when empty)
    blob: bytes
    asked: int  # rows asked for: fewer means the table ends here
    read_s: float = 0.0  # the read statement's time


def prepare_reader(conn: pymysql.connections.Connection) -> int:
    """Session settings of a reading connection; returns the largest blob it may return."""
    with conn.cursor() as cur:
        cur.execute("SELECT @@max_allowed_packet")
        packet = int(cur.fetchone()[0])
        cur.execute(READ_SESSION % packet)
    return int(packet * PACKET_SHARE)


def read_chunk(conn: pymysql.connections.Connection, info: TableInfo, last: tuple[Any, ...] | None,
               limit: int, max_bytes: int) -> Chunk:
    """Read the next chunk; a chunk too large for one packet is read again with fewer rows."""
    t0 = time.perf_counter()
    while True:
        sql, args = chunk_read_sql(info, last, limit)
        with conn.cursor() as cur:
            cur.execute(sql, args)
            row = cur.fetchone()
        n = int(row[0])
        blob = row[-1] or b""
        if len(blob) < max_bytes:
            break
        # one row alone may use the whole packet (less a margin for the protocol): a large BLOB row
        if limit <= 1 and len(blob) < int(max_bytes / PACKET_SHARE * 0.95):
            break
        if limit <= 1:
            raise CopyError(f"{info.name}: one row renders to {len(blob)} bytes, more than the copy can carry "
                            f"({max_bytes}); raise max_allowed_packet on the source", phase="copy")
        limit = max(1, limit // 4)
    lines = blob.count(b"\n") + 1 if n else 0
    if lines != n:
        raise CopyError(f"{info.name}: a chunk of {n} rows rendered {lines} lines", phase="copy")
    last_key = tuple(row[1:-1]) if n else None
    return Chunk(n, last_key, bytes(blob), limit, time.perf_counter() - t0)


# -- writing ---------------------------------------------------------------------------------------

class LoadFile:
    """An in-memory file the target's ``LOAD DATA LOCAL`` reads one chunk from."""

    def __init__(self) -> None:
        if hasattr(os, "memfd_create"):
            self.fd = os.memfd_create("migrator-chunk", os.MFD_CLOEXEC)
            self.path = f"/proc/{os.getpid()}/fd/{self.fd}"
            self._tmp = None
        else:  # pragma: no cover - platforms without memfd
            self._tmp = tempfile.NamedTemporaryFile(prefix="migrator-chunk-")
            self.fd, self.path = self._tmp.fileno(), self._tmp.name

    def write(self, data: bytes) -> None:
        """The chunk's lines, the last one terminated too: LOAD DATA drops an empty last field at
        the end of a file without a line terminator (``Row N doesn't contain data for all columns``)."""
        os.ftruncate(self.fd, 0)
        view = memoryview(data)
        done = 0
        while done < len(view):
            done += os.pwrite(self.fd, view[done:], done)
        if done:
            os.pwrite(self.fd, b"\n", done)

    def close(self) -> None:
        if self._tmp is not None:
            self._tmp.close()
        else:
            os.close(self.fd)


#: "Data truncated for column ..." (what storing an ENUM's invalid value, index 0, raises)
WARN_DATA_TRUNCATED = 1265


def changed_values(info: TableInfo, warnings: list[tuple[Any, ...]], count: int) -> list[str]:
    """The load's warnings that mean a value changed on the way: every warning but "Data truncated" on
    an ENUM column, which only its invalid value (index 0, loaded as 0) raises; all of them when the
    server kept fewer than ``count`` (some unseen)."""
    enums = {f"column '{c}'" for c in info.columns if info.types.get(c) == "enum"}
    changed = [str(w[2]) for w in warnings
               if not (int(w[1]) == WARN_DATA_TRUNCATED and any(e in str(w[2]) for e in enums))]
    if changed or len(warnings) >= count:
        return changed
    return [f"{count - len(warnings)} more warnings than the server kept"]


def load_chunk(tgt: pymysql.connections.Connection, info: TableInfo, chunk: Chunk, file: LoadFile) -> None:
    """Load the chunk in one target transaction; a warning that means a changed value fails it."""
    file.write(chunk.blob)
    try:
        tgt.begin()
        with tgt.cursor() as cur:
            cur.execute(load_sql(info, file.path))
            if cur.warning_count:
                count = cur.warning_count
                cur.execute("SHOW WARNINGS")
                changed = changed_values(info, list(cur.fetchall()), count)
                if changed:
                    raise CopyError(f"{info.name}: the target changed values while loading a chunk: "
                                    f"{'; '.join(changed[:3])}", phase="copy")
        tgt.commit()
    except BaseException:
        try:
            tgt.rollback()
        except pymysql.err.MySQLError:
            pass
        raise


# -- connections and read-ahead ------------------------------------------------------------------

class Links:
    """The connections a copy worker keeps across chunks and tables (a connection costs a handshake,
    with TLS a context too): ``source`` for metadata and the throttler, ``reader`` for chunk reads
    (its own, so reads run ahead of loads), ``target`` with LOCAL INFILE, ``passive`` for the lag."""

    def __init__(self, source: Any, reader: Any, target: Any, passive: Any) -> None:
        self.source, self.reader, self.target, self.passive = source, reader, target, passive
        self.max_bytes = prepare_reader(reader)
        self.file = LoadFile()
        self.throttler: Any = None

    def close(self) -> None:
        for c in (self.source, self.reader, self.target, self.passive):
            try:
                c.close()
            except Exception:  # a dead connection after a failure: nothing to close
                pass
        self.file.close()


class ReadAhead:
    """Chunks of one table in key order, read on ``links.reader``. With ``pipeline`` the next
    one is read in a thread while the caller loads the current one (the first chunk is read in
    the caller's thread, so a table of one chunk starts no thread at all). Off by default:
    ``bench.copy --ablate`` found it slower at the larger sizes (docs/performance.md, "Constants
    measured by the benchmarks")."""

    def __init__(self, links: Links, info: TableInfo, last: tuple[Any, ...] | None,
                 rows: Any, pipeline: bool = False) -> None:
        self.links, self.info, self.last, self.rows, self.pipeline = links, info, last, rows, pipeline
        self._queue: queue.Queue[Chunk | BaseException] = queue.Queue(maxsize=1)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ended = False
        self.avg_line = 0.0

    def _limit(self) -> int:
        limit = int(self.rows())
        if self.avg_line:  # keep a blob well under the packet limit
            limit = min(limit, max(1, int(self.links.max_bytes / 2 / self.avg_line)))
        return limit

    def _read(self) -> Chunk:
        chunk = read_chunk(self.links.reader, self.info, self.last, self._limit(), self.links.max_bytes)
        if chunk.rows:
            self.last = chunk.last
            self.avg_line = len(chunk.blob) / chunk.rows
        self._ended = chunk.rows < chunk.asked
        return chunk

    def _run(self) -> None:
        try:
            while not self._stop.is_set() and not self._ended:
                chunk = self._read()
                while not self._stop.is_set():
                    try:
                        self._queue.put(chunk, timeout=0.2)
                        break
                    except queue.Full:
                        continue
        except BaseException as exc:  # handed to the caller, raised there
            self._queue.put(exc)

    def next(self) -> Chunk:
        if self._thread is None:
            chunk = self._read()
            if not self._ended and self.pipeline:
                self._thread = threading.Thread(target=self._run, name=f"read-{self.info.name}", daemon=True)
                self._thread.start()
            return chunk
        if not self.pipeline:
            return self._read()
        item = self._queue.get()
        if isinstance(item, BaseException):
            raise item
        return item

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            while self._thread.is_alive():
                try:  # unblock a reader waiting to hand over a chunk
                    self._queue.get(timeout=0.05)
                except queue.Empty:
                    pass
            self._thread.join()


# -- the connections of a copy worker ------------------------------------------------------------

#: session settings of the writing connection: keep explicit zero ids, write what was read
TARGET_SESSION = ("SET SESSION sql_mode = 'NO_AUTO_VALUE_ON_ZERO,NO_ENGINE_SUBSTITUTION', "
                  "time_zone = '+00:00', foreign_key_checks = 0, max_error_count = 65535")
SOURCE_SESSION = "SET SESSION time_zone = '+00:00'"
#: connections that create a migration's tables on the target side by side (the copy's prepare)
PREPARE_THREADS = 4


def source_conn(host: Host, creds: Credentials) -> pymysql.connections.Connection:
    conn = connect(host, creds, read_timeout=600)
    with conn.cursor() as cur:
        cur.execute(SOURCE_SESSION)
    return conn


def target_conn(host: Host, creds: Credentials) -> pymysql.connections.Connection:
    conn = connect(host, creds, autocommit=False, read_timeout=600, local_infile=True)
    with conn.cursor() as cur:
        cur.execute(TARGET_SESSION)
    conn.commit()
    return conn


def open_links(ep: Any, creds: Credentials, opts: Any) -> Links:
    """The connections (and throttler) one copy worker uses for every chunk of every table it copies
    (``ep``: the migration's hosts, ``source``, ``target`` and ``target_passive``)."""
    opened: list[Any] = []
    try:
        for make in (lambda: source_conn(ep.source, creds), lambda: source_conn(ep.source, creds),
                     lambda: target_conn(ep.target, creds), lambda: connect(ep.target_passive, creds)):
            opened.append(make())
        links = Links(*opened)
    except BaseException:
        for c in opened:
            c.close()
        raise
    links.throttler = Throttler(links.passive, links.source, max_lag_s=opts.max_passive_lag_s,
                                max_threads_running=opts.max_threads_running)
    return links


def _transient(exc: BaseException) -> bool:
    return isinstance(exc, pymysql.err.OperationalError) and bool(exc.args) and exc.args[0] in (
        ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT)


@retry(retry=retry_if_exception(_transient), stop=stop_after_attempt(5),
       wait=wait_exponential(multiplier=0.05, max=2), reraise=True)
def write_chunk(links: Links, info: TableInfo, chunk: Chunk) -> None:
    """Load the chunk in one target transaction (retried whole on a deadlock)."""
    load_chunk(links.target, info, chunk, links.file)
