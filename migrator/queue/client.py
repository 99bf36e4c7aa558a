"""Python client of the queue service's HTTP API (httpx).

Mirrors :class:`migrator.queue.service.QueueService`, so code can switch
between in-process and remote use. Errors come back as the same
:class:`QueueError` subclasses (``e.code``, ``e.retryable``, and ``e.results``
when the call was partly done: an enqueue's as :class:`EnqueueResult` or
``None`` per job).

An enqueue that may be retried passes ``idempotency_key`` (one per call, the
same on every retry of it, e.g. ``uuid.uuid4().hex`` chosen before the first
try): the retry makes no job twice.

    with QueueClient("http://127.0.0.1:8640", token=...) as q:
        q.create_queue("emails", QueueConfig(partitions=4))
        q.enqueue("emails", [EnqueueJob(body='{"to": "a@b"}')])
        for job in q.dequeue("emails", limit=10, wait_seconds=5):
            q.ack("emails", [AckItem(id=job.id, claim=job.claim)])
"""

from __future__ import annotations

from typing import Any

import httpx

from migrator.queue.errors import QueueError, ShardUnavailable, from_wire
from migrator.queue.model import (
    AckItem,
    CheckpointItem,
    EnqueueJob,
    EnqueueResult,
    JobDescriptor,
    JobFilter,
    JobInfo,
    JobState,
    QueueConfig,
    QueueConfigUpdate,
    QueueRecord,
)


