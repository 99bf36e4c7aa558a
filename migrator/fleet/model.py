"""The fleet model: hosts, master-master pairs, shard ranges and the shard map.

Pure data and validation, no I/O. The stores in :mod:`migrator.fleet.shard_map` keep
these objects in ZooKeeper; everything that routes or migrates reads them.

The shard map's wire format is the seed's list of ranges, wrapped in one
object that also carries the shard count, the frozen ranges and the table
routes::

    {"num_shards": 16,
     "ranges": [{"range": [0, 7], "master": "MySQL001A", "slave": "MySQL001B"}, ...],
     "frozen": [[4, 7]],
     "routes": [{"shard": 5, "tables": ["hq_p5", "hq_p5_dedupe"],
                 "master": "MySQL003A", "slave": "MySQL003B", "frozen": false}]}

A **table route** serves some tables of one shard from another pair than the
shard's range: a queue partition that moved on its own. Its tables are served by
the route's pair whatever the range says, and frozen by the route's own flag, not
the range's. Invariant kept by every edit: a route that is not frozen never names
its shard's range pair (such a route is dropped: the range serves the tables), so
a routed table never lives on its range's pair, and a move of the range carries
only unrouted tables. ``routes`` is written only when there is one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from migrator.errors import ShardMapError, UnknownHost
from migrator.fleet.ids import MAX_SHARD

HOST_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,62}$")


#: The code's word for the pair member that is not the active master is *passive*. Stored records,
#: the seed's shard map and the command line's JSON keep older words; these are the only keys that
#: differ from the code's names (code name -> wire key), translated where each is read and written:
#: the shard map here (:meth:`ShardRange.to_wire`), a migration's spec and options as field aliases
#: (:mod:`migrator.engine.migration`), cleanup's report where it is printed.
WIRE_NAMES: dict[str, str] = {
    "passive": "slave",
    "source_passive": "source_slave",
    "target_passive": "target_slave",
    "max_passive_lag_s": "max_standby_lag_s",
    "passive_lag": "standby_lag",
}
PASSIVE_KEY = WIRE_NAMES["passive"]


def wire_keys(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` with its top-level keys under their wire names (:data:`WIRE_NAMES`)."""
    return {WIRE_NAMES.get(k, k): v for k, v in doc.items()}


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
    passive: str

    @model_validator(mode="after")
    def _ordered(self) -> ShardRange:
        if self.lo > self.hi:
            raise ValueError(f"range [{self.lo}, {self.hi}] is empty (lo > hi)")
        if self.master == self.passive:
            raise ValueError(f"range [{self.lo}, {self.hi}] names {self.master} as both master and slave")
        check_host_name(self.master)
        check_host_name(self.passive)
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
        return {"range": [self.lo, self.hi], "master": self.master, PASSIVE_KEY: self.passive}

    @classmethod
    def from_wire(cls, item: Any) -> ShardRange:
        if not isinstance(item, dict):
            raise ShardMapError(f"each range must be an object, got {item!r}")
        rng = item.get("range")
        if not (isinstance(rng, (list, tuple)) and len(rng) == 2 and all(isinstance(x, int) for x in rng)):
            raise ShardMapError(f'each range needs "range": [lo, hi] with two integers, got {rng!r}')
        unknown = set(item) - {"range", "master", PASSIVE_KEY}
        if unknown:
            raise ShardMapError(f"unknown keys in range {rng}: {sorted(unknown)}")
        try:
            return cls(lo=rng[0], hi=rng[1], master=item.get("master"), passive=item.get(PASSIVE_KEY))
        except ValidationError as exc:
            raise ShardMapError(f"range {rng}: {_first_error(exc)}") from None


