"""How any failure reaches the operator: one line on stderr and an exit code.

The one handler of the ``migrator`` entry point (:func:`migrator.cli.main.main`)
calls :func:`describe` on whatever a command raised: a
:class:`~migrator.errors.MigratorError` (the message already names the object
and the way out), a usage error of the command line (click), or an exception
of the standard library or of pydantic that a command did not turn into one
(a path that is a directory, a file that is not JSON, TOML or SQLite, a value
out of range, an unreachable address, ZooKeeper lost under a command that does not wait for it). Each becomes
``error: <what>: <why> (<what to do>)`` with an exit code of
:class:`~migrator.errors.ExitCode`. No traceback reaches the terminal unless
``MIGRATOR_TRACEBACK=1`` asks for one (a bug report needs it).
"""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import tomllib
import traceback
from typing import Any

import typer

from migrator.errors import ExitCode, MigratorError

#: ask for the traceback of an unexpected error (for a bug report)
ENV_TRACEBACK = "MIGRATOR_TRACEBACK"

#: errno values that mean "the path given is wrong", not "the system failed"
_PATH_ERRNOS = {errno.ENOENT, errno.EISDIR, errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.ENAMETOOLONG,
                errno.ELOOP}


def one_line(text: str) -> str:
    """``text`` on one line: its lines joined, runs of blanks squeezed (operators grep these)."""
    parts = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    return "; ".join(parts).replace(":;", ":")


def pydantic_reason(exc: Any, names: dict[str, str] | None = None) -> str:
    """A pydantic ``ValidationError`` as ``<field>: <why>`` for each error (never its documentation link);
    ``names`` renames fields (an option's field to its ``--flag``)."""
    out = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err.get("loc", ()))
        loc = (names or {}).get(loc, loc)
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ").removeprefix("Assertion failed, ")
        value = err.get("input")
        shown = "" if isinstance(value, dict | list) or value is None else f" {short(value)}"
        out.append(f"{loc}{shown}: {msg}" if loc else msg)
    return "; ".join(out) or "invalid value"


def short(value: Any, limit: int = 40) -> str:
    """A value as the operator typed it, cut to ``limit`` characters (a 5000-digit argument is not echoed)."""
    text = str(value)
    return text if len(text) <= limit else f"{text[:limit - 12]}... ({len(text)} characters)"


def command_line_error(exc: BaseException) -> bool:
    """An error of the command line itself, raised by click (typer carries its own copy of click, whose
    classes are not the ``click`` package's: recognised by their base, :class:`typer.TyperException`)."""
    return isinstance(exc, typer.TyperException) and hasattr(exc, "format_message")


def _usage(exc: Any) -> tuple[str, int]:
    ctx = getattr(exc, "ctx", None)
    path = ctx.command_path if ctx is not None else "migrator"
    code = int(getattr(exc, "exit_code", ExitCode.USAGE))
    if code != ExitCode.USAGE:  # a click error that is not about usage (a file option it could not open)
        return f"{path}: {one_line(exc.format_message())}", int(ExitCode.FAILED)
    return f"{path}: {one_line(exc.format_message())} (see `{path} --help`)", int(ExitCode.USAGE)


def _os_error(exc: OSError) -> tuple[str, int]:
    if isinstance(exc, ConnectionError | TimeoutError) or exc.errno in (errno.ECONNREFUSED, errno.EHOSTUNREACH,
                                                                        errno.ENETUNREACH, errno.ETIMEDOUT):
        return (f"{exc.filename or 'a server'}: {exc.strerror or exc} (check that it runs and that the config "
                "names the right address)", int(ExitCode.UNREACHABLE))
    what = exc.filename if exc.filename is not None else "a file or address"
    why = exc.strerror or str(exc) or type(exc).__name__
    if exc.errno == errno.EADDRINUSE:
        return f"{what}: {why} (another process listens there: pick another --listen)", int(ExitCode.USAGE)
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"{what}: {why} (give an address of this machine to --listen)", int(ExitCode.USAGE)
    if exc.errno in _PATH_ERRNOS:
        return f"{what}: {why} (give the path of a readable file)", int(ExitCode.USAGE)
    return f"{what}: {why}", int(ExitCode.FAILED)


