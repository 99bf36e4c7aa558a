"""The queue service's data model: queue records, job requests and descriptors.

Pure pydantic models shared by the service, the HTTP API and the client. The
queue record is what ZooKeeper holds at ``<root>/queues/<name>`` (see
:mod:`migrator.queue.storage` for that contract).
"""

from __future__ import annotations

import hashlib
from enum import IntEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from migrator.fleet import bounds
from migrator.fleet.ids import TYPE_JOB, decode, encode

#: the one check of a queue's name, shared with the command line and the engine (:mod:`migrator.fleet.bounds`)
QUEUE_NAME_RE = bounds.QUEUE_NAME_RE
#: largest job body accepted (bytes of UTF-8)
MAX_BODY_BYTES = 64 * 1024
MAX_BATCH = 1000
MAX_CUSTOM_STATUS = 1000
MAX_DEDUPE_KEY = 191
MAX_IDEMPOTENCY_KEY = 200
#: the first character of the keys an enqueue's ``idempotency_key`` makes for its jobs without a dedupe key
#: (:func:`call_dedupe_key`); they share the dedupe side table, so no dedupe key of a job may start with it
CALL_KEY_PREFIX = "\x1e"


class JobState(IntEnum):
    NEW = 0   # pending
    IPR = 1   # in progress (claimed, leased)
    OK = 2    # succeeded
    FAIL = 3  # failed for good

    @classmethod
    def parse(cls, value: str | int) -> JobState:
        if isinstance(value, int) and not isinstance(value, bool):
            return cls(value)
        key = str(value).strip().upper()
        aliases = {"PENDING": "NEW", "IN_PROGRESS": "IPR", "SUCCEEDED": "OK", "DONE": "OK",
                   "FAILED": "FAIL"}
        key = aliases.get(key, key)
        if key.isdigit():
            return cls(int(key))
        return cls[key]


def check_queue_name(name: str) -> str:
    from migrator.queue.errors import InvalidArgument

    if not isinstance(name, str) or not QUEUE_NAME_RE.fullmatch(name):
        raise InvalidArgument(
            f"queue name {name!r} is not valid: use 1-40 letters, digits or underscores (\\w)"
        )
    return name


class Retention(BaseModel):
    """How long rows of each state are kept (seconds), measured from their last
    state change. NEW has a finite TTL too, so a forgotten queue cleans itself up."""

    model_config = ConfigDict(extra="forbid")
    new: int = Field(default=14 * 86400, ge=60)
    ipr: int = Field(default=7 * 86400, ge=60)
    ok: int = Field(default=86400, ge=60)
    fail: int = Field(default=7 * 86400, ge=60)

    def of(self, state: JobState) -> int:
        return {JobState.NEW: self.new, JobState.IPR: self.ipr, JobState.OK: self.ok,
                JobState.FAIL: self.fail}[state]


class QueueConfig(BaseModel):
    """A queue's settings. ``partitions`` and ``fifo`` are fixed at creation."""

    model_config = ConfigDict(extra="forbid")
    max_jobs_per_second: float = Field(default=0.0, ge=0, description="dequeue rate limit; 0 = none")
    lease_seconds: float = Field(default=30.0, gt=0, le=86400)
    default_attempts: int = Field(default=3, ge=1, le=1000)
    retention: Retention = Retention()
    partitions: int = Field(default=1, ge=1, le=256)
    fifo: bool = False
    paused: bool = False

    @model_validator(mode="after")
    def _fifo_one_partition(self) -> QueueConfig:
        if self.fifo and self.partitions != 1:
            raise ValueError("a fifo queue has exactly one partition (enqueue order is kept per partition)")
        return self


class QueueConfigUpdate(BaseModel):
    """The settings that can change after creation."""

    model_config = ConfigDict(extra="forbid")
    max_jobs_per_second: float | None = Field(default=None, ge=0)
    lease_seconds: float | None = Field(default=None, gt=0, le=86400)
    default_attempts: int | None = Field(default=None, ge=1, le=1000)
    retention: Retention | None = None


class PartitionRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")
    index: int
    shard: int
    table: str
    #: every table of the partition (jobs table first, then its dedupe side table)
    tables: list[str] = []


class QueueRecord(BaseModel):
    """The JSON stored at ``<root>/queues/<name>``."""

    model_config = ConfigDict(extra="ignore")
    name: str
    config: QueueConfig
    partitions: list[PartitionRecord]
    created_at: float = 0.0
    version: int | None = Field(default=None, exclude=True)

    def partition(self, index: int) -> PartitionRecord:
        for p in self.partitions:
            if p.index == index:
                return p
        from migrator.queue.errors import InvalidArgument

        raise InvalidArgument(f"queue {self.name} has no partition {index}")

    def partitions_for_shard(self, shard: int) -> list[PartitionRecord]:
        return [p for p in self.partitions if p.shard == shard]


# -- jobs ------------------------------------------------------------------------

