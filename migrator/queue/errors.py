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
=====================  ======  =========  =====================================
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

    def to_wire(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "retryable": self.retryable}


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


ERRORS_BY_CODE: dict[str, type[QueueError]] = {
    cls.code: cls
    for cls in (QueueError, UnknownQueue, QueueExists, QueuePaused, RateLimited, ShardUnavailable,
                InvalidArgument, BodyTooLarge, JobNotFound)
}


def from_wire(data: dict[str, Any]) -> QueueError:
    cls = ERRORS_BY_CODE.get(str(data.get("code")), QueueError)
    return cls(str(data.get("message", "queue service error")))
