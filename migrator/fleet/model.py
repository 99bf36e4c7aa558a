"""The fleet model: hosts, master-master pairs, shard ranges and the shard map.

Pure data and validation, no I/O. The stores in :mod:`migrator.fleet.shard_map` keep
these objects in ZooKeeper; everything that routes or migrates reads them.

The shard map's wire format is the seed's list of ranges, wrapped in one
object that also carries the shard count and the frozen ranges::

    {"num_shards": 16,
     "ranges": [{"range": [0, 7], "master": "MySQL001A", "slave": "MySQL001B"}, ...],
     "frozen": [[4, 7]]}
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from migrator.errors import ShardMapError, UnknownHost
from migrator.fleet.ids import MAX_SHARD

HOST_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,62}$")


def check_host_name(name: str) -> str:
    if not isinstance(name, str) or not HOST_NAME_RE.fullmatch(name):
        raise ShardMapError(
            f"host name {name!r} is not valid: use letters, digits, '.', '_' or '-', starting with a letter"
        )
    return name


class Host(BaseModel):
    """One MySQL server of the fleet, as the host registry knows it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    address: str = "127.0.0.1"
    port: int = Field(ge=1, le=65535)
    partner: str  # the other member of its master-master pair

    @field_validator("name", "partner")
    @classmethod
    def _valid_name(cls, v: str) -> str:
        return check_host_name(v)


