"""Binlog streamer: reads a MariaDB master's binlog from a GTID position and
hands over whole transactions that touch the schemas (and tables) being moved.

Runs inside the catch-up worker (and, under the cutover's write fence, in the
cutover process). It is the hot path of catch-up: python-mysql-replication
decodes rows in pure Python, so everything that can be dropped is dropped
before any row is decoded:

* ``only_schemas`` / ``only_tables`` make the reader skip table-map events of
  other tables, and with them every row event of those tables, without
  decoding a single row;
* only the event classes below are parsed at all;
* rows are decoded lazily, by the applier, only for transactions we keep.

Position tracking (see PARTS.md): the reader runs in *blocking* mode with a
server heartbeat, and we track the position ourselves: a transaction's GTID
joins :attr:`BinlogStreamer.position` only when its end (Xid, ``COMMIT``, or
the single statement of a stand-alone DDL transaction) has been read. GTID,
Xid and Query events arrive for every schema, so the position advances over
other schemas' traffic too and a target position is always reached.

The library reconnects silently on a lost connection, from its ``auto_position``.
We keep that attribute at our own position after every transaction, so a
reconnect resumes where we are instead of replaying from the start; a
transaction cut in half by a reconnect is dropped when the next GTID event
arrives (it is then read again whole).

``freeze_schema``: the library then parses a table's table-map event only the
first time it sees its table id (about 4x faster on small transactions).
That is unsafe across ALTER TABLE if a table id is reused with a new shape, so
we drop the whole table-map cache on every DDL statement (of any schema) and on
every rotate (a server restart reuses table ids, and always starts a new
binlog file). Row events that were already read keep the cache they were read
with, so rows decoded later still see their own table definition.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import (
    HeartbeatLogEvent,
    MariadbGtidEvent,
    QueryEvent,
    RotateEvent,
    XidEvent,
)
from pymysqlreplication.row_event import DeleteRowsEvent, RowsEvent, UpdateRowsEvent, WriteRowsEvent

from migrator.errors import MigratorError
from migrator.fleet.config import Credentials
from migrator.fleet.gtid import Gtid, GtidPos
from migrator.fleet.model import Host

log = logging.getLogger(__name__)

#: MariaDB GTID event flag: the transaction is one statement with no COMMIT/Xid (DDL)
FL_STANDALONE = 0x01

_EVENTS = [
    MariadbGtidEvent, XidEvent, QueryEvent, RotateEvent, HeartbeatLogEvent,
    WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent,
]


class StreamerError(MigratorError):
    component = "streamer"


@dataclass(slots=True)
class Statement:
    """A query event (DDL) read from the binlog, with the session schema it ran in."""

    schema: str
    query: str


@dataclass(slots=True)
class Transaction:
    """One committed source transaction, reduced to what concerns the moving tables."""

    gtid: Gtid
    timestamp: int
    #: this domain's GTID before this transaction (None: the domain starts here)
    prev: Gtid | None = None
    events: list[RowsEvent] = field(default_factory=list)
    statements: list[Statement] = field(default_factory=list)
    size: int = 0  # bytes of the kept row events

    @property
    def row_count(self) -> int:
        return sum(len(ev.rows) for ev in self.events)


def _server_id() -> int:
    # a replica id must be unique per master: two readers with one id kick each other off
    return random.randrange(1 << 24, 1 << 31)


class BinlogStreamer:
    """A long-lived binlog reader positioned by GTID.

    ``schemas``: the source schemas to keep; ``tables``: if given, only these
    table names inside them. Use :meth:`transactions` to read.
    """

    def __init__(
        self,
        host: Host,
        credentials: Credentials,
        *,
        start: GtidPos,
        schemas: Iterable[str],
        tables: Iterable[str] | None = None,
        heartbeat_s: float = 0.25,
        freeze_schema: bool = True,
        read_timeout_s: float = 30.0,
    ):
        self.host = host
        self.schemas = sorted(set(schemas))
        self.tables = sorted(set(tables)) if tables else None
        if not self.schemas:
            raise StreamerError("nothing to stream: no schemas given")
        self._pos: dict[int, Gtid] = dict(GtidPos.parse(str(start)).items())
        self.start = GtidPos(self._pos)
        self.heartbeat_s = heartbeat_s
        self.freeze_schema = freeze_schema
        self._settings = {
            "host": host.address,
            "port": host.port,
            "user": credentials.mysql_user,
            "password": credentials.mysql_password,
            "charset": "utf8mb4",
            "connect_timeout": 5,
            "read_timeout": read_timeout_s,
        }
        self._stream: BinLogStreamReader | None = None
        self.server_id = _server_id()
        #: counters since this streamer was opened
        self.transactions_read = 0
        self.events_kept = 0
        self.bytes_kept = 0
        self.last_event_ts = 0
        self.reconnect_cuts = 0

    # -- position ----------------------------------------------------------------
    @property
    def position(self) -> GtidPos:
        """Every transaction up to here has been read whole (and handed over, if kept)."""
        return GtidPos(self._pos)

    def position_before(self, txn: Transaction) -> GtidPos:
        """:attr:`position` as it was just before ``txn`` (the last one yielded)."""
        by = dict(self._pos)
        if txn.prev is None:
            by.pop(txn.gtid.domain, None)
        else:
            by[txn.gtid.domain] = txn.prev
        return GtidPos(by)

    def _open(self) -> BinLogStreamReader:
        if self._stream is None:
            self._stream = BinLogStreamReader(
                connection_settings=dict(self._settings),
                server_id=self.server_id,
                blocking=True,
                slave_heartbeat=self.heartbeat_s,
                is_mariadb=True,
                auto_position=str(self.position),
                only_schemas=self.schemas,
                only_tables=self.tables,
                only_events=_EVENTS,
                freeze_schema=self.freeze_schema,
                enable_logging=False,
            )
        return self._stream

    def close(self) -> None:
        if self._stream is not None:
            try:
                self._stream.close()
            except Exception:  # closing a broken stream is not worth an error
                pass
            self._stream = None

    def __enter__(self) -> BinlogStreamer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading --------------------------------------------------------------------
    def transactions(
        self, until: GtidPos | None = None, *, deadline: float | None = None, tick_s: float = 0.2
    ) -> Iterator[Transaction | None]:
        """Yield kept transactions in binlog order.

        Stops once :attr:`position` contains ``until`` (returns normally), or
        when ``time.monotonic()`` passes ``deadline`` (returns too: the caller
        compares :attr:`position` with its target). Yields ``None`` at least
        every ``tick_s`` while nothing is kept, so the caller can flush by time
        and checkpoint :attr:`position`.
        """
        connected = self._stream is not None
        if until is not None and connected and self.position.contains(until):
            return
        # a first call connects even when there is nothing to read, so a caller can
        # warm the stream up (the server's GTID lookup) before a time-critical call
        stream = self._open()
        pos = self._pos
        schemas = set(self.schemas)
        need = dict((d, g.seq) for d, g in until.items()) if until is not None else None
        txn: Transaction | None = None
        standalone = False
        last_tick = time.monotonic()
        try:
            while True:
                ev = stream.fetchone()
                if ev is None:  # the server closed the dump (it should not in blocking mode)
                    self.close()
                    stream = self._open()
                    continue
                cls = ev.__class__
                if cls is MariadbGtidEvent:
                    if txn is not None:
                        # the previous transaction never ended: a reconnect cut it; it is re-read whole
                        self.reconnect_cuts += 1
                    txn = Transaction(Gtid(ev.domain_id, ev.server_id, ev.gtid_seq_no), ev.timestamp)
                    standalone = bool(ev.flags & FL_STANDALONE)
                    continue
                if cls is WriteRowsEvent or cls is UpdateRowsEvent or cls is DeleteRowsEvent:
                    if txn is not None:
                        txn.events.append(ev)
                        txn.size += ev.event_size
                    continue
                ended = False
                if cls is XidEvent:
                    ended = True
                elif cls is QueryEvent:
                    q = ev.query.strip()
                    head = q[:8].upper()
                    if head.startswith("BEGIN") or head.startswith("XA START"):
                        continue
                    if head.startswith("COMMIT") or head.startswith("XA END") or head.startswith("XA COMMIT"):
                        ended = True
                    elif head.startswith("ROLLBACK"):
                        txn = None  # nothing of it reached the binlog's data
                        continue
                    else:
                        # DDL or another statement: it may change any table's shape
                        if self.freeze_schema:
                            stream.table_map = {}
                        if txn is not None:
                            schema = ev.schema.decode() if isinstance(ev.schema, bytes) else (ev.schema or "")
                            txn.statements.append(Statement(schema, q))
                        ended = standalone
                elif cls is RotateEvent:
                    # (also the first event after connecting: the server has found our position)
                    if self.freeze_schema:
                        stream.table_map = {}
                elif cls is HeartbeatLogEvent:
                    pass
                if not ended and txn is None and need is not None and self.position.contains(until):
                    return  # connected, and nothing more to read
                if ended and txn is not None:
                    g = txn.gtid
                    txn.prev = pos.get(g.domain)
                    pos[g.domain] = g
                    self.transactions_read += 1
                    self.last_event_ts = txn.timestamp
                    stream.auto_position = ",".join(str(pos[d]) for d in sorted(pos))
                    kept = txn
                    txn = None
                    if kept.events or (kept.statements and _mentions(kept.statements, schemas)):
                        self.events_kept += len(kept.events)
                        self.bytes_kept += kept.size
                        last_tick = time.monotonic()
                        yield kept
                    if need is not None and g.domain in need and g.seq >= need[g.domain]:
                        if all(pos[d].seq >= s if d in pos else False for d, s in need.items()):
                            return
                now = time.monotonic()
                if now - last_tick >= tick_s:
                    last_tick = now
                    yield None
                if deadline is not None and now >= deadline:
                    return
        except GeneratorExit:
            raise
        except MigratorError:
            raise
        except Exception as exc:
            self.close()
            if getattr(exc, "args", None) and exc.args[0] == 1236:
                raise StreamerError(
                    f"{self.host.name} can no longer stream from {self.position or 'the beginning'}: "
                    f"{exc.args[-1]}. The binlog it needs is gone (purged?); the copy has to be redone"
                ) from exc
            raise StreamerError(
                f"reading the binlog of {self.host.name} ({self.host.address}:{self.host.port}) from "
                f"{self.position or 'its beginning'} failed: {exc}; re-run catch-up to resume from the checkpoint"
            ) from exc


def _mentions(statements: list[Statement], schemas: set[str]) -> bool:
    """Whether a statement may concern the kept schemas (the applier decides for sure)."""
    for st in statements:
        if st.schema in schemas:
            return True
        lowered = st.query.lower()
        if any(s.lower() in lowered for s in schemas):
            return True
    return False
