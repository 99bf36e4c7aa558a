"""Metadata locks on live tables: who holds them, and how to take one without making clients queue.

Runs wherever the migrator changes a table that clients use: the cutover's
write gates (``CREATE TRIGGER`` / ``DROP TRIGGER`` on the source pair's
members), the passive member's tombstone renames after the flip (``LOCK
TABLES``), the settler's and reconcile's undo and finish, on either member of
either pair, forward and back.

Why
---
A statement that needs an exclusive (or shared-no-write) metadata lock
(``CREATE/DROP TRIGGER``, ``LOCK TABLES ... WRITE``, ``RENAME``, ``ALTER``)
waits behind every open transaction that touched the table, and while it waits
every new statement on that table, reads included, queues behind *it*. With the
server's default ``lock_wait_timeout`` (a day) one report holding a read
transaction on a passive member made a client's 20 ms inserts wait 56 s behind
a ``CREATE TRIGGER`` (seen on MariaDB 10.11). gh-ost takes such locks with a
short wait and retries; Spirit kills the holders near its lock wait.

How
---
Each try runs as ``SET STATEMENT max_statement_time=<try> FOR <statement>``:
MariaDB interrupts the statement (error 1969) when the try is over, and a
statement waiting for a metadata lock is interruptible, so no client queues
behind it for longer than one try (``lock_wait_timeout`` counts whole seconds
only, too coarse for a freeze budget of 500 ms; checked: a client's read
queued behind an interrupted ``CREATE TRIGGER`` waited 0.2 s with a 0.2 s try).
Between tries the statement backs off (tenacity, jittered, doubling), for at
most :attr:`LockWait.retry_s`. Then it stops with :class:`LockBusy`, which
names the holders (connection, user, host, how long, what it runs), as a freeze
that ran out does. Each statement given here must be safe to run again (``IF
NOT EXISTS`` / ``IF EXISTS``): an interrupted try may have been interrupted
after its lock was granted.

A statement may need longer than a try with nothing holding its table (a
``CREATE TRIGGER`` on a table of many partitions): such a statement gets
longer tries (doubling, up to :data:`SLOW_TRY_MAX_S`) only with a second
connection that watches the process list meanwhile (:class:`_QueueWatch`):
the moment a client statement waits for a metadata lock on one of its tables,
the try is interrupted (``KILL QUERY``) and the next tries are the bound
again. So no client waits past the bound, whatever the statement needs.

As an opt-in (:attr:`LockWait.kill_holders`, the migration option
``kill_blockers``), the holders that outlast the tries are ended instead
(``KILL CONNECTION``), as Spirit does, but only client connections (never
replication's threads, the event scheduler or other threads of the server,
nor the migrator's own connections) and never a transaction that changed
more than :attr:`LockWait.kill_max_rows` rows; each one ended is recorded
(:attr:`Attempts.killed`), then the statement is tried again. Ending holders
needs the ``metadata_lock_info`` plugin (the only way to know that a
connection holds *this* table) and CONNECTION ADMIN.

Who holds what is read from the server's own tables, with the PROCESS
privilege:

- ``information_schema.METADATA_LOCK_INFO`` (the ``metadata_lock_info``
  plugin: ``INSTALL SONAME 'metadata_lock_info'``; the sandbox loads it) says
  exactly which connections hold a lock on which table;
- without the plugin, ``information_schema.INNODB_TRX`` lists the open
  transactions, oldest first: the server cannot say which tables they hold, and
  the line says so.

Both are joined to ``information_schema.PROCESSLIST`` for the user, the client
host, and the statement running (an idle transaction runs none).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import pymysql
from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_random_exponential

from migrator.errors import ExitCode, MigratorError
from migrator.fleet.mysql import ER_QUERY_INTERRUPTED, kill_connection, own_connection_ids, query, scalar, tag

log = logging.getLogger(__name__)

TAG = tag("cutover")
#: the statements of the migrator's own fences and gates (never a holder to name or end)
OWN_TAGS = (tag("cutover"), tag("cutover-passive"))
ER_LOCK_WAIT_TIMEOUT = 1205
ER_STATEMENT_TIMEOUT = 1969
#: holders named at most (the oldest first)
LIMIT = 5
#: a statement is shown up to this many characters
STATEMENT_CHARS = 160
#: without the plugin, only transactions open at least this long are named (a busy master has many short ones)
MIN_OPEN_S = 1
#: the process list's COMMAND of the server's own threads: replication's IO, SQL and parallel workers, a
#: replica's binlog dump (a binlog reader of the migrator's too), the event scheduler and background threads
SERVER_COMMANDS = frozenset({"Slave_IO", "Slave_SQL", "Slave_worker", "Binlog Dump", "Binlog Dump GTID", "Daemon",
                             "Connect"})
#: the process list's USER of the server's own threads
SERVER_USERS = frozenset({"system user", "event_scheduler", "DELAYED", "unauthenticated user"})


@dataclass
class Blocker:
    """One connection that holds (or, without the plugin, may hold) a lock on a table the migrator needs."""

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
    #: rows its transaction changed (None: no InnoDB transaction, or not read)
    rows_modified: int | None = None
    #: the process list's COMMAND (``Query``, ``Sleep``; ``Slave_SQL``, ``Slave_worker``, ``Daemon`` for the
    #: server's own threads)
    command: str = ""

    @property
    def client(self) -> bool:
        """A client's connection: not one of the server's own threads (replication, the event scheduler,
        background work), which :func:`kill_holders` never ends."""
        return self.command not in SERVER_COMMANDS and self.user not in SERVER_USERS

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


def read_blockers(conn: pymysql.connections.Connection, tables: Sequence[tuple[str, str]], *, server: str,
                  use_plugin: bool | None = None) -> list[Blocker]:
    """The connections (not this one) that hold a lock on one of ``tables`` (``(db, table)``), oldest first;
    without the plugin (or with ``use_plugin=False``), the transactions open on the server."""
    if use_plugin is None:
        use_plugin = has_lock_info(conn)
    return _from_lock_info(conn, tables, server) if use_plugin else _from_transactions(conn, server)


def _statement(info: Any) -> str:
    text = " ".join(str(info or "").split())
    return text if len(text) <= STATEMENT_CHARS else text[:STATEMENT_CHARS - 3] + "..."


def _from_lock_info(conn: pymysql.connections.Connection, tables: Sequence[tuple[str, str]],
                    server: str) -> list[Blocker]:
    wanted = {(db, t) for db, t in tables}
    dbs = sorted({db for db, _ in wanted})
    if not dbs:
        return []
    marks = ", ".join(["%s"] * len(dbs))
    rows = query(conn, f"{TAG}SELECT m.THREAD_ID, m.TABLE_SCHEMA, m.TABLE_NAME, m.LOCK_MODE, p.USER, p.HOST, "
                       "p.TIME, p.INFO, TIMESTAMPDIFF(SECOND, t.trx_started, NOW()), t.trx_rows_modified, p.COMMAND "
                       "FROM information_schema.METADATA_LOCK_INFO m "
                       "JOIN information_schema.PROCESSLIST p ON p.ID = m.THREAD_ID "
                       "LEFT JOIN information_schema.INNODB_TRX t ON t.trx_mysql_thread_id = m.THREAD_ID "
                       f"WHERE m.THREAD_ID <> CONNECTION_ID() AND m.TABLE_SCHEMA IN ({marks})", tuple(dbs))
    by_id: dict[int, Blocker] = {}
    for tid, db, table, mode, user, host, time_s, info, trx_s, modified, command in rows:
        if (db, table) not in wanted or str(info or "").startswith(OWN_TAGS):
            continue  # another table of the db, or the migrator's own fence or gate still letting go
        held = f"{db}.{table} ({mode})"
        b = by_id.get(int(tid))
        if b is None:
            by_id[int(tid)] = Blocker(server, int(tid), str(user), str(host),
                                      int(trx_s if trx_s is not None else time_s or 0), _statement(info), held,
                                      None if modified is None else int(modified), str(command or ""))
        elif held not in b.holds:
            b.holds += f", {held}"
    return sorted(by_id.values(), key=lambda b: -b.seconds)[:LIMIT]


def _from_transactions(conn: pymysql.connections.Connection, server: str) -> list[Blocker]:
    rows = query(conn, f"{TAG}SELECT t.trx_mysql_thread_id, p.USER, p.HOST, p.INFO, "
                       "TIMESTAMPDIFF(SECOND, t.trx_started, NOW()), t.trx_tables_locked, t.trx_rows_locked, "
                       "t.trx_rows_modified, p.COMMAND "
                       "FROM information_schema.INNODB_TRX t "
                       "JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id "
                       "WHERE t.trx_mysql_thread_id <> CONNECTION_ID() "
                       "AND t.trx_started <= NOW() - INTERVAL %s SECOND "
                       "ORDER BY t.trx_started LIMIT %s", (MIN_OPEN_S, LIMIT))
    return [Blocker(server, int(tid), str(user), str(host), int(age or 0), _statement(info),
                    f"an open transaction ({int(tables or 0)} tables, {int(locked or 0)} rows locked; which "
                    "tables: the server says with the metadata_lock_info plugin)", int(modified or 0),
                    str(command or ""))
            for tid, user, host, info, age, tables, locked, modified, command in rows]


def named(refusal: str, blockers: Sequence[Blocker]) -> str:
    """A refusal with its blockers named after it (unchanged without any)."""
    if not blockers:
        return refusal
    return refusal.rstrip(". ") + ". Blocked by " + "; ".join(b.describe() for b in blockers) + "."


# -- taking a lock without making clients queue --------------------------------------------------------

@dataclass(frozen=True)
class LockWait:
    """How a statement that needs a metadata lock on a live table waits for it."""

    #: one try waits at most this long for the lock: the longest a client queues behind the statement
    try_s: float = 0.25
    #: tries go on for this long (backing off between them), then :class:`LockBusy`
    retry_s: float = 30.0
    #: the first pause between tries; it doubles (jittered) up to :attr:`max_pause_s`
    first_pause_s: float = 0.05
    max_pause_s: float = 2.0
    #: end the holders that outlast the tries (open for the whole :attr:`retry_s`: KILL CONNECTION) and try once
    #: more, instead of stopping
    kill_holders: bool = False
    #: ... but never a holder whose transaction changed more rows than this
    kill_max_rows: int = 0

    @classmethod
    def of(cls, options: Any) -> LockWait:
        """The wait a migration's options give: a try takes at most half the freeze budget (at most 1 s), so a
        client queued behind it waits less than the budget, statement included; the holders are ended only
        when the migration opted in (``kill_blockers``)."""
        try_s = min(1.0, max(0.05, options.freeze_budget_ms / 2000))
        return cls(try_s=try_s, retry_s=float(options.lock_retry_s), kill_holders=bool(options.kill_blockers),
                   kill_max_rows=int(options.kill_blockers_max_rows))


#: the wait of code that has no migration options at hand (a settler without its spec, tests)
DEFAULT_WAIT = LockWait()


@dataclass
class Attempts:
    """What taking locks cost on one member: tries, the longest wait of one, and the holders ended."""

    tries: int = 0
    busy: int = 0
    #: tries interrupted with no holder of the tables: the statement itself was slower than its try
    slow: int = 0
    #: longer tries interrupted because a client statement queued behind them
    queued: int = 0
    longest_try_ms: float = 0.0
    killed: list[dict[str, Any]] = field(default_factory=list)

    def add(self, other: Attempts) -> None:
        self.tries += other.tries
        self.busy += other.busy
        self.slow += other.slow
        self.queued += other.queued
        self.longest_try_ms = max(self.longest_try_ms, other.longest_try_ms)
        self.killed.extend(other.killed)

    def to_dict(self) -> dict[str, Any]:
        return {"tries": self.tries, "busy": self.busy, "slow": self.slow,
                "longest_try_ms": round(self.longest_try_ms, 1),
                "killed": list(self.killed)}


class LockBusy(MigratorError):
    """A statement could not take a table's metadata lock within its tries; nothing of it was done."""

    component = "mdl"
    exit_code = ExitCode.REFUSED

    def __init__(self, message: str, *, blockers: Sequence[Blocker] = (), server: str = "",
                 attempts: Attempts | None = None, phase: str | None = None):
        super().__init__(message, phase=phase)
        self.blockers = list(blockers)
        #: the member it ran on, and what its tries cost there (the holders it ended, too)
        self.server = server
        self.attempts = attempts if attempts is not None else Attempts()


