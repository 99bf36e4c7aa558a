"""Applier: writes binlog row changes to the target idempotently, in batches.

Runs in the catch-up worker (and in the cutover process for the final drain),
with one connection to the target master. The target pair replicates the
writes to its standby as usual (they are binlogged on the target).

Idempotent by primary key (replaying from an earlier position converges):

* insert and update -> ``REPLACE`` of the after image;
* delete -> ``DELETE`` by key;
* an update that changes the key -> delete the old key, ``REPLACE`` the new
  row. The queue's jobs table is keyed on ``(local_id, state, updated_at)``,
  so every state change is a key change: a plain REPLACE of the after image
  would leave the old row behind.

A batch first collapses its changes per table and key (the last change of a
key wins; earlier ones are dead), then runs one multi-row ``DELETE`` and one
multi-row ``REPLACE`` per table and column set, all in one transaction. Keys
touched in a batch are distinct after collapsing, so the order of the
statements inside the batch does not matter.

Statements (DDL) on moving tables are classified by
:func:`~migrator.engine.catch_up.statements.classify`: what it marks safe is
replayed on the target (rewritten onto the target schema); anything unsafe
stops the migration with :class:`UnsafeStatement`. Replaying an already applied
partition or index statement (a replay after a crash) fails with a "does not
exist / already exists" error, which counts as applied.

``schema_map`` maps source schema -> target schema, so the same applier serves
the reverse tail of a rollback (new master -> tombstone schema).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pymysql
from pymysqlreplication.constants import FIELD_TYPE
from pymysqlreplication.row_event import DeleteRowsEvent, RowsEvent, UpdateRowsEvent, WriteRowsEvent
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from migrator.engine.catch_up.statements import classify, short
from migrator.engine.catch_up.streamer import Statement
from migrator.errors import MigratorError
from migrator.fleet.mysql import ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT, ident, qualified, tag

log = logging.getLogger(__name__)

TAG = tag("catchup")

#: target errors that mean "this DDL was applied already" (a replay after a crash)
ALREADY_APPLIED = {
    1507,  # ER_DROP_PARTITION_NON_EXISTENT: partition listed does not exist
    1517,  # ER_SAME_NAME_PARTITION: duplicate partition name
    1061,  # ER_DUP_KEYNAME
    1091,  # ER_CANT_DROP_FIELD_OR_KEY
}

MAX_ROWS_PER_STATEMENT = 500
MAX_BYTES_PER_STATEMENT = 4 << 20


class ApplierError(MigratorError):
    component = "applier"


class UnsafeStatement(ApplierError):
    """A statement on a moving table cannot be carried over to the target safely."""


# -- row changes ---------------------------------------------------------------------

@dataclass(slots=True)
class _TableOps:
    key_cols: tuple[str, ...]
    upserts: dict[Any, tuple[tuple[str, ...], tuple[Any, ...]]] = field(default_factory=dict)
    deletes: dict[Any, tuple[Any, ...]] = field(default_factory=dict)


class _Shape:
    """How to turn one table map's decoded rows into SQL values."""

    __slots__ = ("columns", "names", "key_cols", "key_idx", "fixes")

    def __init__(self, ev: RowsEvent):
        self.columns = ev.columns
        self.names = tuple(c.name for c in ev.columns)
        pk = ev.primary_key
        if not pk:
            raise ApplierError(
                f"{ev.schema}.{ev.table} has no primary key in the binlog's table map: catch-up applies by "
                "primary key only (preflight requires one; check binlog_row_metadata=FULL on the source)"
            )
        self.key_cols = (pk,) if isinstance(pk, str) else tuple(pk)
        self.key_idx = tuple(self.names.index(c) for c in self.key_cols)
        fixes: list[tuple[int, Any]] = []
        for i, c in enumerate(ev.columns):
            if c.type == FIELD_TYPE.STRING and c.character_set_name == "binary" and getattr(c, "max_length", 0):
                # BINARY(n): the binlog drops trailing 0x00; the key compare needs them back
                n = c.max_length
                fixes.append((i, lambda v, n=n: v.ljust(n, b"\0") if isinstance(v, bytes) else v))
            elif c.type == FIELD_TYPE.SET:
                order = list(c.set_values or [])
                fixes.append((i, lambda v, order=order: ",".join(x for x in order if x in v)
                              if isinstance(v, (set, frozenset)) else v))
        self.fixes = tuple(fixes)

    def values(self, row: dict[str, Any], none_sources: dict[str, str] | None = None) -> tuple[Any, ...]:
        vals = [row[n] for n in self.names]
        for i, fix in self.fixes:
            vals[i] = fix(vals[i])
        if none_sources:
            # the reader turns some non-NULL values into None; its none_sources say why
            for name, why in none_sources.items():
                if why != "null":
                    vals[self.names.index(name)] = _not_null(name, why)
        return tuple(vals)

    def key(self, vals: tuple[Any, ...]) -> tuple[Any, ...]:
        return tuple(vals[i] for i in self.key_idx)


