"""MariaDB GTID positions: parse, compare, and combine them per domain.

A MariaDB GTID is ``domain-server-seq`` (``0-1-100``). A *position* is a list
of GTIDs with at most one per replication domain (``@@gtid_binlog_pos``, e.g.
``"1-1-100,2-2-7"``): for each domain, the last transaction seen. The binlog
of a master-master member holds several domains (its own writes, and its
partner's writes that arrive through ``log_slave_updates`` with the partner's
domain id), so every comparison here is per domain and every domain counts.

Semantics used by catch-up:

* ``a.contains(b)``: every transaction in ``b`` is also in ``a`` (for each
  domain of ``b``, ``a`` has that domain with a ``seq_no`` at least as high).
  A tail that has read or applied up to ``a`` has passed ``b``.
* ``earliest([...])`` (per-domain minimum) is where a tail must start so that
  it covers every position in the list. A domain missing from one of them
  means that position predates the domain's first transaction, so the
  earliest position leaves the domain out: the binlog server then streams that
  domain from its beginning.
* ``latest([...])`` (per-domain maximum) is the union.

Per-domain order holds only where every domain has one writer (one domain per
server, ``gtid_strict_mode``). With MariaDB's default of one domain shared by
both members of a pair, a member's binlog holds its partner's transactions in
the order it applied them: a late one keeps its lower ``seq_no`` and follows
transactions with higher ones, so "the position after X has a higher seq_no"
no longer means "after X". What stays ordered in every layout is the
transactions of one *server* within one domain: a server numbers its own
transactions above everything its binlog already holds, and a replica applies
(and re-logs) a peer's transactions in the peer's order. :class:`GtidState`
tracks that, per (domain, server), the way MariaDB's ``@@gtid_binlog_state``
does, and says exactly when a reader or a replica has passed a transaction
(:meth:`GtidState.reaches`), whatever the layout.

The same two things exist in a light form for a binlog reader's per-transaction work (tens of
thousands a second, where building an immutable value per transaction costs measurable CPU): a
:data:`Position` (``{domain: Gtid}``) and a :data:`State` (``{(domain, server): seq}``), plain dicts
updated in place, with the functions below (:func:`reaches`, :func:`format_pos`, :func:`format_state`,
...). :class:`GtidPos` and :class:`GtidState` wrap exactly these dicts and use the same functions, so
a GTID is parsed, rendered and "reached" in one place.

Pure functions and immutable values (the light forms aside); runs anywhere (no server needed).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from typing import NamedTuple

from migrator.errors import MigratorError

_GTID_RE = re.compile(r"^\s*(\d+)-(\d+)-(\d+)\s*$")


class InvalidGtid(MigratorError):
    component = "gtid"
    exit_code = 2


class Gtid(NamedTuple):
    """One MariaDB GTID: ``domain-server-seq``."""

    domain: int
    server: int
    seq: int

    @classmethod
    def parse(cls, text: str) -> Gtid:
        m = _GTID_RE.match(text)
        if not m:
            raise InvalidGtid(f"{text!r} is not a MariaDB GTID (expected domain-server-seq, e.g. 0-1-100)")
        return cls(int(m.group(1)), int(m.group(2)), int(m.group(3)))

    def __str__(self) -> str:
        return f"{self.domain}-{self.server}-{self.seq}"


#: the light form of a position: the last GTID of each domain (what :class:`GtidPos` wraps)
Position = dict[int, Gtid]
#: the light form of a state: the last ``seq`` of each (domain, server) (what :class:`GtidState` wraps)
State = dict[tuple[int, int], int]


def parse_gtids(text: str | None) -> list[Gtid]:
    """The GTIDs of ``"0-1-100,2-2-7"`` (commas or newlines between them); ``""`` and None: none."""
    if not text:
        return []
    return [Gtid.parse(p) for p in str(text).replace("\n", ",").split(",") if p.strip()]


def format_pos(pos: Mapping[int, Gtid]) -> str:
    """A position's text (its GTIDs by domain): what ``str(GtidPos)`` is, and what is stored."""
    return ",".join(str(pos[d]) for d in sorted(pos))


def state_of(*parts: str | Mapping[int, Gtid] | Iterable[Gtid] | None) -> State:
    """A state from positions, GTID lists and state texts (``"0-1-5,0-2-9"``: several GTIDs of one domain
    allowed), per (domain, server) the highest ``seq``."""
    out: State = {}
    for p in parts:
        if not p:
            continue
        gtids = parse_gtids(p) if isinstance(p, str) else p.values() if isinstance(p, Mapping) else p
        for g in gtids:
            key = (g.domain, g.server)
            if out.get(key, -1) < g.seq:
                out[key] = g.seq
    return out


def format_state(state: State) -> str:
    """A state's text (its GTIDs by domain, then server): what ``str(GtidState)`` is, and what is stored."""
    return ",".join(f"{d}-{s}-{state[(d, s)]}" for d, s in sorted(state))


def merge_state(into: State, other: State) -> None:
    """Add ``other`` to ``into`` in place (per key, the highest ``seq``)."""
    for k, q in other.items():
        if into.get(k, -1) < q:
            into[k] = q


