"""Dequeue brokers: one owner per partition, failover when a broker dies with
jobs in its buffer (nothing lost), FIFO through a broker, and the HTTP path."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from migrator.queue.broker import Broker, BrokerDirectory, assign
from migrator.queue.model import AckItem, EnqueueJob, QueueConfig
from migrator.queue.service import QueueService


def wait_for(cond, timeout=10.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def services(fleet):
    made = []

    def make():
        s = QueueService(fleet.config, fleet.credentials, frozen_wait=3.0)
        made.append(s)
        return s

    yield make
    for s in made:
        try:
            s.close()
        except Exception:
            pass


def owners(fleet, queue):
    import json

    base = f"{fleet.root}/queue_brokers/owners"
    out = {}
    from kazoo.exceptions import NoNodeError

    for child in fleet.zk.client.get_children(base):
        q, idx = child.rsplit(".", 1)
        if q == queue:
            try:  # an owner node is ephemeral: it may vanish between the listing and the read
                out[int(idx)] = json.loads(fleet.zk.client.get(f"{base}/{child}")[0])["broker"]
            except NoNodeError:
                continue
    return out


def test_broker_failover_loses_nothing(qs, fleet, services):
    n_parts = 4
    qs.create_queue("bq", QueueConfig(partitions=n_parts, lease_seconds=1.0))
    expected = assign([("bq", i) for i in range(n_parts)], ["b1", "b2"])
    assert set(expected.values()) == {"b1", "b2"}, "test needs both brokers to own something"
    b1 = Broker(services(), broker_id="b1", buffer_size=20).start()
    b2 = Broker(services(), broker_id="b2", buffer_size=20).start()
    qs.dequeue_source = BrokerDirectory(qs)
    try:
        wait_for(lambda: owners(fleet, "bq") == {i: expected[("bq", i)] for i in range(n_parts)}, what="assignment")
        assert b1.owned() | b2.owned() == {("bq", i) for i in range(n_parts)}
        assert not b1.owned() & b2.owned()

        ids: set[int] = set()
        for k in range(8):  # a batch goes to one partition; round-robin over calls
            ids |= {r.id for r in qs.enqueue("bq", [EnqueueJob(body=f"{k}.{i}") for i in range(10)])}
        wait_for(lambda: b1.buffered() > 0 and b2.buffered() > 0, what=f"prefetch ({b1.errors}, {b2.errors})")
        done: set[int] = set()
        got = qs.dequeue("bq", limit=10)
        assert got
        assert qs.ack("bq", [AckItem(id=d.id, claim=d.claim) for d in got]) == ["OK"] * len(got)
        done |= {d.id for d in got}

        held = b1.buffered()
        assert held > 0
        b1.crash()  # dies holding claimed jobs in its buffer
        wait_for(lambda: b2.owned() == {("bq", i) for i in range(n_parts)}, what="failover")
        assert set(owners(fleet, "bq").values()) == {"b2"}

        deadline = time.monotonic() + 15
        while done != ids and time.monotonic() < deadline:
            got = qs.dequeue("bq", limit=20, wait_seconds=0.3)
            if got:
                res = qs.ack("bq", [AckItem(id=d.id, claim=d.claim) for d in got])
                done |= {d.id for d, r in zip(got, res) if r == "OK"}
        assert done == ids, f"{len(ids - done)} jobs never came back"
        assert qs.counts("bq") == {"NEW": 0, "IPR": 0, "OK": len(ids), "FAIL": 0}
    finally:
        qs.dequeue_source = None
        b2.stop()


def test_graceful_stop_hands_buffer_back(qs, fleet, services):
    qs.create_queue("bg", QueueConfig(partitions=2, lease_seconds=60))
    qs.enqueue("bg", [EnqueueJob(body=str(i)) for i in range(10)])
    b = Broker(services(), broker_id="solo", buffer_size=50).start()
    wait_for(lambda: b.buffered() == 10, what="prefetch")
    assert qs.counts("bg")["IPR"] == 10
    b.stop()
    assert qs.counts("bg") == {"NEW": 10, "IPR": 0, "OK": 0, "FAIL": 0}
    # the attempt was refunded: released jobs were never started
    [d] = qs.dequeue("bg")
    assert d.attempt == 1


def test_fifo_through_a_broker(qs, fleet, services):
    qs.create_queue("bf", QueueConfig(fifo=True))
    ids = [r.id for r in qs.enqueue("bf", [EnqueueJob(body=str(i), priority=1 + i % 3) for i in range(25)])]
    b = Broker(services(), broker_id="fifo", buffer_size=10).start()
    qs.dequeue_source = BrokerDirectory(qs)
    try:
        wait_for(lambda: ("bf", 0) in b.owned(), what="ownership")
        seen = []
        deadline = time.monotonic() + 10
        while len(seen) < len(ids) and time.monotonic() < deadline:
            got = qs.dequeue("bf", limit=4, wait_seconds=0.3)
            seen += [d.id for d in got]
            if got:
                qs.ack("bf", [AckItem(id=d.id, claim=d.claim) for d in got])
        assert seen == ids
    finally:
        qs.dequeue_source = None
        b.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_remote_broker_over_http(qs, fleet, services):
    """A broker in its own uvicorn server; the service reaches it by the URL it registered."""
    import uvicorn

    from migrator.queue.api import create_app

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    bsvc = services()
    broker = Broker(bsvc, broker_id="remote", url=url)
    app = create_app(bsvc, token=None, broker=broker, allow_open=True)  # the directory below sends no token
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    th = threading.Thread(target=server.run, daemon=True)
    th.start()
    broker.start()
    from migrator.queue import broker as broker_mod

    broker_mod.LOCAL_BROKERS.pop("remote")  # make the directory go over HTTP
    qs.create_queue("bh", QueueConfig(partitions=1))
    directory = BrokerDirectory(qs)
    qs.dequeue_source = directory
    try:
        [r] = qs.enqueue("bh", [EnqueueJob(body="over http")])
        wait_for(lambda: directory.owner("bh", 0) is not None and broker.buffered() == 1, what="prefetch")
        [d] = qs.dequeue("bh", limit=5, wait_seconds=2)
        assert d.id == r.id and d.body == "over http"
        assert qs.ack("bh", [AckItem(id=d.id, claim=d.claim)]) == ["OK"]
    finally:
        qs.dequeue_source = None
        directory.close()
        broker_mod.LOCAL_BROKERS["remote"] = broker
        broker.stop()
        server.should_exit = True
        th.join(5)
