"""Errors of the queue service, each with a stable code.

The HTTP API returns ``{"error": {"code": ..., "message": ..., "retryable": ...}}``
with the status below; the Python client raises the same class back. Codes are
part of the API: never rename one.

=====================  ======  =========  =====================================
code                   status  retryable  meaning
=====================  ======  =========  =====================================
UNKNOWN_QUEUE          404     no         no queue of that name
QUEUE_EXISTS           409     no         create of a name already taken
QUEUE_PAUSED           409     yes        dequeue on a paused queue
RATE_LIMITED           429     yes        the queue's max jobs/s is used up
SHARD_UNAVAILABLE      503     yes        frozen for a cutover too long, or
                                          the master is unreachable
INVALID_ARGUMENT       400     no         bad name, priority, filter, ...
BODY_TOO_LARGE         413     no         a job body over the limit
JOB_NOT_FOUND          404     no         lookup of an id that is not there
PARTIALLY_APPLIED      409     no         part of an enqueue was stored and a
                                          retry as sent would store it again:
                                          ``results`` says which jobs were
=====================  ======  =========  =====================================

A call whose items span several partitions (an enqueue, an ack, a lease
extension, a checkpoint) writes each partition in its own transaction. When one
partition fails after others committed, the error says so: ``results`` holds,
per item of the call in its order, what was done (an enqueue's result, an ack's
answer) or ``null`` where nothing was. An error without ``results`` did
nothing. Its code is the cause's (``SHARD_UNAVAILABLE``, retryable) when a
retry of the whole call repeats nothing (every job stored has a dedupe key, the
call carried an ``idempotency_key``, or the call was an ack, extension or
checkpoint), and ``PARTIALLY_APPLIED`` (not retryable) when it would: an
enqueue without ``idempotency_key`` whose stored part holds jobs without a
dedupe key. Then retry only the items whose result is ``null``.
"""

from __future__ import annotations

from typing import Any

from migrator.errors import MigratorError


class QueueError(MigratorError):
    """Base of queue-service errors; ``code`` is stable, ``status`` is HTTP."""

    component = "queue"
    code = "INTERNAL"
    status = 500
    retryable = False

    #: per item of a call that was partly done: what was done (an enqueue's result, an ack's answer), ``None``
    #: where nothing was; ``None`` itself when the call did nothing (see the module docstring)
    results: list[Any] | None = None

    def to_wire(self) -> dict[str, Any]:
        wire = {"code": self.code, "message": self.message, "retryable": self.retryable}
        if self.results is not None:
            wire["results"] = [r.model_dump(mode="json") if hasattr(r, "model_dump") else r for r in self.results]
        return wire


class UnknownQueue(QueueError):
    code = "UNKNOWN_QUEUE"
    status = 404
    exit_code = 2


class QueueExists(QueueError):
    code = "QUEUE_EXISTS"
    status = 409
    exit_code = 2


class QueuePaused(QueueError):
    code = "QUEUE_PAUSED"
    status = 409
    retryable = True


class RateLimited(QueueError):
    code = "RATE_LIMITED"
    status = 429
    retryable = True


class ShardUnavailable(QueueError):
    code = "SHARD_UNAVAILABLE"
    status = 503
    retryable = True
    exit_code = 4


class InvalidArgument(QueueError):
    code = "INVALID_ARGUMENT"
    status = 400
    exit_code = 2


class BodyTooLarge(InvalidArgument):
    code = "BODY_TOO_LARGE"
    status = 413


class JobNotFound(QueueError):
    code = "JOB_NOT_FOUND"
    status = 404
    exit_code = 2


class PartiallyApplied(QueueError):
    """Part of an enqueue was stored, and a retry of the call as it was sent would store that part again."""

    code = "PARTIALLY_APPLIED"
    status = 409


ERRORS_BY_CODE: dict[str, type[QueueError]] = {
    cls.code: cls
    for cls in (QueueError, UnknownQueue, QueueExists, QueuePaused, RateLimited, ShardUnavailable,
                InvalidArgument, BodyTooLarge, JobNotFound, PartiallyApplied)
}


def from_wire(data: dict[str, Any]) -> QueueError:
    cls = ERRORS_BY_CODE.get(str(data.get("code")), QueueError)
    exc = cls(str(data.get("message", "queue service error")))
    if isinstance(data.get("results"), list):
        exc.results = list(data["results"])
    return exc