class ShardRange(BaseModel):
    """An inclusive range of virtual shards on one pair."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    lo: int = Field(ge=0, le=MAX_SHARD)
    hi: int = Field(ge=0, le=MAX_SHARD)
    master: str
    slave: str

    @model_validator(mode="after")
    def _ordered(self) -> ShardRange:
        if self.lo > self.hi:
            raise ValueError(f"range [{self.lo}, {self.hi}] is empty (lo > hi)")
        if self.master == self.slave:
            raise ValueError(f"range [{self.lo}, {self.hi}] names {self.master} as both master and slave")
        check_host_name(self.master)
        check_host_name(self.slave)
        return self

    @property
    def shards(self) -> range:
        return range(self.lo, self.hi + 1)

    @property
    def count(self) -> int:
        return self.hi - self.lo + 1

    def contains(self, shard: int) -> bool:
        return self.lo <= shard <= self.hi

    def overlaps(self, lo: int, hi: int) -> bool:
        return self.lo <= hi and lo <= self.hi

    def to_wire(self) -> dict[str, Any]:
        return {"range": [self.lo, self.hi], "master": self.master, "slave": self.slave}

    @classmethod
    def from_wire(cls, item: Any) -> ShardRange:
        if not isinstance(item, dict):
            raise ShardMapError(f"each range must be an object, got {item!r}")
        rng = item.get("range")
        if not (isinstance(rng, (list, tuple)) and len(rng) == 2 and all(isinstance(x, int) for x in rng)):
            raise ShardMapError(f'each range needs "range": [lo, hi] with two integers, got {rng!r}')
        unknown = set(item) - {"range", "master", "slave"}
        if unknown:
            raise ShardMapError(f"unknown keys in range {rng}: {sorted(unknown)}")
        try:
            return cls(lo=rng[0], hi=rng[1], master=item.get("master"), slave=item.get("slave"))
        except ValidationError as exc:
            raise ShardMapError(f"range {rng}: {_first_error(exc)}") from None


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(x) for x in err.get("loc", ()))
    msg = err.get("msg", "invalid")
    return f"{loc}: {msg}" if loc else msg


class ShardMap(BaseModel):
    """The range -> pair map plus the ranges frozen for a cutover.

    ``epoch`` is the ZooKeeper version of the node it was read from (None for a
    map that was never stored); it is not part of the wire format.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    num_shards: int = Field(ge=1, le=MAX_SHARD + 1)
    ranges: tuple[ShardRange, ...]
    frozen: tuple[tuple[int, int], ...] = ()
    epoch: int | None = None

    # -- construction -------------------------------------------------------
    @classmethod
    def from_wire(cls, data: Any, epoch: int | None = None) -> ShardMap:
        """Build from the stored object, or from the seed's bare list of ranges."""
        if isinstance(data, list):
            data = {"ranges": data}
        if not isinstance(data, dict):
            raise ShardMapError("a shard map must be a JSON object or a list of ranges")
        unknown = set(data) - {"num_shards", "ranges", "frozen"}
        if unknown:
            raise ShardMapError(f"unknown keys in shard map: {sorted(unknown)}")
        raw_ranges = data.get("ranges")
        if not isinstance(raw_ranges, list) or not raw_ranges:
            raise ShardMapError('the shard map needs a non-empty "ranges" list')
        ranges = tuple(ShardRange.from_wire(r) for r in raw_ranges)
        num = data.get("num_shards")
        if num is None:
            num = max(r.hi for r in ranges) + 1
        frozen_raw = data.get("frozen") or []
        frozen: list[tuple[int, int]] = []
        for f in frozen_raw:
            if not (isinstance(f, (list, tuple)) and len(f) == 2 and all(isinstance(x, int) for x in f)):
                raise ShardMapError(f"each frozen range must be [lo, hi], got {f!r}")
            frozen.append((f[0], f[1]))
        try:
            smap = cls(num_shards=num, ranges=ranges, frozen=tuple(frozen), epoch=epoch)
        except ValidationError as exc:
            raise ShardMapError(_first_error(exc)) from None
        smap.validate_layout()
        return smap

    @classmethod
    def from_json(cls, text: str | bytes, epoch: int | None = None) -> ShardMap:
        try:
            data = json.loads(text)
        except (ValueError, UnicodeDecodeError) as exc:
            raise ShardMapError(f"the shard map is not valid JSON: {exc}") from None
        return cls.from_wire(data, epoch=epoch)

    def to_wire(self) -> dict[str, Any]:
        return {
            "num_shards": self.num_shards,
            "ranges": [r.to_wire() for r in self.ranges],
            "frozen": [list(f) for f in self.frozen],
        }

    def to_json(self) -> bytes:
        return json.dumps(self.to_wire(), separators=(",", ":"), sort_keys=True).encode()

    # -- validation ---------------------------------------------------------
    def validate_layout(self) -> None:
        """No overlap, full cover of 0..N-1, frozen ranges inside the map."""
        ordered = sorted(self.ranges, key=lambda r: r.lo)
        expect = 0
        for r in ordered:
            if r.lo < expect:
                prev = next(p for p in ordered if p.overlaps(r.lo, r.hi) and p is not r)
                raise ShardMapError(
                    f"ranges [{prev.lo}, {prev.hi}] and [{r.lo}, {r.hi}] overlap: each shard must belong to one range"
                )
            if r.lo > expect:
                raise ShardMapError(
                    f"shards {expect}..{r.lo - 1} are not covered by any range: the map must cover "
                    f"0..{self.num_shards - 1}"
                )
            expect = r.hi + 1
        if expect != self.num_shards:
            if expect > self.num_shards:
                raise ShardMapError(
                    f"ranges reach shard {expect - 1} but num_shards is {self.num_shards}"
                )
            raise ShardMapError(
                f"shards {expect}..{self.num_shards - 1} are not covered by any range: the map must cover "
                f"0..{self.num_shards - 1}"
            )
        for lo, hi in self.frozen:
            if lo > hi or lo < 0 or hi >= self.num_shards:
                raise ShardMapError(f"frozen range [{lo}, {hi}] is outside 0..{self.num_shards - 1}")

    def validate_hosts(self, hosts: dict[str, Host]) -> None:
        """Every host known, and each range's master and slave form a pair."""
        for r in self.ranges:
            for role, name in (("master", r.master), ("slave", r.slave)):
                if name not in hosts:
                    raise UnknownHost(
                        f"range [{r.lo}, {r.hi}] names {role} {name!r}, which is not in the host registry; "
                        "register it first (migrator topology init registers the hosts of a map file)"
                    )
            if hosts[r.master].partner != r.slave or hosts[r.slave].partner != r.master:
                raise ShardMapError(
                    f"range [{r.lo}, {r.hi}]: {r.master} and {r.slave} are not a master-master pair "
                    f"({r.master}'s partner is {hosts[r.master].partner}, {r.slave}'s is {hosts[r.slave].partner})"
                )

    # -- lookups ------------------------------------------------------------
    def range_of(self, shard: int) -> ShardRange:
        if not 0 <= shard < self.num_shards:
            raise ShardMapError(f"shard {shard} is outside 0..{self.num_shards - 1}")
        for r in self.ranges:
            if r.contains(shard):
                return r
        raise ShardMapError(f"shard {shard} is in no range")  # validate_layout makes this unreachable

    def master_of(self, shard: int) -> str:
        return self.range_of(shard).master

    def is_frozen(self, shard: int) -> bool:
        return any(lo <= shard <= hi for lo, hi in self.frozen)

    def shards_on(self, master: str) -> list[int]:
        return [s for r in self.ranges if r.master == master for s in r.shards]

    def ranges_on(self, master: str) -> list[ShardRange]:
        return sorted((r for r in self.ranges if r.master == master), key=lambda r: r.lo)

    def masters(self) -> list[str]:
        return sorted({r.master for r in self.ranges})

    def __iter__(self) -> Iterator[ShardRange]:  # type: ignore[override]
        return iter(sorted(self.ranges, key=lambda r: r.lo))

    # -- edits (pure: each returns a new map) ---------------------------------
    def with_frozen(self, lo: int, hi: int) -> ShardMap:
        if (lo, hi) in self.frozen:
            return self
        return self._replace(frozen=tuple(sorted(self.frozen + ((lo, hi),))))

    def without_frozen(self, lo: int, hi: int) -> ShardMap:
        return self._replace(frozen=tuple(f for f in self.frozen if f != (lo, hi)))

    def reassign(self, lo: int, hi: int, master: str, slave: str) -> ShardMap:
        """Move shards lo..hi to another pair, splitting and merging ranges as needed."""
        owner: dict[int, tuple[str, str]] = {}
        for r in self.ranges:
            for s in r.shards:
                owner[s] = (r.master, r.slave)
        for s in range(lo, hi + 1):
            if s not in owner:
                raise ShardMapError(f"shard {s} is outside the map")
            owner[s] = (master, slave)
        new_ranges = list(_coalesce(owner[s] + (s,) for s in range(self.num_shards)))
        return self._replace(ranges=tuple(new_ranges))

    def _replace(self, **changes: Any) -> ShardMap:
        data = self.model_dump()
        data.update(changes)
        data["epoch"] = self.epoch
        smap = ShardMap(**data)
        smap.validate_layout()
        return smap


