"""MySQL access: connections to fleet hosts with the migrator's credentials.

Every statement migrator sends should carry a ``/* migrator:<component> */``
tag (see :func:`tag`) so it shows in processlists and slow logs.
"""

from __future__ import annotations

import re
import ssl
import threading
import time
import weakref
from collections.abc import Sequence
from typing import Any

import pymysql
import pymysql.cursors

from migrator.errors import MigratorError, MySQLCredentialsRefused, MySQLUnavailable
from migrator.fleet.config import Credentials
from migrator.fleet.gtid import GtidPos, GtidState
from migrator.fleet.model import Host
from migrator.fleet.tls import MySQLTLS

#: a plain name (needs no quoting anywhere: ZooKeeper nodes, job ids, file names)
IDENT_RE = re.compile(r"^[A-Za-z0-9_]{1,64}$")
#: what MariaDB refuses in a back-quoted identifier: NUL, and characters outside the BMP
_ILLEGAL_IN_IDENT = re.compile("[\x00\U00010000-\U0010ffff]")

# MySQL error codes migrator reacts to
ER_NO_SUCH_TABLE = 1146
ER_BAD_DB_ERROR = 1049
ER_LOCK_WAIT_TIMEOUT = 1205
ER_LOCK_DEADLOCK = 1213
ER_DUP_ENTRY = 1062
ER_OPTION_PREVENTS_STATEMENT = 1290  # read_only
#: a statement ended by KILL QUERY: what a cutover's fence answers a writer that waited on it at the flip
ER_QUERY_INTERRUPTED = 1317
#: "the table moved: refresh the shard map and retry there": a renamed table or database, the end of a
#: wait on a cutover's fence, a fenced (read_only) old master
MOVED_CODES = frozenset({ER_NO_SUCH_TABLE, ER_BAD_DB_ERROR, ER_QUERY_INTERRUPTED, ER_OPTION_PREVENTS_STATEMENT})

#: the migrator's own schema on fleet hosts (replicated like any schema): :func:`write_mark`'s table
OWN_SCHEMA = "_migrator"
MARKS_TABLE = "marks"


class MySQLTLSFailed(MySQLUnavailable):
    """The TLS handshake with a host failed: its certificate did not verify, or it offers no TLS."""


class InvalidIdentifier(MigratorError):
    component = "mysql"
    exit_code = 2


def ident(name: str) -> str:
    """Validate a database/table/column name and return it back-quoted.

    Identifiers cannot be bound as parameters; every one that reaches SQL
    passes here first. Every name MariaDB accepts between backticks is
    accepted (spaces, reserved words, Unicode of the BMP, backticks, which
    are doubled): 1-64 characters, no NUL, no character outside the BMP, no
    trailing space.
    """
    if not isinstance(name, str) or not 1 <= len(name) <= 64 or _ILLEGAL_IN_IDENT.search(name) \
            or name.endswith(" "):
        raise InvalidIdentifier(
            f"identifier {name!r} is not a legal MariaDB name: use 1-64 characters, without NUL, characters "
            "outside the Basic Multilingual Plane (emoji) or a trailing space"
        )
    return "`" + name.replace("`", "``") + "`"


def qualified(db: str, table: str) -> str:
    return f"{ident(db)}.{ident(table)}"


def tag(component: str) -> str:
    return f"/* migrator:{component} */ "


#: a statement this long (bytes) is written without PyMySQL's copies (:meth:`_Connection._execute_command`)
WIDE_STATEMENT = 1 << 20