def pos_before(pos: Mapping[int, Gtid], gtid: Gtid, prev: Gtid | None) -> Position:
    """``pos`` set back before the transaction ``gtid``: its domain at ``prev`` (the domain's GTID before
    it), or without the domain when ``prev`` is None."""
    out = dict(pos)
    if prev is None:
        out.pop(gtid.domain, None)
    else:
        out[gtid.domain] = prev
    return out


def state_before(state: Mapping[tuple[int, int], int], gtid: Gtid, prev_seq: int | None) -> State:
    """``state`` set back before the transaction ``gtid``: its (domain, server) at ``prev_seq`` (that
    server's previous transaction in the domain), or without it when ``prev_seq`` is None."""
    out = dict(state)
    key = (gtid.domain, gtid.server)
    if prev_seq is None:
        out.pop(key, None)
    else:
        out[key] = prev_seq
    return out


def reaches(state: State, want: Iterable[Gtid]) -> bool:
    """Every transaction of ``want`` is at or before ``state``: for each GTID, ``state`` holds a
    transaction of that (domain, server) numbered at least as high (exact in every GTID layout)."""
    for g in want:
        if state.get((g.domain, g.server), -1) < g.seq:
            return False
    return True


class GtidPos(Mapping[int, Gtid]):
    """An immutable GTID position: at most one :class:`Gtid` per domain."""

    __slots__ = ("_by_domain",)

    def __init__(self, gtids: Iterable[Gtid] | Mapping[int, Gtid] = ()):
        by: dict[int, Gtid] = {}
        items = gtids.values() if isinstance(gtids, Mapping) else gtids
        for g in items:
            prev = by.get(g.domain)
            if prev is not None and prev != g:
                raise InvalidGtid(f"two GTIDs for domain {g.domain}: {prev} and {g}")
            by[g.domain] = g
        self._by_domain = by

    # -- construction ------------------------------------------------------------
    @classmethod
    def parse(cls, text: str | None) -> GtidPos:
        """Parse ``"0-1-100,2-2-7"``; ``""`` and ``None`` are the empty position."""
        if text is None:
            return cls()
        if isinstance(text, GtidPos):
            return text
        return cls(parse_gtids(text))

    @classmethod
    def copy_of(cls, pos: Mapping[int, Gtid]) -> GtidPos:
        """A position of a light one (:data:`Position`, e.g. a reader's), copied (no checks)."""
        out = cls.__new__(cls)
        out._by_domain = dict(pos)
        return out

    def with_gtid(self, gtid: Gtid) -> GtidPos:
        """This position advanced by one transaction (replaces that domain's entry)."""
        return GtidPos.copy_of({**self._by_domain, gtid.domain: gtid})

    def before(self, gtid: Gtid, prev: Gtid | None) -> GtidPos:
        """This position set back before the transaction ``gtid`` (:func:`pos_before`)."""
        return GtidPos.copy_of(pos_before(self._by_domain, gtid, prev))

    # -- Mapping -----------------------------------------------------------------
    def __getitem__(self, domain: int) -> Gtid:
        return self._by_domain[domain]

    def __iter__(self) -> Iterator[int]:
        return iter(sorted(self._by_domain))

    def __len__(self) -> int:
        return len(self._by_domain)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            other = GtidPos.parse(other)
        if not isinstance(other, GtidPos):
            return NotImplemented
        return self._by_domain == other._by_domain

    def __hash__(self) -> int:
        return hash(frozenset(self._by_domain.items()))

    def __str__(self) -> str:
        return format_pos(self._by_domain)

    def __repr__(self) -> str:
        return f"GtidPos({str(self)!r})"

    # -- comparison ----------------------------------------------------------------
    def seq(self, domain: int) -> int:
        """The sequence number reached in ``domain`` (0 when the domain is absent)."""
        g = self._by_domain.get(domain)
        return g.seq if g else 0

    def contains(self, other: GtidPos | Gtid | str) -> bool:
        """True when every transaction up to ``other`` is within this position."""
        if isinstance(other, str):
            other = GtidPos.parse(other)
        if isinstance(other, Gtid):
            return self.seq(other.domain) >= other.seq
        return all(self.seq(d) >= g.seq for d, g in other._by_domain.items())

    def __le__(self, other: GtidPos) -> bool:
        return other.contains(self)

    def __ge__(self, other: GtidPos) -> bool:
        return self.contains(other)

    def behind(self, other: GtidPos | str) -> int:
        """How many transactions (all domains together) ``other`` has beyond this position."""
        if isinstance(other, str):
            other = GtidPos.parse(other)
        return sum(max(0, g.seq - self.seq(d)) for d, g in other._by_domain.items())


def compare(a: GtidPos | str, b: GtidPos | str) -> int | None:
    """-1, 0 or 1 when ``a`` is before, equal to or after ``b``; None when they
    are not ordered (ahead in one domain, behind in another)."""
    a = GtidPos.parse(a) if isinstance(a, str) else a
    b = GtidPos.parse(b) if isinstance(b, str) else b
    a_in_b, b_in_a = b.contains(a), a.contains(b)
    if a_in_b and b_in_a:
        return 0
    if a_in_b:
        return -1
    if b_in_a:
        return 1
    return None


