"""A raw MariaDB binlog client: the master's binlog as framed events, from a GTID position.

Runs wherever the binlog is read: the catch-up reader process, the cutover's
key collection, the change tracker of verify.

Why not python-mysql-replication's reader: it parses every event into Python
objects and decodes every row column by column; on this workload that costs
~50 µs per row change and capped catch-up below the write rate of one ordinary
writer (measured: 17.5k rows/s decoded vs 640k events/s framed here). This
client only frames events (header + body as bytes) and leaves decoding to
:mod:`migrator.engine.binlog.rows`, which generates a decoder per table
shape. It also never reconnects on its own: the library's silent reconnect
from its original position replayed a backlog forever (see PARTS.md). The
caller owns the position and reopens from it.

Protocol (MariaDB's ``COM_BINLOG_DUMP`` with GTID): before the dump the
session sets ``@master_binlog_checksum`` (events carry a CRC32, checked here),
``@mariadb_slave_capability=4`` (GTID events), ``@slave_connect_state`` (the
start position), ``@slave_gtid_strict_mode`` and ``@master_heartbeat_period``
(the master sends a heartbeat when idle, so a blocked read ends within
``read_timeout`` only when the connection is really dead), and a long
``net_write_timeout`` (a reader whose consumer is busy stops reading; the
dump thread waits for it instead of closing the connection).

Uses PyMySQL's packet reader (``_read_packet``/``_write_bytes``): PyMySQL is
pinned exactly in pyproject.toml for that reason.
"""

from __future__ import annotations

import random
import select
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pymysql

from migrator.fleet.mysql import tls_failure
from migrator.fleet.tls import MySQLTLS

#: how long the master waits for a reader that stopped reading before it drops the dump (seconds)
NET_WRITE_TIMEOUT_S = 24 * 3600

# event types (MariaDB 10.11)
QUERY = 2
ROTATE = 4
FORMAT_DESCRIPTION = 15
XID = 16
TABLE_MAP = 19
WRITE_ROWS_V1, UPDATE_ROWS_V1, DELETE_ROWS_V1 = 23, 24, 25
HEARTBEAT = 27
WRITE_ROWS_V2, UPDATE_ROWS_V2, DELETE_ROWS_V2 = 30, 31, 32
XA_PREPARE = 38
ANNOTATE_ROWS = 160
BINLOG_CHECKPOINT = 161
GTID = 162
GTID_LIST = 163
START_ENCRYPTION = 164
QUERY_COMPRESSED = 165
WRITE_ROWS_COMPRESSED_V1, UPDATE_ROWS_COMPRESSED_V1, DELETE_ROWS_COMPRESSED_V1 = 169, 170, 171

ROWS_EVENTS = frozenset({WRITE_ROWS_V1, UPDATE_ROWS_V1, DELETE_ROWS_V1, WRITE_ROWS_V2, UPDATE_ROWS_V2,
                         DELETE_ROWS_V2, WRITE_ROWS_COMPRESSED_V1, UPDATE_ROWS_COMPRESSED_V1,
                         DELETE_ROWS_COMPRESSED_V1})

COM_BINLOG_DUMP = 0x12
ER_MASTER_FATAL_ERROR_READING_BINLOG = 1236


class BinlogError(Exception):
    """The binlog could not be read (``code`` is the server's error code when it sent one)."""

    def __init__(self, message: str, code: int | None = None):
        super().__init__(message)
        self.code = code


@dataclass(slots=True)
class Event:
    """One binlog event: its header fields and its body (checksum stripped)."""

    type: int
    timestamp: int
    server_id: int
    flags: int
    body: bytes


def new_server_id() -> int:
    """A replica id for one reader: two readers with one id kick each other off the master."""
    return random.randrange(1 << 24, 1 << 31)


