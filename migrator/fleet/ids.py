"""64-bit object ids and the mod shard.

An id is ``(shard << 46) | (type << 36) | local_id``: 16 bits of shard, 10 of
type, 36 of local id, and the two high bits reserved as zero. Decoding an id
tells where its row lives, forever.
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

from migrator.errors import InvalidIdError

SHARD_BITS = 16
TYPE_BITS = 10
LOCAL_BITS = 36
SHARD_SHIFT = TYPE_BITS + LOCAL_BITS  # 46
TYPE_SHIFT = LOCAL_BITS  # 36
MAX_SHARD = (1 << SHARD_BITS) - 1
MAX_TYPE = (1 << TYPE_BITS) - 1
MAX_LOCAL = (1 << LOCAL_BITS) - 1
MAX_ID = (1 << (SHARD_BITS + TYPE_BITS + LOCAL_BITS)) - 1  # reserved bits zero

#: object type ids used by the seed schema
TYPE_PIN = 1
TYPE_BOARD = 2
TYPE_USER = 3
TYPE_JOB = 9


class ObjectId(NamedTuple):
    shard: int
    type: int
    local: int

    @property
    def value(self) -> int:
        return encode(self.shard, self.type, self.local)


def _check(name: str, value: int, maximum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidIdError(f"{name} must be an integer, got {value!r}")
    if value < 0 or value > maximum:
        raise InvalidIdError(f"{name} {value} is out of range 0..{maximum}")


def encode(shard: int, type_id: int, local: int) -> int:
    """Pack shard, type and local id into one 64-bit id."""
    _check("shard", shard, MAX_SHARD)
    _check("type", type_id, MAX_TYPE)
    _check("local id", local, MAX_LOCAL)
    return (shard << SHARD_SHIFT) | (type_id << TYPE_SHIFT) | local


def decode(object_id: int) -> ObjectId:
    """Split an id into (shard, type, local); ids with reserved bits set are rejected."""
    if isinstance(object_id, bool) or not isinstance(object_id, int):
        raise InvalidIdError(f"an id must be an integer, got {object_id!r}")
    if object_id < 0:
        raise InvalidIdError(f"id {object_id} is negative")
    if object_id > MAX_ID:
        raise InvalidIdError(
            f"id {object_id} sets the two reserved high bits (or exceeds 64 bits); "
            "it was not made by this codec"
        )
    return ObjectId(
        (object_id >> SHARD_SHIFT) & MAX_SHARD,
        (object_id >> TYPE_SHIFT) & MAX_TYPE,
        object_id & MAX_LOCAL,
    )


#: the longest text an id can be written in (0x and 16 hex digits; 20 decimal digits hold 64 bits)
MAX_ID_TEXT = 20


def parse_id(text: str) -> int:
    """Parse an id given on a command line (decimal or 0x hex); a text too long to be a 64-bit id is
    refused by its length, never echoed whole."""
    if not isinstance(text, str):
        raise InvalidIdError(f"an id must be given as text, got {type(text).__name__}")
    text = text.strip()
    shown = repr(text) if len(text) <= 40 else f"{text[:24]!r}... ({len(text)} characters)"
    if len(text) > MAX_ID_TEXT:
        raise InvalidIdError(f"{shown} is too long for an id: an id is a 64-bit number (at most 19 decimal "
                             "digits, or 0x and 16 hex digits)")
    try:
        return int(text, 0)
    except ValueError:
        raise InvalidIdError(f"{shown} is not an integer id (decimal, or hex with 0x)") from None


def mod_shard(key: str | bytes, num_shards: int) -> int:
    """The shard of a key without an id (email, IP): ``md5(key) % N``."""
    if num_shards <= 0:
        raise InvalidIdError("the number of shards must be positive")
    raw = key.encode("utf-8") if isinstance(key, str) else key
    return int.from_bytes(hashlib.md5(raw).digest(), "big") % num_shards


def shard_db(shard: int) -> str:
    """The database name of a virtual shard: ``db%05d``."""
    _check("shard", shard, MAX_SHARD)
    return f"db{shard:05d}"


def db_shard(name: str) -> int:
    """The inverse of :func:`shard_db`; raises on names that are not shard databases."""
    if len(name) == 7 and name.startswith("db") and name[2:].isdigit():
        return int(name[2:])
    raise InvalidIdError(f"{name!r} is not a shard database name (dbNNNNN)")
