"""Where the fleet is: one TOML file every command reads.

Resolution order: ``--config PATH``, else ``$MIGRATOR_CONFIG``, else
``.sandbox/migrator.toml``. The file names the ZooKeeper ensemble and root
path, the Redis URL, and the credentials file; credentials themselves never
live in it (nor in ZooKeeper).

Example::

    [zookeeper]
    hosts = "127.0.0.1:21810"
    root = "/migrator"

    [redis]
    url = "redis://127.0.0.1:63790/0"   # rediss://... for TLS; never a password here
    # ca_file = "redis-ca.pem"          # TLS: the CA that signed the server's certificate
    # sentinels = ["10.0.0.1:26379", "10.0.0.2:26379"]
    # service_name = "migrator"         # the master's name the sentinels monitor

    [credentials]
    file = "secrets.toml"        # relative to this file

    [mysql.tls]                  # optional; see migrator.fleet.tls
    ca = "tls/ca.pem"
"""

from __future__ import annotations

import json
import os
import re
import sys
import tomllib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from migrator.errors import ConfigError, CredentialsError
from migrator.fleet.tls import MySQLSettings, MySQLTLSSettings

DEFAULT_CONFIG = Path(".sandbox/migrator.toml")
#: where ``migrator demo`` leaves its fleet's config (named by the hint when the default config is missing)
DEMO_CONFIG = Path(".sandbox-demo/migrator.toml")
ENV_CONFIG = "MIGRATOR_CONFIG"


class ZooKeeperSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    hosts: str = "127.0.0.1:2181"
    root: str = "/migrator"
    session_timeout: float = Field(default=10.0, gt=0)
    #: session of a running cutover's lease: when its process dies the lease ends after this long and
    #: a live worker settles the cutover (the server bounds it by its min/maxSessionTimeout)
    lease_timeout: float = Field(default=4.0, gt=0)

    @field_validator("hosts")
    @classmethod
    def _hosts(cls, v: str) -> str:
        """``HOST[:PORT],HOST[:PORT]...`` (kazoo's connection string): a config error here, not a usage error
        or a wait on an address that cannot be one."""
        servers, _, chroot = v.partition("/")
        for item in servers.split(","):
            m = re.fullmatch(r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)(?::(\d{1,5}))?", item.strip())
            if not m or (m.group(2) is not None and not 1 <= int(m.group(2)) <= 65535):
                raise ValueError(f"{v[:80]!r} is not a ZooKeeper connection string: give HOST:PORT[,HOST:PORT...], "
                                 "e.g. \"10.0.0.5:2181,10.0.0.6:2181\"")
        if chroot and (not re.fullmatch(r"[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*", chroot)
                       or {".", ".."} & set(chroot.split("/"))):
            raise ValueError(f"{v[:80]!r}: the chroot after the servers must be a znode path such as /prod")
        return v

    @field_validator("root")
    @classmethod
    def _root(cls, v: str) -> str:
        if not re.fullmatch(r"(/[A-Za-z0-9_.-]+)+", v):
            raise ValueError("root must be an absolute znode path such as /migrator")
        return v


#: where a Redis password and ACL user go (the config file never holds them)
REDIS_SECRET_HINT = ("set MIGRATOR_REDIS_PASSWORD (and MIGRATOR_REDIS_USERNAME for an ACL user) or put "
                     "password (and user) under [redis] in the secrets file")


class RedisSettings(BaseModel):
    """Where Redis is: a URL (``redis://`` or ``rediss://`` for TLS, with the db number), a CA for
    TLS, and optionally the Sentinels that know the master's address. No credentials: they come
    from the environment or the secrets file (:func:`load_redis_credentials`)."""

    model_config = ConfigDict(extra="forbid")
    url: str = "redis://127.0.0.1:6379/0"
    #: the CA file that verifies the server's certificate (``rediss://`` only; relative to the config)
    ca_file: str | None = None
    #: Redis Sentinel: "host:port" of each sentinel; the master's address is asked from them
    sentinels: list[str] = []
    #: the name the sentinels monitor the master under
    service_name: str | None = None

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        parts = urlsplit(v)
        if parts.scheme not in ("redis", "rediss", "unix"):
            raise ValueError(f"{v!r} is not a Redis URL: use redis://HOST:PORT/DB (rediss:// for TLS)")
        if parts.username or parts.password:
            raise ValueError(f"the Redis URL carries credentials, which never go in the config file: remove "
                             f"them and {REDIS_SECRET_HINT}")
        return v

    @field_validator("sentinels")
    @classmethod
    def _sentinels(cls, v: list[str]) -> list[str]:
        for item in v:
            host, _, port = item.rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"sentinel {item!r} must look like host:port")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> RedisSettings:
        if self.ca_file and not self.url.startswith("rediss://"):
            raise ValueError("ca_file is for TLS: use a rediss:// URL with it")
        if bool(self.sentinels) != bool(self.service_name):
            raise ValueError("Sentinel needs both sentinels = [\"host:port\", ...] and service_name")
        return self

    @property
    def tls(self) -> bool:
        return self.url.startswith("rediss://")

    @property
    def db(self) -> int:
        path = urlsplit(self.url).path.strip("/")
        return int(path) if path.isdigit() else 0


class CredentialsSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    file: str | None = None


class QueueSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")
    listen: str = "127.0.0.1:8640"


class Config(BaseModel):
    """The parsed config file; ``path`` is where it came from."""

    model_config = ConfigDict(extra="forbid")

    zookeeper: ZooKeeperSettings = ZooKeeperSettings()
    redis: RedisSettings = RedisSettings()
    credentials: CredentialsSettings = CredentialsSettings()
    queue: QueueSettings = QueueSettings()
    # -- MySQL TLS (migrator.fleet.tls) --
    mysql: MySQLSettings = MySQLSettings()
    # --
    path: Path | None = None

    def credentials_path(self) -> Path | None:
        return self._relative(self.credentials.file)

    def _relative(self, name: str | None) -> Path | None:
        """A path the config names, relative to the config file's directory."""
        if not name:
            return None
        p = Path(name)
        if not p.is_absolute() and self.path is not None:
            p = self.path.parent / p
        return p

    def redis_ca_path(self) -> Path | None:
        return self._relative(self.redis.ca_file)

    def with_root(self, root: str) -> Config:
        """A copy pointing at another ZooKeeper root (tests use one per test)."""
        data = self.model_copy(deep=True)
        data.zookeeper = ZooKeeperSettings(**{**self.zookeeper.model_dump(), "root": root})
        return data


def resolve_path(path: str | os.PathLike[str] | None = None) -> Path:
    if path:
        return Path(path)
    env = os.environ.get(ENV_CONFIG)
    if env:
        return Path(env)
    return DEFAULT_CONFIG


def load(path: str | os.PathLike[str] | None = None) -> Config:
    """Read the config file (see the module docstring for the search order)."""
    p = resolve_path(path)
    if not p.exists():
        hint = "start a sandbox with `migrator sandbox up`, or pass --config PATH / set MIGRATOR_CONFIG"
        if not path and not os.environ.get(ENV_CONFIG) and DEMO_CONFIG.exists():
            hint += f" (the demo's fleet: --config {DEMO_CONFIG}, or export MIGRATOR_CONFIG={DEMO_CONFIG})"
        raise ConfigError(f"config file {p} does not exist: {hint}")
    if p.is_dir():
        raise ConfigError(f"config file {p} is a directory: give the path of the TOML file in it (e.g. "
                          f"{p / DEFAULT_CONFIG.name})")
    try:
        data = tomllib.loads(p.read_text())
    except OSError as exc:
        raise ConfigError(f"config file {p} cannot be read ({exc.strerror or exc}): check its permissions") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {p} is not valid TOML: {exc}") from None
    return parse(data, path=p)


def parse(data: dict[str, Any], path: Path | None = None) -> Config:
    try:
        # the context resolves relative file settings (mysql.tls) against the config file's folder
        base = path.resolve().parent if path else None
        return Config.model_validate({**data, "path": path.resolve() if path else None}, context={"base": base})
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        msg = str(err["msg"]).removeprefix("Value error, ")
        raise ConfigError(f"config {path or ''}: {loc}: {msg}") from None


def dump(config: Config) -> str:
    """Render a config as TOML (only the keys this module knows)."""
    lines = [
        "[zookeeper]",
        f'hosts = "{config.zookeeper.hosts}"',
        f'root = "{config.zookeeper.root}"',
        f"session_timeout = {config.zookeeper.session_timeout}",
        "",
        "[redis]",
        f'url = "{config.redis.url}"',
        *([f'ca_file = "{config.redis.ca_file}"'] if config.redis.ca_file else []),
        *([f"sentinels = {json.dumps(config.redis.sentinels)}",
           f'service_name = "{config.redis.service_name}"'] if config.redis.sentinels else []),
        "",
        "[queue]",
        f'listen = "{config.queue.listen}"',
        "",
    ]
    if config.credentials.file:
        lines += ["[credentials]", f'file = "{config.credentials.file}"', ""]
    # -- MySQL TLS --
    if config.mysql.tls is not None:
        lines += [*config.mysql.tls.dump(), ""]
    # --
    return "\n".join(lines)


# -- credentials ------------------------------------------------------------

