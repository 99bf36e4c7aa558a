"""The fast apply path: the source's own rows events applied on the target by the server, below SQL.

Runs in the catch-up worker (and wherever a :class:`~migrator.engine.catch_up.tailer.Tailer` runs: the
cutover's re-check and drain, a rollback's reverse tail), once the tail has passed the position verify
proved equal (``verified_gtid``).

Why: the row path (:mod:`.lanes`) decodes every row into SQL literals in the reader process and the
target parses them again as ``REPLACE``/``DELETE``; that is idempotent, which the fuzzy window of a copy
needs (copied and replayed rows mixed), and it costs (measured: docs/performance.md). From the
verified position on the target holds exactly the source's rows at every transaction boundary, so
the source's rows events apply *strictly*, as a replica applies them: this module forwards them as
``BINLOG '<base64>'`` statements (:mod:`migrator.engine.binlog.forward`), the statement
``mariadb-binlog | mariadb`` uses, which goes through the server's own row applier. The reader only
frames them and decodes their keys (what the cutover's compare collects).

Promises kept from the row path:

* **fencing token**: every target transaction begins with the epoch check of the row path
  (:meth:`~.lanes.Epoch.check`), so a tail that lost its claim writes nothing;
* **exactly once**: the source position a target transaction brings the target to is written in that
  same transaction (``_migrator_fence.applied``), so a resume after a kill -9 starts after the last
  committed transaction (:func:`recorded`), never replaying a committed event (which a strict apply
  would refuse); the ZooKeeper checkpoint follows as on the row path;
* **a transaction of any size**: a source transaction that arrives in parts is applied in one target
  transaction across them, each part sent and dropped, so memory stays bounded in bytes; the target
  transaction is never committed in the middle of a source transaction;
* **strict**: any error of a ``BINLOG`` statement (1032 row not found, 1062 duplicate key, anything) is a
  divergence or something this path cannot carry: the target transaction rolls back and
  :class:`FastApplyFailed` names the table and GTID; the tailer then goes back to the row path
  from the last committed position (which replays the window idempotently) and records why;
* what it cannot carry stays on the row path item by item: a rows event too long for one ``BINLOG``
  statement under the target's ``max_allowed_packet`` arrives decoded and is written as SQL in the same
  target transaction, in order; DDL statements are the tailer's barriers, as on the row path.

One connection applies, in source order: the server's row applier is fast enough that the reader, not
the target, bounds it on this workload; parallel lanes of independent transactions are not built.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

import pymysql

from migrator.engine.binlog import forward
from migrator.engine.binlog import reader as rd
from migrator.engine.binlog.client import decompress
from migrator.engine.binlog.reader import COMPRESSED_ROWS, ROW_KINDS, V2_ROWS
from migrator.engine.binlog.rows import TableMap, decode_keys, decode_rows, parse_table_map, rows_header
from migrator.engine.catch_up.keys import ChangedKeys
from migrator.engine.catch_up.lanes import EPOCH_SCHEMA, SESSION, Epoch, Part
from migrator.engine.catch_up.sql import TAG, delete_statements, replace_statements
from migrator.errors import MigratorError
from migrator.fleet.gtid import GtidPos, GtidState
from migrator.fleet.mysql import close_quietly

if TYPE_CHECKING:
    from migrator.engine.catch_up.tailer import Tailer

#: where the position each fast target transaction brought the target to is kept (one row per applier)
APPLIED_TABLE = "applied"
_APPLIED = f"`{EPOCH_SCHEMA}`.`{APPLIED_TABLE}`"
#: a target transaction is committed once it holds this many bytes of events, or is this old (seconds)
COMMIT_BYTES = 16 << 20
COMMIT_S = 0.25
#: bytes of raw events in one ``BINLOG`` statement at most (also bounded by the target's packet size)
STATEMENT_BYTES = 4 << 20
#: the reader's part bound on this path: a large source transaction reaches the target in parts of this
#: many bytes while the rest is read (all of them in one target transaction)
PART_BYTES = 4 << 20
#: fault injection for tests: the applier waits this long after sending each part of a source transaction
#: larger than a part, so a kill can land while that transaction is open on the target
PART_PAUSE_ENV = "MIGRATOR_FAULT_FAST_PART_PAUSE_MS"


class FastApplyFailed(MigratorError):
    """A ``BINLOG`` statement failed: the target diverged from the source or the event cannot be applied
    this way. The target transaction was rolled back; the row path takes over from the last commit."""

    component = "catch_up"

    def __init__(self, message: str, *, table: str, gtid: str, code: int | None):
        super().__init__(message)
        self.table = table
        self.gtid = gtid
        self.code = code

    def record(self) -> dict[str, Any]:
        return {"table": self.table, "gtid": self.gtid, "code": self.code, "error": str(self)[:300]}


def ensure_applied_table(conn: pymysql.connections.Connection) -> None:
    """Make the table of applied positions (once per target; never altered, so no lock waits on it)."""
    with conn.cursor() as cur:
        cur.execute(f"{TAG}SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
                    "AND TABLE_NAME = %s", (EPOCH_SCHEMA, APPLIED_TABLE))
        row = cur.fetchone()
        if not row or not row[0]:
            cur.execute(f"{TAG}CREATE DATABASE IF NOT EXISTS `{EPOCH_SCHEMA}`")
            cur.execute(f"{TAG}CREATE TABLE IF NOT EXISTS {_APPLIED} (applier VARBINARY(255) NOT NULL PRIMARY KEY, "
                        "position TEXT NOT NULL, state TEXT NOT NULL, updated_at DATETIME(6) NOT NULL) ENGINE=InnoDB")
    conn.commit()


def recorded(conn: pymysql.connections.Connection, applier: str) -> tuple[GtidPos, GtidState] | None:
    """The position the last fast target transaction of ``applier`` committed, and its state (None: none)."""
    ensure_applied_table(conn)
    with conn.cursor() as cur:
        cur.execute(f"{TAG}SELECT position, state FROM {_APPLIED} WHERE applier = %s", (applier,))
        row = cur.fetchone()
    conn.commit()
    if row is None:
        return None
    return GtidPos.parse(row[0]), GtidState.parse(row[1])


def may_replay(conn: pymysql.connections.Connection) -> bool:
    """The session's user may run ``BINLOG`` statements (``BINLOG REPLAY``, or ``SUPER``/``ALL`` on ``*.*``)."""
    with conn.cursor() as cur:
        cur.execute(f"{TAG}SHOW GRANTS")
        lines = [str(r[0]) for r in cur.fetchall()]
    conn.commit()
    for line in lines:
        head = line.split(" ON ", 1)[0].upper()
        if " ON *.* " in line and any(p in head for p in ("BINLOG REPLAY", "SUPER", "ALL PRIVILEGES")):
            return True
    return False


