"""The binlog reader: whole source transactions of the moving tables, decoded, in binlog order.

Runs in its own process during catch-up (:mod:`.process`), so reading and
decoding the binlog never waits for the target's commits, and in the calling process where a short segment or only
keys are wanted (:class:`LocalReader`: verify, the cutover's compare).

What it does with each event (see :mod:`.client` for the framing, :mod:`.rows`
for the decoding):

* a table-map event names a table: other schemas and tables are dropped right
  there, so their row events are skipped without being decoded; the shape of
  a kept table is cached by the exact bytes of its table map (an ALTER changes
  them, so a reused table id can never decode with a stale shape);
* row events of kept tables become :class:`Change` records: the key (SQL
  literals of the primary-key columns), the full after image for inserts and
  updates, and the old key when an update changed the key;
* ``GTID`` opens a transaction, ``XID``/``COMMIT`` close it; a statement that
  is not ``BEGIN``/``COMMIT`` is handed over as a :class:`Statement` (the
  applier decides what DDL means); a stand-alone GTID group is one statement;
* ``ROLLBACK`` alone ends a group whose changes were undone (a transaction that
  also wrote a non-transactional table is logged whole, then ``ROLLBACK``): it
  is dropped. Savepoints are the transaction's own business: ``SAVEPOINT x``
  marks where its changes stand, ``ROLLBACK TO x`` drops the changes read since
  that mark (MariaDB logs them, and the statement, when a non-transactional
  write came after the savepoint: the row events up to ``ROLLBACK TO`` were
  undone, the rest of the group commits), ``RELEASE SAVEPOINT x`` forgets it;
  none of them is handed over, and none ends the transaction;
* XA: a group that ends in ``XA PREPARE`` is held until its ``XA COMMIT``
  (then applied, under the commit's GTID) or ``XA ROLLBACK`` (then dropped).
  While a prepared transaction is unresolved the safe position of its domain
  stays before it, so a restart reads it again.

Memory is bounded by ``part_changes`` and ``part_bytes``, not by the source's transactions: a
transaction never holds more than that many row changes, nor row changes read from more than that
many bytes of row events (beyond one event: a row of one event), in memory. Beyond either,
its changes so far leave as a *part* (a :class:`Committed` with ``partial``
set, :meth:`TxnReader.take_parts`) when nothing can undo them any more, or go
to a temporary file on local disk (:class:`Spill`) while something still can
(a savepoint is set, or the group is an XA prepare): they leave as parts once
the transaction commits, and a ``ROLLBACK TO`` or ``XA ROLLBACK`` truncates or
drops the file. A part does not move the position: it stays before the
transaction until its commit, so a reader or applier that stops midway
replays the transaction whole.

Position: :attr:`TxnReader.position` is the GTID position every transaction
up to which has been read whole (where a reader resumes: the server starts
after each domain's exact GTID); it advances over transactions of other
schemas too, so a target position is always reached. Whether a target has
been passed is asked of :attr:`TxnReader.state` (:meth:`TxnReader.reaches`):
the last transaction read of each (domain, server), which is exact in every
GTID layout where the per-domain position is not (two pair members sharing a
domain: :mod:`migrator.fleet.gtid`). Both are kept in the light forms of
:mod:`migrator.fleet.gtid` (plain dicts updated in place once per transaction: a
:data:`~migrator.fleet.gtid.Position` and a :data:`~migrator.fleet.gtid.State`).
"""

from __future__ import annotations

import os
import pickle
import re
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from migrator.engine.binlog import client as bl
from migrator.engine.binlog.forward import ends_statement, with_statement_end
from migrator.engine.binlog.rows import (
    DELETE,
    UPDATE,
    WRITE,
    RowFormatError,
    TableMap,
    decode_keys,
    decode_rows,
    parse_table_map,
    rows_header,
    table_map_names,
)
from migrator.fleet.gtid import (
    Gtid,
    GtidPos,
    GtidState,
    Position,
    State,
    format_pos,
    parse_gtids,
    pos_before,
    reaches,
    state_of,
)

if TYPE_CHECKING:
    from migrator.fleet.tls import MySQLTLS

_MISSING = object()

# GTID event flags2 (MariaDB)
FL_STANDALONE = 0x01
FL_GROUP_COMMIT_ID = 0x02
FL_PREPARED_XA = 0x40
FL_COMPLETED_XA = 0x80

_KIND = {bl.WRITE_ROWS_V1: WRITE, bl.UPDATE_ROWS_V1: UPDATE, bl.DELETE_ROWS_V1: DELETE,
         bl.WRITE_ROWS_V2: WRITE, bl.UPDATE_ROWS_V2: UPDATE, bl.DELETE_ROWS_V2: DELETE,
         bl.WRITE_ROWS_COMPRESSED_V1: WRITE, bl.UPDATE_ROWS_COMPRESSED_V1: UPDATE,
         bl.DELETE_ROWS_COMPRESSED_V1: DELETE}