def _redis_error(exc: BaseException) -> tuple[str, int] | None:
    """A failure of Redis that reached the command (redis-py connects lazily: the first command does);
    None for anything else."""
    from redis import exceptions as rex

    if isinstance(exc, rex.AuthenticationError | rex.NoPermissionError):
        return (f"Redis refused the credentials: {one_line(str(exc))} (fix the password under [redis] in the "
                "secrets file, or the ACL user's rights)", int(ExitCode.CONFIG))
    if isinstance(exc, rex.ConnectionError | rex.TimeoutError):
        return (f"Redis did not answer: {one_line(str(exc))} (check that it runs and that [redis] in the config "
                "names it; retry when it is back)", int(ExitCode.UNREACHABLE))
    return None


def _zookeeper_error(exc: BaseException) -> tuple[str, int] | None:
    """ZooKeeper going away under a command that does not wait for it (a lost connection, an expired session, a
    request that timed out): exit 4, what to do; None for anything else."""
    from kazoo.exceptions import ConnectionLoss, OperationTimeoutError, SessionExpiredError
    from kazoo.handlers.threading import KazooTimeoutError

    if isinstance(exc, ConnectionLoss | SessionExpiredError | OperationTimeoutError | KazooTimeoutError):
        return (f"ZooKeeper stopped answering ({type(exc).__name__}) (run the command again once it is back; "
                "`migrator status` shows what was under way)", int(ExitCode.UNREACHABLE))
    return None


def describe(exc: BaseException) -> tuple[str, int]:
    """One line (without the ``error:`` prefix) and the exit code for ``exc``."""
    if isinstance(exc, MigratorError):
        return one_line(str(exc)), int(exc.exit_code)
    zookeeper_failure = _zookeeper_error(exc)
    if zookeeper_failure is not None:
        return zookeeper_failure
    if command_line_error(exc):
        return _usage(exc)
    if isinstance(exc, typer.Abort | KeyboardInterrupt | EOFError):
        return ("interrupted (what was under way resumes from its checkpoints: `migrator status`)",
                int(ExitCode.INTERRUPTED))
    if type(exc).__name__ == "ValidationError" and hasattr(exc, "errors"):
        return f"invalid value: {pydantic_reason(exc)} (see the command's --help)", int(ExitCode.USAGE)
    if isinstance(exc, json.JSONDecodeError):
        return (f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno} (fix the file)",
                int(ExitCode.USAGE))
    if isinstance(exc, tomllib.TOMLDecodeError):
        return f"not valid TOML: {one_line(str(exc))} (fix the file)", int(ExitCode.USAGE)
    if isinstance(exc, sqlite3.DatabaseError):
        return (f"not a readable SQLite database: {one_line(str(exc))} (give the path of the ledger file "
                "`migrator queue load` wrote)", int(ExitCode.USAGE))
    if isinstance(exc, UnicodeDecodeError):
        return f"not a text file: {exc.reason} (give the path of a text file)", int(ExitCode.USAGE)
    redis_failure = _redis_error(exc)
    if redis_failure is not None:
        return redis_failure
    if isinstance(exc, OSError):
        return _os_error(exc)
    if isinstance(exc, ValueError):
        return f"invalid value: {one_line(str(exc)) or type(exc).__name__} (see the command's --help)", \
            int(ExitCode.USAGE)
    return (f"unexpected {type(exc).__name__}: {one_line(str(exc))[:300]} (a bug: run again with "
            f"{ENV_TRACEBACK}=1 for the traceback and report it)", int(ExitCode.FAILED))


def report(exc: BaseException, stream: Any) -> int:
    """Print ``exc`` as one line on ``stream``; its exit code. The traceback too when asked for."""
    line, code = describe(exc)
    if os.environ.get(ENV_TRACEBACK) and not command_line_error(exc):
        traceback.print_exception(exc, file=stream)
    print(f"error: {line}", file=stream, flush=True)
    return code