class EnqueueJob(BaseModel):
    model_config = ConfigDict(extra="forbid")
    body: str = Field(default="", description="opaque payload (text; JSON recommended)")
    priority: int = Field(default=2, ge=1, le=3, description="1 highest .. 3 lowest")
    run_after: float | None = Field(default=None, description="epoch seconds; not before")
    delay_seconds: float | None = Field(default=None, ge=0)
    attempts: int | None = Field(default=None, ge=1, le=1000)
    custom_status: str = Field(default="", max_length=MAX_CUSTOM_STATUS)
    dedupe_key: str | None = Field(default=None, min_length=1, max_length=MAX_DEDUPE_KEY,
                                   description="an enqueue while a job of this key is remembered (the NEW "
                                               "retention) answers that job's id, deduplicated")

    @field_validator("body")
    @classmethod
    def _body_size(cls, v: str) -> str:
        n = len(v.encode("utf-8"))
        if n > MAX_BODY_BYTES:
            from migrator.queue.errors import BodyTooLarge

            raise BodyTooLarge(f"job body is {n} bytes; the limit is {MAX_BODY_BYTES}")
        return v

    @field_validator("dedupe_key")
    @classmethod
    def _not_a_call_key(cls, v: str | None) -> str | None:
        if v is not None and v.startswith(CALL_KEY_PREFIX):
            from migrator.queue.errors import InvalidArgument

            raise InvalidArgument("dedupe_key may not start with the character U+001E (the queue's own keys do): "
                                  "drop that character")
        return v

    @model_validator(mode="after")
    def _one_time(self) -> EnqueueJob:
        if self.run_after is not None and self.delay_seconds is not None:
            raise ValueError("give run_after or delay_seconds, not both")
        return self


class EnqueueResult(BaseModel):
    id: int
    partition: int
    deduplicated: bool = Field(default=False, description="the job was there already (its dedupe key, or the "
                                                          "call's idempotency key): no job was made")


def partition_of_key(key: str, partitions: int) -> int:
    """The partition a key's jobs go to: a dedupe key's (so its side table sees every copy of the key), and an
    idempotency key's jobs without a dedupe key (so a retry of the call finds what it stored)."""
    return int.from_bytes(hashlib.md5(key.encode()).digest()[:8], "big") % partitions


def call_dedupe_key(idempotency_key: str, position: int) -> str:
    """The dedupe side table's key of the job at ``position`` of an enqueue sent with ``idempotency_key``
    (a job without a dedupe key of its own): the same call retried finds its jobs there. Hashed, so any key
    fits the column and none differs from another by case or trailing blanks only (the column's collation)."""
    return f"{CALL_KEY_PREFIX}call:{hashlib.sha256(idempotency_key.encode()).hexdigest()}:{position}"


class JobDescriptor(BaseModel):
    """What a dequeue hands out: the job plus the claim that fences its ack."""

    queue: str
    id: int
    partition: int
    body: str
    priority: int
    claim: str
    attempt: int = Field(description="1 for the first try")
    attempts_allowed: int
    attempts_left: int
    custom_status: str = ""
    lease_until: float
    created_at: float

    @property
    def shard(self) -> int:
        return decode(self.id).shard


class AckItem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: int
    claim: str
    success: bool = True
    retry_delay_seconds: float | None = Field(default=None, ge=0)
    custom_status: str | None = Field(default=None, max_length=MAX_CUSTOM_STATUS)


#: an ack's answer per job: ``OK`` (this ack finished it), ``ALREADY_ACKED`` (an earlier ack with this claim
#: did, and the job was not claimed again since: a retried ack), ``STALE_CLAIM`` (the claim is no longer the
#: job's: its lease expired, it was given back or claimed again; this ack did nothing), ``NOT_FOUND`` (no job
#: of that id in its partition: purged, deleted or never made)
AckResult = Literal["OK", "ALREADY_ACKED", "STALE_CLAIM", "NOT_FOUND"]
#: the answers that say the job's ack is done (by this call or an earlier one)
ACKED = ("OK", "ALREADY_ACKED")


class CheckpointItem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: int
    claim: str
    body: str | None = None
    to_pending: bool = False
    run_after: float | None = None
    delay_seconds: float | None = Field(default=None, ge=0)
    attempts: int | None = Field(default=None, ge=0, le=1000, description="set attempts left")
    custom_status: str | None = Field(default=None, max_length=MAX_CUSTOM_STATUS)

    @field_validator("body")
    @classmethod
    def _body_size(cls, v: str | None) -> str | None:
        if v is not None and len(v.encode("utf-8")) > MAX_BODY_BYTES:
            from migrator.queue.errors import BodyTooLarge

            raise BodyTooLarge(f"job body is {len(v.encode())} bytes; the limit is {MAX_BODY_BYTES}")
        return v


class JobInfo(BaseModel):
    """A lookup or scan row."""

    queue: str
    id: int
    partition: int
    state: str
    body: str
    priority: int
    attempts_allowed: int
    attempts_left: int
    custom_status: str
    run_after: float
    created_at: float
    updated_at: float
    lease_until: float | None = None
    dedupe_key: str | None = None


class JobFilter(BaseModel):
    """Bound filters for scan / delete / cancel / retry (never interpolated into SQL)."""

    model_config = ConfigDict(extra="forbid")
    priority: int | None = Field(default=None, ge=1, le=3)
    custom_status: str | None = Field(default=None, max_length=MAX_CUSTOM_STATUS)
    created_before: float | None = None
    created_after: float | None = None
    ids: list[int] | None = Field(default=None, max_length=MAX_BATCH)


def job_id(shard: int, local_id: int) -> int:
    return encode(shard, TYPE_JOB, local_id)


def split_job_id(value: int) -> tuple[int, int]:
    """(shard, local id) of a job id; rejects ids of other object types."""
    from migrator.errors import InvalidIdError
    from migrator.queue.errors import InvalidArgument

    try:
        oid = decode(value)
    except InvalidIdError as exc:
        raise InvalidArgument(str(exc.message)) from None
    if oid.type != TYPE_JOB:
        raise InvalidArgument(f"id {value} is not a job id (type {oid.type}, jobs are type {TYPE_JOB})")
    return oid.shard, oid.local