class _Connection(pymysql.connections.Connection):
    """A PyMySQL connection that shares one TLS context per process.

    Without TLS options PyMySQL prefers TLS and builds a new default context
    for every connection (loading the system CA store: about 70 ms here); a
    copy worker or a cutover opening many connections paid that each time."""

    _preferred_ctx: Any = None
    _ctx_lock = threading.Lock()

    def _create_ssl_ctx(self, sslp: Any) -> Any:
        if sslp == {}:  # the preferred mode's context: the same for every connection
            with _Connection._ctx_lock:
                if _Connection._preferred_ctx is None:
                    _Connection._preferred_ctx = super()._create_ssl_ctx(sslp)
            return _Connection._preferred_ctx
        return super()._create_ssl_ctx(sslp)

    def _execute_command(self, command: int, sql: Any) -> None:
        """PyMySQL's, but a statement given as bytes of ``WIDE_STATEMENT`` or more is cut into packets
        through a memoryview: PyMySQL slices the bytes at every 16 MiB packet (a copy of the rest each
        time), so a statement carrying a wide row cost several copies of itself in memory at once."""
        if isinstance(sql, (bytes, bytearray)) and len(sql) >= WIDE_STATEMENT:
            sql = memoryview(sql)
        super()._execute_command(command, sql)


#: the connections of the migrator's own fences and gates in this process, while they are open
#: (:func:`mark_own`): never a lock holder to end, even idle
_OWN: weakref.WeakSet[pymysql.connections.Connection] = weakref.WeakSet()


def mark_own(conn: pymysql.connections.Connection) -> pymysql.connections.Connection:
    """Mark ``conn`` as one of the migrator's own connections (a fence's, a gate's) and return it."""
    _OWN.add(conn)
    return conn


def own_connection_ids(conn: pymysql.connections.Connection) -> set[int]:
    """The server thread ids of the migrator's own connections (:func:`mark_own`) this process has open to
    ``conn``'s server, ``conn`` included: a kill of lock holders never ends them."""
    return {int(c.server_thread_id[0]) for c in [*_OWN, conn]
            if c.open and c.host == conn.host and c.port == conn.port and c.server_thread_id}


def tls_of(host: Host, credentials: Credentials) -> MySQLTLS | None:
    """The TLS settings of connections to ``host`` (``[mysql.tls]`` with the host's override), or None."""
    return credentials.mysql_tls.for_host(host.name) if credentials.mysql_tls is not None else None


def ssl_kwargs(host: Host, credentials: Credentials) -> dict[str, Any]:
    """The PyMySQL keyword arguments of TLS to ``host`` (``{"ssl": context}``, or none): for a client built
    on PyMySQL that is not opened by :func:`connect` (a binlog stream's ``connection_settings``)."""
    tls = tls_of(host, credentials)
    return {"ssl": tls.context()} if tls is not None else {}


def tls_failure(where: str, tls: MySQLTLS, exc: BaseException) -> MySQLTLSFailed | None:
    """The one-line error for a connection error (to the server ``where`` names) that is a TLS failure;
    None when it is another error."""
    cause = getattr(exc, "original_exception", None) or exc.__cause__ or exc.__context__
    text = str(exc.args[-1] if getattr(exc, "args", None) else exc)
    if isinstance(cause, ssl.SSLCertVerificationError):
        return MySQLTLSFailed(
            f"the TLS certificate of {where} did not verify ({cause.verify_message}) with {tls.describe()}: "
            "point mysql.tls.ca at the CA that signed the server's certificate, or set verify_hostname = false "
            "if the certificate does not name this address"
        )
    if isinstance(cause, ssl.SSLError):
        return MySQLTLSFailed(f"TLS with {where} failed ({cause.reason or cause}) with {tls.describe()}: "
                              "check the CA, the client certificate and its key")
    if "doesn't support" in text and "SSL" in text:
        return MySQLTLSFailed(f"{where} offers no TLS but mysql.tls is configured for it: enable TLS on the "
                              f"server (ssl_cert, ssl_key) or set enabled = false in its [mysql.tls.hosts.NAME]")
    return None


