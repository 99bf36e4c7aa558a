"""ShardRouter: the client-side view of the shard map.

Watches the map node in ZooKeeper (a kazoo ``DataWatch`` fires at once, then on
every change), keeps the current map and host registry in memory, and answers
"which master holds this shard / this id" and "is this shard frozen". Services
that read and write the fleet (the queue service, the load generator) route
every statement through one of these.

Runs in the caller's process; watch callbacks run on kazoo's event thread, so
the state swap is a single reference assignment guarded by a condition.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pymysql

from migrator.errors import ShardFrozen, ShardMapError, UnknownHost
from migrator.fleet.config import Credentials
from migrator.fleet.ids import shard_db
from migrator.fleet.model import Host, ShardMap
from migrator.fleet.mysql import connect as mysql_connect
from migrator.fleet.shard_map import HostRegistry, ShardMapStore
from migrator.fleet.zk import ZK


class ShardRouter:
    """Routes shards and ids to their master, following the shard map live."""

    def __init__(self, zk: ZK, credentials: Credentials):
        self.zk = zk
        self.credentials = credentials
        self.store = ShardMapStore(zk)
        self.registry = HostRegistry(zk)
        self._cond = threading.Condition()
        self._map: ShardMap | None = None
        self._hosts: dict[str, Host] = {}
        self._listeners: list[Callable[[ShardMap], None]] = []
        self._started = False

    # -- lifecycle -------------------------------------------------------------
    def start(self, timeout: float = 5.0) -> ShardRouter:
        if self._started:
            return self
        self._started = True
        self._hosts = self.registry.all()
        self.zk.client.DataWatch(self.store.path, self._on_data)
        self.zk.client.ChildrenWatch(self.registry.base, self._on_hosts, allow_session_lost=True)
        with self._cond:
            if not self._cond.wait_for(lambda: self._map is not None, timeout):
                raise ShardMapError(
                    f"no shard map at {self.store.path} within {timeout}s: run `migrator topology init`"
                )
        return self

    def add_listener(self, fn: Callable[[ShardMap], None]) -> None:
        self._listeners.append(fn)

    def _on_data(self, data: bytes | None, stat: object) -> None:
        if data is None:
            return
        try:
            smap = ShardMap.from_json(data, epoch=getattr(stat, "version", None))
        except ShardMapError:
            return  # keep the last good map; writers validate before storing
        with self._cond:
            self._map = smap
            self._cond.notify_all()
        for fn in list(self._listeners):
            try:
                fn(smap)
            except Exception:  # a listener's failure must not kill the watch
                pass

    def _on_hosts(self, children: list[str]) -> None:
        try:
            hosts = self.registry.all()
        except Exception:
            return
        with self._cond:
            self._hosts = hosts

    # -- lookups ---------------------------------------------------------------
    @property
    def map(self) -> ShardMap:
        if self._map is None:
            self.refresh()
        assert self._map is not None
        return self._map

    @property
    def epoch(self) -> int | None:
        return self.map.epoch

    def refresh(self, *, hosts: bool = True) -> ShardMap:
        """Read the map synchronously (after an error that says a table moved); with ``hosts`` the host
        registry too (one read per host: after a lost connection, whose host may have a new address)."""
        smap = self.store.read()
        registry = self.registry.all() if hosts else None
        with self._cond:
            if self._map is None or (smap.epoch or 0) >= (self._map.epoch or 0):
                self._map = smap
            if registry is not None:
                self._hosts = registry
            self._cond.notify_all()
            return self._map

    def host(self, name: str) -> Host:
        h = self._hosts.get(name)
        if h is None:
            self._hosts = self.registry.all()
            h = self._hosts.get(name)
        if h is None:
            raise UnknownHost(f"host {name!r} is not in the host registry")
        return h

    def master_for(self, shard: int, table: str | None = None) -> Host:
        """The master serving ``shard`` (or ``table`` of it, which a table route may serve elsewhere)."""
        return self.host(self.map.master_of_table(shard, table))

    def is_frozen(self, shard: int, table: str | None = None) -> bool:
        return self.map.is_table_frozen(shard, table)

    def wait_unfrozen(self, shard: int, timeout: float = 10.0, table: str | None = None) -> ShardMap:
        """Block until ``shard`` (or ``table`` of it) is not frozen (bounded); raises :class:`ShardFrozen`."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                smap = self._map
                if smap is not None and not smap.is_table_frozen(shard, table):
                    return smap
                left = deadline - time.monotonic()
                if left <= 0:
                    what = f"shard {shard}" if table is None else f"table {table} of shard {shard}"
                    raise ShardFrozen(
                        f"{what} stayed frozen for {timeout:.1f}s (a cutover is running); retry later"
                    )
                self._cond.wait(left)

    def wait_for_epoch(self, epoch: int, timeout: float = 5.0) -> bool:
        with self._cond:
            return self._cond.wait_for(
                lambda: self._map is not None and (self._map.epoch or 0) >= epoch, timeout
            )

    def connect(self, shard: int, table: str | None = None, **kwargs: object) -> pymysql.connections.Connection:
        """A new connection to the master of ``shard`` (or of ``table`` of it), using database ``dbNNNNN``."""
        return mysql_connect(self.master_for(shard, table), self.credentials, shard_db(shard),  # type: ignore[arg-type]
                             **kwargs)
