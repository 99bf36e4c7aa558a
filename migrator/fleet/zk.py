"""ZooKeeper access: one client per process, paths under the configured root,
and the digest ACL that keeps the fleet's shared config writable by the
migrator identity only.

Anyone may read the shard map and host registry (routers run as many services);
only the identity in the credentials (``MIGRATOR_ZK_DIGEST`` or the secrets
file) may change them.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    NoAuthError,
    NodeExistsError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState
from kazoo.retry import ForceRetryError, KazooRetry, RetryFailedError
from kazoo.security import READ_ACL_UNSAFE, make_digest_acl

from migrator.errors import CredentialsError, NotAuthorized, ZooKeeperUnavailable
from migrator.fleet.config import Config, Credentials, load_credentials

T = TypeVar("T")


def holder() -> str:
    """This process as the holder of a lock, lease or settle (``host:pid``): how a holder is named in
    the nodes that say who holds what."""
    return f"{socket.gethostname()}:{os.getpid()}"


def protected(digest: str) -> list[Any]:
    """World-readable, writable only by the digest identity ``user:password``."""
    user, password = digest.split(":", 1)
    return [make_digest_acl(user, password, all=True), *READ_ACL_UNSAFE]


class ZK:
    """A connected kazoo client plus the root path every node lives under."""

    def __init__(self, client: KazooClient, root: str, credentials: Credentials | None = None):
        self.client = client
        self.root = root.rstrip("/")
        self.credentials = credentials

    # -- paths ----------------------------------------------------------------
    def path(self, *parts: str) -> str:
        return "/".join([self.root, *[p.strip("/") for p in parts if p]])

    # -- ACLs -----------------------------------------------------------------
    def protected_acl(self) -> list[Any]:
        """World-readable, writable only by the migrator digest identity."""
        if not self.credentials or not self.credentials.zk_digest:
            raise CredentialsError(
                "no ZooKeeper identity configured: set MIGRATOR_ZK_DIGEST=user:password "
                "or [zookeeper] digest in the secrets file; the shard map is writable only by that identity"
            )
        return protected(self.credentials.zk_digest)

    def ensure(self, path: str, acl: list[Any] | None = None) -> None:
        """Create ``path`` and its parents (protected) if they do not exist."""
        if self.client.exists(path):
            return
        acl = acl if acl is not None else self.protected_acl()
        parts = path.strip("/").split("/")
        cur = ""
        for p in parts:
            cur += "/" + p
            try:
                self.client.create(cur, b"", acl=acl)
            except NodeExistsError:
                pass
            except NoAuthError:
                raise NotAuthorized(f"not allowed to create {cur}: wrong ZooKeeper identity") from None

    # -- JSON helpers -----------------------------------------------------------
    def get_json(self, path: str) -> tuple[Any, int]:
        data, stat = self.client.get(path)
        return (json.loads(data) if data else None), stat.version

    def close(self) -> None:
        try:
            self.client.stop()
            self.client.close()
        except Exception:  # closing a dead client is not an error worth surfacing
            pass

    def __enter__(self) -> ZK:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect(config: Config, credentials: Credentials | None = None, *, timeout: float = 5.0,
            session_timeout: float | None = None) -> ZK:
    """Connect to the configured ensemble, authenticated when a digest is known."""
    auth = []
    default_acl = None
    if credentials and credentials.zk_digest:
        auth.append(("digest", credentials.zk_digest))
        # nodes made without an explicit ACL (kazoo's recipes: the applier and cleanup locks) are
        # protected too: world-readable, writable by the migrator identity only
        default_acl = protected(credentials.zk_digest)
    client = KazooClient(
        hosts=config.zookeeper.hosts,
        timeout=session_timeout or config.zookeeper.session_timeout,
        auth_data=auth or None,
        default_acl=default_acl,
        connection_retry=KazooRetry(max_tries=-1, delay=0.2, max_delay=2),
        command_retry=KazooRetry(max_tries=3, delay=0.1, max_delay=1),
    )
    try:
        client.start(timeout=timeout)
    except KazooTimeoutError:
        client.stop()
        client.close()
        raise ZooKeeperUnavailable(
            f"cannot reach ZooKeeper at {config.zookeeper.hosts} within {timeout:.0f}s; "
            "is it running? (`migrator sandbox status` for the sandbox)"
        ) from None
    return ZK(client, config.zookeeper.root, credentials)


# -- a session that waits for ZooKeeper ----------------------------------------------------------------

#: what a ZooKeeper call raises when ZooKeeper went away under it (the connection lost, the session expired, a
#: request timed out, no connection within the connect timeout): ZooKeeper's state, not the caller's error
AWAY = (ConnectionLoss, SessionExpiredError, OperationTimeoutError, ZooKeeperUnavailable)


def went_away(exc: BaseException | None) -> bool:
    """``exc``, or an error it was raised from (``raise ... from``), says ZooKeeper went away (:data:`AWAY`). An
    error merely raised while handling one is not: it may be the step's own verdict."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, AWAY):
            return True
        seen.add(id(exc))
        exc = exc.__cause__
    return False


#: how long a patient session (:class:`PatientSession`) waits for ZooKeeper to come back before it gives up:
#: the default of ``--zk-patience``. Past a leader election or a rolling restart of the ensemble, and past
#: every session timeout, so a follower rides through what ZooKeeper recovers from by itself.
PATIENCE_S = 120.0


