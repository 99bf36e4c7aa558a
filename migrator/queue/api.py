"""The queue service's HTTP/JSON API (FastAPI; OpenAPI at ``/openapi.json``, docs at ``/docs``).

Runs in ``migrator queue serve`` (uvicorn). Every route is a thin shell over a
:class:`QueueService` method; handlers are plain ``def`` so FastAPI runs them in
its thread pool (the service blocks on MySQL). Errors are
``{"error": {"code", "message", "retryable"}}`` with the status of
:mod:`migrator.queue.errors`, plus ``results`` when a call was partly done (per
item what was done, ``null`` where nothing was); request validation failures
(bad JSON, a priority out of range, an unknown field) are 400
``INVALID_ARGUMENT`` naming the offending field.

An enqueue may carry an ``idempotency_key`` (any 1-200 characters the client
chooses, one per call, the same on every retry of that call): a retry then
makes no job twice, whichever part of the call was stored before.

Every ``/v1`` call (and every broker route) must send ``Authorization: Bearer
<token>``, the ``[queue] token`` of the secrets file. Without a token the app is
not built (:class:`OpenRefused`) unless the caller says in so many words that it
may serve open (``allow_open=True``, ``migrator queue serve --open``): a queue
API that anyone who reaches the address can drain or delete is never an accident.
"""

from __future__ import annotations

import secrets
from typing import Any

from fastapi import Depends, FastAPI, Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from pydantic import BaseModel, ConfigDict, Field

from migrator.errors import ExitCode, MigratorError
from migrator.queue import metrics
from migrator.queue.errors import QueueError
from migrator.queue.model import (
    MAX_BATCH,
    MAX_IDEMPOTENCY_KEY,
    AckItem,
    CheckpointItem,
    EnqueueJob,
    EnqueueResult,
    JobDescriptor,
    JobFilter,
    JobInfo,
    QueueConfig,
    QueueConfigUpdate,
    QueueRecord,
)
from migrator.queue.service import QueueService


