"""MySQL access: connections to fleet hosts with the migrator's credentials.

Every statement migrator sends should carry a ``/* migrator:<component> */``
tag (see :func:`tag`) so it shows in processlists and slow logs.
"""

from __future__ import annotations

import re
import ssl
import threading
from typing import Any

import pymysql
import pymysql.cursors

from migrator.errors import MigratorError, MySQLUnavailable
from migrator.fleet.config import Credentials
from migrator.fleet.gtid import GtidPos
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
            raise MySQLUnavailable(
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


def wait_applied(conn: pymysql.connections.Connection, pos: GtidPos | str, timeout: float) -> bool:
    """Wait until this server has applied ``pos`` from its replication peer.

    The server's own GTID domain is left out (its own writes are in its binlog
    by definition). True when reached, False on timeout.
    """
    pos = GtidPos.parse(str(pos))
    own = int(scalar(conn, "SELECT @@gtid_domain_id"))
    want = GtidPos(g for d, g in pos.items() if d != own)
    if not want:
        return True
    res = scalar(conn, tag("replication") + "SELECT MASTER_GTID_WAIT(%s, %s)",
                 (str(want), max(0.001, float(timeout))))
    return res is not None and int(res) == 0


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