class QueueClient:
    def __init__(self, base_url: str, *, token: str | None = None, timeout: float = 30.0,
                 transport: httpx.BaseTransport | None = None, http: Any = None):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        # ``http`` may be any httpx-compatible client (FastAPI's TestClient in tests)
        self.http = http or httpx.Client(base_url=base_url, headers=headers, timeout=timeout, transport=transport)
        if http is not None and token:
            self.http.headers.update(headers)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> QueueClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, path: str, json: Any = None, timeout: float | None = None) -> Any:
        try:
            kw: dict[str, Any] = {}
            if json is not None:
                kw["json"] = json
            if timeout is not None:
                kw["timeout"] = timeout
            r = self.http.request(method, path, **kw)
        except httpx.TransportError as exc:
            raise ShardUnavailable(f"queue service unreachable: {exc}") from None
        if r.status_code >= 400:
            try:
                err = r.json()["error"]
            except Exception:
                raise QueueError(f"HTTP {r.status_code}: {r.text[:200]}") from None
            raise from_wire(err)
        if r.status_code == 204:
            return None
        return r.json()

    # -- queues -------------------------------------------------------------------------
    def create_queue(self, name: str, config: QueueConfig | None = None) -> QueueRecord:
        body = {"name": name, "config": (config or QueueConfig()).model_dump(mode="json")}
        return QueueRecord.model_validate(self._call("POST", "/v1/queues", body))

    def list_queues(self) -> list[QueueRecord]:
        return [QueueRecord.model_validate(x) for x in self._call("GET", "/v1/queues")]

    def get_queue(self, name: str) -> QueueRecord:
        return QueueRecord.model_validate(self._call("GET", f"/v1/queues/{name}"))

    def update_queue(self, name: str, update: QueueConfigUpdate) -> QueueRecord:
        return QueueRecord.model_validate(self._call("PATCH", f"/v1/queues/{name}",
                                                     update.model_dump(mode="json", exclude_none=True)))

    def pause(self, name: str) -> QueueRecord:
        return QueueRecord.model_validate(self._call("POST", f"/v1/queues/{name}/pause"))

    def resume(self, name: str) -> QueueRecord:
        return QueueRecord.model_validate(self._call("POST", f"/v1/queues/{name}/resume"))

    def delete_queue(self, name: str) -> None:
        self._call("DELETE", f"/v1/queues/{name}")

    # -- jobs ------------------------------------------------------------------------------
    def enqueue(self, queue: str, jobs: list[EnqueueJob], *,
                idempotency_key: str | None = None) -> list[EnqueueResult]:
        body: dict[str, Any] = {"jobs": [j.model_dump(mode="json", exclude_none=True) for j in jobs]}
        if idempotency_key is not None:
            body["idempotency_key"] = idempotency_key
        try:
            out = self._call("POST", f"/v1/queues/{queue}/jobs", body)
        except QueueError as exc:
            if exc.results is not None:
                exc.results = [None if x is None else EnqueueResult.model_validate(x) for x in exc.results]
            raise
        return [EnqueueResult.model_validate(x) for x in out]

    def dequeue(self, queue: str, limit: int = 1, lease_seconds: float | None = None,
                wait_seconds: float = 0.0) -> list[JobDescriptor]:
        body: dict[str, Any] = {"limit": limit, "wait_seconds": wait_seconds}
        if lease_seconds is not None:
            body["lease_seconds"] = lease_seconds
        out = self._call("POST", f"/v1/queues/{queue}/dequeue", body, timeout=wait_seconds + 30)
        return [JobDescriptor.model_validate(x) for x in out]

    def ack(self, queue: str, items: list[AckItem]) -> list[str]:
        body = {"items": [i.model_dump(mode="json", exclude_none=True) for i in items]}
        return self._call("POST", f"/v1/queues/{queue}/ack", body)["results"]

    def extend_lease(self, queue: str, items: list[tuple[int, str]], lease_seconds: float | None = None) -> list[str]:
        body: dict[str, Any] = {"items": [{"id": i, "claim": c} for i, c in items]}
        if lease_seconds is not None:
            body["lease_seconds"] = lease_seconds
        return self._call("POST", f"/v1/queues/{queue}/extend", body)["results"]

    def checkpoint(self, queue: str, items: list[CheckpointItem]) -> list[str]:
        body = {"items": [i.model_dump(mode="json", exclude_none=True) for i in items]}
        return self._call("POST", f"/v1/queues/{queue}/checkpoint", body)["results"]

    def lookup(self, queue: str, job: int) -> JobInfo:
        return JobInfo.model_validate(self._call("GET", f"/v1/queues/{queue}/jobs/{job}"))

    def counts(self, queue: str) -> dict[str, int]:
        return self._call("GET", f"/v1/queues/{queue}/counts")

    def scan(self, queue: str, state: JobState | str | int, limit: int = 100, cursor: str | None = None,
             filter: JobFilter | None = None) -> tuple[list[JobInfo], str | None]:
        st = JobState.parse(state).name
        body: dict[str, Any] = {"state": st, "limit": limit, "cursor": cursor}
        if filter is not None:
            body["filter"] = filter.model_dump(mode="json", exclude_none=True)
        out = self._call("POST", f"/v1/queues/{queue}/scan", body)
        return [JobInfo.model_validate(x) for x in out["jobs"]], out["next_cursor"]

    def _bulk(self, queue: str, op: str, **kw: Any) -> int:
        f = kw.pop("filter", None)
        body = {k: v for k, v in kw.items() if v is not None}
        if f is not None:
            body["filter"] = f.model_dump(mode="json", exclude_none=True)
        return int(self._call("POST", f"/v1/queues/{queue}/{op}", body)["affected"])

    def retry_failed(self, queue: str, limit: int = 1000, attempts: int | None = None,
                     filter: JobFilter | None = None) -> int:
        return self._bulk(queue, "retry", limit=limit, attempts=attempts, filter=filter)

    def cancel(self, queue: str, limit: int = 1000, filter: JobFilter | None = None) -> int:
        return self._bulk(queue, "cancel", limit=limit, filter=filter)

    def delete_jobs(self, queue: str, state: JobState | str | int, limit: int = 1000,
                    filter: JobFilter | None = None) -> int:
        return self._bulk(queue, "delete", state=JobState.parse(state).name, limit=limit, filter=filter)