class CreateQueue(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    config: QueueConfig = QueueConfig()


class EnqueueRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    jobs: list[EnqueueJob] = Field(min_length=1, max_length=MAX_BATCH)
    idempotency_key: str | None = Field(
        default=None, min_length=1, max_length=MAX_IDEMPOTENCY_KEY,
        description="chosen by the client, one per call and the same on every retry of it (with the same jobs "
                    "in the same order): a retry answers the jobs stored before as deduplicated and makes none "
                    "twice (remembered for the queue's NEW retention). The call's jobs without a dedupe key then "
                    "all go to the partition the key names, even while it is frozen for a cutover")


class DequeueRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    limit: int = Field(default=1, ge=1, le=MAX_BATCH)
    lease_seconds: float | None = Field(default=None, gt=0, le=86400)
    wait_seconds: float = Field(default=0.0, ge=0, le=60)


class AckRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    items: list[AckItem] = Field(min_length=1, max_length=MAX_BATCH)


class ClaimRef(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: int
    claim: str


class ExtendRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    items: list[ClaimRef] = Field(min_length=1, max_length=MAX_BATCH)
    lease_seconds: float | None = Field(default=None, gt=0, le=86400)


class CheckpointRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    items: list[CheckpointItem] = Field(min_length=1, max_length=MAX_BATCH)


class ResultsResponse(BaseModel):
    results: list[str] = Field(description="per item, in the request's order: OK, or STALE_CLAIM (the claim is "
                                           "not the job's any more); an ack also answers ALREADY_ACKED (an "
                                           "earlier ack with this claim finished the job: a retried ack) and "
                                           "NOT_FOUND (no such job)")


class ErrorDetail(BaseModel):
    code: str
    message: str
    retryable: bool
    results: list[Any] | None = Field(
        default=None, description="only when the call was partly done: per item what was done (an enqueue's "
                                  "result, an ack's answer), null where nothing was; a retry of the whole call "
                                  "repeats nothing unless the code is PARTIALLY_APPLIED")


class ErrorResponse(BaseModel):
    error: ErrorDetail


#: the errors of the calls whose items span partitions, as the OpenAPI document shows them
PARTIAL_ERRORS: dict[int | str, dict[str, Any]] = {
    409: {"model": ErrorResponse, "description": "PARTIALLY_APPLIED: part of the enqueue was stored (results), "
                                                 "and a retry as sent would store it again"},
    503: {"model": ErrorResponse, "description": "SHARD_UNAVAILABLE (retryable); with results when part of the "
                                                 "call was done"},
}
PARTIAL_ERRORS_503 = {503: PARTIAL_ERRORS[503]}


class ScanRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    state: str = "NEW"
    limit: int = Field(default=100, ge=1, le=MAX_BATCH)
    cursor: str | None = None
    filter: JobFilter | None = None


class ScanResponse(BaseModel):
    jobs: list[JobInfo]
    next_cursor: str | None


class BulkRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    state: str | None = None
    limit: int = Field(default=1000, ge=1, le=100000)
    attempts: int | None = Field(default=None, ge=1, le=1000)
    filter: JobFilter | None = None


class CountResponse(BaseModel):
    affected: int


def _error(status: int, code: str, message: str, retryable: bool = False) -> JSONResponse:
    return JSONResponse(status_code=status,
                        content={"error": {"code": code, "message": message, "retryable": retryable}})


def _queue_error_response(exc: QueueError) -> JSONResponse:
    return JSONResponse(status_code=exc.status, content={"error": exc.to_wire()})


def _validation_message(exc: RequestValidationError) -> str:
    msgs = []
    for err in exc.errors()[:5]:
        loc = [str(x) for x in err.get("loc", ()) if x != "body"]
        if err.get("type") == "json_invalid":
            ctx = err.get("ctx", {}) or {}
            return f"request body is not valid JSON: {ctx.get('error', err.get('msg'))}"
        where = ".".join(loc) or "body"
        msgs.append(f"{where}: {err.get('msg')}")
    return "; ".join(msgs) or "invalid request"


class OpenRefused(MigratorError):
    """An HTTP endpoint that acts was asked to start without a token, and not told it may run open."""

    component = "queue"
    exit_code = ExitCode.CONFIG


NO_TOKEN = ("no queue token: set `token` under [queue] in the secrets file (or MIGRATOR_QUEUE_TOKEN), or pass "
            "--open to serve without one (anyone who reaches the address may enqueue, dequeue and delete)")


def bearer_auth(app: FastAPI, token: str | None, *, hint: str = "queue token", allow_open: bool = False) -> list[Any]:
    """Route dependencies that demand ``Authorization: Bearer <token>``, and the handler on ``app`` that
    answers a missing or wrong token with 401 ``UNAUTHORIZED``. Without a token: :class:`OpenRefused`,
    unless ``allow_open`` (then the routes are open)."""
    if not token and not allow_open:
        raise OpenRefused(NO_TOKEN)

    def auth(authorization: str | None = Header(default=None)) -> None:
        if not token:
            return
        if not authorization or not secrets.compare_digest(authorization, f"Bearer {token}"):
            raise _Unauthorized()

    @app.exception_handler(_Unauthorized)
    async def _unauth(_req: Request, _exc: _Unauthorized) -> JSONResponse:
        return _error(401, "UNAUTHORIZED", f"send Authorization: Bearer <{hint}> (see the secrets file)")

    return [Depends(auth)]


def create_app(service: QueueService, *, token: str | None, broker: Any = None, allow_open: bool = False) -> FastAPI:
    """The FastAPI app over ``service``; ``broker`` adds the broker routes. Refused without ``token``
    unless ``allow_open`` (:func:`bearer_auth`)."""
    app = FastAPI(title="migrator queue service", version="1",
                  description="Pinlater/Pacer-style job queue on the sharded MariaDB fleet.")
    app.state.service = service

    @app.exception_handler(QueueError)
    async def _queue_error(_req: Request, exc: QueueError) -> JSONResponse:
        return _queue_error_response(exc)

    @app.exception_handler(MigratorError)
    async def _migrator_error(_req: Request, exc: MigratorError) -> JSONResponse:
        return _error(503, "SHARD_UNAVAILABLE", str(exc), True)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_req: Request, exc: RequestValidationError) -> JSONResponse:
        for err in exc.errors():
            cause = (err.get("ctx") or {}).get("error")
            if isinstance(cause, QueueError):
                return _queue_error_response(cause)
        return _error(400, "INVALID_ARGUMENT", _validation_message(exc))

    deps = bearer_auth(app, token, allow_open=allow_open)

    @app.get("/healthz")
    def healthz() -> dict[str, Any]:
        return {"ok": True, "shard_map_epoch": service.router.epoch}

    @app.get("/metrics")
    def metrics_endpoint() -> Response:
        metrics.refresh_depth(service)
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    # -- queues ---------------------------------------------------------------------
    @app.get("/v1/queues", dependencies=deps)
    def list_queues() -> list[QueueRecord]:
        return service.list_queues()

    @app.post("/v1/queues", status_code=201, dependencies=deps)
    def create_queue(req: CreateQueue) -> QueueRecord:
        return service.create_queue(req.name, req.config)

    @app.get("/v1/queues/{name}", dependencies=deps)
    def get_queue(name: str) -> QueueRecord:
        return service.get_queue(name)

    @app.patch("/v1/queues/{name}", dependencies=deps)
    def update_queue(name: str, req: QueueConfigUpdate) -> QueueRecord:
        return service.update_queue(name, req)

    @app.post("/v1/queues/{name}/pause", dependencies=deps)
    def pause(name: str) -> QueueRecord:
        return service.pause(name)

    @app.post("/v1/queues/{name}/resume", dependencies=deps)
    def resume(name: str) -> QueueRecord:
        return service.resume(name)

    @app.delete("/v1/queues/{name}", status_code=204, dependencies=deps)
    def delete_queue(name: str) -> Response:
        service.delete_queue(name)
        return Response(status_code=204)

    # -- jobs --------------------------------------------------------------------------
    @app.post("/v1/queues/{name}/jobs", dependencies=deps, responses=PARTIAL_ERRORS)
    def enqueue(name: str, req: EnqueueRequest) -> list[EnqueueResult]:
        return service.enqueue(name, req.jobs, idempotency_key=req.idempotency_key)

    @app.post("/v1/queues/{name}/dequeue", dependencies=deps)
    def dequeue(name: str, req: DequeueRequest) -> list[JobDescriptor]:
        return service.dequeue(name, req.limit, req.lease_seconds, req.wait_seconds)

    @app.post("/v1/queues/{name}/ack", dependencies=deps, responses=PARTIAL_ERRORS_503)
    def ack(name: str, req: AckRequest) -> ResultsResponse:
        return ResultsResponse(results=service.ack(name, req.items))

    @app.post("/v1/queues/{name}/extend", dependencies=deps, responses=PARTIAL_ERRORS_503)
    def extend(name: str, req: ExtendRequest) -> ResultsResponse:
        return ResultsResponse(results=service.extend_lease(name, [(i.id, i.claim) for i in req.items],
                                                            req.lease_seconds))

    @app.post("/v1/queues/{name}/checkpoint", dependencies=deps, responses=PARTIAL_ERRORS_503)
    def checkpoint(name: str, req: CheckpointRequest) -> ResultsResponse:
        return ResultsResponse(results=service.checkpoint(name, req.items))

    @app.get("/v1/queues/{name}/jobs/{job_id}", dependencies=deps)
    def lookup(name: str, job_id: int) -> JobInfo:
        return service.lookup(name, job_id)

    @app.get("/v1/queues/{name}/counts", dependencies=deps)
    def counts(name: str) -> dict[str, int]:
        return service.counts(name)

    @app.post("/v1/queues/{name}/scan", dependencies=deps)
    def scan(name: str, req: ScanRequest) -> ScanResponse:
        jobs, cursor = service.scan(name, req.state, req.limit, req.cursor, req.filter)
        return ScanResponse(jobs=jobs, next_cursor=cursor)

    @app.post("/v1/queues/{name}/retry", dependencies=deps)
    def retry_failed(name: str, req: BulkRequest) -> CountResponse:
        return CountResponse(affected=service.retry_failed(name, req.limit, req.attempts, req.filter))

    @app.post("/v1/queues/{name}/cancel", dependencies=deps)
    def cancel(name: str, req: BulkRequest) -> CountResponse:
        return CountResponse(affected=service.cancel(name, req.limit, req.filter))

    @app.post("/v1/queues/{name}/delete", dependencies=deps)
    def delete_jobs(name: str, req: BulkRequest) -> CountResponse:
        if req.state is None:
            from migrator.queue.errors import InvalidArgument

            raise InvalidArgument("delete needs a state (NEW, IPR, OK or FAIL)")
        return CountResponse(affected=service.delete_jobs(name, req.state, req.limit, req.filter))

    if broker is not None:
        from migrator.queue.broker import add_broker_routes

        add_broker_routes(app, broker, deps)
    return app


class _Unauthorized(Exception):
    pass
