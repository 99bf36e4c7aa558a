"""ZooKeeper stores for the fleet's shared config: host registry and shard map.

Layout under the configured root::

    <root>/hosts/<name>       {"name", "address", "port", "partner"}
    <root>/shardmap           ShardMap wire JSON; znode version == epoch
    <root>/audit/entry-NNNN   one JSON record per shard-map change

Every shard-map change is a compare-and-set on the node's version, made in the
same ZooKeeper transaction as its audit record; a concurrent edit raises
:class:`ShardMapConflict` and is never retried blindly.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from kazoo.exceptions import BadVersionError, NoAuthError, NodeExistsError, NoNodeError

from migrator.errors import NotAuthorized, ShardMapConflict, ShardMapError, ShardMapGuardLost, UnknownHost
from migrator.fleet.model import Host, ShardMap, check_host_name
from migrator.fleet.zk import ZK

SHARDMAP = "shardmap"
HOSTS = "hosts"
AUDIT = "audit"


def actor() -> str:
    """Who is making a change: user@host, plus $MIGRATOR_ACTOR when set."""
    who = os.environ.get("MIGRATOR_ACTOR") or f"{getpass.getuser()}@{socket.gethostname()}"
    return who


class HostRegistry:
    """Host name -> address, port and pair partner."""

    def __init__(self, zk: ZK):
        self.zk = zk
        self.base = zk.path(HOSTS)

    def register(self, host: Host) -> None:
        self.zk.ensure(self.base)
        path = f"{self.base}/{host.name}"
        data = host.model_dump_json().encode()
        try:
            try:
                self.zk.client.create(path, data, acl=self.zk.protected_acl())
            except NodeExistsError:
                self.zk.client.set(path, data)
        except NoAuthError:
            raise NotAuthorized(
                f"not allowed to write host {host.name}: only the migrator identity may change the host registry"
            ) from None

    def get(self, name: str) -> Host:
        check_host_name(name)
        try:
            data, _ = self.zk.client.get(f"{self.base}/{name}")
        except NoNodeError:
            raise UnknownHost(f"host {name!r} is not in the host registry (see `migrator topology show`)") from None
        return Host.model_validate_json(data)

    def all(self) -> dict[str, Host]:
        try:
            names = self.zk.client.get_children(self.base)
        except NoNodeError:
            return {}
        # all reads in flight at once: one round trip, not one per host (a cutover's CAS reads them)
        pending = [(n, self.zk.client.get_async(f"{self.base}/{n}")) for n in sorted(names)]
        hosts = {}
        for n, result in pending:
            try:
                data, _ = result.get()
            except NoNodeError:
                continue
            hosts[n] = Host.model_validate_json(data)
        return hosts


class ShardMapStore:
    """The shard map node: read with its epoch, change by compare-and-set."""

    def __init__(self, zk: ZK):
        self.zk = zk
        self.path = zk.path(SHARDMAP)
        self.audit_base = zk.path(AUDIT)

    def exists(self) -> bool:
        return self.zk.client.exists(self.path) is not None

    def read(self) -> ShardMap:
        try:
            data, stat = self.zk.client.get(self.path)
        except NoNodeError:
            raise ShardMapError(
                f"no shard map at {self.path}: run `migrator topology init --from FILE` (or `migrator sandbox up`)"
            ) from None
        return ShardMap.from_json(data, epoch=stat.version)

    def init(self, smap: ShardMap, hosts: dict[str, Host], *, reason: str = "init",
             register: list[Host] | tuple[Host, ...] = ()) -> ShardMap:
        """Store a first map, and register the hosts of ``register`` (new, or replacing an entry of the same
        name) in the same transaction. Everything is checked before anything is written: the layout, every
        host the map names (among ``hosts`` and ``register``), and that no map exists yet (edit one by CAS
        instead), so a refused init leaves the registry as it was."""
        smap.validate_layout()
        smap.validate_hosts({**hosts, **{h.name: h for h in register}})
        if self.exists():
            raise ShardMapError(f"a shard map already exists at {self.path}: nothing was written (hosts included); "
                                "change it with split, move or rebalance, or register hosts with `migrator "
                                "topology add-pair`")
        self.zk.ensure(self.zk.root)
        self.zk.ensure(self.audit_base)
        tx = self.zk.client.transaction()
        if register:
            registry = HostRegistry(self.zk)
            self.zk.ensure(registry.base)
            for h in register:
                path, data = f"{registry.base}/{h.name}", h.model_dump_json().encode()
                if self.zk.client.exists(path):
                    tx.set_data(path, data)
                else:
                    tx.create(path, data, acl=self.zk.protected_acl())
        tx.create(self.path, smap.to_json(), acl=self.zk.protected_acl())
        tx.create(
            f"{self.audit_base}/entry-",
            self._audit(reason, None, 0, smap),
            acl=self.zk.protected_acl(),
            sequence=True,
        )
        results = tx.commit()
        self._raise_tx(results, existing_msg=f"a shard map already exists at {self.path}")
        return smap.model_copy(update={"epoch": 0})

    def cas(self, new: ShardMap, expected_epoch: int, *, reason: str,
            details: dict[str, Any] | None = None, guard: str | None = None) -> ShardMap:
        """Replace the map iff its epoch is still ``expected_epoch``; returns the stored map.

        ``guard``: a znode that must still exist for the change to commit (checked in
        the same transaction), e.g. the ephemeral lease of the process making it.
        """
        new.validate_layout()
        hosts = HostRegistry(self.zk).all()
        new.validate_hosts(hosts)
        self.zk.ensure(self.audit_base)
        tx = self.zk.client.transaction()
        if guard is not None:
            tx.check(guard, -1)
        tx.set_data(self.path, new.to_json(), version=expected_epoch)
        tx.create(
            f"{self.audit_base}/entry-",
            self._audit(reason, expected_epoch, expected_epoch + 1, new, details),
            acl=self.zk.protected_acl(),
            sequence=True,
        )
        results = tx.commit()
        if guard is not None:
            if isinstance(results[0], NoNodeError):
                raise ShardMapGuardLost(f"{guard} is gone, so the shard map was not changed: "
                                        "the process that held it lost its claim")
            results = results[1:]
        self._raise_tx(results, expected_epoch=expected_epoch)
        return new.model_copy(update={"epoch": expected_epoch + 1})

    def update(self, change: Callable[[ShardMap], ShardMap], *, reason: str, expected_epoch: int | None = None,
               details: dict[str, Any] | None = None) -> ShardMap:
        """Read, apply ``change``, write back by CAS. One attempt: a conflict raises."""
        cur = self.read()
        if expected_epoch is not None and cur.epoch != expected_epoch:
            raise ShardMapConflict(
                f"the shard map is at epoch {cur.epoch}, not the expected {expected_epoch}: "
                "someone else changed it; re-read the map and decide again"
            )
        assert cur.epoch is not None
        return self.cas(change(cur), cur.epoch, reason=reason, details=details)

    def history(self, limit: int = 100) -> list[dict[str, Any]]:
        try:
            names = sorted(self.zk.client.get_children(self.audit_base))
        except NoNodeError:
            return []
        out = []
        for n in names[-limit:]:
            try:
                data, _ = self.zk.client.get(f"{self.audit_base}/{n}")
            except NoNodeError:
                continue
            rec = json.loads(data)
            rec["seq"] = n
            out.append(rec)
        return out

    # -- internals -----------------------------------------------------------
    @staticmethod
    def _audit(reason: str, old: int | None, new: int, smap: ShardMap, details: dict[str, Any] | None = None) -> bytes:
        return json.dumps({
            "kind": "shard_map",
            "who": actor(),
            "when": time.time(),
            "reason": reason,
            "old_epoch": old,
            "new_epoch": new,
            "map": smap.to_wire(),
            "details": details or {},
        }).encode()

    def _raise_tx(self, results: list[Any], *, expected_epoch: int | None = None, existing_msg: str = "") -> None:
        # kazoo's commit() does not raise: it returns exception instances.
        for r in results:
            if isinstance(r, BadVersionError):
                raise ShardMapConflict(
                    f"the shard map changed under us (expected epoch {expected_epoch}): "
                    "a concurrent edit won; re-read the map and decide again"
                )
            if isinstance(r, NodeExistsError) and existing_msg:
                raise ShardMapError(existing_msg)
            if isinstance(r, NoAuthError):
                raise NotAuthorized(
                    "not allowed to change the shard map: only the migrator identity (digest ACL) may"
                )
            if isinstance(r, NoNodeError):
                raise ShardMapError(f"no shard map at {self.path}: run `migrator topology init --from FILE`")
        for r in results:
            if isinstance(r, Exception) and not type(r).__name__ == "RolledBackError":
                raise ShardMapError(f"shard map transaction failed: {type(r).__name__}")