def connect(
    host: Host,
    credentials: Credentials,
    database: str | None = None,
    *,
    autocommit: bool = True,
    connect_timeout: float = 5,
    read_timeout: float | None = None,
    dict_cursor: bool = False,
    **kwargs: Any,
) -> pymysql.connections.Connection:
    """Open a connection to one fleet host, over verified TLS when the config sets ``[mysql.tls]`` for it.
    Raises :class:`MySQLUnavailable` (:class:`MySQLTLSFailed` when the TLS handshake failed)."""
    tls = tls_of(host, credentials)
    kwargs.update(ssl_kwargs(host, credentials))
    try:
        return _Connection(
            host=host.address,
            port=host.port,
            user=credentials.mysql_user,
            password=credentials.mysql_password,
            database=database,
            autocommit=autocommit,
            connect_timeout=connect_timeout,
            read_timeout=read_timeout,
            charset="utf8mb4",
            cursorclass=pymysql.cursors.DictCursor if dict_cursor else pymysql.cursors.Cursor,
            **kwargs,
        )
    except pymysql.err.OperationalError as exc:
        code = exc.args[0] if exc.args else None
        where = f"{host.name} ({host.address}:{host.port})"
        failed = tls_failure(where, tls, exc) if tls is not None else None
        if failed is not None:
            raise failed from None
        if code == 1045:
            raise MySQLCredentialsRefused(
                f"{host.name} ({host.address}:{host.port}) refused the credentials of "
                f"{credentials.mysql_user!r}: check MIGRATOR_MYSQL_USER/MIGRATOR_MYSQL_PASSWORD or the secrets file"
            ) from None
        raise MySQLUnavailable(
            f"cannot connect to {host.name} at {host.address}:{host.port}: {exc.args[-1] if exc.args else exc}"
        ) from None


def query(conn: pymysql.connections.Connection, sql: str, args: Any = None) -> list[tuple[Any, ...]]:
    with conn.cursor() as cur:
        cur.execute(sql, args)
        return list(cur.fetchall())


def scalar(conn: pymysql.connections.Connection, sql: str, args: Any = None) -> Any:
    rows = query(conn, sql, args)
    return rows[0][0] if rows else None


def rollback_quietly(conn: pymysql.connections.Connection) -> None:
    """Roll back after an error, ignoring a connection that is already gone (the first error is the one to report)."""
    try:
        conn.rollback()
    except pymysql.err.MySQLError:
        pass


def binlog_pos(conn: pymysql.connections.Connection) -> str:
    """The server's ``@@gtid_binlog_pos``: every transaction it has binlogged, so
    where a binlog tail that wants everything from now on starts (empty on a
    server that never logged). Parse it with :meth:`migrator.fleet.gtid.GtidPos.parse`."""
    return str(scalar(conn, tag("gtid") + "SELECT @@gtid_binlog_pos") or "")


def start_point(conn: pymysql.connections.Connection) -> tuple[str, str]:
    """Where a binlog tail that wants everything from now on starts: ``(@@gtid_binlog_pos,
    @@gtid_binlog_state)``. The state is read first, so it never names a transaction the position
    does not cover; it orders start points read at different times in every GTID layout
    (:meth:`~migrator.fleet.gtid.GtidState.reaches`), where positions are ordered only per domain."""
    state = str(scalar(conn, tag("gtid") + "SELECT @@gtid_binlog_state") or "")
    return binlog_pos(conn), state


def binlog_state(conn: pymysql.connections.Connection) -> GtidState:
    """The server's ``@@gtid_binlog_state``: the last transaction of each (domain, server) in its binlog."""
    return GtidState.parse(str(scalar(conn, tag("gtid") + "SELECT @@gtid_binlog_state") or ""))


def own_gtids(conn: pymysql.connections.Connection) -> GtidPos:
    """The last transaction this server wrote itself, per domain: what its pair partner must apply to
    have every write it accepted (see :func:`wait_applied`). Empty when it never wrote one."""
    rows = query(conn, tag("gtid") + "SELECT @@gtid_binlog_state, @@server_id")
    return GtidState.parse(str(rows[0][0] or "")).own(int(rows[0][1]))