#: a statement slower than its try by itself gets longer tries, up to this, while no client queues behind it
SLOW_TRY_MAX_S = 5.0
#: how often a longer try's watch reads the process list (well under the shortest try)
WATCH_EVERY_S = 0.02


class _QueueWatch:
    """Beside one longer try of ``conn``'s statement (on its own connection, ``side``): interrupts the try
    (``KILL QUERY``) as soon as a client statement waits for a metadata lock on one of ``tables``, so that
    client waits about :data:`WATCH_EVERY_S`, not the try. :attr:`queued` says it did."""

    def __init__(self, side: pymysql.connections.Connection, conn: pymysql.connections.Connection,
                 tables: Sequence[tuple[str, str]]):
        self.side = side
        self.target = int(conn.thread_id())
        self.names = sorted({t for _, t in tables})
        self.queued = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mdl-watch", daemon=True)

    def __enter__(self) -> _QueueWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _waiting(self) -> bool:
        like = " OR ".join(["INFO LIKE %s"] * len(self.names)) or "TRUE"
        return bool(scalar(self.side, f"{TAG}SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID <> %s "
                                      "AND STATE LIKE 'Waiting for table metadata lock' "
                                      f"AND INFO NOT LIKE '/* migrator:%%' AND ({like})",
                           (self.target, *(f"%{n}%" for n in self.names))))

    def _run(self) -> None:
        try:
            while not self._stop.wait(WATCH_EVERY_S):
                if self._waiting():
                    self.queued = True
                    with self.side.cursor() as cur:
                        cur.execute(f"{TAG}KILL QUERY {self.target}")
                    return
        except pymysql.err.MySQLError as exc:  # the try stays bounded by its own max_statement_time
            log.warning("watching the process list beside a longer try failed: %s", exc)


