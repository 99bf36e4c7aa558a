"""Which rows changed between two binlog positions: the keys the cutover re-checks.

Runs in the verify pass (to tell a live write from a real difference) and in
the cutover, whose compare under the fence looks only at the rows changed since
the last full check, so its cost follows the write rate, not the shard size.
Three ways to get those keys, cheapest first: a drainer that is a
:class:`KeyCollector` hands over the keys its own drain applied (no second
binlog reader); a :class:`ChangeTracker` started before the freeze keeps
reading in the background; :func:`changed_keys` reads the segment at once.

A statement in the window that changes rows without row events (``DROP`` or
``TRUNCATE PARTITION``, ``TRUNCATE TABLE``) adds the key
:data:`~migrator.engine.catch_up.statements.WHOLE_TABLE` to its table's set:
:func:`~migrator.engine.verify.repair.check_rows` then compares that table whole.

Keys from the binlog are :class:`~migrator.engine.verify.checksums.LiteralKey`
tuples: the primary-key values as the SQL literals the binlog decoder renders
(:mod:`migrator.engine.binlog.rows`), exact for every column type and character
set. They select rows (``WHERE (pk) IN (...)``); the rows found come back as
ordinary values. :func:`as_values` turns literal keys into those values.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pymysql

from migrator.engine.binlog.reader import LocalReader, wanted
from migrator.engine.catch_up.statements import WHOLE_TABLE, classify
from migrator.engine.verify.checksums import Key, LiteralKey, TableInfo, VerifyError, keys_of
from migrator.engine.verify.waits import Stall, Stalled
from migrator.fleet.config import Credentials
from migrator.fleet.gtid import GtidPos, GtidState
from migrator.fleet.model import Host
from migrator.fleet.mysql import tls_of


def _reader(host: Host, creds: Credentials, tables: Sequence[TableInfo], since: str) -> LocalReader:
    return LocalReader(host.address, host.port, creds.mysql_user, creds.mysql_password, since,
                       sorted({t.db for t in tables}), sorted({t.table for t in tables}), tls=tls_of(host, creds))


#: distinct keys of one table remembered at most (``MIGRATOR_CHANGED_KEYS_MAX``): past it the table is to be
#: compared whole (:data:`WHOLE_TABLE`), so a backfill of millions of rows costs no more memory than this
MAX_KEYS = int(os.environ.get("MIGRATOR_CHANGED_KEYS_MAX", "") or 200_000)
_WHOLE = LiteralKey(WHOLE_TABLE)


def note_key(keys: set[Key], key: Key, limit: int | None = None) -> None:
    """Remember ``key`` in ``keys``; past ``limit`` keys (:data:`MAX_KEYS`) the set becomes the one
    :data:`WHOLE_TABLE` key: every row of the table is to be compared."""
    if _WHOLE in keys or WHOLE_TABLE in keys:
        return
    keys.add(key)
    if len(keys) > (MAX_KEYS if limit is None else limit):
        keys.clear()
        keys.add(_WHOLE)


def _note(out: dict[str, set[Key]], names: dict[tuple[str, str], str], shapes: Any, txn: Any) -> None:
    if txn.statements:
        schemas = {s for s, _ in names}
        for st in txn.statements:
            # rows removed by a statement (DROP/TRUNCATE PARTITION, TRUNCATE TABLE) leave no row
            # events: such a table is compared whole (:data:`WHOLE_TABLE`)
            d = classify(st, schemas)
            if d.action != "ignore":
                for (schema, table), name in names.items():
                    if schema == d.schema and d.table in (table, "*"):
                        out[name].add(LiteralKey(WHOLE_TABLE))
    for sid, _kind, key, old_key, _row in txn.changes:
        sh = shapes[sid]
        name = names.get((sh.schema, sh.table))
        if name is not None:
            note_key(out[name], LiteralKey(key))
            if old_key is not None:
                note_key(out[name], LiteralKey(old_key))


@dataclass
class KeysRead:
    """What a :func:`changed_keys` read went through: transactions of the moving tables and their row
    changes (the size of the window in binlog)."""

    transactions: int = 0
    events: int = 0


def changed_keys(host: Host, creds: Credentials, tables: Sequence[TableInfo], since: str, until: str, *,
                 timeout: float = 10.0, stall_s: float | None = None,
                 read: KeysRead | None = None, phase: str = "verify") -> dict[str, set[Key]]:
    """Primary keys of ``tables`` that row events touched in ``(since, until]`` of ``host``'s binlog.

    Reads only that binlog segment, stopping at the commit that reaches
    ``until``, so its cost follows the writes since ``since``, not the table sizes.
    ``timeout``: the whole read's budget (under the freeze); with ``stall_s`` instead (outside it) the
    read goes on as long as it advances, and is given up after ``stall_s`` without progress
    (:class:`~migrator.engine.verify.waits.Stalled`, naming how far it got). ``read``: counts what was
    read, when given. ``phase``: the phase its errors carry (a cutover's or a rollback's re-check).
    """
    out: dict[str, set[Key]] = {t.name: set() for t in tables}
    if not tables or GtidState.parse(since).reaches(GtidState.parse(until)):
        return out
    names = {(t.db, t.table): t.name for t in tables}
    t0 = time.monotonic()
    read = read if read is not None else KeysRead()
    with _reader(host, creds, tables, since) as rd:
        shapes = _Shapes(rd)
        stall = None if stall_s is None else Stall(stall_s, (rd.position, 0))
        for txn in rd.transactions(until, deadline=None if stall is not None else t0 + timeout):
            if txn is not None:
                _note(out, names, shapes, txn)
                read.transactions += 1
                read.events += len(txn.changes)
            if stall is not None:
                # a transaction (or a part of one) read, or the position passed: progress
                stall.saw((rd.position, read.transactions))
                if stall.stalled():
                    break
        if not rd.reader.reaches(wanted(until) or []):
            if stall is not None:
                raise Stalled(f"reading the binlog of {host.name} from {since} to {until} made no progress for "
                              f"{stall_s:g}s: after {time.monotonic() - t0:.0f}s it had read up to {rd.position} "
                              f"({read.transactions} transactions of the moving tables); is {host.name} "
                              "reachable and its binlog still there? then try again", phase=phase)
            raise VerifyError(f"reading the binlog of {host.name} up to {until} took over {timeout:.1f}s",
                              phase=phase)
    return out


class _Shapes:
    """Shape ids of a :class:`LocalReader` -> shapes (the reader registers each on first sight)."""

    def __init__(self, rd: LocalReader):
        self.rd = rd
        self.by_id: dict[int, Any] = {}

    def __getitem__(self, sid: int) -> Any:
        sh = self.by_id.get(sid)
        if sh is None:
            for s in self.rd.reader.take_shapes():
                self.by_id[s.id] = s
            sh = self.by_id[sid]
        return sh


class ChangeTracker:
    """:func:`changed_keys` kept running: a binlog reader started before a freeze.

    Started from ``since`` on a thread of its own; it collects the primary keys
    of row changes of ``tables`` and the position read so far. Inside the
    freeze, :meth:`keys_until` only waits for the reader to pass the fence
    position (milliseconds), instead of opening a binlog connection and reading
    the segment then.
    """

    def __init__(self, host: Host, creds: Credentials, tables: Sequence[TableInfo], since: str):
        self.host = host
        self.creds = creds
        self.tables = list(tables)
        self.since = since
        self.pos = GtidPos.parse(since)
        #: what the reader has passed, per (domain, server): decides :meth:`keys_until`
        self.state: GtidState = GtidState.parse(since)
        self.keys: dict[str, set[Key]] = {t.name: set() for t in self.tables}
        self.error: BaseException | None = None
        self._cond = threading.Condition()
        self._stop = False
        self._rd: LocalReader | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> ChangeTracker:
        self._rd = _reader(self.host, self.creds, self.tables, self.since)
        names = {(t.db, t.table): t.name for t in self.tables}

        def run() -> None:
            assert self._rd is not None
            shapes = _Shapes(self._rd)
            try:
                for txn in self._rd.transactions(None):
                    if self._stop:
                        return
                    got: dict[str, set[Key]] = {n: set() for n in self.keys}
                    if txn is not None:
                        _note(got, names, shapes, txn)
                    with self._cond:
                        for n, ks in got.items():
                            for k in ks:
                                note_key(self.keys[n], k)
                        self.pos = GtidPos.copy_of(self._rd.reader.position)
                        self.state = self._rd.reader.state
                        self._cond.notify_all()
            except BaseException as exc:  # noqa: BLE001 - reported to the waiter
                if not self._stop:
                    with self._cond:
                        self.error = exc
                        self._cond.notify_all()

        self._thread = threading.Thread(target=run, name=f"change-tracker-{self.host.name}", daemon=True)
        self._thread.start()
        return self

    def keys_until(self, until: str, timeout: float, *, phase: str = "verify") -> dict[str, set[Key]]:
        """Keys changed in ``(since, until]`` (and possibly a little after): waits for the reader.
        ``phase``: the phase its errors carry."""
        target = GtidState.parse(until)
        with self._cond:
            ok = self._cond.wait_for(lambda: self.error is not None or self.state.reaches(target), timeout)
            if self.error is not None:
                raise VerifyError(f"the binlog reader on {self.host.name} failed: {self.error}", phase=phase)
            if not ok:
                raise VerifyError(f"the binlog reader on {self.host.name} did not reach {until} within "
                                  f"{timeout:.2f}s (at {self.pos})", phase=phase)
            return {k: set(v) for k, v in self.keys.items()}

    def stop(self) -> None:
        self._stop = True
        if self._rd is not None:
            self._rd.close()  # ends a blocked read
        if self._thread is not None:
            self._thread.join(timeout=2)


def as_values(sides: Iterable[tuple[pymysql.connections.Connection, TableInfo]], keys: Iterable[Key]) -> set[Key]:
    """Literal keys as the key values a query returns, looked up on every given (connection, table).

    A row deleted on one side is found on the other; a key found on neither
    side names no row at all, and no row can differ there.
    """
    lits = [k for k in keys if isinstance(k, LiteralKey)]
    out: set[Key] = {k for k in keys if not isinstance(k, LiteralKey)}
    if lits:
        for conn, t in sides:
            out |= keys_of(conn, t, lits)
    return out


class KeyCollector:
    """Collects the primary keys of the row changes a catch-up tailer applies.

    Mixed into the drainers that own a :class:`~migrator.engine.catch_up.tailer.Tailer`: the
    cutover starts collecting right after its last drain before the freeze,
    and the drain under the fence then yields exactly the keys changed since,
    with no second binlog reader. The cutover checks that the sentinel row it
    wrote is among them before trusting the set.
    """

    _tailer: Any

    @property
    def position(self) -> str | None:
        """Everything up to here is applied (None before the first drain)."""
        return None if self._tailer is None else str(self._tailer.applied)

    def collect(self, keys: dict[tuple[str, str], tuple[str, ...]]) -> bool:
        """Start collecting keys of ``{(schema, table): pk columns}``; False if not possible."""
        if self._tailer is None:
            return False
        self._tailer.collect(keys)
        return True

    def collected(self) -> dict[tuple[str, str], set[Key]]:
        if self._tailer is None:
            return {}
        return {k: {LiteralKey(x) for x in v} for k, v in self._tailer.collected().items()}
