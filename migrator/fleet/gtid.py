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

Pure functions and immutable values; runs anywhere (no server needed).
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
        parts = [p for p in text.replace("\n", ",").split(",") if p.strip()]
        return cls(Gtid.parse(p) for p in parts)

    def with_gtid(self, gtid: Gtid) -> GtidPos:
        """This position advanced by one transaction (replaces that domain's entry)."""
        by = dict(self._by_domain)
        by[gtid.domain] = gtid
        out = GtidPos.__new__(GtidPos)
        out._by_domain = by
        return out

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
        return ",".join(str(self._by_domain[d]) for d in sorted(self._by_domain))

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