class BinlogClient:
    """One dump connection to a master. Iterate :meth:`events`; :meth:`close` when done."""

    def __init__(self, host: str, port: int, user: str, password: str, start: str, *,
                 heartbeat_s: float = 0.25, read_timeout_s: float = 30.0, connect_timeout_s: float = 5.0,
                 server_id: int | None = None, tls: MySQLTLS | None = None):
        self.start = start
        self.heartbeat_s = heartbeat_s
        self.server_id = server_id or new_server_id()
        self._checksum = False
        kw: dict[str, Any] = {}
        if tls is not None:  # the same verified TLS as every other connection (migrator.fleet.mysql.connect)
            kw["ssl"] = tls.context()
        try:
            self.conn = pymysql.connect(host=host, port=port, user=user, password=password, autocommit=True,
                                        connect_timeout=connect_timeout_s, read_timeout=read_timeout_s,
                                        charset="utf8mb4", **kw)
        except pymysql.err.MySQLError as exc:
            failed = tls_failure(f"{host}:{port}", tls, exc) if tls is not None else None
            if failed is not None:
                raise BinlogError(f"cannot read the binlog: {failed.message}", exc.args[0] if exc.args else None) \
                    from None
            raise BinlogError(f"cannot connect to {host}:{port} to read its binlog: {exc.args[-1]}",
                              exc.args[0] if exc.args else None) from None
        try:
            self._dump()
        except BaseException:
            self.close()
            raise

    def _dump(self) -> None:
        with self.conn.cursor() as cur:
            cur.execute("SELECT @@GLOBAL.binlog_checksum")
            alg = (cur.fetchone() or ("NONE",))[0]
            self._checksum = str(alg).upper() == "CRC32"
            cur.execute("SET @master_binlog_checksum = @@GLOBAL.binlog_checksum")
            cur.execute("SET @master_heartbeat_period = %s", (int(self.heartbeat_s * 1_000_000_000),))
            cur.execute("SET @mariadb_slave_capability = 4")
            cur.execute("SET @slave_connect_state = %s", (self.start,))
            cur.execute("SET @slave_gtid_strict_mode = 1")
            cur.execute("SET @slave_gtid_ignore_duplicates = 0")
            # the reader may stop reading for a while (its consumer is busy and the pipe is full):
            # the master's dump thread must wait for it, not drop the connection after the default 60 s
            cur.execute("SET SESSION net_write_timeout = %s", (NET_WRITE_TIMEOUT_S,))
        payload = struct.pack("<BIHI", COM_BINLOG_DUMP, 4, 0, self.server_id)  # pos 4, blocking, empty file name
        self.conn._next_seq_id = 0
        self.conn._write_bytes(struct.pack("<I", len(payload))[:3] + b"\x00" + payload)
        self.conn._next_seq_id = 1

    def events(self) -> Iterator[Event]:
        """Events in binlog order; blocks while the master has nothing new (heartbeats arrive meanwhile)."""
        read = self.conn._read_packet
        checksum = self._checksum
        crc = zlib.crc32
        while True:
            try:
                pkt = read()
            except pymysql.err.MySQLError as exc:
                code = exc.args[0] if exc.args else None
                raise BinlogError(f"reading the binlog failed: {exc.args[-1] if exc.args else exc}", code) from None
            data = pkt._data
            first = data[0]
            if first == 0xFF:
                code = struct.unpack_from("<H", data, 1)[0]
                msg = data[9:].decode("utf-8", "replace") if data[3:4] == b"#" else data[3:].decode("utf-8", "replace")
                raise BinlogError(msg, code)
            if first == 0xFE and len(data) < 9:
                raise BinlogError("the master ended the binlog dump", None)
            # data[0] is the OK byte; the event starts at 1
            ts, etype, sid, size, _pos, flags = struct.unpack_from("<IBIIIH", data, 1)
            if checksum:
                body_end = len(data) - 4
                if etype != HEARTBEAT and crc(data[1:body_end]) != struct.unpack_from("<I", data, body_end)[0]:
                    raise BinlogError(f"binlog event of type {etype} failed its CRC32 check")
            else:
                body_end = len(data)
            yield Event(etype, ts, sid, flags, data[20:body_end])

    def drained(self) -> bool:
        """Nothing more has arrived from the master yet: no bytes wait on the dump socket.

        Bytes already read into the connection's buffer are not seen, so this may say
        True while an event is buffered; it never says False when nothing came. The
        reader process uses it to send what it holds at once when the master goes
        quiet, instead of holding it until the next event or heartbeat."""
        sock = getattr(self.conn, "_sock", None)
        if sock is None:
            return True
        pending = getattr(sock, "pending", None)  # TLS: bytes decrypted but not read
        if pending is not None and pending():
            return False
        try:
            return not select.select([sock], [], [], 0)[0]
        except (OSError, ValueError):
            return True

    def close(self) -> None:
        conn = getattr(self, "conn", None)
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - a broken dump connection is closed either way
                pass
            self.conn = None  # type: ignore[assignment]


def decompress(body: bytes, header_len: int) -> bytes:
    """The payload of a MariaDB compressed event (``log_bin_compress``): header, then zlib data.

    The first byte after ``header_len`` bytes says how many bytes of
    uncompressed length follow (low 3 bits); the rest is a zlib stream.
    """
    p = header_len
    n = body[p] & 0x07
    length = int.from_bytes(body[p + 1:p + 1 + n], "big")
    out = zlib.decompress(body[p + 1 + n:])
    if len(out) != length:
        raise BinlogError(f"a compressed binlog event inflated to {len(out)} bytes, not {length}")
    return body[:header_len] + out
