"""The one exception family of migrator.

Every error carries the component and phase it came from, so an operator
reading one line knows where to look. Messages say what to do next.
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """The ``migrator`` command line's exit codes, one per thing a script would do next.

    ``docs/operations.md`` ("Exit codes") prints this table; a test checks the two agree.
    """

    #: the command did what it says
    OK = 0
    #: it ran and its check failed: verify found rows that still differ, the ledger lost jobs, a migration
    #: ended failed; read the line (and ``migrator status ID``)
    FAILED = 1
    #: a bad option, argument or input file: fix the command line; nothing was touched
    USAGE = 2
    #: a safety check said no (shards already moving, preflight failures, not converged yet, a freeze over
    #: its budget, a concurrent change of the shard map, no confirmation): nothing was changed that the
    #: line does not name; act on it, then run the command again
    REFUSED = 3
    #: ZooKeeper, MySQL or Redis did not answer: retry when it is back
    UNREACHABLE = 4
    #: the config file, the secrets or the credentials are missing or wrong (or not authorized)
    CONFIG = 5
    #: catch-up (or a rollback's reverse tail) cannot keep up with the writes: lower the write load or move
    #: fewer shards, then resume
    NOT_CONVERGING = 6
    #: stopped following after ``--timeout``; the work goes on (``migrator status ID``)
    STILL_RUNNING = 7
    #: Ctrl-C (SIGINT); what was under way resumes from its checkpoints
    INTERRUPTED = 130


class MigratorError(Exception):
    """Base of every error migrator raises on purpose."""

    component: str = "migrator"
    #: an exit code for the CLI (:class:`ExitCode`); FAILED unless a subclass says otherwise
    exit_code: int = ExitCode.FAILED

    def __init__(self, message: str, *, component: str | None = None, phase: str | None = None):
        super().__init__(message)
        self.message = message
        if component:
            self.component = component
        self.phase = phase

    def __str__(self) -> str:  # one line, tagged
        where = self.component if not self.phase else f"{self.component}/{self.phase}"
        return f"[{where}] {self.message}"


def describe(exc: BaseException) -> str:
    """``exc`` for a log line or a stored error: a :class:`MigratorError`'s own message (without its
    ``[component]`` tag), anything else as ``<type>: <text>``."""
    if isinstance(exc, MigratorError):
        return exc.message
    return f"{type(exc).__name__}: {exc}"


class ConfigError(MigratorError):
    component = "config"
    exit_code = ExitCode.CONFIG


class CredentialsError(ConfigError):
    component = "credentials"


class InvalidIdError(MigratorError):
    component = "ids"
    exit_code = ExitCode.USAGE


class ShardMapError(MigratorError):
    """The shard map is malformed or inconsistent (overlap, gap, unknown host...)."""

    component = "shard_map"
    exit_code = ExitCode.USAGE


class ShardMapConflict(MigratorError):
    """A compare-and-set on the shard map lost against a concurrent edit."""

    component = "shard_map"
    exit_code = ExitCode.REFUSED


class ShardMapGuardLost(ShardMapConflict):
    """A guarded compare-and-set was refused: its guard node (a lease) is gone."""


class ZooKeeperUnavailable(MigratorError):
    component = "zookeeper"
    exit_code = ExitCode.UNREACHABLE


class MySQLUnavailable(MigratorError):
    component = "mysql"
    exit_code = ExitCode.UNREACHABLE


class MySQLCredentialsRefused(MySQLUnavailable):
    """A MySQL host refused the credentials (error 1045): the config or the secrets are wrong, not the
    network. Still a :class:`MySQLUnavailable` to code that waits out an unreachable host; the operator is
    told to fix the secrets (exit 5), not to retry later."""

    exit_code = ExitCode.CONFIG


class RedisUnavailable(MigratorError):
    component = "redis"
    exit_code = ExitCode.UNREACHABLE


class NotAuthorized(MigratorError):
    component = "zookeeper"
    exit_code = ExitCode.CONFIG


class SandboxError(MigratorError):
    component = "sandbox"


class SandboxRefused(SandboxError):
    """A sandbox command's safety check said no (a directory it did not make is neither deleted nor used)."""

    exit_code = ExitCode.REFUSED


class UnknownHost(ShardMapError):
    component = "host_registry"


class ShardFrozen(MigratorError):
    """The shard is frozen for a cutover; retry after the flip."""

    component = "router"
    retryable = True
