"""Which rows changed between two binlog positions: the keys the cutover re-checks.

Runs in the verify pass (to tell a live write from a real difference) and in
the cutover, whose compare under the fence looks only at the rows changed since
the last full check, so its cost follows the write rate, not the shard size.
Three ways to get those keys, cheapest first: a drainer that is a
:class:`KeyCollector` hands over the keys its own drain applied (no second
binlog reader); a :class:`ChangeTracker` started before the freeze keeps
reading in the background; :func:`changed_keys` reads the segment at once.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

from migrator.engine.verify.checksums import Key, TableInfo, VerifyError
from migrator.fleet.config import Credentials
from migrator.fleet.gtid import Gtid, GtidPos
from migrator.fleet.model import Host


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


class KeyCollector:
    """Collects the primary keys of the row events a catch-up tailer applies.

    Mixed into the drainers that own a :class:`~migrator.engine.catch_up.tailer.Tailer`: the
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