class MarkRefused(MigratorError):
    """A server refused the migrator's marker row (read_only, or a missing privilege)."""

    component = "mysql"


def write_mark(conn: pymysql.connections.Connection, name: str) -> GtidPos:
    """Write one marker transaction on this server and return its own GTID (a position of one domain).

    The row (``_migrator.marks``, one per ``name``, a counter) is binlogged and replicates like any
    write: a peer has applied it, and everything this server wrote before it, once
    :func:`wait_applied` says so for the GTID returned. ``conn`` must log to the binlog, in autocommit.
    Raises :class:`MarkRefused` when the server refuses the write (read_only)."""
    sql = (tag("mark") + f"INSERT INTO {qualified(OWN_SCHEMA, MARKS_TABLE)} (name, n, at) VALUES (%s, 1, NOW(6)) "
           "ON DUPLICATE KEY UPDATE n = n + 1, at = NOW(6)")
    for attempt in range(2):
        try:
            with conn.cursor() as cur:
                cur.execute(sql, (name,))
            break
        except pymysql.err.MySQLError as exc:
            code = exc.args[0] if exc.args else None
            if code in (ER_NO_SUCH_TABLE, ER_BAD_DB_ERROR) and attempt == 0:
                with conn.cursor() as cur:
                    cur.execute(tag("mark") + f"CREATE DATABASE IF NOT EXISTS {ident(OWN_SCHEMA)}")
                    cur.execute(tag("mark") + f"CREATE TABLE IF NOT EXISTS {qualified(OWN_SCHEMA, MARKS_TABLE)} "
                                "(name VARCHAR(190) NOT NULL PRIMARY KEY, n BIGINT UNSIGNED NOT NULL, "
                                "at DATETIME(6) NOT NULL) ENGINE=InnoDB")
                continue
            raise MarkRefused(f"could not write the migrator's marker row ({OWN_SCHEMA}.{MARKS_TABLE}): "
                              f"{exc.args[-1] if exc.args else exc}; the migrator's user needs INSERT and CREATE "
                              "there, and a read_only server needs READ ONLY ADMIN") from None
    rows = query(conn, tag("mark") + "SELECT @@last_gtid, @@session.sql_log_bin")
    gtid, logged = rows[0]
    if not int(logged) or not gtid:
        raise MarkRefused("the marker row was not binlogged (sql_log_bin=0 on this connection): write it on a "
                          "connection that logs")
    return GtidPos.parse(str(gtid))


#: the longest single wait inside :func:`wait_applied` before the binlog state is read again
_WAIT_SLICE_S = 0.05


def wait_applied(conn: pymysql.connections.Connection, gtids: GtidPos | str, timeout: float) -> bool:
    """Wait until this server has applied (and binlogged) each transaction of ``gtids``.

    ``gtids`` names transactions by their own GTIDs (domain, server, seq), typically a peer's
    :func:`own_gtids`, and "applied" is read from this server's ``@@gtid_binlog_state``, which keeps
    the last transaction of each (domain, server): a replica applies (and, with ``log_slave_updates``,
    binlogs) a peer's transactions in the peer's own order, so the entry of the peer's server reaching
    the seq_no means that transaction and everything the peer wrote before it are here. That holds in
    every GTID layout: one domain per server, one domain shared by both members (MariaDB's default,
    where a domain position says nothing about which member's writes arrived), parallel replication
    with in-order commit. ``MASTER_GTID_WAIT`` only wakes the wait early; it never decides it (its
    per-domain slave position is not per server). Needs ``log_slave_updates`` (preflight checks it).

    True when applied, False on timeout.
    """
    want = GtidPos.parse(str(gtids)) if not isinstance(gtids, GtidPos) else gtids
    if not want:
        return True
    deadline = time.monotonic() + max(0.0, float(timeout))
    nap = 0.002
    while True:
        if binlog_state(conn).reaches(want):
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        nap = min(nap * 2, _WAIT_SLICE_S, left)
        woke = scalar(conn, tag("replication") + "SELECT MASTER_GTID_WAIT(%s, %s)", (str(want), max(0.001, nap)))
        if woke is not None and int(woke) == 0:
            time.sleep(nap)  # the slave position passed it but the binlog state did not: not a busy loop


