"""The rebalance planner: which contiguous runs of shards move from which pair to which.

Pure Python, no I/O: it takes the range map (as ``(lo, hi, pair)`` triples, a pair
named by its master), each shard's cost and the pairs to add or drain, and returns
the moves. The live side (:mod:`migrator.ops.rebalance.measure`) feeds it measured
costs; ``bench.rebalance`` feeds it modelled fleets.

Every pair ``p`` has a band ``[lower_p, upper_p]``: ``mean x (1 -/+ threshold)`` of
the chosen objective (bytes, rows or writes/s) over the pairs that stay, ``[0, 0]``
for a drained pair. A pair above its band is a donor, one below it a receiver. The
greedy loop takes the donor with the largest excess (or, once no pair is above its
band, the pair with the most to spare for a receiver still below its band), picks
a receiver, and moves one run of shards at an edge of one of the donor's ranges:
the smallest run that covers the need (the donor's excess or the receiver's
deficit, whichever is larger) without pushing the receiver over its band or the
donor under its band; among runs of about that cost, the one that leaves fewer
ranges in the map. A pair is a source or a target in a plan, never both, so no
shard moves twice and the moves commute. Runs between the same two pairs become
one migration (a migration carries any shards of one source pair).

Bytes moved can never be below the bytes above ``upper`` summed over pairs (the
lower bound ``bench.rebalance`` reports against).

**Queue partitions** (:func:`plan_with_partitions`, objective ``writes``): a queue
partition's tables move on their own (a table route in the shard map). Where a few
hot partitions make a pair hot, moving them beats moving shards: the alternative
plan moves whole partitions, hottest first, from pairs above their band to the
pair with the most room, and is chosen when it balances at least as well as the
shard plan (or reaches the band) while moving fewer bytes.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from migrator.errors import MigratorError

OBJECTIVES = ("bytes", "rows", "writes")


class RebalanceError(MigratorError):
    component = "rebalance"
    exit_code = 2


@dataclass(frozen=True)
class ShardCost:
    """What one shard weighs: bytes on disk, rows, row writes per second."""

    bytes: int = 0
    rows: int = 0
    writes: float = 0.0

    def get(self, objective: str) -> float:
        return float(getattr(self, objective))


@dataclass(frozen=True)
class PartitionCost:
    """One queue partition: where it is served now (a pair named by its master) and what it weighs."""

    queue: str
    partition: int
    shard: int
    tables: tuple[str, ...]
    pair: str
    bytes: int = 0
    rows: int = 0
    writes: float = 0.0
    #: served by a table route (its cost is not in its shard's, which is measured on the range's pair)
    routed: bool = False

    def get(self, objective: str) -> float:
        return float(getattr(self, objective))


@dataclass
class Move:
    """One migration of the plan: runs of shards from one pair to another, or one queue partition
    (``queue`` set: its ``tables`` of the one shard of ``runs``)."""

    source: str
    target: str
    runs: list[tuple[int, int]]
    cost: float  # in the objective's unit
    bytes: int
    rows: int
    writes: float
    wave: int = 0
    queue: str | None = None
    partition: int | None = None
    tables: tuple[str, ...] = ()

    @property
    def shards(self) -> list[int]:
        return [s for lo, hi in self.runs for s in range(lo, hi + 1)]

    def as_dict(self) -> dict[str, Any]:
        out = {"source": self.source, "target": self.target, "runs": [list(r) for r in self.runs],
               "shards": sum(hi - lo + 1 for lo, hi in self.runs), "cost": self.cost, "bytes": self.bytes,
               "rows": self.rows, "writes": self.writes, "wave": self.wave}
        if self.queue is not None:
            out.update(queue=self.queue, partition=self.partition, tables=list(self.tables))
        return out


@dataclass
class Plan:
    objective: str
    threshold: float
    pairs: list[str]
    mean: float
    load_before: dict[str, float]
    load_after: dict[str, float]
    moves: list[Move]
    ranges_before: list[tuple[int, int, str]]
    ranges_after: list[tuple[int, int, str]]
    drain: list[str] = field(default_factory=list)
    add: list[str] = field(default_factory=list)
    unbalanced: list[str] = field(default_factory=list)  # pairs still outside their band (a shard too big, ...)
    plan_s: float = 0.0

    @property
    def bytes_moved(self) -> int:
        return sum(m.bytes for m in self.moves)

    def imbalance(self, after: bool = True) -> float:
        """max/mean of the objective over the pairs that stay."""
        load = self.load_after if after else self.load_before
        keep = [load[p] for p in self.pairs if p not in self.drain]
        mean = sum(keep) / len(keep) if keep else 0.0
        return max(keep) / mean if mean > 0 else 1.0

    @property
    def waves(self) -> int:
        return max((m.wave for m in self.moves), default=-1) + 1

    def as_dict(self) -> dict[str, Any]:
        return {"objective": self.objective, "threshold": self.threshold, "pairs": self.pairs, "mean": self.mean,
                "load_before": self.load_before, "load_after": self.load_after,
                "moves": [m.as_dict() for m in self.moves],
                "ranges_before": [list(r) for r in self.ranges_before],
                "ranges_after": [list(r) for r in self.ranges_after], "drain": self.drain, "add": self.add,
                "unbalanced": self.unbalanced, "imbalance_before": self.imbalance(False),
                "imbalance_after": self.imbalance(True), "bytes_moved": self.bytes_moved, "waves": self.waves,
                "plan_s": self.plan_s}


def coalesce(owner: Sequence[str]) -> list[tuple[int, int, str]]:
    """Maximal runs of one owner: ``["a", "a", "b"]`` -> ``[(0, 1, "a"), (2, 2, "b")]``."""
    out: list[tuple[int, int, str]] = []
    for s, p in enumerate(owner):
        if out and out[-1][2] == p:
            out[-1] = (out[-1][0], s, p)
        else:
            out.append((s, s, p))
    return out


def lower_bound(load: dict[str, float], pairs: Iterable[str], drain: Iterable[str], threshold: float) -> float:
    """The least any plan must move: what lies above ``mean x (1 + threshold)`` (above 0 on a drained pair)."""
    drain = set(drain)
    pairs = list(pairs)
    keep = [p for p in pairs if p not in drain]
    mean = sum(load.get(p, 0.0) for p in pairs) / len(keep)
    return sum(max(0.0, load.get(p, 0.0) - (0.0 if p in drain else mean * (1 + threshold))) for p in pairs)


class _State:
    """Owners of shards, loads and prefix sums of the objective (shared by the greedy steps)."""

    def __init__(self, owner: list[str], cost: list[float], pairs: list[str]):
        self.owner = owner
        self.cost = cost
        self.prefix = [0.0]
        for c in cost:
            self.prefix.append(self.prefix[-1] + c)
        self.load = {p: 0.0 for p in pairs}
        for s, p in enumerate(owner):
            self.load[p] += cost[s]
        self.n = len(owner)

    def run_cost(self, a: int, b: int) -> float:
        return self.prefix[b + 1] - self.prefix[a]

    def ranges_of(self, pair: str) -> list[tuple[int, int]]:
        return [(lo, hi) for lo, hi, p in coalesce(self.owner) if p == pair]

    def delta_ranges(self, a: int, b: int, src: str, dst: str) -> int:
        """How many ranges the map gains (+) or loses (-) when shards a..b go from src to dst."""
        d = 0
        for nb in ((self.owner[a - 1] if a > 0 else None), (self.owner[b + 1] if b + 1 < self.n else None)):
            if nb is None:
                continue
            d += int(nb != dst) - int(nb != src)
        return d

    def edge_runs(self, pair: str, need: float, cap: float) -> list[tuple[float, int, int]]:
        """Runs at the edges of ``pair``'s ranges costing about ``need`` and at most ``cap``:
        for each edge the largest run under ``need`` and the smallest run reaching it. Returns
        (cost, a, b)."""
        out: list[tuple[float, int, int]] = []
        pre = self.prefix
        tol = 1e-9 * max(1.0, abs(need))
        for lo, hi in self.ranges_of(pair):
            # runs lo..e-1 cost pre[e] - pre[lo], increasing in e (lo < e <= hi + 1)
            base = pre[lo]
            up = bisect.bisect_left(pre, base + need - tol, lo + 1, hi + 2)
            for e in (up - 1, up):
                if lo + 1 <= e <= hi + 1 and 0 < pre[e] - base <= cap + tol:
                    out.append((pre[e] - base, lo, e - 1))
            # runs a..hi cost pre[hi+1] - pre[a], decreasing in a (lo <= a <= hi)
            top = pre[hi + 1]
            down = bisect.bisect_right(pre, top - need + tol, lo, hi + 1) - 1  # largest a reaching need
            for a in (down, down + 1):
                if lo <= a <= hi and 0 < top - pre[a] <= cap + tol:
                    out.append((top - pre[a], a, hi))
        return out

    def move(self, a: int, b: int, dst: str) -> None:
        src = self.owner[a]
        c = self.run_cost(a, b)
        for s in range(a, b + 1):
            self.owner[s] = dst
        self.load[src] -= c
        self.load[dst] += c


def plan(ranges: Sequence[tuple[int, int, str]], costs: Sequence[ShardCost], *, objective: str = "bytes",
         threshold: float = 0.10, add_pairs: Sequence[str] = (), drain: Sequence[str] = (),
         max_moves_per_pair: int = 1, max_concurrent: int | None = None, max_steps: int = 100_000) -> Plan:
    """Plan the moves (see the module docstring). ``ranges`` cover shards 0..len(costs)-1."""
    t0 = time.perf_counter()
    if objective not in OBJECTIVES:
        raise RebalanceError(f"unknown objective {objective!r}: use one of {', '.join(OBJECTIVES)}")
    if not 0 < threshold < 1:
        raise RebalanceError(f"threshold {threshold} is not in (0, 1): use e.g. 0.10 for 10%")
    if max_moves_per_pair < 1:
        raise RebalanceError("--max-moves-per-pair must be at least 1")
    if max_concurrent is not None and max_concurrent < 1:
        raise RebalanceError("--max-concurrent must be at least 1")
    n = len(costs)
    owner: list[str | None] = [None] * n
    for lo, hi, p in ranges:
        if not 0 <= lo <= hi < n:
            raise RebalanceError(f"range [{lo}, {hi}] is outside the {n} measured shards")
        for s in range(lo, hi + 1):
            owner[s] = p
    if any(o is None for o in owner):
        raise RebalanceError(f"the ranges do not cover shards 0..{n - 1}")
    mapped = sorted({p for _, _, p in ranges})
    for p in add_pairs:
        if p in mapped:
            raise RebalanceError(f"--add-pair {p} already holds shards: name a new, empty pair")
    for p in drain:
        if p not in mapped and p not in add_pairs:
            raise RebalanceError(f"--drain {p}: {p} holds no shards (pairs in the map: {', '.join(mapped)})")
    pairs = sorted(set(mapped) | set(add_pairs))
    keep = [p for p in pairs if p not in drain]
    if not keep:
        raise RebalanceError("every pair would be drained: keep at least one, or add one with --add-pair")
    cost = [c.get(objective) for c in costs]
    st = _State([o for o in owner if o is not None], cost, pairs)
    before = dict(st.load)
    ranges_before = coalesce(st.owner)
    mean = sum(cost) / len(keep)
    drained = set(drain)
    upper = {p: (0.0 if p in drained else mean * (1 + threshold)) for p in pairs}
    lower = {p: (0.0 if p in drained else mean * (1 - threshold)) for p in pairs}
    role: dict[str, str] = {}  # pair -> "source" | "target"
    runs: list[tuple[str, str, int, int]] = []
    stuck: set[tuple[str, str]] = set()
    eps = max(mean * 1e-9, 1e-12)

    for _ in range(max_steps):
        load = st.load
        excess = {p: load[p] - upper[p] for p in pairs if load[p] - upper[p] > eps}
        deficit = {p: lower[p] - load[p] for p in pairs if lower[p] - load[p] > eps}
        if not excess and not deficit:
            break
        donors = [p for p in pairs if role.get(p) != "target" and load[p] > eps]
        receivers = [p for p in pairs if role.get(p) != "source" and p not in drained]
        if excess:
            donors = sorted((p for p in donors if p in excess), key=lambda p: -excess[p])
        else:  # only receivers below their band left: take from the pairs with most to spare
            donors = sorted((p for p in donors if load[p] - lower[p] > eps), key=lambda p: -(load[p] - lower[p]))
        if not excess:  # only the pairs below their band still need anything
            receivers = [p for p in receivers if p in deficit]
        # those below their band first (largest deficit first), then the most room
        receivers.sort(key=lambda p: (p not in deficit, -deficit.get(p, 0.0), load[p] - upper[p]))
        done = False
        for d in donors:
            for r in receivers:
                if r == d or (d, r) in stuck:
                    continue
                cap = min(load[d] - lower[d], upper[r] - load[r])
                if cap <= eps:
                    continue
                need = max(excess.get(d, 0.0), deficit.get(r, 0.0))
                need = min(need, cap)
                cand = st.edge_runs(d, need, cap)
                if not cand:
                    stuck.add((d, r))
                    continue
                c, a, b = min(cand, key=lambda x: _score(x, need, st.delta_ranges(x[1], x[2], d, r), mean))
                st.move(a, b, r)
                role[d], role[r] = "source", "target"
                runs.append((d, r, a, b))
                done = True
                break
            if done:
                break
        if not done:
            break

    moves = _merge(runs, costs, objective)
    schedule_waves(moves, max_moves_per_pair=max_moves_per_pair, max_concurrent=max_concurrent)
    unbalanced = [p for p in pairs if st.load[p] - upper[p] > eps or lower[p] - st.load[p] > eps]
    return Plan(objective=objective, threshold=threshold, pairs=pairs, mean=mean, load_before=before,
                load_after=dict(st.load), moves=moves, ranges_before=ranges_before,
                ranges_after=coalesce(st.owner), drain=list(drain), add=list(add_pairs), unbalanced=unbalanced,
                plan_s=time.perf_counter() - t0)


#: a range more (or fewer) in the map weighs this share of the mean load
RANGE_WEIGHT = 0.02
#: falling short of the need costs this much more than overshooting it (a short move needs another)
SHORT_WEIGHT = 1.5


def _score(cand: tuple[float, int, int], need: float, delta_ranges: int, mean: float) -> float:
    c = cand[0]
    miss = (need - c) * SHORT_WEIGHT if c < need else c - need
    return miss + delta_ranges * RANGE_WEIGHT * mean


def _merge(runs: list[tuple[str, str, int, int]], costs: Sequence[ShardCost], objective: str) -> list[Move]:
    """One move per (source, target): its runs sorted and adjacent runs joined."""
    by_pair: dict[tuple[str, str], list[tuple[int, int]]] = {}
    for d, r, a, b in runs:
        by_pair.setdefault((d, r), []).append((a, b))
    moves = []
    for (d, r), rs in by_pair.items():
        joined: list[tuple[int, int]] = []
        for a, b in sorted(rs):
            if joined and joined[-1][1] + 1 == a:
                joined[-1] = (joined[-1][0], b)
            else:
                joined.append((a, b))
        shards = [s for a, b in joined for s in range(a, b + 1)]
        moves.append(Move(source=d, target=r, runs=joined, cost=sum(costs[s].get(objective) for s in shards),
                          bytes=sum(costs[s].bytes for s in shards), rows=sum(costs[s].rows for s in shards),
                          writes=sum(costs[s].writes for s in shards)))
    moves.sort(key=lambda m: -m.bytes)
    return moves


def schedule_waves(moves: list[Move], *, max_moves_per_pair: int = 1, max_concurrent: int | None = None) -> None:
    """Give each move a wave: within a wave a pair takes part in at most ``max_moves_per_pair``
    moves (as source or target) and at most ``max_concurrent`` moves run. Largest moves first."""
    waiting = sorted(range(len(moves)), key=lambda i: -moves[i].bytes)
    wave = 0
    while waiting:
        busy: dict[str, int] = {}
        placed: list[int] = []
        for i in waiting:
            m = moves[i]
            if max_concurrent is not None and len(placed) >= max_concurrent:
                break
            if busy.get(m.source, 0) >= max_moves_per_pair or busy.get(m.target, 0) >= max_moves_per_pair:
                continue
            m.wave = wave
            busy[m.source] = busy.get(m.source, 0) + 1
            busy[m.target] = busy.get(m.target, 0) + 1
            placed.append(i)
        waiting = [i for i in waiting if i not in set(placed)]
        wave += 1
    moves.sort(key=lambda m: (m.wave, -m.bytes))


def plan_with_partitions(ranges: Sequence[tuple[int, int, str]], costs: Sequence[ShardCost],
                         parts: Sequence[PartitionCost], *, objective: str = "writes", threshold: float = 0.10,
                         **kw: Any) -> Plan:
    """The shard plan, or (objective ``writes`` only) a plan that moves queue partitions instead, when
    that balances at least as well (or reaches the band) and moves fewer bytes (module docstring).

    Shard costs are measured on each range's pair, so they hold the partitions served there; a routed
    partition's cost is added to its route's pair."""
    shard_plan = plan(ranges, costs, objective=objective, threshold=threshold, **kw)
    routed = {p.pair for p in parts if p.routed} - set(shard_plan.pairs)
    if objective != "writes" or not parts or kw.get("drain") or kw.get("add_pairs") or routed:
        return shard_plan
    t0 = time.perf_counter()
    load = dict(shard_plan.load_before)
    for p in parts:
        if p.routed:
            load[p.pair] += p.get(objective)
    pairs = shard_plan.pairs
    mean = sum(load.values()) / len(pairs)
    upper = mean * (1 + threshold)
    before = dict(load)
    moves: list[Move] = []
    moved: set[tuple[str, int]] = set()
    role: dict[str, str] = {}
    eps = max(mean * 1e-9, 1e-12)
    while True:
        donors = sorted((p for p in pairs if load[p] - upper > eps and role.get(p) != "target"),
                        key=lambda p: -load[p])
        best = None
        for d in donors:
            receivers = sorted((p for p in pairs if p != d and role.get(p) != "source"), key=lambda p: load[p])
            for part in sorted((x for x in parts if x.pair == d and (x.queue, x.partition) not in moved),
                               key=lambda x: -x.get(objective)):
                c = part.get(objective)
                r = receivers[0] if receivers else None
                # a move must lower the hotter of the two pairs, and not push the receiver over the band
                if r is None or c <= eps or load[r] + c > max(upper, load[d]) - eps:
                    continue
                best = (d, r, part)
                break
            if best:
                break
        if best is None:
            break
        d, r, part = best
        c = part.get(objective)
        load[d] -= c
        load[r] += c
        role[d], role[r] = "source", "target"
        moved.add((part.queue, part.partition))
        moves.append(Move(source=d, target=r, runs=[(part.shard, part.shard)], cost=c, bytes=part.bytes,
                          rows=part.rows, writes=part.writes, queue=part.queue, partition=part.partition,
                          tables=part.tables))
    if not moves:
        return shard_plan
    alt = Plan(objective=objective, threshold=threshold, pairs=pairs, mean=mean, load_before=before,
               load_after=dict(load), moves=moves, ranges_before=shard_plan.ranges_before,
               ranges_after=shard_plan.ranges_before,
               unbalanced=[p for p in pairs if load[p] - upper > eps or mean * (1 - threshold) - load[p] > eps],
               plan_s=shard_plan.plan_s + time.perf_counter() - t0)
    schedule_waves(alt.moves, max_moves_per_pair=kw.get("max_moves_per_pair", 1),
                   max_concurrent=kw.get("max_concurrent"))
    balanced_enough = alt.imbalance() <= max(shard_plan.imbalance(), 1 + threshold) + 1e-9
    if balanced_enough and (alt.bytes_moved < shard_plan.bytes_moved or not shard_plan.moves):
        return alt
    return shard_plan