def _coalesce(items: Iterable[tuple[str, str, int]]) -> Iterator[ShardRange]:
    cur: tuple[str, str, int, int] | None = None
    for master, slave, s in items:
        if cur and cur[0] == master and cur[1] == slave and cur[3] == s - 1:
            cur = (master, slave, cur[2], s)
            continue
        if cur:
            yield ShardRange(lo=cur[2], hi=cur[3], master=cur[0], slave=cur[1])
        cur = (master, slave, s, s)
    if cur:
        yield ShardRange(lo=cur[2], hi=cur[3], master=cur[0], slave=cur[1])


def pair_names(index: int) -> tuple[str, str]:
    """The host names of pair ``index`` (1-based): MySQL001A, MySQL001B."""
    return f"MySQL{index:03d}A", f"MySQL{index:03d}B"


def even_layout(num_shards: int, pairs: list[tuple[str, str]]) -> ShardMap:
    """Spread shards evenly over pairs (the sandbox's initial map)."""
    if not pairs:
        raise ShardMapError("at least one pair is needed")
    if num_shards < len(pairs):
        raise ShardMapError(f"{num_shards} shards cannot cover {len(pairs)} pairs")
    per, extra = divmod(num_shards, len(pairs))
    ranges = []
    lo = 0
    for i, (m, s) in enumerate(pairs):
        n = per + (1 if i < extra else 0)
        ranges.append(ShardRange(lo=lo, hi=lo + n - 1, master=m, slave=s))
        lo += n
    return ShardMap(num_shards=num_shards, ranges=tuple(ranges))