_V2 = frozenset({bl.WRITE_ROWS_V2, bl.UPDATE_ROWS_V2, bl.DELETE_ROWS_V2})
_COMPRESSED = frozenset({bl.WRITE_ROWS_COMPRESSED_V1, bl.UPDATE_ROWS_COMPRESSED_V1, bl.DELETE_ROWS_COMPRESSED_V1})
#: the same, for whoever decodes a forwarded rows event elsewhere (migrator.engine.catch_up.fast)
ROW_KINDS, V2_ROWS, COMPRESSED_ROWS = _KIND, _V2, _COMPRESSED


class ReaderError(Exception):
    """The binlog cannot be followed (the message says why and what to do)."""

    def __init__(self, message: str, code: int | None = None):
        super().__init__(message)
        self.code = code


def wanted(target: str | None) -> list[Gtid] | None:
    """The GTIDs of a target given as a position or a state text (None: no target)."""
    return None if target is None else parse_gtids(target)


@dataclass(frozen=True, slots=True)
class Shape:
    """What the applier needs to know of a kept table (sent once per table-map shape)."""

    id: int
    schema: str
    table: str
    names: tuple[str, ...]
    pk: tuple[int, ...]

    @property
    def key_names(self) -> tuple[str, ...]:
        return tuple(self.names[i] for i in self.pk)


#: one row change: (shape id, kind, key literals, old key literals or None, after-image literals or None)
Change = tuple[int, str, tuple[str, ...], "tuple[str, ...] | None", "tuple[str, ...] | None"]

#: the kind of a forwarded rows event (a reader made with ``raw``): ``(shape id, RAW, keys, table map, event,
#: rows)``, where ``table map`` and ``event`` are the raw events as the source logged them (:mod:`.forward`),
#: ``keys`` the primary keys the event touches (both keys of an update that changed one) when they were
#: decoded (None: the applier decodes them if it needs them), and ``rows`` the row changes it carries (counted
#: on a table's first events, then reckoned from the event's size and the table's bytes per row: exact for
#: fixed-width rows, close for others; what pass records count)
RAW = "r"
#: a table's first rows events whose rows the raw reader counts by decoding their keys (then it reckons)
LEARN_EVENTS = 8


class Statement(NamedTuple):
    schema: str
    query: str


class Committed(NamedTuple):
    """One committed source transaction, reduced to what concerns the moving tables (what the
    reader process sends: a tuple, cheap to pickle)."""

    gtid: Gtid
    prev: Gtid | None
    timestamp: int
    changes: list[Change]
    statements: list[Statement]
    size: int
    #: the seq_no of the previous transaction read of this one's (domain, server), None if none was
    prev_seen: int | None = None
    #: a part of a transaction still being read (its commit comes later, with the rest): applying it
    #: does not move the position. A part's ``size`` is the bytes of the row events it came from
    partial: bool = False


def part_changes_from_env() -> int:
    """Row changes of one transaction held in memory at most, by default: ``MIGRATOR_CATCHUP_PART_CHANGES``
    as the process that reads finds it, else 5,000 (about 0.75 KB each once decoded, so a few MB)."""
    raw = os.environ.get("MIGRATOR_CATCHUP_PART_CHANGES", "").strip()
    try:
        value = int(raw or 5000)
    except ValueError:
        raise ValueError(f"MIGRATOR_CATCHUP_PART_CHANGES={raw!r} is not a number of row changes: "
                         "set it to a whole number of at least 1 (5000 if unset)") from None
    if value < 1:
        raise ValueError(f"MIGRATOR_CATCHUP_PART_CHANGES={raw!r}: set it to at least 1 (5000 if unset)")
    return value


def part_bytes_from_env() -> int:
    """Bytes of row events whose changes one transaction holds in memory at most, by default:
    ``MIGRATOR_CATCHUP_PART_BYTES`` as the process that reads finds it, else 32 MiB. Binlog bytes: an
    update's event carries the row twice (before and after), its decoded after image (hex) about as
    many bytes again."""
    raw = os.environ.get("MIGRATOR_CATCHUP_PART_BYTES", "").strip()
    try:
        value = int(raw or DEFAULT_PART_BYTES)
    except ValueError:
        raise ValueError(f"MIGRATOR_CATCHUP_PART_BYTES={raw!r} is not a number of bytes: set it to a whole "
                         f"number of at least 1 ({DEFAULT_PART_BYTES} if unset)") from None
    if value < 1:
        raise ValueError(f"MIGRATOR_CATCHUP_PART_BYTES={raw!r}: set it to at least 1 ({DEFAULT_PART_BYTES} if unset)")
    return value


