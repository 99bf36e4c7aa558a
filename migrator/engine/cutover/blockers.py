"""Who holds the moving tables when a freeze runs out waiting for their locks.

Runs in the cutover process, after an attempt was undone and before it is
recorded (:func:`migrator.engine.cutover._cutover`). A freeze that ran out in
``fence`` (LOCK TABLES, the queued RENAMEs, or the master's write gate) or in
``passive_close`` (the passive member's write gate) waited for a metadata
lock some other connection holds: usually a client's open transaction on a
moving table. Raising the freeze budget only makes the next freeze longer; the
operator needs that connection, so the refusal names it (id, user, host, how
long, what it runs) and says to wait for it or end it.

Read from the server's own tables, with the PROCESS privilege:

- ``information_schema.METADATA_LOCK_INFO`` (the ``metadata_lock_info``
  plugin: ``INSTALL SONAME 'metadata_lock_info'``; the sandbox loads it) says
  exactly which connections hold a lock on which moving table;
- without the plugin, ``information_schema.INNODB_TRX`` lists the open
  transactions, oldest first: the server cannot say which tables they hold, and
  the line says so.

Both are joined to ``information_schema.PROCESSLIST`` for the user, the client
host, and the statement running (an idle transaction runs none).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import pymysql

from migrator.fleet.mysql import query, scalar, tag

TAG = tag("cutover")
#: the statements of the cutover's own fence and gates (never a blocker of the cutover itself)
OWN_TAGS = (tag("cutover"), tag("cutover-passive"))

#: the freeze steps that wait for a lock, and whose host they wait on
LOCK_STEPS = ("fence", "passive_close")
#: blockers named at most (the oldest first)
LIMIT = 5
#: a statement is shown up to this many characters
STATEMENT_CHARS = 160
#: without the plugin, only transactions open at least this long are named (a busy master has many short ones)
MIN_OPEN_S = 1


@dataclass
class Blocker:
    """One connection that holds (or, without the plugin, may hold) a moving table's lock."""

    server: str
    id: int
    user: str
    host: str
    #: how long its transaction has been open (else how long its statement has run), in seconds
    seconds: int
    #: what it runs now ("" when idle)
    statement: str
    #: what it holds: "db00004.pins (MDL_SHARED_WRITE)", or "an open transaction (...)"
    holds: str

    def describe(self) -> str:
        doing = f"running {self.statement!r}" if self.statement else "idle in a transaction"
        return (f"connection {self.id} ({self.user}@{self.host}, open {self.seconds} s, {doing}) holds "
                f"{self.holds}: wait for it to end, or end it (KILL {self.id} on {self.server})")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def has_lock_info(conn: pymysql.connections.Connection) -> bool:
    """The ``metadata_lock_info`` plugin is active on this server."""
    return bool(scalar(conn, f"{TAG}SELECT COUNT(*) FROM information_schema.PLUGINS "
                             "WHERE PLUGIN_NAME = 'METADATA_LOCK_INFO' AND PLUGIN_STATUS = 'ACTIVE'"))


def read_blockers(conn: pymysql.connections.Connection, tables: list[tuple[str, str]], *, server: str,
                  use_plugin: bool | None = None) -> list[Blocker]:
    """The connections (not this one) that hold a lock on one of ``tables`` (``(db, table)``), oldest first;
    without the plugin (or with ``use_plugin=False``), the transactions open on the server."""
    if use_plugin is None:
        use_plugin = has_lock_info(conn)
    return _from_lock_info(conn, tables, server) if use_plugin else _from_transactions(conn, server)


def _statement(info: Any) -> str:
    text = " ".join(str(info or "").split())
    return text if len(text) <= STATEMENT_CHARS else text[:STATEMENT_CHARS - 3] + "..."


def _from_lock_info(conn: pymysql.connections.Connection, tables: list[tuple[str, str]],
                    server: str) -> list[Blocker]:
    wanted = {(db, t) for db, t in tables}
    dbs = sorted({db for db, _ in wanted})
    if not dbs:
        return []
    marks = ", ".join(["%s"] * len(dbs))
    rows = query(conn, f"{TAG}SELECT m.THREAD_ID, m.TABLE_SCHEMA, m.TABLE_NAME, m.LOCK_MODE, p.USER, p.HOST, "
                       "p.TIME, p.INFO, TIMESTAMPDIFF(SECOND, t.trx_started, NOW()) "
                       "FROM information_schema.METADATA_LOCK_INFO m "
                       "JOIN information_schema.PROCESSLIST p ON p.ID = m.THREAD_ID "
                       "LEFT JOIN information_schema.INNODB_TRX t ON t.trx_mysql_thread_id = m.THREAD_ID "
                       f"WHERE m.THREAD_ID <> CONNECTION_ID() AND m.TABLE_SCHEMA IN ({marks})", tuple(dbs))
    by_id: dict[int, Blocker] = {}
    for tid, db, table, mode, user, host, time_s, info, trx_s in rows:
        if (db, table) not in wanted or str(info or "").startswith(OWN_TAGS):
            continue  # another table of a moving db, or this cutover's own fence or gate still letting go
        held = f"{db}.{table} ({mode})"
        b = by_id.get(int(tid))
        if b is None:
            by_id[int(tid)] = Blocker(server, int(tid), str(user), str(host),
                                      int(trx_s if trx_s is not None else time_s or 0), _statement(info), held)
        elif held not in b.holds:
            b.holds += f", {held}"
    return sorted(by_id.values(), key=lambda b: -b.seconds)[:LIMIT]


def _from_transactions(conn: pymysql.connections.Connection, server: str) -> list[Blocker]:
    rows = query(conn, f"{TAG}SELECT t.trx_mysql_thread_id, p.USER, p.HOST, p.INFO, "
                       "TIMESTAMPDIFF(SECOND, t.trx_started, NOW()), t.trx_tables_locked, t.trx_rows_locked "
                       "FROM information_schema.INNODB_TRX t "
                       "JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id "
                       "WHERE t.trx_mysql_thread_id <> CONNECTION_ID() "
                       "AND t.trx_started <= NOW() - INTERVAL %s SECOND "
                       "ORDER BY t.trx_started LIMIT %s", (MIN_OPEN_S, LIMIT))
    return [Blocker(server, int(tid), str(user), str(host), int(age or 0), _statement(info),
                    f"an open transaction ({int(tables or 0)} tables, {int(locked or 0)} rows locked; which "
                    "tables: the server says with the metadata_lock_info plugin)")
            for tid, user, host, info, age, tables, locked in rows]


def after_overrun(run: Any) -> list[Blocker]:
    """The blockers of an attempt whose freeze ran out (or failed) waiting for a lock: read on the host the
    pending step waited on (the source master in ``fence``, the passive member in ``passive_close``);
    [] when the attempt stopped in another step, or when they cannot be read (the refusal stands without
    them)."""
    from migrator.fleet.mysql import connect as mysql_connect

    if run.t_freeze is None:
        return []
    step = run.overrun_step or run.pending_step()
    if step not in LOCK_STEPS:
        return []
    host = run.passive_gate.host if step == "passive_close" else run.source
    try:
        with mysql_connect(host, run.creds, read_timeout=10) as conn:
            return read_blockers(conn, [(t.db, t.table) for t in run.tables], server=host.name)
    except Exception:  # noqa: BLE001 - the refusal is worth more than its detail
        return []


def named(refusal: str, blockers: list[Blocker]) -> str:
    """A refusal with its blockers named after it (unchanged without any)."""
    if not blockers:
        return refusal
    return refusal.rstrip(". ") + ". Blocked by " + "; ".join(b.describe() for b in blockers) + "."