class TableRoute(BaseModel):
    """Some tables of one shard served by another pair than the shard's range (see the module doc)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    shard: int = Field(ge=0, le=MAX_SHARD)
    tables: tuple[str, ...]
    master: str
    passive: str
    frozen: bool = False

    @model_validator(mode="after")
    def _valid(self) -> TableRoute:
        if not self.tables:
            raise ValueError(f"the route of shard {self.shard} names no table")
        if len(set(self.tables)) != len(self.tables):
            raise ValueError(f"the route of shard {self.shard} names a table twice: {list(self.tables)}")
        if self.master == self.passive:
            raise ValueError(f"the route of shard {self.shard} names {self.master} as both master and slave")
        check_host_name(self.master)
        check_host_name(self.passive)
        return self

    def to_wire(self) -> dict[str, Any]:
        return {"shard": self.shard, "tables": list(self.tables), "master": self.master, PASSIVE_KEY: self.passive,
                "frozen": self.frozen}

    @classmethod
    def from_wire(cls, item: Any) -> TableRoute:
        if not isinstance(item, dict):
            raise ShardMapError(f"each route must be an object, got {item!r}")
        unknown = set(item) - {"shard", "tables", "master", PASSIVE_KEY, "frozen"}
        if unknown:
            raise ShardMapError(f"unknown keys in route {item!r}: {sorted(unknown)}")
        tables = item.get("tables")
        if not (isinstance(tables, list) and all(isinstance(t, str) for t in tables)):
            raise ShardMapError(f'each route needs "tables": a list of table names, got {tables!r}')
        try:
            return cls(shard=item.get("shard"), tables=tuple(tables), master=item.get("master"),
                       passive=item.get(PASSIVE_KEY), frozen=bool(item.get("frozen", False)))
        except ValidationError as exc:
            raise ShardMapError(f"route {item!r}: {_first_error(exc)}") from None


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    loc = ".".join(str(x) for x in err.get("loc", ()))
    msg = err.get("msg", "invalid")
    return f"{loc}: {msg}" if loc else msg


class ShardMap(BaseModel):
    """The range -> pair map, the ranges frozen for a cutover and the table routes.

    ``epoch`` is the ZooKeeper version of the node it was read from (None for a
    map that was never stored); it is not part of the wire format.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    num_shards: int = Field(ge=1, le=MAX_SHARD + 1)
    ranges: tuple[ShardRange, ...]
    frozen: tuple[tuple[int, int], ...] = ()
    routes: tuple[TableRoute, ...] = ()
    epoch: int | None = None

    # -- construction -------------------------------------------------------
    @classmethod
    def from_wire(cls, data: Any, epoch: int | None = None) -> ShardMap:
        """Build from the stored object, or from the seed's bare list of ranges."""
        if isinstance(data, list):
            data = {"ranges": data}
        if not isinstance(data, dict):
            raise ShardMapError("a shard map must be a JSON object or a list of ranges")
        unknown = set(data) - {"num_shards", "ranges", "frozen", "routes"}
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
        raw_routes = data.get("routes") or []
        if not isinstance(raw_routes, list):
            raise ShardMapError('"routes" must be a list of routes')
        routes = tuple(TableRoute.from_wire(r) for r in raw_routes)
        try:
            smap = cls(num_shards=num, ranges=ranges, frozen=tuple(frozen), routes=routes, epoch=epoch)
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
        out: dict[str, Any] = {
            "num_shards": self.num_shards,
            "ranges": [r.to_wire() for r in self.ranges],
            "frozen": [list(f) for f in self.frozen],
        }
        if self.routes:
            out["routes"] = [r.to_wire() for r in self.routes]
        return out

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
        routed: set[tuple[int, str]] = set()
        for rt in self.routes:
            if rt.shard >= self.num_shards:
                raise ShardMapError(f"the route of {list(rt.tables)} names shard {rt.shard}, outside "
                                    f"0..{self.num_shards - 1}")
            twice = sorted(t for t in rt.tables if (rt.shard, t) in routed)
            if twice:
                raise ShardMapError(f"tables {twice} of shard {rt.shard} are in two routes: a table has one route")
            routed.update((rt.shard, t) for t in rt.tables)

    def validate_hosts(self, hosts: dict[str, Host]) -> None:
        """Every host known, and each range's master and slave form a pair."""
        for r in self.ranges:
            for role, name in (("master", r.master), ("slave", r.passive)):
                if name not in hosts:
                    raise UnknownHost(
                        f"range [{r.lo}, {r.hi}] names {role} {name!r}, which is not in the host registry; "
                        "register it first (migrator topology init registers the hosts of a map file)"
                    )
            if hosts[r.master].partner != r.passive or hosts[r.passive].partner != r.master:
                raise ShardMapError(
                    f"range [{r.lo}, {r.hi}]: {r.master} and {r.passive} are not a master-master pair "
                    f"({r.master}'s partner is {hosts[r.master].partner}, {r.passive}'s is {hosts[r.passive].partner})"
                )
        for rt in self.routes:
            for role, name in (("master", rt.master), ("slave", rt.passive)):
                if name not in hosts:
                    raise UnknownHost(f"the route of shard {rt.shard} {list(rt.tables)} names {role} {name!r}, "
                                      "which is not in the host registry; register it first")

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
        """The shard's range is frozen (its routed tables follow their route's flag instead)."""
        return any(lo <= shard <= hi for lo, hi in self.frozen)

    def route_of(self, shard: int, table: str) -> TableRoute | None:
        for rt in self.routes:
            if rt.shard == shard and table in rt.tables:
                return rt
        return None

    def routes_of(self, shard: int) -> list[TableRoute]:
        return [rt for rt in self.routes if rt.shard == shard]

    def pair_of_table(self, shard: int, table: str | None) -> tuple[str, str]:
        """(master, slave) serving ``table`` of ``shard``: its route's pair, else its range's."""
        rt = self.route_of(shard, table) if table is not None else None
        if rt is not None:
            return rt.master, rt.passive
        r = self.range_of(shard)
        return r.master, r.passive

    def master_of_table(self, shard: int, table: str | None) -> str:
        return self.pair_of_table(shard, table)[0]

    def is_table_frozen(self, shard: int, table: str | None) -> bool:
        """Writes to ``table`` of ``shard`` wait: its route is frozen, or (unrouted) its range is."""
        rt = self.route_of(shard, table) if table is not None else None
        return rt.frozen if rt is not None else self.is_frozen(shard)

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

    def with_route(self, shard: int, tables: Iterable[str], master: str, passive: str, *,
                   frozen: bool) -> ShardMap:
        """Route ``tables`` of ``shard`` to a pair (frozen or not). The tables must be exactly one
        existing route's, or routed nowhere yet. A route left unfrozen on its range's pair is dropped."""
        tabs = tuple(tables)
        current = {self.route_of(shard, t) for t in tabs}
        if len(current) > 1 or (None not in current and next(iter(current)).tables != tabs):  # type: ignore[union-attr]
            raise ShardMapError(f"tables {list(tabs)} of shard {shard} are not one route: their routes are "
                                f"{[list(r.tables) if r else None for r in current]}")
        keep = tuple(rt for rt in self.routes if rt not in current)
        r = self.range_of(shard)
        if frozen or (master, passive) != (r.master, r.passive):
            keep = keep + (TableRoute(shard=shard, tables=tabs, master=master, passive=passive, frozen=frozen),)
        return self._replace(routes=tuple(sorted(keep, key=lambda rt: (rt.shard, rt.tables))))

    def reassign(self, lo: int, hi: int, master: str, passive: str) -> ShardMap:
        """Move shards lo..hi to another pair, splitting and merging ranges as needed."""
        owner: dict[int, tuple[str, str]] = {}
        for r in self.ranges:
            for s in r.shards:
                owner[s] = (r.master, r.passive)
        for s in range(lo, hi + 1):
            if s not in owner:
                raise ShardMapError(f"shard {s} is outside the map")
            owner[s] = (master, passive)
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
    for master, passive, s in items:
        if cur and cur[0] == master and cur[1] == passive and cur[3] == s - 1:
            cur = (master, passive, cur[2], s)
            continue
        if cur:
            yield ShardRange(lo=cur[2], hi=cur[3], master=cur[0], passive=cur[1])
        cur = (master, passive, s, s)
    if cur:
        yield ShardRange(lo=cur[2], hi=cur[3], master=cur[0], passive=cur[1])