_NOT_NULL = {
    "empty set": "",
    "out of date range": "0000-00-00",
    "out of datetime range": "0000-00-00 00:00:00",
    "out of datetime2 range": "0000-00-00 00:00:00",
}


def _not_null(name: str, why: str) -> Any:
    try:
        return _NOT_NULL[why]
    except KeyError:
        raise ApplierError(
            f"column {name}: the binlog row has no value ({why}); catch-up needs binlog_row_image=FULL "
            "and full JSON images (binlog_row_value_options empty) on the source"
        ) from None


@dataclass
class BatchStats:
    transactions: int = 0
    events: int = 0  # row changes read
    rows_replaced: int = 0
    rows_deleted: int = 0
    statements: int = 0
    statements_skipped: int = 0


class Applier:
    """Applies row changes and statements to one target master.

    ``connect``: opens a PyMySQL connection to the target (called again after
    the connection is lost). ``schema_map``: source schema -> target schema
    (identity when absent).
    """

    def __init__(self, connect: Callable[[], pymysql.connections.Connection],
                 schema_map: Mapping[str, str] | None = None,
                 *, tables: Iterable[str] | None = None, retries: int = 5):
        self._connect = connect
        self._conn: pymysql.connections.Connection | None = None
        self.schema_map = dict(schema_map or {})
        self.tables = set(tables) if tables else None
        self._shapes: dict[int, tuple[Any, _Shape]] = {}
        self._pending: dict[tuple[str, str], _TableOps] = {}
        self.pending_events = 0
        self.stats = BatchStats()
        self._retrying = Retrying(
            stop=stop_after_attempt(retries),
            wait=wait_exponential(multiplier=0.05, max=2),
            retry=retry_if_exception(_retryable),
            reraise=True,
        )
        self.conn  # noqa: B018 - the property connects now: a wrong target fails early

    @property
    def conn(self) -> pymysql.connections.Connection:
        if self._conn is None or not self._conn.open:
            conn = self._connect()
            conn.autocommit(False)
            with conn.cursor() as cur:
                # the binlog reader decodes TIMESTAMP columns as naive UTC datetimes
                cur.execute(TAG + "SET SESSION time_zone = '+00:00', foreign_key_checks = 0")
            self._conn = conn
        return self._conn

    def _drop_connection(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # already broken
                pass
            self._conn = None

    def target_schema(self, schema: str) -> str:
        return self.schema_map.get(schema, schema)

    # -- collecting -----------------------------------------------------------------------
    def _shape(self, ev: RowsEvent) -> _Shape:
        cols = ev.columns
        hit = self._shapes.get(id(cols))
        if hit is not None and hit[0] is cols:
            return hit[1]
        shape = _Shape(ev)
        self._shapes[id(cols)] = (cols, shape)
        return shape

    def add(self, events: Iterable[RowsEvent]) -> int:
        """Collapse the row changes of one transaction into the pending batch."""
        n = 0
        for ev in events:
            shape = self._shape(ev)
            tkey = (ev.schema, ev.table)
            ops = self._pending.get(tkey)
            if ops is None or ops.key_cols != shape.key_cols:
                if ops is not None:  # the key changed shape mid-batch: write what we have first
                    self.flush_rows()
                ops = self._pending[tkey] = _TableOps(shape.key_cols)
            ups, dels = ops.upserts, ops.deletes
            names = shape.names
            cls = ev.__class__
            if cls is WriteRowsEvent:
                for row in ev.rows:
                    vals = shape.values(row["values"], row["none_sources"])
                    k = shape.key(vals)
                    dels.pop(k, None)
                    ups[k] = (names, vals)
            elif cls is DeleteRowsEvent:
                for row in ev.rows:
                    vals = shape.values(row["values"], row["none_sources"])
                    k = shape.key(vals)
                    ups.pop(k, None)
                    dels[k] = k
            elif cls is UpdateRowsEvent:
                for row in ev.rows:
                    before = shape.values(row["before_values"], row["before_none_sources"])
                    after = shape.values(row["after_values"], row["after_none_sources"])
                    kb, ka = shape.key(before), shape.key(after)
                    if kb != ka:
                        ups.pop(kb, None)
                        dels[kb] = kb
                        dels.pop(ka, None)
                    ups[ka] = (names, after)
            n += len(ev.rows)
        self.pending_events += n
        self.stats.events += n
        return n

    # -- writing ----------------------------------------------------------------------------
    def flush_rows(self) -> tuple[int, int]:
        """Write the pending batch in one target transaction. Returns (replaced, deleted)."""
        batch = self.take_batch()
        return self.write_batch(batch) if batch else (0, 0)

    def take_batch(self) -> dict[tuple[str, str], _TableOps] | None:
        """Hand over the pending batch (to write with :meth:`write_batch`), starting a new one."""
        if not self._pending:
            return None
        batch = self._pending
        self._pending = {}
        self.pending_events = 0
        return batch

    def write_batch(self, batch: dict[tuple[str, str], _TableOps]) -> tuple[int, int]:
        """Write one batch in one target transaction, retrying deadlocks and lost
        connections (the batch is idempotent). Not to be run concurrently with
        another write of this applier."""
        replaced = deleted = 0
        for attempt in self._retrying:
            with attempt:
                replaced, deleted = self._write(batch)
        self.stats.rows_replaced += replaced
        self.stats.rows_deleted += deleted
        return replaced, deleted

    def _write(self, pending: dict[tuple[str, str], _TableOps]) -> tuple[int, int]:
        conn = self.conn
        replaced = deleted = 0
        try:
            with conn.cursor() as cur:
                cur.execute("BEGIN")
                for (schema, table), ops in pending.items():
                    target = qualified(self.target_schema(schema), table)
                    if ops.deletes:
                        deleted += self._delete(cur, target, ops.key_cols, list(ops.deletes.values()))
                    if ops.upserts:
                        replaced += self._replace(cur, target, list(ops.upserts.values()))
            conn.commit()
        except BaseException as exc:
            try:
                conn.rollback()
            except Exception:  # the connection is gone: the retry reconnects
                self._drop_connection()
            if isinstance(exc, (pymysql.err.InterfaceError, pymysql.err.OperationalError)) and _lost(exc):
                self._drop_connection()
            raise
        return replaced, deleted

    def _delete(self, cur: Any, target: str, key_cols: tuple[str, ...], keys: list[tuple[Any, ...]]) -> int:
        esc = self.conn.escape
        n = 0
        if len(key_cols) == 1:
            col = ident(key_cols[0])
            for i in range(0, len(keys), MAX_ROWS_PER_STATEMENT):
                chunk = keys[i:i + MAX_ROWS_PER_STATEMENT]
                cur.execute(f"{TAG}DELETE FROM {target} WHERE {col} IN ({','.join(esc(k[0]) for k in chunk)})")
                n += len(chunk)
        else:
            cols = [ident(c) for c in key_cols]
            for i in range(0, len(keys), MAX_ROWS_PER_STATEMENT):
                chunk = keys[i:i + MAX_ROWS_PER_STATEMENT]
                where = " OR ".join(
                    "(" + " AND ".join(f"{c}={esc(v)}" for c, v in zip(cols, k)) + ")" for k in chunk
                )
                cur.execute(f"{TAG}DELETE FROM {target} WHERE {where}")
                n += len(chunk)
        return n

    def _replace(self, cur: Any, target: str, rows: list[tuple[tuple[str, ...], tuple[Any, ...]]]) -> int:
        esc = self.conn.escape
        by_names: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}
        for names, vals in rows:
            by_names.setdefault(names, []).append(vals)
        n = 0
        for names, vals_list in by_names.items():
            head = f"{TAG}REPLACE INTO {target} ({','.join(ident(c) for c in names)}) VALUES "
            parts: list[str] = []
            size = len(head)
            for vals in vals_list:
                lit = "(" + ",".join(esc(v) for v in vals) + ")"
                if parts and (len(parts) >= MAX_ROWS_PER_STATEMENT or size + len(lit) > MAX_BYTES_PER_STATEMENT):
                    cur.execute(head + ",".join(parts))
                    parts, size = [], len(head)
                parts.append(lit)
                size += len(lit) + 1
            if parts:
                cur.execute(head + ",".join(parts))
            n += len(vals_list)
        return n

    # -- statements -------------------------------------------------------------------------
    def apply_statement(self, st: Statement, moving_schemas: Iterable[str]) -> str:
        """Carry one statement over. Returns "applied", "skipped" (already applied)
        or "ignored" (not about a moving table). Raises :class:`UnsafeStatement`."""
        decision = classify(st, set(moving_schemas), self.tables)
        if decision.action == "ignore":
            return "ignored"
        if decision.action == "unsafe":
            raise UnsafeStatement(decision.reason)
        self.flush_rows()
        sql = decision.render(self.target_schema)
        try:
            conn = self.conn
            with conn.cursor() as cur:
                cur.execute(TAG + sql)
            conn.commit()
        except pymysql.err.MySQLError as exc:
            code = exc.args[0] if exc.args else None
            if code in ALREADY_APPLIED:
                log.info("statement already applied on the target (%s): %s", exc.args[-1], sql)
                self.stats.statements_skipped += 1
                return "skipped"
            raise ApplierError(
                f"carrying over `{short(st.query)}` to the target failed: {exc.args[-1] if exc.args else exc}; "
                "fix the target table by hand and resume, or abort the migration"
            ) from None
        self.stats.statements += 1
        return "applied"

    def close(self) -> None:
        self._drop_connection()


def _lost(exc: BaseException) -> bool:
    if isinstance(exc, pymysql.err.InterfaceError):
        return True
    code = exc.args[0] if exc.args else None
    return code in (2006, 2013, 2003, 2055)


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, pymysql.err.OperationalError):
        code = exc.args[0] if exc.args else None
        return code in (ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT, 2006, 2013, 2003)
    return isinstance(exc, pymysql.err.InterfaceError)
