"""The one exception family of migrator.

Every error carries the component and phase it came from, so an operator
reading one line knows where to look. Messages say what to do next.
"""

from __future__ import annotations


class MigratorError(Exception):
    """Base of every error migrator raises on purpose."""

    component: str = "migrator"
    #: an exit code for the CLI; 1 unless a subclass says otherwise
    exit_code: int = 1

    def __init__(self, message: str, *, component: str | None = None, phase: str | None = None):
        super().__init__(message)
        self.message = message
        if component:
            self.component = component
        self.phase = phase

    def __str__(self) -> str:  # one line, tagged
        where = self.component if not self.phase else f"{self.component}/{self.phase}"
        return f"[{where}] {self.message}"


class ConfigError(MigratorError):
    component = "config"
    exit_code = 2


class CredentialsError(ConfigError):
    component = "credentials"


class InvalidIdError(MigratorError):
    component = "ids"
    exit_code = 2


class ShardMapError(MigratorError):
    """The shard map is malformed or inconsistent (overlap, gap, unknown host...)."""

    component = "shard_map"
    exit_code = 2


class ShardMapConflict(MigratorError):
    """A compare-and-set on the shard map lost against a concurrent edit."""

    component = "shard_map"
    exit_code = 3


class ShardMapGuardLost(ShardMapConflict):
    """A guarded compare-and-set was refused: its guard node (a lease) is gone."""


class ZooKeeperUnavailable(MigratorError):
    component = "zookeeper"
    exit_code = 4


class MySQLUnavailable(MigratorError):
    component = "mysql"
    exit_code = 4


class RedisUnavailable(MigratorError):
    component = "redis"
    exit_code = 4


class NotAuthorized(MigratorError):
    component = "zookeeper"
    exit_code = 5


class SandboxError(MigratorError):
    component = "sandbox"


class UnknownHost(ShardMapError):
    component = "host_registry"


class ShardFrozen(MigratorError):
    """The shard is frozen for a cutover; retry after the flip."""

    component = "router"
    retryable = True