#: the byte bound of one transaction's part, of a message of the reader process and of a round (default)
DEFAULT_PART_BYTES = 32 << 20


class Spill:
    """Row changes of one transaction on local disk: a temporary file of pickled chunks (gone when closed).

    Holds what may still be undone (after a savepoint, or in an XA prepare) beyond the memory bound;
    chunks come back in order (:meth:`chunks`), and :meth:`truncate` drops every change from a given
    index on (a ``ROLLBACK TO``)."""

    def __init__(self) -> None:
        self._f: Any = tempfile.TemporaryFile(prefix="migrator-txn-")
        self.count = 0
        #: (index of its first change, file offset) of each chunk
        self._starts: list[tuple[int, int]] = []

    def write(self, changes: list[Change]) -> None:
        if not changes:
            return
        self._f.seek(0, os.SEEK_END)
        self._starts.append((self.count, self._f.tell()))
        pickle.dump(changes, self._f, protocol=pickle.HIGHEST_PROTOCOL)
        self.count += len(changes)

    def truncate(self, index: int) -> None:
        """Keep the first ``index`` changes only."""
        if index >= self.count:
            return
        k = max(i for i, (first, _) in enumerate(self._starts) if first <= index)
        first, offset = self._starts[k]
        keep: list[Change] = []
        if index > first:
            self._f.seek(offset)
            keep = pickle.load(self._f)[:index - first]
        self._f.seek(offset)
        self._f.truncate()
        del self._starts[k:]
        self.count = first
        self.write(keep)

    def chunks(self) -> Iterator[list[Change]]:
        for chunk, _ in self.sized_chunks():
            yield chunk

    def sized_chunks(self) -> Iterator[tuple[list[Change], int]]:
        """:meth:`chunks`, each with its size on disk (bytes)."""
        starts = list(self._starts)
        self._f.seek(0, os.SEEK_END)
        ends = [offset for _, offset in starts[1:]] + [self._f.tell()]
        for (_, offset), end in zip(starts, ends):
            self._f.seek(offset)
            yield pickle.load(self._f), end - offset

    def close(self) -> None:
        self._f.close()