def shard_runs(runs: Iterable[tuple[int, int] | list[int]]) -> str:
    """Shard runs ``[(lo, hi), ...]`` as an operator writes them (``move --shards``): ``0-3,7``."""
    return ",".join(f"{lo}-{hi}" if lo != hi else str(lo) for lo, hi in runs)


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
        ranges.append(ShardRange(lo=lo, hi=lo + n - 1, master=m, passive=s))
        lo += n
    return ShardMap(num_shards=num_shards, ranges=tuple(ranges))


@dataclass(frozen=True)
class MovingSet:
    """What one migration moves in the shard map: whole shards (their ranges), or some tables of
    one shard (their route). A cutover or rollback freezes, flips and unfreezes only through this,
    so a shard move and a table move differ here and nowhere else in the engine."""

    shards: tuple[int, ...]
    #: non-empty: only these tables of the one shard move (a table route); empty: whole shards
    tables: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.tables and len(self.shards) != 1:
            raise ShardMapError(f"tables {list(self.tables)} move with exactly one shard, not {list(self.shards)}")

    @property
    def ranges(self) -> list[tuple[int, int]]:
        """The shards as maximal contiguous [lo, hi] ranges."""
        out: list[tuple[int, int]] = []
        for s in sorted(self.shards):
            if out and out[-1][1] == s - 1:
                out[-1] = (out[-1][0], s)
            else:
                out.append((s, s))
        return out

    def describe(self) -> str:
        if self.tables:
            return f"tables {', '.join(self.tables)} of shard {self.shards[0]}"
        return "shards " + shard_runs(self.ranges)

    # -- reads --------------------------------------------------------------------------
    def pair_in(self, smap: ShardMap, shard: int) -> tuple[str, str]:
        return smap.pair_of_table(shard, self.tables[0] if self.tables else None)

    def master_in(self, smap: ShardMap, shard: int) -> str:
        return self.pair_in(smap, shard)[0]

    def frozen_in(self, smap: ShardMap, shard: int) -> bool:
        return smap.is_table_frozen(shard, self.tables[0] if self.tables else None)

    def served_by(self, smap: ShardMap, master: str) -> bool:
        """Every moving shard (or the moving tables) is served by ``master``."""
        return all(self.master_in(smap, s) == master for s in self.shards)

    def all_frozen(self, smap: ShardMap) -> bool:
        return all(self.frozen_in(smap, s) for s in self.shards)

    def image(self, smap: ShardMap) -> tuple[tuple[str, str, bool], ...]:
        """Owner, standby and frozen flag of each moving unit: equal images, nothing of ours changed."""
        return tuple((*self.pair_in(smap, s), self.frozen_in(smap, s)) for s in sorted(self.shards))

    # -- edits (pure) -------------------------------------------------------------------
    def freeze(self, smap: ShardMap) -> ShardMap:
        if self.tables:
            m, sl = self.pair_in(smap, self.shards[0])
            return smap.with_route(self.shards[0], self.tables, m, sl, frozen=True)
        for lo, hi in self.ranges:
            smap = smap.with_frozen(lo, hi)
        return smap

    def unfreeze(self, smap: ShardMap) -> ShardMap:
        if self.tables:
            if not self.frozen_in(smap, self.shards[0]) or smap.route_of(self.shards[0], self.tables[0]) is None:
                return smap
            m, sl = self.pair_in(smap, self.shards[0])
            return smap.with_route(self.shards[0], self.tables, m, sl, frozen=False)
        for lo, hi in self.ranges:
            smap = smap.without_frozen(lo, hi)
        return smap

    def flip(self, smap: ShardMap, master: str, passive: str) -> ShardMap:
        """Serve the moving set from (master, slave), unfrozen, in one edit."""
        if self.tables:
            return smap.with_route(self.shards[0], self.tables, master, passive, frozen=False)
        for lo, hi in self.ranges:
            smap = smap.reassign(lo, hi, master, passive).without_frozen(lo, hi)
        return smap