def earliest(positions: Iterable[GtidPos | str]) -> GtidPos:
    """Per-domain minimum; a domain absent from any position is left out (see module doc)."""
    ps = [GtidPos.parse(p) if isinstance(p, str) else p for p in positions]
    if not ps:
        raise InvalidGtid("no positions to take the earliest of")
    domains = set.intersection(*(set(p) for p in ps))
    return GtidPos(min((p[d] for p in ps), key=lambda g: g.seq) for d in sorted(domains))


def latest(positions: Iterable[GtidPos | str]) -> GtidPos:
    """Per-domain maximum over every domain seen (the union of the positions)."""
    best: dict[int, Gtid] = {}
    for p in positions:
        p = GtidPos.parse(p) if isinstance(p, str) else p
        for d, g in p.items():
            if d not in best or g.seq > best[d].seq:
                best[d] = g
    return GtidPos(best)


class GtidState(Mapping[tuple[int, int], Gtid]):
    """The last transaction of each (domain, server) a binlog holds: MariaDB's ``@@gtid_binlog_state``.

    A binlog holds the transactions of one server in one domain in that server's own order (see the
    module doc), so ``state.reaches(g)`` (the transaction of server ``g.server`` numbered ``g.seq`` or a
    later one of that server is in the binlog, or has been read by a reader that tracks its state) is
    exact in every GTID layout, where :meth:`GtidPos.contains` is exact only with one writer per domain.
    A target given as a position (``@@gtid_binlog_pos``: the last transaction of each domain) is reached
    once each of its GTIDs is: the last transaction the binlog held is one of them.

    It wraps a :data:`State` (``{(domain, server): seq}``), the light form a reader updates in place.
    """

    __slots__ = ("_by_key",)

    def __init__(self, gtids: Iterable[Gtid] = ()):
        self._by_key = state_of(gtids)

    @classmethod
    def copy_of(cls, state: Mapping[tuple[int, int], int]) -> GtidState:
        """A state of a light one (:data:`State`, e.g. a reader's), copied."""
        out = cls.__new__(cls)
        out._by_key = dict(state)
        return out

    @classmethod
    def parse(cls, text: str | None) -> GtidState:
        """Parse ``"0-1-100,0-2-7"`` (several GTIDs per domain allowed); ``""``/None is empty."""
        if isinstance(text, GtidState):
            return text
        return cls(parse_gtids(text))

    @classmethod
    def of(cls, *parts: GtidState | GtidPos | str | Iterable[Gtid] | None) -> GtidState:
        """The union (per key, the highest ``seq``) of states, positions and GTID lists."""
        out: State = {}
        for p in parts:
            merge_state(out, p._by_key if isinstance(p, GtidState) else state_of(p))
        return cls.copy_of(out)

    def with_gtid(self, gtid: Gtid) -> GtidState:
        """This state after one more transaction (a server's own numbering only grows)."""
        key = (gtid.domain, gtid.server)
        if self._by_key.get(key, -1) >= gtid.seq:
            return self
        return GtidState.copy_of({**self._by_key, key: gtid.seq})

    def before(self, gtid: Gtid, prev_seq: int | None) -> GtidState:
        """This state set back before the transaction ``gtid`` (:func:`state_before`)."""
        return GtidState.copy_of(state_before(self._by_key, gtid, prev_seq))

    def __getitem__(self, key: tuple[int, int]) -> Gtid:
        return Gtid(key[0], key[1], self._by_key[key])

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return iter(sorted(self._by_key))

    def __len__(self) -> int:
        return len(self._by_key)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            other = GtidState.parse(other)
        if not isinstance(other, GtidState):
            return NotImplemented
        return self._by_key == other._by_key

    def __hash__(self) -> int:
        return hash(frozenset(self._by_key.items()))

    def __str__(self) -> str:
        return format_state(self._by_key)

    def __repr__(self) -> str:
        return f"GtidState({str(self)!r})"

    def reaches(self, target: GtidPos | GtidState | Gtid | str | Iterable[Gtid]) -> bool:
        """Every transaction of ``target`` (one GTID, a position or a state) is at or before this state
        (:func:`reaches`)."""
        if isinstance(target, GtidState):
            return reaches(self._by_key, target.values())
        if isinstance(target, str):
            return reaches(self._by_key, parse_gtids(target))
        if isinstance(target, Gtid):
            return reaches(self._by_key, (target,))
        return reaches(self._by_key, target.values() if isinstance(target, Mapping) else target)

    def own(self, server_id: int) -> GtidPos:
        """The last transaction ``server_id`` wrote itself, per domain (what a peer must apply to have
        every write that server accepted)."""
        return GtidPos(Gtid(d, s, q) for (d, s), q in sorted(self._by_key.items()) if s == server_id)

    def earlier_than(self, other: GtidState) -> bool:
        """True when this state is at or before ``other`` in every (domain, server) of either (two
        states of one binlog read at different times are always ordered so)."""
        return other.reaches(self)