@dataclass(slots=True)
class Txn:
    """A source transaction being read."""

    gtid: Gtid
    timestamp: int
    prev: Gtid | None = None
    changes: list[Change] = field(default_factory=list)
    statements: list[Statement] = field(default_factory=list)
    size: int = 0
    xid: bytes | None = None
    prev_seen: int | None = None
    #: savepoint name (lower case: savepoint names ignore case) -> (changes, statements) read before it,
    #: in the order they were set (changes counted from the transaction's start: parts and spill too)
    savepoints: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: changes already handed out as parts, and those spilled to disk (they come before ``changes``)
    streamed: int = 0
    spill: Spill | None = None
    #: ``size`` when changes last left memory (as parts or to the spill): ``size`` minus it is what
    #: the changes held in memory were read from
    left_at: int = 0

    @property
    def count(self) -> int:
        """Row changes read so far (handed out, spilled and in memory)."""
        return self.streamed + (self.spill.count if self.spill is not None else 0) + len(self.changes)

    def done(self) -> Committed:
        return Committed(self.gtid, self.prev, self.timestamp, self.changes, self.statements, self.size,
                         self.prev_seen)

    def part(self, changes: list[Change], nbytes: int = 0) -> Committed:
        return Committed(self.gtid, self.prev, self.timestamp, changes, [], nbytes, None, True)

    def bound(self, limit: int | None, max_bytes: int | None = None) -> list[Committed]:
        """Keep fewer than ``limit`` changes, read from fewer than ``max_bytes`` bytes of row events,
        in memory (beyond one row event's rows): hand them out as parts of at most ``limit`` when
        nothing can undo them any more (returned), else spill them (a savepoint is set, or it is an
        XA prepare)."""
        held = self.size - self.left_at
        if (limit is None or len(self.changes) < limit) and (max_bytes is None or held < max_bytes):
            return []
        if not self.changes:
            return []
        limit = limit or len(self.changes)
        self.left_at = self.size
        out, self.changes = self.changes, []
        if self.savepoints or self.xid is not None or self.spill is not None:
            if self.spill is None:
                self.spill = Spill()
            for k in range(0, len(out), limit):
                self.spill.write(out[k:k + limit])
            return []
        self.streamed += len(out)
        return [self.part(out[k:k + limit], held * len(out[k:k + limit]) // len(out))
                for k in range(0, len(out), limit)]

    def held_parts(self) -> Iterator[Committed]:
        """The spilled changes as parts, in order, then the file is closed (at the commit)."""
        spill, self.spill = self.spill, None
        if spill is None:
            return
        try:
            for chunk, nbytes in spill.sized_chunks():
                self.streamed += len(chunk)
                yield self.part(chunk, nbytes)
        finally:
            spill.close()

    def discard(self) -> None:
        """Drop everything held (a rollback)."""
        if self.spill is not None:
            self.spill.close()
            self.spill = None
        self.changes = []

    def savepoint(self, name: str) -> None:
        self.savepoints.pop(name, None)  # set again: it moves to here (and after every other one)
        self.savepoints[name] = (self.count, len(self.statements))

    def rollback_to(self, name: str) -> None:
        """Drop what was read since savepoint ``name`` and the savepoints set after it (which stays).

        A name this transaction never logged is refused (:class:`ReaderError`) rather than
        guessed at: MariaDB logs a savepoint set before any change as nothing and a rollback to
        it as a group of its own ending in ``ROLLBACK``, so it is not expected here."""
        if name not in self.savepoints:
            raise ReaderError(f"ROLLBACK TO `{name}` in the transaction {self.gtid} names a savepoint its binlog "
                              "group never set: catch-up cannot tell which of its changes were undone")
        changes, statements = self.savepoints[name]
        held = self.streamed + (self.spill.count if self.spill is not None else 0)
        if changes >= held:
            del self.changes[changes - held:]
        else:  # a savepoint is never before what was handed out (nothing is while one is set)
            assert self.spill is not None and changes >= self.streamed
            self.spill.truncate(changes - self.streamed)
            self.changes = []
        del self.statements[statements:]
        names = list(self.savepoints)
        for later in names[names.index(name) + 1:]:
            del self.savepoints[later]

    def release(self, name: str) -> None:
        """``RELEASE SAVEPOINT``: the savepoint and those set after it are gone; nothing is undone."""
        if name in self.savepoints:
            names = list(self.savepoints)
            for gone in names[names.index(name):]:
                del self.savepoints[gone]


_SAVEPOINT = re.compile(r"^(SAVEPOINT|ROLLBACK\s+(?:WORK\s+)?TO(?:\s+SAVEPOINT)?|RELEASE\s+SAVEPOINT)(?:\s+|(?=`))"
                        r"(`(?:[^`]|``)+`|[^\s;`]+)\s*;?\s*$", re.I | re.S)
_COMMENTS = re.compile(r"^\s*(?:/\*.*?\*/\s*)*", re.S)
#: the end of a group whose changes were all undone (``ROLLBACK``, as MariaDB logs it)
_FULL_ROLLBACK = re.compile(r"^\s*ROLLBACK(?:\s+WORK)?\s*(?:/\*.*?\*/\s*)*;?\s*$", re.I | re.S)


def savepoint_statement(query: str) -> tuple[str, str] | None:
    """(``"set"`` | ``"rollback_to"`` | ``"release"``, the savepoint's lower-case name) when ``query``
    is ``SAVEPOINT x``, ``ROLLBACK [WORK] TO [SAVEPOINT] x`` or ``RELEASE SAVEPOINT x``; else None."""
    m = _SAVEPOINT.match(_COMMENTS.sub("", query, count=1).strip())
    if m is None:
        return None
    verb = m.group(1).split()[0].upper()
    name = m.group(2)
    if name.startswith("`"):
        name = name[1:-1].replace("``", "`")
    return {"SAVEPOINT": "set", "ROLLBACK": "rollback_to", "RELEASE": "release"}[verb], name.lower()


def _query_text(body: bytes) -> tuple[str, str]:
    """(schema, query) of a QUERY event body."""
    db_len = body[8]
    sv_len = body[11] | body[12] << 8
    p = 13 + sv_len
    schema = body[p:p + db_len].decode("utf-8", "replace")
    return schema, body[p + db_len + 1:].decode("utf-8", "replace")


def _gtid_xid(body: bytes, flags2: int) -> bytes | None:
    p = 13
    if flags2 & FL_GROUP_COMMIT_ID:
        p += 8
    if flags2 & (FL_PREPARED_XA | FL_COMPLETED_XA):
        gl, ql = body[p + 4], body[p + 5]
        return body[p:p + 6 + gl + ql]
    return None


class TxnReader:
    """Turns framed events into :class:`Txn` records of the kept tables (no I/O of its own but the
    temporary files of :class:`Spill`).

    After every :meth:`feed`, take the parts it made (:meth:`take_parts`) before what it returned:
    a part of a transaction always comes before the transaction's end."""

    def __init__(self, start: str, schemas: Iterable[str], tables: Iterable[str] | None = None, *,
                 part_changes: int | None = 0, part_bytes: int | None = 0, raw: bool = False,
                 raw_max: int = 0, checksum: bool = False):
        #: the last transaction read of each domain (where a restart resumes, capped: :attr:`position`)
        self.pos: Position = dict(GtidPos.parse(start))
        #: row changes of one transaction held in memory at most (None: no bound; 0: what
        #: ``MIGRATOR_CATCHUP_PART_CHANGES`` says in this process, 5,000 if unset)
        self.part_changes = part_changes_from_env() if part_changes == 0 else part_changes
        #: bytes of row events whose changes one transaction holds in memory at most (None: no bound;
        #: 0: ``MIGRATOR_CATCHUP_PART_BYTES`` in this process, 32 MiB if unset)
        self.part_bytes = part_bytes_from_env() if part_bytes == 0 else part_bytes
        self._parts: list[Committed | Iterator[Committed]] = []
        #: the last transaction read of each (domain, server); starts from what ``start`` names
        self.seen: State = state_of(self.pos)
        self.schemas = frozenset(schemas)
        self.tables = frozenset(tables) if tables else None
        self._maps: dict[int, TableMap | None] = {}
        self._shapes: dict[bytes, tuple[TableMap, Shape] | None] = {}
        self._by_table: dict[int, tuple[TableMap, Shape]] = {}
        self.new_shapes: list[Shape] = []
        self._txn: Txn | None = None
        self._standalone = False
        self._held: dict[bytes, Txn] = {}  # prepared XA groups, by xid
        self.transactions_read = 0
        self.last_ts = 0
        #: forward rows events whole (:data:`RAW` items, only their keys decoded) instead of decoded rows;
        #: an event longer than ``raw_max`` bytes (0: no limit) is decoded as usual (it would not fit
        #: the target's packet); ``checksum``: the events carry a CRC32 (set again when one changes)
        self.raw = raw
        self.raw_max = raw_max
        self.checksum = checksum
        #: the raw table-map event of each kept table id (raw mode)
        self._raw_maps: dict[int, bytes] = {}
        #: per shape id: (rows events counted, their bytes of rows, their rows) (raw mode)
        self._row_sizes: dict[int, list[int]] = {}
        #: the source's format description event, raw (raw mode); ``new_format``: not yet taken
        self.format: bytes = b""
        self.new_format = False

    # -- positions --------------------------------------------------------------------
    @property
    def position(self) -> Position:
        """Every transaction up to here was read whole (capped before unresolved XA prepares).

        A domain with prepared, unresolved transactions is capped just before the first of them in
        binlog order (the held ones are kept in the order read), never by comparing seq_nos: with a
        domain shared by two servers a later transaction may have the lower seq_no."""
        if not self._held:
            return dict(self.pos)
        out = dict(self.pos)
        capped: set[int] = set()
        for t in self._held.values():
            d = t.gtid.domain
            if d in capped:
                continue
            capped.add(d)
            if t.prev is None:
                out.pop(d, None)
            else:
                out[d] = t.prev
        return out

    @property
    def state(self) -> GtidState:
        """The last transaction read of each (domain, server) (a copy)."""
        return GtidState.copy_of(self.seen)

    def reaches(self, want: Iterable[Gtid]) -> bool:
        """This reader has read past every transaction of ``want`` (:func:`migrator.fleet.gtid.reaches`)."""
        return reaches(self.seen, want)

    def keep_table(self, schema: str, table: str) -> bool:
        return schema in self.schemas and (self.tables is None or table in self.tables)

    # -- events -------------------------------------------------------------------------
    def feed(self, ev: bl.Event) -> Committed | None:
        """Take one event; return a transaction when one of kept rows or statements ended.

        What is done with it depends on its type only (:attr:`_ON`); a type with no handler there
        (a heartbeat, an annotation, a GTID list) is read past."""
        on = self._ON.get(ev.type)
        return None if on is None else on(self, ev)

    def _on_rows(self, ev: bl.Event) -> None:
        """A row event: its row changes, decoded, join the open transaction (a table not kept: skipped
        undecoded)."""
        txn = self._txn
        if txn is None:
            return None
        t = ev.type
        body = ev.body
        tid = int.from_bytes(body[0:6], "little")
        entry = self._by_table.get(tid)
        if entry is None:
            if self.raw and body[6] & 1:
                self._end_forwarded_statement(txn)
            return None  # a table we do not keep: never decoded
        if t in _COMPRESSED:
            body = bl.decompress(body, 8)
        tm, shape = entry
        _, _, p = rows_header(body, t in _V2)
        kind = _KIND[t]
        if self.raw and (not self.raw_max or len(ev.raw) <= self.raw_max):
            learnt = self._row_sizes.get(shape.id)
            if learnt is None:
                learnt = self._row_sizes[shape.id] = [0, 0, 0]
            keys: tuple[tuple[str, ...], ...] | None = None
            if learnt[0] < LEARN_EVENTS:  # decode this one's keys: the count is exact, and it teaches the size
                found, n = decode_keys(body, tm, kind, p)
                keys = tuple(found)
                learnt[0] += 1
                learnt[1] += len(body) - p
                learnt[2] += n
            else:
                n = max(1, round((len(body) - p) * learnt[2] / learnt[1])) if learnt[1] else 1
            txn.changes.append((shape.id, RAW, keys, self._raw_maps[tid], ev.raw, n))  # type: ignore[arg-type]
            txn.size += len(ev.body)
            self._parts.extend(txn.bound(self.part_changes, self.part_bytes))
            return None
        rows = decode_rows(body, tm, kind, p)
        pk = tm.pk
        ch = txn.changes
        sid = shape.id
        if kind == WRITE:
            for r in rows:
                ch.append((sid, WRITE, tuple(r[i] for i in pk), None, r))  # type: ignore[index]
        elif kind == DELETE:
            for r in rows:
                ch.append((sid, DELETE, tuple(r[i] for i in pk), None, None))  # type: ignore[index]
        else:
            for before, after in rows:  # type: ignore[misc]
                kb = tuple(before[i] for i in pk)
                ka = tuple(after[i] for i in pk)
                ch.append((sid, UPDATE, ka, kb if kb != ka else None, after))
        txn.size += len(ev.body)
        self._parts.extend(txn.bound(self.part_changes, self.part_bytes))
        return None

    def _on_table_map(self, ev: bl.Event) -> None:
        self._table_map(ev.body)
        if self.raw:
            tid = int.from_bytes(ev.body[0:6], "little")
            if tid in self._by_table:
                self._raw_maps[tid] = ev.raw
            else:
                self._raw_maps.pop(tid, None)

    def _end_forwarded_statement(self, txn: Txn) -> None:
        """A statement ended on an event of a table that does not move (dropped): its end flag goes onto
        the last forwarded event of the statement, if it is still held (one handed out already ends its
        ``BINLOG`` statement anyway: :mod:`.forward`)."""
        ch = txn.changes
        if ch and ch[-1][1] == RAW and not ends_statement(ch[-1][4]):  # type: ignore[arg-type]
            sid, kind, keys, tm, raw, rows = ch[-1]  # type: ignore[misc]
            ch[-1] = (sid, kind, keys, tm, with_statement_end(raw, self.checksum), rows)  # type: ignore[assignment]

    def _on_format(self, ev: bl.Event) -> None:
        """The source's format description event: the fast path sends it to the target first (raw mode)."""
        if self.raw and ev.raw and ev.raw != self.format:
            self.format = ev.raw
            self.new_format = True

    def _on_gtid(self, ev: bl.Event) -> None:
        """A GTID event opens a transaction (a stand-alone group, an XA group with its xid)."""
        body = ev.body
        seq = int.from_bytes(body[0:8], "little")
        domain = int.from_bytes(body[8:12], "little")
        flags2 = body[12]
        self._txn = Txn(Gtid(domain, ev.server_id, seq), ev.timestamp)
        self._standalone = bool(flags2 & FL_STANDALONE)
        if flags2 & (FL_PREPARED_XA | FL_COMPLETED_XA):
            self._txn.xid = _gtid_xid(body, flags2)

    def _on_xid(self, ev: bl.Event) -> Committed | None:
        return self._end()

    def _on_query(self, ev: bl.Event) -> Committed | None:
        """A statement: ``BEGIN``/``COMMIT``, a savepoint, a ``ROLLBACK``, an XA verb, or one handed over
        as a :class:`Statement`."""
        body = ev.body if ev.type == bl.QUERY else _inflate_query(ev.body)
        schema, q = _query_text(body)
        head = q.lstrip()[:12].upper()
        if head.startswith("BEGIN") or head.startswith("XA START") or head.startswith("XA END"):
            return None
        if head.startswith("COMMIT"):
            return self._end()
        if head.startswith(("SAVEPOINT", "ROLLBACK", "RELEASE")):
            sp = savepoint_statement(q)
            if sp is not None:
                self._savepoint(*sp)
                return None
            if head.startswith("ROLLBACK"):
                if not _FULL_ROLLBACK.match(q):
                    raise ReaderError(f"a ROLLBACK the binlog reader does not understand ends a transaction "
                                      f"after {format_pos(self.pos)}: `{q[:200]}`; catch-up cannot tell which "
                                      "of its changes were undone")
                # nothing of it reached the moving (transactional: preflight) tables; read past it, so
                # a target naming this group (the last one logged) is reached
                txn, self._txn = self._txn, None
                if txn is not None:
                    txn.discard()
                    self._advance(txn)
                return None
        if head.startswith("XA COMMIT") or head.startswith("XA ROLLBACK"):
            return self._complete_xa(commit=head.startswith("XA COMMIT"))
        txn = self._txn
        if txn is not None and self._mentions(schema, q):
            txn.statements.append(Statement(schema, q))
        # a statement may change any table's shape: forget the table maps read so far
        self._maps.clear()
        self._by_table.clear()
        self._raw_maps.clear()
        if self._standalone:
            return self._end()
        return None

    def _on_xa_prepare(self, ev: bl.Event) -> Committed | None:
        """``XA PREPARE`` ends a group that is held until its ``XA COMMIT`` or ``XA ROLLBACK`` (a one-phase
        one commits now)."""
        one_phase = ev.body[0]
        if one_phase:
            return self._end()
        txn = self._txn
        self._txn = None
        if txn is None:
            return None
        self._advance(txn)
        if txn.xid is None:
            raise ReaderError(f"an XA PREPARE at {txn.gtid} carries no xid in its GTID event")
        self._held[txn.xid] = txn
        return None

    def _on_rotate(self, ev: bl.Event) -> None:
        # a server restart reuses table ids and always starts a new binlog file
        self._maps.clear()
        self._by_table.clear()
        self._raw_maps.clear()

    def _on_start_encryption(self, ev: bl.Event) -> None:
        raise ReaderError("the source sent an encrypted binlog event stream; catch-up reads plain events")

    #: event type -> what :meth:`feed` does with it
    _ON: ClassVar[dict[int, Callable[[TxnReader, bl.Event], Committed | None]]] = {
        **dict.fromkeys(_KIND, _on_rows),
        bl.TABLE_MAP: _on_table_map,
        bl.GTID: _on_gtid,
        bl.XID: _on_xid,
        bl.QUERY: _on_query,
        bl.QUERY_COMPRESSED: _on_query,
        bl.XA_PREPARE: _on_xa_prepare,
        bl.ROTATE: _on_rotate,
        bl.START_ENCRYPTION: _on_start_encryption,
        bl.FORMAT_DESCRIPTION: _on_format,
    }

    def _savepoint(self, verb: str, name: str) -> None:
        txn = self._txn
        if txn is None:
            return
        if verb == "set":
            txn.savepoint(name)
        elif verb == "rollback_to":
            txn.rollback_to(name)
        else:
            txn.release(name)

    def _mentions(self, schema: str, q: str) -> bool:
        if schema in self.schemas:
            return True
        low = q.lower()
        return any(s.lower() in low for s in self.schemas)

    def _table_map(self, body: bytes) -> None:
        tid = int.from_bytes(body[0:6], "little")
        key = body[6:]  # everything but the table id: the table and its shape
        entry = self._shapes.get(key, _MISSING)
        if entry is _MISSING:
            entry = self._new_table_map(body, key)
        if entry is None:
            self._by_table.pop(tid, None)
        else:
            self._by_table[tid] = entry

    def _new_table_map(self, body: bytes, key: bytes) -> tuple[TableMap, Shape] | None:
        schema, table, _ = table_map_names(body)
        if not self.keep_table(schema, table):
            self._shapes[key] = None
            return None
        tm = parse_table_map(body)
        try:
            tm.check()
            tm.decoder()
        except RowFormatError as exc:
            raise ReaderError(str(exc)) from None
        shape = Shape(len(self._shapes) + 1, schema, table, tm.names, tm.pk)
        self._shapes[key] = (tm, shape)
        self.new_shapes.append(shape)
        return (tm, shape)

    def _advance(self, txn: Txn) -> None:
        g = txn.gtid
        txn.prev = self.pos.get(g.domain)
        self.pos[g.domain] = g
        txn.prev_seen = self.seen.get((g.domain, g.server))
        if txn.prev_seen is None or txn.prev_seen < g.seq:
            self.seen[(g.domain, g.server)] = g.seq
        self.transactions_read += 1
        self.last_ts = txn.timestamp

    def take_parts(self) -> Iterator[Committed]:
        """The parts made since the last call, in order (spilled ones read back lazily). When a
        transaction that had spilled ended, its spilled parts come here, then its end (not
        ``partial``): the position moves past it only after its last part was taken."""
        out, self._parts = self._parts, []
        for p in out:
            if isinstance(p, Committed):
                yield p
            else:
                yield from p

    def _finish_held(self, txn: Txn) -> Iterator[Committed]:
        """A transaction that spilled, at its commit: its spilled parts, then (its position moved past
        it) its end."""
        yield from txn.held_parts()
        self._advance(txn)
        yield txn.done()  # its end, even with no change left: one transaction for whoever counts them

    def _end(self) -> Committed | None:
        txn = self._txn
        self._txn = None
        if txn is None:
            return None
        if txn.spill is not None:
            self._parts.append(self._finish_held(txn))
            return None
        self._advance(txn)
        # a transaction that left in parts ends with its end even when its last part took every change
        return txn.done() if (txn.changes or txn.statements or txn.streamed) else None

    def _complete_xa(self, *, commit: bool) -> Committed | None:
        txn = self._txn
        self._txn = None
        if txn is None:
            return None
        held = self._held.get(txn.xid) if txn.xid is not None else None
        if held is None:
            self._advance(txn)
            if commit and txn.xid is not None:
                raise ReaderError(
                    f"XA COMMIT at {txn.gtid} ends a transaction prepared before catch-up's start position: its "
                    "rows were neither in the copy nor in the binlog read; redo the copy (`migrator restart-copy "
                    "ID`) once no XA transaction is left prepared on the source (XA RECOVER)")
            return None
        xid = txn.xid
        if not commit:
            self._held.pop(xid, None)
            self._advance(txn)
            held.discard()
            return None  # rolled back: nothing of it applies
        txn.changes = held.changes
        txn.statements = held.statements
        txn.size = held.size
        txn.spill, held.spill = held.spill, None
        if txn.spill is not None:
            # the prepare stays held (the position capped before it) until its last part was taken
            self._parts.append(self._finish_xa(txn, xid))
            return None
        self._held.pop(xid, None)
        self._advance(txn)
        # a transaction that left in parts ends with its end even when its last part took every change
        return txn.done() if (txn.changes or txn.statements or txn.streamed) else None

    def _finish_xa(self, txn: Txn, xid: bytes) -> Iterator[Committed]:
        yield from txn.held_parts()
        self._held.pop(xid, None)
        self._advance(txn)
        if txn.changes or txn.statements:
            yield txn.done()

    def take_shapes(self) -> list[Shape]:
        out, self.new_shapes = self.new_shapes, []
        return out


def _inflate_query(body: bytes) -> bytes:
    sv_len = body[11] | body[12] << 8
    db_len = body[8]
    head = 13 + sv_len + db_len + 1
    return bl.decompress(body, head)


class LocalReader:
    """The reader in the calling process, for short segments and key collection (verify, the
    cutover, write-rate samples): no process of its own, no decoding ahead.

    ``transactions(until, deadline)`` yields kept transactions, and ``None`` at
    least every ``tick_s`` so the caller can look at :attr:`position` and the time.
    """

    def __init__(self, address: str, port: int, user: str, password: str, start: str, schemas: Iterable[str],
                 tables: Iterable[str] | None = None, *, heartbeat_s: float = 0.2, tls: MySQLTLS | None = None,
                 part_changes: int | None = 0, part_bytes: int | None = 0):
        self.client = bl.BinlogClient(address, port, user, password, start, heartbeat_s=heartbeat_s, tls=tls)
        self.reader = TxnReader(start, schemas, tables, part_changes=part_changes, part_bytes=part_bytes)

    @property
    def position(self) -> str:
        return format_pos(self.reader.position)

    def position_before(self, txn: Committed) -> str:
        """:attr:`position` as it was just before ``txn`` (the last one yielded)."""
        return format_pos(pos_before(self.reader.position, txn.gtid, txn.prev))

    def transactions(self, until: str | None = None, *, deadline: float | None = None,
                     tick_s: float = 0.1) -> Iterator[Committed | None]:
        """Kept transactions up to ``until`` (a position or state text whose every transaction has then
        been read: :meth:`TxnReader.reaches`), or until ``deadline``. A transaction over the reader's
        memory bound comes in parts (``partial`` set) before its end."""
        want = wanted(until)
        if want is not None and self.reader.reaches(want):
            return
        last = time.monotonic()
        for ev in self.client.events():
            txn = self.reader.feed(ev)
            yield from self.reader.take_parts()
            if txn is not None:
                yield txn
            if want is not None and self.reader.reaches(want):
                return
            now = time.monotonic()
            if now - last >= tick_s or ev.type == bl.HEARTBEAT:
                last = now
                yield None
            if deadline is not None and now >= deadline:
                return

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> LocalReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
