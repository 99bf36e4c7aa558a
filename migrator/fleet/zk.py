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
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, NodeExistsError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry
from kazoo.security import READ_ACL_UNSAFE, make_digest_acl

from migrator.errors import CredentialsError, NotAuthorized, ZooKeeperUnavailable
from migrator.fleet.config import Config, Credentials


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