def packet_limit(conn: pymysql.connections.Connection) -> int:
    """Raw event bytes one ``BINLOG`` statement may carry on this target (its ``max_allowed_packet``, less
    base64's third and a margin)."""
    with conn.cursor() as cur:
        cur.execute("SELECT @@max_allowed_packet")
        row = cur.fetchone()
    conn.commit()
    packet = int(row[0]) if row else 16 << 20
    return max(64 << 10, (packet - (64 << 10)) * 3 // 4)


class FastApplier:
    """The target connection of the fast path and its open target transaction.

    ``begin`` (implicit at the first event), ``add`` a transaction or a part of one, ``commit`` with the
    position and state the target then holds, ``rollback`` on failure. Not thread-safe: the tailer's
    coordinator drives it."""

    def __init__(self, tailer: Tailer, applier: str, epoch: Epoch | None, limit: int):
        self.tailer = tailer
        self.applier = applier
        self.epoch = epoch
        #: raw bytes of one ``BINLOG`` statement at most
        self.limit = min(STATEMENT_BYTES, limit)
        self._conn: pymysql.connections.Connection | None = None
        self._format: bytes = b""
        self._format_sent = False
        self.checksum = False
        #: the open target transaction: when it began, bytes sent in it, whether a source transaction
        #: is open in it (parts applied, its end not yet)
        self.open = False
        self.began = 0.0
        self.bytes = 0
        self.partial = False
        #: events waiting to go in the next ``BINLOG`` statement, their bytes, the table ids mapped in the
        #: statement group being built and whether that group has rows already
        self._events: list[bytes] = []
        self._event_bytes = 0
        self._mapped: set[bytes] = set()
        self._group_rows = False
        #: the source transactions and tables whose events wait in the next statement (an error names them)
        self._gtids: list[str] = []
        self._tables: list[str] = []
        #: renamed table maps (a reverse tail writes into tombstone schemas), by the source's bytes
        self._renamed: dict[bytes, bytes] = {}
        #: the whole source transactions the open target transaction holds (None: it holds a part of one
        #: larger than a part, whose earlier parts are gone: a refusal then stops this path)
        self.window: list[rd.Committed] | None = []
        #: what made a window be written again as SQL (table, GTID, error), in this applier's life
        self.replays: list[dict[str, Any]] = []
        self._rows = ForwardedRows()
        self.part_pause_s = float(os.environ.get(PART_PAUSE_ENV, "0") or 0) / 1000

    # -- the connection -------------------------------------------------------------------------
    def set_format(self, event: bytes, checksum: bool) -> None:
        """The source's format description event (sent to the target before the first ``BINLOG`` of events,
        and again on every new connection)."""
        if event != self._format:
            self._format = event
            self._format_sent = False
        self.checksum = checksum

    @property
    def conn(self) -> pymysql.connections.Connection:
        if self._conn is None or not self._conn.open:
            conn = self.tailer._connect_target()
            conn.autocommit(False)
            with conn.cursor() as cur:
                cur.execute(TAG + SESSION)
                # the target logs the rows it applies as rows events; annotated, each would carry the text of
                # the statement that made it: here the whole BINLOG statement, megabytes of base64, once per
                # statement inside it (seen: a binlog of 20 GB for a few MB of rows)
                cur.execute(f"{TAG}SET SESSION binlog_annotate_row_events = 0")
            conn.commit()
            self._conn = conn
            self._format_sent = False
        return self._conn

    def close(self) -> None:
        close_quietly(self._conn)
        self._conn = None

    # -- one target transaction ------------------------------------------------------------------
    def _begin(self) -> None:
        if self.open:
            return
        conn = self.conn
        if not self._format:
            raise FastApplyFailed("the binlog reader sent no format description event before rows events",
                                  table="", gtid="", code=None)
        try:
            with conn.cursor() as cur:
                if not self._format_sent:
                    cur.execute(forward.statement([self._format]))
                    self._format_sent = True
                if self.epoch is not None:
                    self.epoch.check(cur)  # before any write: a stale tail writes nothing
        except pymysql.err.MySQLError as exc:
            self.rollback()
            code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
            raise FastApplyFailed(f"the target refused the source's format description event: {exc.args[-1]} "
                                  f"(error {code}); the migration identity needs the BINLOG REPLAY privilege "
                                  "on the target for the fast apply path", table="", gtid="",
                                  code=code) from None
        except BaseException:
            self.rollback()
            raise
        self.open = True
        self.began = time.monotonic()
        self.bytes = 0

    def add(self, txn: rd.Committed) -> int:
        """Send the events of ``txn`` (a whole transaction, or a part of one) in the open target
        transaction; returns the row changes it carried.

        A ``BINLOG`` statement the target refuses inside a window of whole transactions (what the open
        target transaction holds) does not stop this path: the window is rolled back and written again as
        SQL by key (:meth:`_replay`), idempotently, in a new target transaction, and the events after it
        go on as they were. A re-check or a verify re-copies rows from the live source ahead of the tail,
        so a strict apply meets them (a row already moved to its new key, one already inserted); replayed
        by key the window converges as the row path does. Only a window holding a part of a transaction
        larger than a part (whose earlier parts are gone) stops this path (:class:`FastApplyFailed`)."""
        if txn.partial or self.window is None:
            self.window = None
        else:
            self.window.append(txn)
        try:
            return self._send(txn)
        except FastApplyFailed as failed:
            if self.window is None:
                raise
            self._replay(failed)
            return sum(item[5] if item[1] == rd.RAW else 1 for item in txn.changes)  # type: ignore[misc]

    def _send(self, txn: rd.Committed) -> int:
        self._begin()
        gtid = str(txn.gtid)
        if not self._gtids or self._gtids[-1] != gtid:
            self._gtids.append(gtid)
        rows = 0
        target_schema = self.tailer.target_schema
        shapes = self.tailer._shapes
        for item in txn.changes:
            sid, kind = item[0], item[1]
            sh = shapes[sid]
            if kind == rd.RAW:
                tm, raw = item[3], item[4]
                rows += item[5]  # type: ignore[misc]
                name = f"{target_schema(sh.schema)}.{sh.table}"
                if name not in self._tables:
                    self._tables.append(name)
                if target_schema(sh.schema) != sh.schema:
                    tm = self._renamed_map(tm, target_schema(sh.schema))
                self._add_event(tm, raw)  # type: ignore[arg-type]
            else:  # a row too long to forward: written as SQL, in order with the events around it
                self._flush()
                self._write_row(item)  # type: ignore[arg-type]
                rows += 1
        self.partial = txn.partial
        if txn.partial:  # a part is sent whole: the applier holds at most one part (small transactions
            self._flush()  # gather into one statement until it is full or the target transaction commits)
            if self.part_pause_s:
                time.sleep(self.part_pause_s)
        return rows

    def _renamed_map(self, tm: bytes, schema: str) -> bytes:
        out = self._renamed.get(tm)
        if out is None:
            out = self._renamed[tm] = forward.with_schema(tm, schema, self.checksum)
        return out

    def _add_event(self, tm: bytes, raw: bytes) -> None:
        tid = raw[forward.HEADER_LEN:forward.HEADER_LEN + 6]
        if tid not in self._mapped:
            if self._group_rows:  # the server opened this group's tables already: end the group first
                self._events[-1] = forward.with_statement_end(self._events[-1], self.checksum)
                self._mapped.clear()
                self._group_rows = False
            if self._event_bytes + len(tm) + len(raw) > self.limit and self._events:
                self._flush()
            self._events.append(tm)
            self._event_bytes += len(tm)
            self._mapped.add(tid)
        elif self._event_bytes + len(raw) > self.limit and self._events:
            self._flush()
            self._events.append(tm)  # a new statement opens its tables again
            self._event_bytes += len(tm)
            self._mapped.add(tid)
        self._events.append(raw)
        self._event_bytes += len(raw)
        self._group_rows = True
        if forward.ends_statement(raw):
            self._mapped.clear()
            self._group_rows = False

    def _flush(self) -> None:
        """Send the events gathered as one ``BINLOG`` statement (its last rows event ends a statement)."""
        events = self._events
        if not events:
            return
        events[-1] = forward.with_statement_end(events[-1], self.checksum)
        sql = forward.statement(events)
        self._events, self._event_bytes = [], 0
        self._mapped.clear()
        self._group_rows = False
        self._execute(sql)
        self.bytes += len(sql)
        self._gtids = self._gtids[-1:] if self.partial else []
        self._tables = []

    def _execute(self, sql: bytes | str) -> None:
        try:
            with self.conn.cursor() as cur:
                cur.execute(sql)
        except pymysql.err.MySQLError as exc:
            code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
            table = ", ".join(self._tables[:5]) + (f" (and {len(self._tables) - 5} more)" if len(self._tables) > 5
                                                     else "") or "?"
            gtids = self._gtids
            gtid = gtids[0] if len(gtids) == 1 else f"{gtids[0]}..{gtids[-1]}" if gtids else "?"
            self.rollback()
            raise FastApplyFailed(
                f"the fast apply path stopped at source transaction {gtid} on {table}: "
                f"{exc.args[-1] if exc.args else exc} (error {code}); the target diverged from the source there "
                "or the event cannot be applied this way: the row path takes over from the last commit",
                table=table, gtid=gtid, code=code) from None

    def _write_row(self, item: rd.Change) -> None:
        sid, _kind, key, old_key, row = item
        t = self.tailer._target(sid)
        if old_key is not None:
            for sql in delete_statements(t, [old_key]):
                self._execute(sql)
        if row is None:
            for sql in delete_statements(t, [key]):
                self._execute(sql)
        else:
            for stmt in replace_statements(t, [row]):
                self._execute(stmt)

    def due(self) -> bool:
        """The open target transaction should be committed at the next transaction boundary."""
        return self.open and not self.partial and (
            self.bytes >= COMMIT_BYTES or time.monotonic() - self.began >= COMMIT_S)

    def commit(self, pos: str, state: GtidState) -> None:
        """Commit the open target transaction, with the position and state it brings the target to."""
        if not self.open:
            return
        assert not self.partial, "a target transaction is never committed inside a source transaction"
        try:
            self._flush()
        except FastApplyFailed as failed:
            if self.window is None:
                raise
            self._replay(failed)
        conn = self.conn
        try:
            with conn.cursor() as cur:
                cur.execute(f"{TAG}INSERT INTO {_APPLIED} (applier, position, state, updated_at) VALUES "
                            "(%s, %s, %s, UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE position = VALUES(position), "
                            "state = VALUES(state), updated_at = VALUES(updated_at)", (self.applier, pos, str(state)))
            conn.commit()
        except pymysql.err.MySQLError as exc:
            self.rollback()
            raise FastApplyFailed(f"the fast apply path could not commit up to {pos}: {exc}", table="",
                                  gtid=pos, code=exc.args[0] if exc.args else None) from None
        self.open = False
        self._tables = []
        self._gtids = []
        self.window = []

    def _replay(self, failed: FastApplyFailed) -> None:
        """Write the window (the whole transactions of the rolled-back target transaction) again as SQL by
        key, in a new target transaction left open for what follows (:meth:`add`)."""
        window, self.window = self.window or [], None
        self.replays.append(failed.record())
        self._begin()
        part = Part()
        for txn in window:
            for item in txn.changes:
                changes = self._rows.changes(item, self.checksum) if item[1] == rd.RAW else [item]
                for sid, kind, key, old_key, row in changes:
                    if old_key is not None:
                        part.delete(sid, old_key)
                    if kind == rd.DELETE:
                        part.delete(sid, key)
                    else:
                        part.upsert(sid, key, row)  # type: ignore[arg-type]
        for sid, keys in part.dels.items():
            for sql in delete_statements(self.tailer._target(sid), list(keys)):
                self._execute(sql)
        for sid, rows in part.ups.items():
            for stmt in replace_statements(self.tailer._target(sid), rows.values()):
                self._execute(stmt)
        self.window = list(window)

    def rollback(self) -> None:
        self._events, self._event_bytes = [], 0
        self._mapped.clear()
        self._group_rows = False
        self.open = self.partial = False
        self._tables = []
        self._gtids = []
        if self._conn is not None:
            try:
                self._conn.rollback()
            except Exception:  # noqa: BLE001 - a broken connection is opened again next time
                self._conn = None


class ForwardedRows:
    """Forwarded rows events decoded here, in the applier, when they are needed: their primary keys for a
    key collection (the cutover's compare, verify's windows: the reader decodes only a table's first
    events), their row changes for a window written again as SQL (:meth:`FastApplier._replay`). The table
    map is parsed once per shape."""

    def __init__(self) -> None:
        self._maps: dict[bytes, TableMap] = {}

    def _event(self, item: Any, checksum: bool) -> tuple[TableMap, bytes, str, int]:
        tm_raw, raw = item[3], item[4]
        cut = 4 if checksum else 0
        tm = self._maps.get(tm_raw)
        if tm is None:
            tm = self._maps[tm_raw] = parse_table_map(tm_raw[forward.HEADER_LEN:len(tm_raw) - cut])
        etype = raw[4]
        body = raw[forward.HEADER_LEN:len(raw) - cut]
        if etype in COMPRESSED_ROWS:
            body = decompress(body, 8)
        _, _, p = rows_header(body, etype in V2_ROWS)
        return tm, body, ROW_KINDS[etype], p

    def of(self, item: Any, checksum: bool) -> list[tuple[str, ...]]:
        """The primary keys the event touches."""
        tm, body, kind, p = self._event(item, checksum)
        return decode_keys(body, tm, kind, p)[0]

    def changes(self, item: Any, checksum: bool) -> list[rd.Change]:
        """The event's row changes as the row path's reader makes them."""
        tm, body, kind, p = self._event(item, checksum)
        sid, pk = item[0], tm.pk
        out: list[rd.Change] = []
        for r in decode_rows(body, tm, kind, p):
            if kind == rd.UPDATE:
                before, after = r  # type: ignore[misc]
                kb, ka = tuple(before[i] for i in pk), tuple(after[i] for i in pk)
                out.append((sid, kind, ka, kb if kb != ka else None, after))
            else:
                key = tuple(r[i] for i in pk)  # type: ignore[index]
                out.append((sid, kind, key, None, r if kind == rd.WRITE else None))  # type: ignore[arg-type]
        return out


class FastApply:
    """One :meth:`~migrator.engine.catch_up.tailer.Tailer.apply_until` call on the fast path: the
    coordinator's loop of the row path (:class:`~migrator.engine.catch_up.tailer._Apply`) with one
    applier instead of lanes and rounds. A message's transactions go to the open target transaction;
    it is committed, and the position checkpointed, at a transaction boundary once it is big or old
    enough, when the reader goes quiet, before a statement, and at the end of the call."""

    def __init__(self, tailer: Tailer, applier: FastApplier, want: GtidState | None, timeout_s: float | None,
                 stop: Any, stats: Any):
        self.tailer = tailer
        self.applier = applier
        self.want = want
        self.stop = stop
        self.t0 = time.monotonic()
        self.deadline = None if timeout_s is None else self.t0 + timeout_s
        self.stats = stats
        self._keys = ForwardedRows()
        #: the position and state the open target transaction brings the target to once committed
        self._pos: str | None = None
        self._state: GtidState | None = None

    def run(self) -> None:
        replays = len(self.applier.replays)
        try:
            self._run()
        finally:
            self.stats.fast_replays = self.applier.replays[replays:]

    def _run(self) -> None:
        tailer, stats = self.tailer, self.stats
        from migrator.engine.binlog.messages import Format, Tick, Txns

        while not self._done():
            if not tailer._pending:
                poll = 0.01 if self.stop is not None else 0.05
                left = poll if self.deadline is None else min(poll, self.deadline - time.monotonic())
                if left > 0 and tailer._receive(left):
                    continue
                self.commit()  # quiet: what is open is committed, the checkpoint follows the reader
                tailer._save()
                continue
            msg = tailer._pending.pop(0)
            match msg:
                case Format(event, checksum):
                    self.applier.set_format(event, checksum)
                case Tick(position, last_ts, state):
                    stats.last_ts = last_ts or stats.last_ts
                    self._moved(position, GtidState.parse(state))
                    if not self.applier.open:
                        self.commit()
                case Txns(txns, position, last_ts, _, state):
                    stats.last_ts = last_ts or stats.last_ts
                    self._take(txns, position, GtidState.parse(state))
        self.commit()

    def _done(self) -> bool:
        if self.stop is not None and self.stop.is_set() and not self.applier.partial:
            return True
        if self.want is not None and self.tailer._seen.reaches(self.want):
            return True
        if self.want is not None and self._state is not None and not self.applier.partial \
                and self._state.reaches(self.want):
            self.stats.read_s = self.stats.read_s or time.monotonic() - self.t0
            self.commit()
            return True
        # the deadline never ends a call inside a source transaction: the commit waits for its end
        return self.deadline is not None and time.monotonic() >= self.deadline and not self.applier.partial

    def _moved(self, pos: str, state: GtidState) -> None:
        self._pos, self._state = pos, state

    def _take(self, txns: list[rd.Committed], pos: str, state: GtidState) -> None:
        tailer, stats, applier = self.tailer, self.stats, self.applier
        coll = tailer._collect
        for txn in txns:
            if txn.partial and applier.open and not applier.partial:
                self.commit()  # the transactions before a large one commit on their own, with their position
            if not txn.partial:
                stats.transactions += 1
                stats.bytes += txn.size
            if not stats.first_ts:
                stats.first_ts = txn.timestamp
            rows = applier.add(txn)
            stats.events += rows
            tailer.events_read += rows
            if coll is not None:
                self._collect_keys(txn, coll)
            if txn.statements:
                self._barrier(txn, pos, state)
        tailer.last_submit_at = time.monotonic()
        self._moved(pos, state)
        if applier.due():
            self.commit()

    def _collect_keys(self, txn: rd.Committed, coll: ChangedKeys) -> None:
        shapes = self.tailer._shapes
        for item in txn.changes:
            sh = shapes[item[0]]
            table = (sh.schema, sh.table)
            if not coll.wants(table):
                continue
            if item[1] == rd.RAW:
                coll.add(table, item[2] if item[2] is not None else self._keys.of(item, self.applier.checksum))
            else:
                coll.add(table, (item[2],) if item[3] is None else (item[2], item[3]))  # type: ignore[arg-type]

    def _barrier(self, txn: rd.Committed, pos: str, state: GtidState) -> None:
        """A transaction with statements (always its message's last): its rows are committed with the
        position just before it (as the row path does), then its statements run; a crash in between
        replays it, which the strict path refuses and the row path then applies."""
        self.applier.commit(str(GtidPos.parse(pos).before(txn.gtid, txn.prev)),
                            state.before(txn.gtid, txn.prev_seen))
        self.tailer._checkpoint(str(GtidPos.parse(pos).before(txn.gtid, txn.prev)),
                                state.before(txn.gtid, txn.prev_seen))
        self.tailer._save(force=True)
        self.stats.statements += self.tailer._run_statements(txn)
        self._moved(pos, state)
        self.tailer._checkpoint(pos, state)

    def commit(self) -> None:
        """Commit what is open (never inside a source transaction) and checkpoint its position."""
        applier = self.applier
        if applier.partial or self._pos is None:
            return
        if applier.open:
            applier.commit(self._pos, self._state or GtidState())
            self.stats.rounds += 1
        self.tailer._checkpoint(self._pos, self._state)
