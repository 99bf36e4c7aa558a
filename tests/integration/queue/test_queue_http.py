"""The HTTP API and the Python client against the real fleet (FastAPI TestClient)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from migrator.queue.api import create_app
from migrator.queue.client import QueueClient
from migrator.queue.errors import InvalidArgument, QueuePaused, UnknownQueue
from migrator.queue.model import MAX_BODY_BYTES, AckItem, EnqueueJob, JobFilter, QueueConfig

TOKEN = "t0ken"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def http(qs):
    with TestClient(create_app(qs, token=TOKEN)) as tc:
        yield tc


@pytest.fixture
def client(http):
    return QueueClient("http://testserver", token=TOKEN, http=http)


def test_client_round_trip(client):
    client.create_queue("web", QueueConfig(partitions=2, default_attempts=2))
    assert [q.name for q in client.list_queues()] == ["web"]
    res = client.enqueue("web", [EnqueueJob(body='{"n": 1}', priority=1), EnqueueJob(body="two")])
    assert len(res) == 2
    got = client.dequeue("web", limit=5)
    assert {d.id for d in got} == {r.id for r in res}
    assert client.extend_lease("web", [(got[0].id, got[0].claim)], lease_seconds=60) == ["OK"]
    assert client.ack("web", [AckItem(id=d.id, claim=d.claim) for d in got]) == ["OK", "OK"]
    assert client.ack("web", [AckItem(id=got[0].id, claim=got[0].claim)]) == ["ALREADY_ACKED"]
    assert client.lookup("web", res[0].id).state == "OK"
    assert client.counts("web")["OK"] == 2
    jobs, cursor = client.scan("web", "OK", limit=1)
    assert len(jobs) == 1 and cursor
    jobs2, cursor2 = client.scan("web", "OK", limit=1, cursor=cursor)
    assert len(jobs2) == 1 and jobs2[0].id != jobs[0].id
    assert client.delete_jobs("web", "OK", filter=JobFilter(ids=[res[0].id])) == 1
    client.pause("web")
    with pytest.raises(QueuePaused) as exc:
        client.dequeue("web")
    assert exc.value.retryable
    client.resume("web")
    client.delete_queue("web")
    with pytest.raises(UnknownQueue):
        client.counts("web")


def test_bad_input_gets_4xx_with_a_clear_message(http, qs):
    qs.create_queue("bad")
    r = http.post("/v1/queues/nope/jobs", json={"jobs": [{"body": "x"}]}, headers=AUTH)
    assert r.status_code == 404 and r.json()["error"]["code"] == "UNKNOWN_QUEUE"
    assert "nope" in r.json()["error"]["message"]

    r = http.post("/v1/queues", json={"name": "bad-name!"}, headers=AUTH)
    assert r.status_code == 400 and r.json()["error"]["code"] == "INVALID_ARGUMENT"
    assert "queue name" in r.json()["error"]["message"]

    r = http.post("/v1/queues/bad/jobs", json={"jobs": [{"body": "x" * (MAX_BODY_BYTES + 1)}]}, headers=AUTH)
    assert r.status_code == 413 and r.json()["error"]["code"] == "BODY_TOO_LARGE"
    assert str(MAX_BODY_BYTES) in r.json()["error"]["message"]

    r = http.post("/v1/queues/bad/jobs", json={"jobs": [{"body": "x", "priority": 7}]}, headers=AUTH)
    assert r.status_code == 400 and r.json()["error"]["code"] == "INVALID_ARGUMENT"
    assert "priority" in r.json()["error"]["message"]

    r = http.post("/v1/queues/bad/jobs", content=b'{"jobs": [{"body": ',
                  headers={**AUTH, "content-type": "application/json"})
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]

    r = http.post("/v1/queues/bad/jobs", json={"jobs": [{"body": "x", "colour": "red"}]}, headers=AUTH)
    assert r.status_code == 400 and "colour" in r.json()["error"]["message"]

    r = http.post("/v1/queues/bad/ack", json={"items": [{"id": 1, "claim": "zzz"}]}, headers=AUTH)
    assert r.status_code == 400 and "not a job id" in r.json()["error"]["message"]

    r = http.post("/v1/queues/bad/jobs", json={"jobs": [{"body": "x"}]})
    assert r.status_code == 401

    r = http.post("/v1/queues/bad/scan", json={"state": "SLEEPING"}, headers=AUTH)
    assert r.status_code == 400 and "unknown state" in r.json()["error"]["message"]

    # the bound filter is data, not SQL
    r = http.post("/v1/queues/bad/delete", json={"state": "NEW", "filter": {"custom_status": "' OR 1=1 -- "}},
                  headers=AUTH)
    assert r.status_code == 200 and r.json()["affected"] == 0


def test_client_raises_typed_errors(client):
    with pytest.raises(UnknownQueue):
        client.enqueue("ghost", [EnqueueJob(body="x")])
    with pytest.raises(InvalidArgument):
        client.create_queue("no spaces")


def test_openapi_and_metrics(http, qs):
    spec = http.get("/openapi.json").json()
    assert "/v1/queues/{name}/dequeue" in spec["paths"]
    assert "idempotency_key" in spec["components"]["schemas"]["EnqueueRequest"]["properties"]
    assert "results" in spec["components"]["schemas"]["ErrorDetail"]["properties"]
    qs.create_queue("met")
    qs.enqueue("met", [EnqueueJob(body="x"), EnqueueJob(body="y")])
    [d] = qs.dequeue("met")
    qs.ack("met", [AckItem(id=d.id, claim=d.claim)])
    qs.ack("met", [AckItem(id=d.id, claim=d.claim)])  # a retried ack: ALREADY_ACKED
    forged = ("0" if d.claim[0] != "0" else "1") + d.claim[1:]  # another token: STALE_CLAIM
    qs.ack("met", [AckItem(id=d.id, claim=forged)])
    qs.dequeue("met", limit=5)
    qs.dequeue("met")
    text = http.get("/metrics").text
    assert 'queue_depth{queue="met",state="NEW"} 0.0' in text
    assert 'queue_depth{queue="met",state="IPR"} 1.0' in text
    assert 'queue_depth{queue="met",state="OK"} 1.0' in text
    per_partition = {(smp.labels["partition"], smp.labels["state"]): smp.value
                     for fam in text_string_to_metric_families(text) if fam.name == "queue_partition_depth"
                     for smp in fam.samples if smp.labels["queue"] == "met"}
    assert {p for p, _ in per_partition} == {str(p.index) for p in qs.get_queue("met").partitions}
    for state, total in (("NEW", 0.0), ("IPR", 1.0), ("OK", 1.0)):
        assert sum(v for (_, st), v in per_partition.items() if st == state) == total, state
    for name in ("queue_enqueued_jobs_total", "queue_dequeued_jobs_total", "queue_acked_jobs_total",
                 "queue_stale_acks_total", "queue_empty_dequeues_total", "queue_lease_expirations_total",
                 "queue_deduplicated_jobs_total", "queue_repeated_acks_total"):
        assert name in text
    assert 'queue_acked_jobs_total{queue="met",result="success"} 1.0' in text
    assert 'queue_repeated_acks_total{queue="met"} 1.0' in text
    assert 'queue_stale_acks_total{queue="met"} 1.0' in text
    assert 'queue_empty_dequeues_total{queue="met"} 1.0' in text