def _has_lock_info(conn: pymysql.connections.Connection) -> bool:
    try:
        return has_lock_info(conn)
    except pymysql.err.MySQLError:
        return False


_LEADING_COMMENT = re.compile(r"^\s*(/\*.*?\*/\s*)", re.S)


def bounded_sql(sql: str, try_s: float) -> str:
    """``sql`` interrupted by the server after ``try_s`` (its leading tag comment kept first, so the
    statement is still recognised as the migrator's in the processlist)."""
    m = _LEADING_COMMENT.match(sql)
    head, body = (m.group(1), sql[m.end():]) if m else ("", sql)
    return f"{head}SET STATEMENT max_statement_time={max(0.001, try_s):.3f} FOR {body}"


def _busy(exc: BaseException) -> bool:
    return (isinstance(exc, pymysql.err.MySQLError) and bool(exc.args)
            and exc.args[0] in (ER_STATEMENT_TIMEOUT, ER_LOCK_WAIT_TIMEOUT, ER_QUERY_INTERRUPTED))


def run_locking(conn: pymysql.connections.Connection, sql: str, *, tables: Sequence[tuple[str, str]], server: str,
                wait: LockWait = DEFAULT_WAIT, what: str = "", attempts: Attempts | None = None,
                sleep: Callable[[float], None] = time.sleep, phase: str | None = "cutover",
                side: Callable[[], pymysql.connections.Connection] | None = None) -> None:
    """Run ``sql`` (which takes a metadata lock on ``tables``, on ``server``) on ``conn``, each try bounded
    by ``wait.try_s``, retried with backoff for ``wait.retry_s``; then, with ``wait.kill_holders``, end the
    holders it may and try once more; else raise :class:`LockBusy` naming them. ``sql`` must be safe to
    run again. ``side`` opens a second connection to the server: with it, a statement slower than its try
    with no holder gets longer tries, each watched (:class:`_QueueWatch`); without it every try is the bound."""
    attempts = attempts if attempts is not None else Attempts()
    try_s = wait.try_s
    plugin: list[bool] = []
    watcher: list[pymysql.connections.Connection] = []

    def one_try() -> None:
        nonlocal try_s
        attempts.tries += 1
        t0 = time.monotonic()
        watch: _QueueWatch | None = None
        try:
            with conn.cursor() as cur:
                if try_s > wait.try_s and watcher:
                    # a try longer than the bound: only while no client statement queues behind it
                    with _QueueWatch(watcher[0], conn, tables) as watch:
                        cur.execute(bounded_sql(sql, try_s))
                else:
                    cur.execute(bounded_sql(sql, try_s))
        except pymysql.err.MySQLError as exc:
            if _busy(exc):
                attempts.busy += 1
                if watch is not None and watch.queued:
                    try_s = wait.try_s  # a client queued behind the longer try: back to the bound
                    attempts.queued += 1
                    raise
                # interrupted with no holder on its tables: the statement itself outran the try (a CREATE
                # TRIGGER on a table of many partitions on a busy server), not a lock wait; only then the
                # next try may take longer, watched by a second connection (clients queue behind a statement
                # that runs, whatever its bound)
                if not plugin:
                    plugin.append(_has_lock_info(conn))
                if side is not None and plugin[0] and not _holders(conn, tables, server) \
                        and try_s < SLOW_TRY_MAX_S:
                    if not watcher:
                        watcher.append(side())
                    try_s = min(SLOW_TRY_MAX_S, try_s * 2)
                    attempts.slow += 1
            raise
        finally:
            attempts.longest_try_ms = max(attempts.longest_try_ms, (time.monotonic() - t0) * 1000)

    retrying = Retrying(retry=retry_if_exception(_busy), stop=stop_after_delay(wait.retry_s),
                        wait=wait_random_exponential(multiplier=wait.first_pause_s, max=wait.max_pause_s),
                        sleep=sleep, reraise=True)
    try:
        try:
            retrying(one_try)
            return
        except pymysql.err.MySQLError as exc:
            if not _busy(exc):
                raise
        holders = _holders(conn, tables, server)
        doing = what or _statement(sql)
        if wait.kill_holders:
            try:
                ended = kill_holders(conn, holders, wait.kill_max_rows, server, min_open_s=int(wait.retry_s))
            except KillFailed as exc:  # those ended before the refused KILL are recorded, and named in the error
                attempts.killed.extend(b.to_dict() for b in exc.ended)
                raise LockBusy(named(f"{exc.message}; {doing} was not done", holders), blockers=holders,
                               server=server, attempts=attempts, phase=phase) from None
            attempts.killed.extend(b.to_dict() for b in ended)
            if ended:
                try:
                    one_try()
                    return
                except pymysql.err.MySQLError as exc:
                    if not _busy(exc):
                        raise
                holders = _holders(conn, tables, server)
    finally:
        for c in watcher:
            c.close()
    raise LockBusy(named(
        f"{doing} on {server} could not take its table's metadata lock in {attempts.tries} tries of "
        f"{try_s * 1000:.0f} ms over {wait.retry_s:g} s (no client waited longer than one try); nothing "
        f"of it was done: retry when the holders are gone"
        + ("" if wait.kill_holders else ", or let the migration end them (`migrator set ID --kill-blockers`)"),
        holders), blockers=holders, server=server, attempts=attempts, phase=phase)


