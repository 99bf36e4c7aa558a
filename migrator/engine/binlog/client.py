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

Uses PyMySQL to connect and its private ``_write_bytes``, ``_sock``, ``_rfile`` and
``_read_timeout`` (frames the dump stream itself, see :meth:`BinlogClient.events`):
PyMySQL is pinned exactly in pyproject.toml for that reason.
"""

from __future__ import annotations

import random
import select
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pymysql

if TYPE_CHECKING:  # the reader process starts without the fleet's config models (see start-up below)
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
    """One binlog event: its header fields and its body (checksum stripped); ``raw``: the whole event as
    the master sent it (header, body and checksum), kept only by a client made with ``raw=True`` (the fast
    apply path forwards it to the target as it is)."""

    type: int
    timestamp: int
    server_id: int
    flags: int
    body: bytes
    raw: bytes = b""


def new_server_id() -> int:
    """A replica id for one reader: two readers with one id kick each other off the master."""
    return random.randrange(1 << 24, 1 << 31)


class BinlogClient:
    """One dump connection to a master. Iterate :meth:`events`; :meth:`close` when done."""

    #: keep every event's raw bytes too (:attr:`Event.raw`)
    raw = False

    def __init__(self, host: str, port: int, user: str, password: str, start: str, *,
                 heartbeat_s: float = 0.25, read_timeout_s: float = 30.0, connect_timeout_s: float = 5.0,
                 server_id: int | None = None, tls: MySQLTLS | None = None, raw: bool = False):
        self.start = start
        self.raw = raw
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
            from migrator.fleet.mysql import tls_failure  # only on a failure: fleet.mysql loads the config models

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
        """Events in binlog order; blocks while the master has nothing new (heartbeats arrive meanwhile).

        Frames the dump stream itself, from the connection's buffered socket: reads up to
        :data:`READ_CHUNK` bytes at a time and cuts packets out of them with one copy per event (its
        body), where PyMySQL's ``_read_packet`` makes two reads, a packet object and a join per packet.
        A packet of 16 MiB - 1 bytes continues in the next (MySQL's split of a long event)."""
        conn = self.conn
        conn._sock.settimeout(conn._read_timeout)  # as PyMySQL's reader does before it reads
        rfile = conn._rfile
        checksum = self._checksum
        keep_raw = self.raw
        crc = zlib.crc32
        unpack = struct.unpack_from
        buf, pos = b"", 0
        while True:
            if len(buf) - pos < 4:
                buf, pos = buf[pos:] + _read_some(rfile, READ_CHUNK), 0
                continue
            length = buf[pos] | buf[pos + 1] << 8 | buf[pos + 2] << 16
            end = pos + 4 + length
            if end > len(buf):  # the rest of this packet in one read (a long event is not read chunk by chunk)
                buf, pos = buf[pos:] + _read_exactly(rfile, end - len(buf)), 0
                end = 4 + length
            if length == MAX_PACKET:  # a split event: join its packets
                data, buf = _joined(buf, pos, rfile)
                pos, start, end = 0, 0, len(data)
            else:
                data, start = buf, pos + 4
                pos = end
            first = data[start]
            if first == 0xFF:
                code = unpack("<H", data, start + 1)[0]
                text = data[start + 3:end]
                msg = (text[6:] if text[:1] == b"#" else text).decode("utf-8", "replace")
                raise BinlogError(msg, code)
            if first == 0xFE and end - start < 9:
                raise BinlogError("the master ended the binlog dump", None)
            # data[start] is the OK byte; the event starts at start + 1
            ts, etype, sid, _size, _pos, flags = unpack("<IBIIIH", data, start + 1)
            if checksum:
                body_end = end - 4
                if etype != HEARTBEAT and crc(data[start + 1:body_end]) != unpack("<I", data, body_end)[0]:
                    raise BinlogError(f"binlog event of type {etype} failed its CRC32 check")
            else:
                body_end = end
            if keep_raw:
                yield Event(etype, ts, sid, flags, data[start + 20:body_end], data[start + 1:end])
            else:
                yield Event(etype, ts, sid, flags, data[start + 20:body_end])

    @property
    def checksum(self) -> bool:
        """The master's events end in a CRC32 (``binlog_checksum=CRC32``): a raw event carries it."""
        return self._checksum

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


#: bytes asked of the socket at a time while framing events
READ_CHUNK = 1 << 20
#: a packet of this length continues in the next one (MySQL's packets carry at most 16 MiB - 1 bytes)
MAX_PACKET = 0xFFFFFF


def _read_some(rfile: Any, n: int) -> bytes:
    """What the buffered socket holds, or one read of at most ``n`` bytes (blocking until some arrive)."""
    try:
        data = rfile.read1(n)
    except OSError as exc:  # a timeout included: the master sends heartbeats, so silence is a dead link
        raise BinlogError(f"reading the binlog failed: lost connection to the master ({exc})", 2013) from None
    if not data:
        raise BinlogError("reading the binlog failed: the master closed the connection", 2013)
    return data


def _read_exactly(rfile: Any, n: int) -> bytes:
    try:
        data = rfile.read(n)
    except OSError as exc:
        raise BinlogError(f"reading the binlog failed: lost connection to the master ({exc})", 2013) from None
    if len(data) < n:
        raise BinlogError("reading the binlog failed: the master closed the connection", 2013)
    return data


def _joined(buf: bytes, pos: int, rfile: Any) -> tuple[bytes, bytes]:
    """The payload of a split event whose first packet (of :data:`MAX_PACKET` bytes) starts at ``pos`` of
    ``buf``, its next packets from the rest of ``buf`` and then ``rfile``; and the bytes read after it."""
    parts = [buf[pos + 4:pos + 4 + MAX_PACKET]]
    rest = buf[pos + 4 + MAX_PACKET:]
    while True:
        if len(rest) < 4:
            rest += _read_exactly(rfile, 4 - len(rest))
        length = int.from_bytes(rest[:3], "little")
        body = rest[4:4 + length]
        if len(body) < length:
            body += _read_exactly(rfile, length - len(body))
        parts.append(body)
        rest = rest[4 + length:]
        if length < MAX_PACKET:
            return b"".join(parts), rest


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
