"""Every Redis client of the toolkit, opened one way: :func:`connect`.

RQ workers, every enqueue of a migration step, the queue load, ``status``
and the metrics all call it, so the settings of ``[redis]`` in the config
apply to each of them:

* ``url``: ``redis://HOST:PORT/DB``, or ``rediss://`` for TLS, verified
  against ``ca_file`` when the config names one (else the system's CAs);
* ``sentinels`` and ``service_name``: the master's address is asked from
  Redis Sentinel (the URL's host and port are then unused; its scheme and db
  still apply), and a failover is followed on the next reconnect;
* the ACL user and password come from the environment or the secrets file
  (:func:`migrator.fleet.config.load_redis_credentials`), never from the
  config file.
"""

from __future__ import annotations

from typing import Any

from redis import Redis
from redis.sentinel import Sentinel

from migrator.errors import RedisUnavailable
from migrator.fleet.config import Config, load_redis_credentials


def _tls_kwargs(config: Config) -> dict[str, Any]:
    if not config.redis.tls:
        return {}
    kwargs: dict[str, Any] = {"ssl_cert_reqs": "required"}
    ca = config.redis_ca_path()
    if ca is not None:
        if not ca.exists():
            raise RedisUnavailable(f"the Redis CA file {ca} ([redis] ca_file) does not exist")
        kwargs["ssl_ca_certs"] = str(ca)
    return kwargs


def connect(config: Config, **options: Any) -> Redis:
    """A Redis client for the configured server (``options``: redis-py connection settings such as
    ``socket_timeout``). Connects lazily: the first command reaches the server."""
    creds = load_redis_credentials(config)
    auth = {k: v for k, v in (("username", creds.username), ("password", creds.password)) if v is not None}
    if config.redis.sentinels:
        addrs = [(h, int(p)) for h, _, p in (s.rpartition(":") for s in config.redis.sentinels)]
        sentinel_opts = {k: v for k, v in options.items() if k in ("socket_timeout", "socket_connect_timeout")}
        sentinel = Sentinel(addrs, sentinel_kwargs=sentinel_opts or None, **options)
        tls = {"ssl": True, **_tls_kwargs(config)} if config.redis.tls else {}
        return sentinel.master_for(config.redis.service_name, db=config.redis.db, **auth, **tls)
    return Redis.from_url(config.redis.url, **auth, **_tls_kwargs(config), **options)


def url_with_credentials(config: Config, *, db: int | None = None) -> str:
    """The configured URL with the ACL user and password in it (and ``db`` as its path), for
    programs that only take a URL, such as the ``rq`` command line. Hand it over in the
    environment (``RQ_REDIS_URL``), never on a command line: ``ps`` shows those."""
    from urllib.parse import quote, urlparse, urlunparse

    creds = load_redis_credentials(config)
    url = urlparse(config.redis.url)
    if creds.password:
        user = quote(creds.username or "", safe="")
        url = url._replace(netloc=f"{user}:{quote(creds.password, safe='')}@{url.netloc}")
    if db is not None:
        url = url._replace(path=f"/{db}")
    return urlunparse(url)