def _holders(conn: pymysql.connections.Connection, tables: Sequence[tuple[str, str]], server: str) -> list[Blocker]:
    try:
        return read_blockers(conn, tables, server=server)
    except pymysql.err.MySQLError as exc:  # the refusal stands without its detail
        log.warning("could not read the lock holders on %s: %s", server, exc)
        return []


def kill_holders(conn: pymysql.connections.Connection, holders: Sequence[Blocker], max_rows: int,
                 server: str, *, min_open_s: int = 0) -> list[Blocker]:
    """End (``KILL CONNECTION``) the client connections among ``holders`` open at least ``min_open_s`` (they
    held the lock through every try, not a client's passing statement) whose transaction changed at most
    ``max_rows`` rows; returns the ones ended. Never the server's own threads (:attr:`Blocker.client`: a
    replica's SQL thread applying a long statement holds its tables as a client does, and ending it stops
    replication) nor a connection of this process (:func:`~migrator.fleet.mysql.own_connection_ids`). Only
    with the ``metadata_lock_info`` plugin: without it a holder is only "an open transaction", which may hold
    none of the tables, and nothing is ended. A KILL the server refuses raises :class:`KillFailed`, which
    names the connections already ended."""
    if not holders or not has_lock_info(conn):
        return []
    own = own_connection_ids(conn)
    ended: list[Blocker] = []
    with conn.cursor() as cur:
        for b in holders:
            if b.seconds < min_open_s:
                continue
            if not b.client or b.id in own:
                log.info("%s: not ending connection %s (%s, %s): not a client's", server, b.id, b.user, b.command)
                continue
            if (b.rows_modified or 0) > max_rows:
                log.warning("%s: not ending connection %s: its transaction changed %s rows (limit %s)",
                            server, b.id, b.rows_modified, max_rows)
                continue
            if (exc := kill_connection(cur, int(b.id), TAG)) is not None:
                raise KillFailed(server, b, exc, ended)
            log.warning("%s: ended connection %s, which held a table the migrator needed: %s", server, b.id,
                        b.describe())
            ended.append(b)
    return ended


class KillFailed(MigratorError):
    """A KILL of a lock holder was refused; :attr:`ended` are the connections ended before it."""

    component = "mdl"
    exit_code = ExitCode.REFUSED

    def __init__(self, server: str, holder: Blocker, exc: pymysql.err.MySQLError, ended: Sequence[Blocker]):
        done = ", ".join(str(b.id) for b in ended) or "none"
        super().__init__(f"could not end connection {holder.id} on {server} ({exc.args[-1]}); connections "
                         f"already ended there: {done}. Grant the migration user CONNECTION ADMIN there, or end "
                         f"it by hand (KILL {holder.id}) and retry", phase="cutover")
        self.ended = list(ended)