class Credentials(BaseModel):
    """MySQL and ZooKeeper identities. From the environment or a secrets file only.

    ``repr`` hides the secrets so they never reach logs or job meta by accident.
    """

    model_config = ConfigDict(frozen=True)

    mysql_user: str
    mysql_password: str = Field(repr=False)
    zk_digest: str | None = Field(default=None, repr=False)  # "user:password"
    queue_token: str | None = Field(default=None, repr=False)
    # -- MySQL TLS: paths from the config, carried here because every MySQL connection is opened from the
    # credentials (migrator.fleet.mysql.connect); the files' contents are never read into this object --
    mysql_tls: MySQLTLSSettings | None = None
    # --

    @property
    def zk_identity(self) -> str | None:
        return self.zk_digest.split(":", 1)[0] if self.zk_digest else None


def load_credentials(config: Config) -> Credentials:
    """Environment first (MIGRATOR_MYSQL_USER / _PASSWORD, MIGRATOR_ZK_DIGEST,
    MIGRATOR_QUEUE_TOKEN), then the secrets file the config names."""
    file_data = _secrets(config)
    mysql = file_data.get("mysql", {})
    zk = file_data.get("zookeeper", {})
    queue = file_data.get("queue", {})
    user = os.environ.get("MIGRATOR_MYSQL_USER") or mysql.get("user")
    password = os.environ.get("MIGRATOR_MYSQL_PASSWORD")
    if password is None:
        password = mysql.get("password")
    if not user or password is None:
        raise CredentialsError(
            "no MySQL credentials: set MIGRATOR_MYSQL_USER and MIGRATOR_MYSQL_PASSWORD, "
            "or name a secrets file under [credentials] file = ... in the config"
        )
    digest = os.environ.get("MIGRATOR_ZK_DIGEST") or zk.get("digest")
    if digest is not None and ":" not in digest:
        raise CredentialsError("the ZooKeeper digest identity must look like user:password")
    token = os.environ.get("MIGRATOR_QUEUE_TOKEN") or queue.get("token")
    return Credentials(mysql_user=user, mysql_password=password, zk_digest=digest, queue_token=token,
                       mysql_tls=config.mysql.tls)


#: the secrets files already warned about in this process (a command reads its secrets several times)
_WARNED: set[Path] = set()


def warn_if_readable_by_others(path: Path) -> bool:
    """One line on stderr (once per file and process) when the secrets file is readable or writable by its group
    or by others: it should be mode 600. The file is still used (the operator decides); True when it warned."""
    try:
        mode = path.stat().st_mode & 0o777
    except OSError:
        return False
    if not mode & 0o077 or path in _WARNED:
        return False
    _WARNED.add(path)
    print(f"warning: credentials file {path} is readable by its group or others (mode {mode:04o}); it holds "
          f"passwords: `chmod 600 {path}`", file=sys.stderr, flush=True)
    return True


def _secrets(config: Config) -> dict[str, Any]:
    """The secrets file the config names, parsed ({} when it names none)."""
    path = config.credentials_path()
    if path is None:
        return {}
    named = f"[credentials] file of {config.path}" if config.path else "[credentials] file"
    if not path.exists():
        raise CredentialsError(f"credentials file {path} (the {named}) does not exist: create it (mode 600) or "
                               "point the config at the right one (without a [credentials] file the secrets come "
                               "from MIGRATOR_MYSQL_USER, MIGRATOR_MYSQL_PASSWORD, MIGRATOR_ZK_DIGEST, "
                               "MIGRATOR_QUEUE_TOKEN)")
    if path.is_dir():
        raise CredentialsError(f"credentials file {path} (the {named}) is a directory: name the TOML file")
    warn_if_readable_by_others(path)
    try:
        return tomllib.loads(path.read_text())
    except OSError as exc:
        raise CredentialsError(f"credentials file {path} cannot be read ({exc.strerror or exc}): check its "
                               "owner and permissions (mode 600, readable by this user)") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise CredentialsError(f"credentials file {path} is not valid TOML: {exc}") from None


class RedisCredentials(BaseModel):
    """The Redis ACL user and password (both optional: a Redis without ``requirepass`` needs none)."""

    model_config = ConfigDict(frozen=True)

    username: str | None = None
    password: str | None = Field(default=None, repr=False)


def load_redis_credentials(config: Config) -> RedisCredentials:
    """Environment first (MIGRATOR_REDIS_USERNAME / MIGRATOR_REDIS_PASSWORD), then ``[redis] user``
    and ``password`` in the secrets file the config names."""
    section = _secrets(config).get("redis", {})
    username = os.environ.get("MIGRATOR_REDIS_USERNAME") or section.get("user")
    password = os.environ.get("MIGRATOR_REDIS_PASSWORD")
    if password is None:
        password = section.get("password")
    if username and password is None:
        raise CredentialsError(f"a Redis ACL user ({username}) without a password: {REDIS_SECRET_HINT}")
    return RedisCredentials(username=username or None, password=password)