def replication_problem(conn: pymysql.connections.Connection, name: str, peer: str) -> str | None:
    """A one-line description of why ``peer -> name`` replication is not healthy, or None."""
    with conn.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute("SHOW ALL SLAVES STATUS")
        rows = cur.fetchall()
    if not rows:
        return f"{name} does not replicate from {peer}"
    for st in rows:
        if st.get("Slave_IO_Running") != "Yes" or st.get("Slave_SQL_Running") != "Yes":
            err = st.get("Last_SQL_Error") or st.get("Last_IO_Error") or "stopped"
            return f"replication {peer} -> {name} is not running ({err})"
    return None


def databases(conn: pymysql.connections.Connection) -> list[str]:
    return [r[0] for r in query(conn, "SHOW DATABASES")]


#: KILL of a thread id the server does not know: the connection had ended already
ER_NO_SUCH_THREAD = 1094


def kill_connection(cur: pymysql.cursors.Cursor, thread_id: int, tag: str = "") -> pymysql.err.MySQLError | None:
    """``KILL CONNECTION thread_id`` (``tag``: the statement's comment prefix). None when the connection is
    gone, whether this ended it or it had ended meanwhile; else the server's error, for the caller to name."""
    try:
        cur.execute(f"{tag}KILL CONNECTION {int(thread_id)}")
    except pymysql.err.MySQLError as exc:
        if exc.args and exc.args[0] == ER_NO_SUCH_THREAD:
            return None
        return exc
    return None


def kill_connections(cur: pymysql.cursors.Cursor, thread_ids: Sequence[int], tag: str = "") -> None:
    """``KILL CONNECTION`` each of ``thread_ids`` in one round trip (a compound statement, which MariaDB runs
    outside a stored program: 200 kills took 18-26 ms against 90-100 ms one by one on a loaded box); a thread
    already gone is ended, as :func:`kill_connection` has it. Raises the server's error on any other refusal
    (the caller then kills one by one, to name the connection refused)."""
    ids = [int(t) for t in thread_ids]
    if not ids:
        return
    kills = " ".join(f"KILL CONNECTION {t};" for t in ids)
    cur.execute(f"{tag}BEGIN NOT ATOMIC DECLARE CONTINUE HANDLER FOR {ER_NO_SUCH_THREAD} BEGIN END; {kills} END")


def wait_connections_gone(cur: pymysql.cursors.Cursor, thread_ids: Sequence[int], timeout: float = 10.0) -> list[int]:
    """Wait until none of ``thread_ids`` is on the server any more (information_schema.PROCESSLIST); return
    the ones still there after ``timeout`` (empty: all gone).

    A ``KILL CONNECTION`` returns, and its victim's client sees the connection closed, before the victim's
    thread has ended: one waiting for a metadata lock that is granted in between goes on and runs its
    statement (a RENAME killed while queued behind LOCK TABLES, then UNLOCK TABLES at once: 84 of 200 tries
    on MariaDB 10.11 renamed the table). Whatever must not run after a kill waits here first."""
    ids = [int(t) for t in thread_ids]
    if not ids:
        return []
    marks = ", ".join(["%s"] * len(ids))
    deadline = time.monotonic() + timeout
    while True:
        cur.execute(f"SELECT ID FROM information_schema.PROCESSLIST WHERE ID IN ({marks})", ids)
        left = [int(r[0]) for r in cur.fetchall()]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.002)


def close_quietly(conn: Any) -> None:
    """Close a connection that may be broken already (closing is then not an error)."""
    if conn is None:
        return
    try:
        conn.close()
    except Exception:  # noqa: BLE001 - a broken connection is closed either way
        pass
