"""Dequeue brokers (after Pinterest's Pacer): one owner per queue partition,
prefetching claimed jobs into a bounded in-memory buffer.

Runs in ``migrator queue broker`` processes (and inside ``migrator queue serve
--broker``). Coordination is through ZooKeeper:

``<root>/queue_brokers/members/<broker id>``   ephemeral: ``{"id", "url", "pid", "host"}``
``<root>/queue_brokers/owners/<queue>.<index>`` ephemeral: ``{"broker", "url"}``

Every broker sees the same member list and computes the same assignment of
partitions to brokers (rendezvous hashing, :func:`assign`: a join or leave
moves only the partitions that must move). A broker serves a partition only
after it has created that partition's ``owners`` node, and it deletes the node
after giving its buffer back, so even while views of the membership differ a
partition has at most one owner. A broker that dies loses its session: its
nodes vanish, the survivors take its partitions over, and the jobs it had
buffered come back when their leases expire (the reaper), so nothing is lost.

The owner claims pending jobs (``FOR UPDATE SKIP LOCKED``, with the queue's
lease) in batches whenever its buffer falls below half, and serves dequeues
from memory: no two processes contend for the same rows. Jobs held so long
that little of their lease is left are released back to NEW rather than
handed out. A FIFO queue has one partition, so one broker, which serves it in
claim order.

:class:`BrokerDirectory` is the service side: it routes a dequeue for a
partition to its owner (in-process when the owner is local, else over HTTP
to ``POST <url>/v1/broker/dequeue``).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
import time
import uuid
from collections import deque
from typing import Any

import httpx
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.protocol.states import KazooState
from pydantic import BaseModel, ConfigDict, Field

from migrator.fleet.ids import shard_db
from migrator.queue import metrics
from migrator.queue import storage as st
from migrator.queue.errors import QueueError, UnknownQueue, from_wire
from migrator.queue.model import (
    JobDescriptor,
    PartitionRecord,
    QueueRecord,
    split_job_id,
)

BASE = "queue_brokers"
#: brokers in this process, by id (a directory calls them without HTTP)
LOCAL_BROKERS: dict[str, Broker] = {}


def assign(partitions: list[tuple[str, int]], brokers: list[str]) -> dict[tuple[str, int], str]:
    """Rendezvous (highest random weight) assignment of partitions to brokers."""
    if not brokers:
        return {}

    def weight(p: tuple[str, int], b: str) -> int:
        return int.from_bytes(hashlib.md5(f"{p[0]}/{p[1]}/{b}".encode()).digest()[:8], "big")

    return {p: max(sorted(brokers), key=lambda b: weight(p, b)) for p in partitions}


def owner_node(queue: str, index: int) -> str:
    return f"{queue}.{index}"


class _Buffer:
    def __init__(self, rec: QueueRecord, part: PartitionRecord, capacity: int):
        self.rec = rec
        self.part = part
        self.capacity = capacity
        self.items: deque[JobDescriptor] = deque()
        self.lock = threading.Lock()


class Broker:
    """One broker: membership, partition ownership, prefetch buffers."""

    def __init__(self, service: Any, *, broker_id: str | None = None, url: str | None = None,
                 buffer_size: int = 200, tick: float = 0.1, min_lease_left: float = 0.25):
        self.service = service
        self.zk = service.zk
        self.id = broker_id or f"b{uuid.uuid4().hex[:10]}"
        self.url = url
        self.buffer_size = buffer_size
        self.tick = tick
        self.min_lease_left = min_lease_left
        self.members_path = self.zk.path(BASE, "members")
        self.owners_path = self.zk.path(BASE, "owners")
        self._members: list[str] = []
        self._buffers: dict[tuple[str, int], _Buffer] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._recs: list[QueueRecord] = []
        self._recs_at = 0.0
        self._last_reap: dict[tuple[str, int], float] = {}
        self._rejoin = False
        self.errors = 0

    # -- lifecycle -------------------------------------------------------------------
    def start(self) -> Broker:
        self.zk.ensure(self.members_path)
        self.zk.ensure(self.owners_path)
        self._register()
        self.zk.client.ChildrenWatch(self.members_path, self._on_members, allow_session_lost=True)
        self.zk.client.add_listener(self._on_state)
        LOCAL_BROKERS[self.id] = self
        self._thread = threading.Thread(target=self._loop, name=f"broker-{self.id}", daemon=True)
        self._thread.start()
        return self

    def _register(self) -> None:
        data = json.dumps({"id": self.id, "url": self.url, "pid": os.getpid(), "host": socket.gethostname()})
        try:
            self.zk.client.create(f"{self.members_path}/{self.id}", data.encode(), ephemeral=True,
                                  acl=self.zk.protected_acl())
        except NodeExistsError:
            pass

    def _on_state(self, state: str) -> None:
        if state == KazooState.LOST:  # the session (and every node we owned) is gone
            with self._lock:
                self._buffers.clear()  # their claims expire; the new owners' reapers return them
            self._rejoin = True
            self._wake.set()

    def _on_members(self, children: list[str]) -> bool | None:
        self._members = sorted(children)
        self._wake.set()
        return False if self._stop.is_set() else None

    def stop(self) -> None:
        """Graceful: give buffered jobs back, drop ownership, leave."""
        self._stop.set()
        self._wake.set()
        if self._thread:
            self._thread.join(10)
        for key in list(self._buffers):
            self._release(key)
        try:
            self.zk.client.delete(f"{self.members_path}/{self.id}")
        except NoNodeError:
            pass
        LOCAL_BROKERS.pop(self.id, None)

    def crash(self) -> None:
        """Die without cleanup (tests): stop working and drop the ZooKeeper session."""
        self._stop.set()
        self._wake.set()
        if self._thread:
            self._thread.join(10)
        LOCAL_BROKERS.pop(self.id, None)
        self.zk.client.stop()

    # -- views -----------------------------------------------------------------------
    def owned(self) -> set[tuple[str, int]]:
        with self._lock:
            return set(self._buffers)

    def buffered(self) -> int:
        with self._lock:
            return sum(len(b.items) for b in self._buffers.values())

    def _queues(self) -> list[QueueRecord]:
        now = time.monotonic()
        if now - self._recs_at > 1.0:
            self._recs = self.service.catalog.all()
            self._recs_at = now
        return self._recs

    # -- the loop ----------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._step()
            except Exception:  # noqa: BLE001 - a broker keeps going; errors are counted
                self.errors += 1
                time.sleep(0.2)
            self._wake.wait(self.tick)
            self._wake.clear()

    def _step(self) -> None:
        if self._rejoin:  # a new session after a lost one: register again (from this thread, not kazoo's)
            if not self.zk.client.connected:
                return
            self._register()
            self._rejoin = False
        recs = {r.name: r for r in self._queues()}
        parts = [(r.name, p.index) for r in recs.values() for p in r.partitions]
        mine = {k for k, b in assign(parts, self._members).items() if b == self.id}
        for key in self.owned() - mine:
            self._release(key)
        for key in mine - self.owned():
            self._acquire(recs[key[0]], key[1])
        for key in self.owned():
            rec = recs.get(key[0])
            if rec is None:
                continue
            with self._lock:
                buf = self._buffers.get(key)
            if buf is None:
                continue
            buf.rec = rec
            self._maybe_reap(buf)
            self._refill(buf)

    def _acquire(self, rec: QueueRecord, index: int) -> None:
        node = f"{self.owners_path}/{owner_node(rec.name, index)}"
        try:
            self.zk.client.create(node, json.dumps({"broker": self.id, "url": self.url}).encode(),
                                  ephemeral=True, acl=self.zk.protected_acl())
        except NodeExistsError:
            return  # the previous owner has not let go yet
        with self._lock:
            self._buffers[(rec.name, index)] = _Buffer(rec, rec.partition(index), self.buffer_size)

    def _release(self, key: tuple[str, int]) -> None:
        with self._lock:
            buf = self._buffers.pop(key, None)
        if buf is not None:
            with buf.lock:
                items = list(buf.items)
                buf.items.clear()
            self._give_back(buf, items)
            metrics.BROKER_BUFFERED.labels(key[0], str(key[1])).set(0)
        try:
            self.zk.client.delete(f"{self.owners_path}/{owner_node(*key)}")
        except NoNodeError:
            pass

    def _give_back(self, buf: _Buffer, items: list[JobDescriptor]) -> None:
        if not items:
            return
        args = [(split_job_id(d.id)[1], st.Claim.parse(d.claim)) for d in items]
        try:
            self.service.executor.run(buf.part.shard, lambda c: st.release_jobs(
                c, shard_db(buf.part.shard), buf.part.table, args), what=f"release {buf.part.table}",
                table=buf.part.table)
        except QueueError:
            self.errors += 1  # their leases expire and the reaper returns them

    def _maybe_reap(self, buf: _Buffer) -> None:
        key = (buf.rec.name, buf.part.index)
        now = time.monotonic()
        if now - self._last_reap.get(key, 0.0) >= 1.0:
            self._last_reap[key] = now
            self.service.reap_partition(buf.rec, buf.part)

    def _refill(self, buf: _Buffer) -> None:
        if buf.rec.config.paused:
            return
        with buf.lock:
            have = len(buf.items)
        if have >= buf.capacity // 2:
            return
        got = self.service.claim_from_table(buf.rec, buf.part, buf.capacity - have, buf.rec.config.lease_seconds)
        if got:
            with buf.lock:
                buf.items.extend(got)
        metrics.BROKER_BUFFERED.labels(buf.rec.name, str(buf.part.index)).set(len(buf.items))

    # -- serving ------------------------------------------------------------------------
    def take(self, queue: str, index: int, limit: int,
             lease_seconds: float | None = None) -> list[JobDescriptor] | None:
        """Up to ``limit`` buffered jobs of a partition; None if this broker does not own it."""
        with self._lock:
            buf = self._buffers.get((queue, index))
        if buf is None:
            return None
        now = time.time()
        margin = buf.rec.config.lease_seconds * self.min_lease_left
        out: list[JobDescriptor] = []
        stale: list[JobDescriptor] = []
        with buf.lock:
            while buf.items and len(out) < limit:
                d = buf.items.popleft()
                (stale if d.lease_until - now < margin else out).append(d)
        if stale:
            self._give_back(buf, stale)
        if len(buf.items) < buf.capacity // 2:
            self._wake.set()
        if out and lease_seconds is not None and lease_seconds > buf.rec.config.lease_seconds:
            res = self.service.extend_lease(queue, [(d.id, d.claim) for d in out], lease_seconds)
            out = [d.model_copy(update={"lease_until": now + lease_seconds}) for d, r in zip(out, res) if r == "OK"]
        return out


class BrokerDirectory:
    """The service's :class:`DequeueSource`: send each partition's dequeue to its owner."""

    def __init__(self, service: Any, *, local: Broker | None = None, fallback_to_table: bool = False,
                 token: str | None = None, ttl: float = 0.5):
        self.service = service
        self.local = local
        self.fallback = fallback_to_table
        self.owners_path = service.zk.path(BASE, "owners")
        self.ttl = ttl
        self._cache: dict[tuple[str, int], tuple[float, dict[str, Any] | None]] = {}
        self._http = httpx.Client(timeout=10, headers={"Authorization": f"Bearer {token}"} if token else {})

    def owner(self, queue: str, index: int) -> dict[str, Any] | None:
        key = (queue, index)
        now = time.monotonic()
        hit = self._cache.get(key)
        if hit and now - hit[0] < self.ttl:
            return hit[1]
        try:
            data, _ = self.service.zk.client.get(f"{self.owners_path}/{owner_node(queue, index)}")
            val = json.loads(data)
        except NoNodeError:
            val = None
        self._cache[key] = (now, val)
        return val

    def dequeue(self, rec: QueueRecord, part: PartitionRecord, limit: int,
                lease_s: float) -> list[JobDescriptor] | None:
        owner = self.owner(rec.name, part.index)
        if owner is None:
            return None if self.fallback else []
        lease = lease_s if lease_s != rec.config.lease_seconds else None
        broker = LOCAL_BROKERS.get(owner["broker"])
        if broker is not None:
            got = broker.take(rec.name, part.index, limit, lease)
            if got is None:
                self._cache.pop((rec.name, part.index), None)
            return got or []
        if not owner.get("url"):
            return []
        try:
            r = self._http.post(f"{owner['url']}/v1/broker/dequeue",
                                json={"queue": rec.name, "partition": part.index, "limit": limit,
                                      "lease_seconds": lease})
        except httpx.TransportError:
            self._cache.pop((rec.name, part.index), None)
            return []
        if r.status_code >= 400:
            try:
                raise from_wire(r.json()["error"])
            except (ValueError, KeyError):
                return []
        return [JobDescriptor.model_validate(x) for x in r.json()]

    def close(self) -> None:
        self._http.close()


class BrokerDequeue(BaseModel):
    model_config = ConfigDict(extra="forbid")
    queue: str
    partition: int = Field(ge=0)
    limit: int = Field(default=1, ge=1, le=1000)
    lease_seconds: float | None = Field(default=None, gt=0, le=86400)


def add_broker_routes(app: Any, broker: Broker, deps: list[Any]) -> None:
    """``POST /v1/broker/dequeue`` and ``GET /v1/broker`` on a FastAPI app."""

    @app.post("/v1/broker/dequeue", dependencies=deps)
    def broker_dequeue(req: BrokerDequeue) -> list[JobDescriptor]:
        got = broker.take(req.queue, req.partition, req.limit, req.lease_seconds)
        if got is None:
            raise UnknownQueue(f"broker {broker.id} does not own {req.queue}/{req.partition} (any more)")
        return got

    @app.get("/v1/broker", dependencies=deps)
    def broker_info() -> dict[str, Any]:
        return {"id": broker.id, "url": broker.url, "owned": sorted(f"{q}.{i}" for q, i in broker.owned()),
                "buffered": broker.buffered(), "errors": broker.errors}