@dataclass(frozen=True)
class Outage:
    """ZooKeeper gone and back, as one session saw it: for how long, and whether the session expired meanwhile
    (kazoo then made a new one)."""

    seconds: float
    expired: bool

    def text(self) -> str:
        how = "the session had expired: went on with a new one" if self.expired else "the session held"
        return f"ZooKeeper is back after {self.seconds:.0f}s ({how})"

    def as_dict(self) -> dict[str, Any]:
        return {"away_s": round(self.seconds, 3), "expired": self.expired}


class PatientSession:
    """One ZooKeeper session for a process that follows something through time (a migration, a rebalance, a
    playbook run) or launches it, kept for as long as it does, whatever ZooKeeper does meanwhile.

    Runs in the operator's ``migrator`` process. Opened once (waiting up to ``patience_s`` for a first
    connection); when the connection is lost kazoo reconnects by itself, on the same session while it lives
    and on a new one once it expired (its connection retry has no limit), and :meth:`call` runs the caller's
    reads and compare-and-sets again through kazoo's :class:`~kazoo.retry.KazooRetry` once it is back. Only
    when ZooKeeper stays away for ``patience_s`` in a row does it give up: a watchdog started when the
    connection went stops the client, which releases any request kazoo held for the reconnection, and every
    :meth:`call` then raises :class:`~migrator.errors.ZooKeeperUnavailable` (exit 4) with ``then`` (what
    to run once ZooKeeper is back). :meth:`reconnected` lists each outage once, for the one line a follower
    prints about it.

    Holds no ephemeral node of its own: what a caller creates as ephemeral goes with an expired session,
    and the caller must be one that recreates it."""

    def __init__(self, config: Config, credentials: Credentials | None = None, *, patience_s: float = PATIENCE_S,
                 then: str = ""):
        """``credentials``: the config's (read from it when not given)."""
        self.patience_s = patience_s
        self.hosts = config.zookeeper.hosts
        self.then = then
        self._lock = threading.Lock()
        self._away_since: float | None = None
        self._expired = False
        self._outages: list[Outage] = []
        self._watchdog: threading.Timer | None = None
        self._gave_up = threading.Event()
        self._closing = False
        self.zk = connect(config, credentials or load_credentials(config), timeout=patience_s)
        self.zk.client.add_listener(self._on_state)

    # -- kazoo's connection thread: never blocks --------------------------------------------------------
    def _on_state(self, state: str) -> None:
        with self._lock:
            if self._closing:
                return
            if state == KazooState.CONNECTED:
                if self._away_since is not None:
                    self._outages.append(Outage(time.monotonic() - self._away_since, self._expired))
                self._away_since, self._expired = None, False
                if self._watchdog is not None:
                    self._watchdog.cancel()
                    self._watchdog = None
                return
            if state == KazooState.LOST:
                self._expired = True
            if self._away_since is None:  # SUSPENDED, or LOST straight away
                self._away_since = time.monotonic()
                self._watchdog = threading.Timer(self.patience_s, self._give_up)
                self._watchdog.daemon = True
                self._watchdog.start()

    def _give_up(self) -> None:
        """ZooKeeper stayed away for the patience: stop the client, so that a request kazoo holds until the
        reconnection fails now instead of waiting on."""
        self._gave_up.set()
        with self._lock:
            self._closing = True
        self.zk.close()

    # -- the caller's side ---------------------------------------------------------------------------------
    def unavailable(self) -> ZooKeeperUnavailable:
        return ZooKeeperUnavailable(
            f"ZooKeeper at {self.hosts} did not answer for {self.patience_s:g}s (--zk-patience)"
            + (f"; {self.then}" if self.then else "")
        )

    def call(self, fn: Callable[[ZK], T]) -> T:
        """``fn(zk)`` on this session, run again while ZooKeeper is away (connection lost, session expired,
        a request timed out: :func:`went_away`, however ``fn`` wrapped it), with kazoo's backoff, until it
        returns: ``fn`` must be safe to run twice (reads, compare-and-sets, creates that find their own node).
        :class:`~migrator.errors.ZooKeeperUnavailable` once ZooKeeper was away for the patience; any other
        error of ``fn`` as it is."""

        def attempt() -> T:
            if self._gave_up.is_set():
                raise self.unavailable()
            try:
                return fn(self.zk)
            except ConnectionClosedError:
                if self._gave_up.is_set():
                    raise self.unavailable() from None
                raise
            except KazooRetry.RETRY_EXCEPTIONS + KazooRetry.EXPIRED_EXCEPTIONS:
                raise
            except Exception as exc:
                if went_away(exc):  # wrapped by the caller, or a session of its own that could not connect
                    raise ForceRetryError(str(exc)) from exc
                raise

        retry = KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=2.0, deadline=self.patience_s,
                           ignore_expire=True, interrupt=self._gave_up.is_set)
        try:
            return retry(attempt)
        except RetryFailedError:  # the deadline, or the watchdog's interrupt
            raise self.unavailable() from None

    def reconnected(self) -> list[Outage]:
        """The outages this session came back from since the last look (each reported once)."""
        with self._lock:
            out, self._outages = self._outages, []
        return out

    def close(self) -> None:
        with self._lock:
            self._closing = True
            if self._watchdog is not None:
                self._watchdog.cancel()
        self.zk.close()

    def __enter__(self) -> PatientSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
