"""The queue catalog in ZooKeeper: one node per queue at ``<root>/queues/<name>``.

The record format (and why a partition is addressed by shard) is documented in
:mod:`migrator.queue.storage`. Nodes carry the protected ACL. Config edits are
compare-and-set on the node version; a lost race is re-read and re-applied
(queue config, unlike the shard map, is safe to retry: each edit is a pure
function of the current record).

Runs in every queue process; reads are cached for ``ttl`` seconds so the hot
path (enqueue/dequeue) does not touch ZooKeeper, which bounds how long another
process's pause or rate change takes to be seen.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from migrator.fleet.zk import ZK
from migrator.queue.errors import QueueExists, UnknownQueue
from migrator.queue.model import QueueRecord, check_queue_name

QUEUES = "queues"


class QueueCatalog:
    def __init__(self, zk: ZK, *, ttl: float = 1.0):
        self.zk = zk
        self.base = zk.path(QUEUES)
        self.ttl = ttl
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, QueueRecord]] = {}

    def node(self, name: str) -> str:
        return f"{self.base}/{check_queue_name(name)}"

    def create(self, record: QueueRecord) -> QueueRecord:
        self.zk.ensure(self.base)
        data = record.model_dump_json().encode()
        try:
            self.zk.client.create(self.node(record.name), data, acl=self.zk.protected_acl())
        except NodeExistsError:
            raise QueueExists(f"queue {record.name} already exists; pick another name or delete it first") from None
        self.invalidate(record.name)
        return self.get(record.name, fresh=True)

    def exists(self, name: str) -> bool:
        return self.zk.client.exists(self.node(name)) is not None

    def get(self, name: str, *, fresh: bool = False) -> QueueRecord:
        path = self.node(name)
        now = time.monotonic()
        if not fresh:
            with self._lock:
                hit = self._cache.get(name)
            if hit and now - hit[0] < self.ttl:
                return hit[1]
        try:
            data, stat = self.zk.client.get(path)
        except NoNodeError:
            self.invalidate(name)
            raise UnknownQueue(f"no queue named {name!r}; `migrator queue list` shows the queues") from None
        rec = QueueRecord.model_validate(json.loads(data))
        rec.version = stat.version
        with self._lock:
            self._cache[name] = (now, rec)
        return rec

    def names(self) -> list[str]:
        try:
            return sorted(self.zk.client.get_children(self.base))
        except NoNodeError:
            return []

    def all(self) -> list[QueueRecord]:
        out = []
        for n in self.names():
            try:
                out.append(self.get(n, fresh=True))
            except UnknownQueue:
                continue
        return out

    def update(self, name: str, change: Callable[[QueueRecord], QueueRecord], *, tries: int = 10) -> QueueRecord:
        for _ in range(tries):
            cur = self.get(name, fresh=True)
            new = change(cur)
            try:
                self.zk.client.set(self.node(name), new.model_dump_json().encode(), version=cur.version)
            except BadVersionError:
                continue
            except NoNodeError:
                raise UnknownQueue(f"queue {name!r} was deleted meanwhile") from None
            self.invalidate(name)
            return self.get(name, fresh=True)
        raise QueueExists(f"queue {name!r} kept changing under us; try again")

    def delete(self, name: str) -> None:
        try:
            self.zk.client.delete(self.node(name))
        except NoNodeError:
            raise UnknownQueue(f"no queue named {name!r}") from None
        self.invalidate(name)

    def invalidate(self, name: str) -> None:
        with self._lock:
            self._cache.pop(name, None)
