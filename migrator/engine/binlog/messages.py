"""What the reader process (:mod:`.process`) sends its parent, one class per kind of message.

Every message is pickled through the process pipe (:class:`multiprocessing.connection.Connection`).
Each class pickles as a reference to itself and the tuple of its fields (``__reduce__``), and
unpickles as one call of the class: not through the generic dataclass state (a list of fields
built by :func:`dataclasses.fields` on every message).

The parent reads them with ``match``::

    match msg:
        case Txns(txns, position, last_ts, sent_at, state): ...
        case Tick(position, last_ts, state): ...
        case Shapes(shapes): ...
        case Format(event, checksum): ...
        case Failure(message, code): ...
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from migrator.engine.binlog.reader import Committed, Shape


@dataclass(frozen=True, slots=True)
class Shapes:
    """Table shapes met for the first time (or changed): sent before the transactions that use them."""

    shapes: list[Shape]

    def __reduce__(self) -> tuple[Any, ...]:
        return Shapes, (self.shapes,)


@dataclass(frozen=True, slots=True)
class Format:
    """The source's format description event, raw, and whether its events carry a CRC32 (a reader that
    forwards rows events whole sends it before the first of them, and again when it changes)."""

    event: bytes
    checksum: bool

    def __reduce__(self) -> tuple[Any, ...]:
        return Format, (self.event, self.checksum)


@dataclass(frozen=True, slots=True)
class Txns:
    """Transactions read, in binlog order (never none).

    ``position``: the reader's position after the last of them (before it if that one is a
    ``partial`` part); ``last_ts``: the binlog timestamp of the last event read; ``sent_at``:
    ``time.monotonic()`` when sent (one clock for both processes on Linux); ``state``: the last
    transaction read of each (domain, server) (:attr:`~.reader.TxnReader.seen`, formatted). A
    message ends at a transaction with statements: such a transaction is always its message's last.
    """

    txns: list[Committed]
    position: str
    last_ts: int
    sent_at: float
    state: str

    def __reduce__(self) -> tuple[Any, ...]:
        return Txns, (self.txns, self.position, self.last_ts, self.sent_at, self.state)


@dataclass(frozen=True, slots=True)
class Tick:
    """Nothing kept read since the last message, but the reader moved on (or is idle): its position."""

    position: str
    last_ts: int
    state: str

    def __reduce__(self) -> tuple[Any, ...]:
        return Tick, (self.position, self.last_ts, self.state)


@dataclass(frozen=True, slots=True)
class Failure:
    """The reader stopped on an error (``code``: the server's error code, if any); it exits after this."""

    message: str
    code: int | None

    def __reduce__(self) -> tuple[Any, ...]:
        return Failure, (self.message, self.code)


#: every message the reader process sends
Message = Shapes | Format | Txns | Tick | Failure
