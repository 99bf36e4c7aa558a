"""Batched cutovers: a move of more tables than one rename fence takes cuts over in batches.

A host-sized split (512 shards x 5 tables) cannot be fenced by one
:class:`~migrator.engine.cutover.rename_fence.Fence`: it holds one connection per table
(at most :data:`~migrator.engine.cutover.rename_fence.MAX_TABLES`). Such a move is one
**batched** migration (``Spec.batched``): preflighted, copied, tailed and
verified once, for all its shards. Its pipeline then hands its shards over
in **batches** of consecutive shards, one at a time, each to a batch migration
that starts converged and runs the normal rename-fenced cutover of only its
ranges (:mod:`.handover`); between two batches the map is
valid, with part of the ranges moved. The rebalance record lists the batches as
they are handed over (:func:`migrator.ops.rebalance.record.refresh`).

Batch size follows the freeze budget: the first batch is sized by the cutover's
model of the rename fence's freeze (:mod:`migrator.engine.cutover.budget`: a fixed
part and a part per table; here the fixed part, :data:`FIXED_MS`, also holds a
drain, :data:`DRAIN_MS`), aimed at :data:`AIM` of the budget; every later batch by
what the batch before it froze, per table (:func:`next_limit`): a quick freeze grows
the next batch (at most to twice the last), a freeze over the budget shrinks it, and
a slow batch earlier in the split weighs nothing once a later one was measured. The
freeze measured is the whole of it, the compare under the fence included: what the
clients of that batch's shards waited. A table costs the freeze its lock, its queued RENAME
and its sentinel row; the RENAMEs themselves run after the freeze (the release
lets the waiting clients go first: :mod:`migrator.engine.cutover.rename_fence`), so the
batch's table count weighs little on its freeze, and a batch is most often bounded
by :data:`~migrator.engine.cutover.rename_fence.MAX_TABLES`.
This keeps every guarantee of the rename
fence (TRUNCATE and DDL wait for the lock, no stale reader sees the old tables
after the flip, prepared statements keep working), which the trigger gate
(``--fence gate``) does not.

A shard whose tables alone exceed the limit is a batch of its own, fenced by the
gate under ``fence=auto`` (see :func:`~migrator.engine.cutover.rename_fence.fence_mode`).
A move fenced by the gate (``--fence gate``) is never batched: one gate closes any
number of tables.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from migrator.engine.cutover.budget import FENCE_PER_TABLE_MS, FIXED_FREEZE_MS
from migrator.engine.cutover.freeze_stats import AFTER_CLAIM_STEPS
from migrator.engine.cutover.watchdog import MAX_RESERVE_SHARE
from migrator.engine.fencing import MAX_TABLES
from migrator.engine.migration import Spec
from migrator.engine.names import SENTINEL_TABLE
from migrator.fleet.config import Credentials
from migrator.fleet.ids import shard_db
from migrator.fleet.mysql import connect as mysql_connect
from migrator.fleet.mysql import query, tag
from migrator.fleet.shard_map import HostRegistry
from migrator.fleet.zk import ZK
from migrator.ops.rebalance.record import Move, migration_id

TAG = tag("plan")
#: the drain's share of a freeze before any batch was measured: the cutover's gate predicts it from its own
#: timed drains, which a batch does not have yet when it is sized
DRAIN_MS = 50.0
#: the rename fence's freeze besides its per-table part (freeze CAS, passive close, drain, compare, flip CAS),
#: before any batch was measured: the gate's default fixed cost plus the drain
FIXED_MS = FIXED_FREEZE_MS + DRAIN_MS
#: a table's share of a freeze (its lock, its queued RENAME, its db's sentinel row) before any batch
#: was measured: the gate's
PER_TABLE_MS = FENCE_PER_TABLE_MS
#: share of the freeze budget a batch is sized for (the rest is headroom for a busier moment)
AIM = 0.6
#: share of the budget a batch's freeze and the watchdog's reserve may take together (the gate refuses past
#: the whole budget: the rest is headroom for a busier moment)
BOUND = 0.9
#: connections of the source master the batches' rename fences leave to everyone else (up to three batches are
#: in flight at once: one freezes while the next two prepare theirs: :func:`migrator.ops.batched.run._fly`)
CONNECTIONS_KEPT = 100
#: a fence's connections besides one a table (its lock's, its KILLs', its spare)
FENCE_EXTRA_CONNECTIONS = 3


#: the steps of a freeze whose time grows with the batch's tables (the passive member's gate closed on each,
#: a lock a table, a sentinel row a db); the others (two CAS, the pair's sync, the drain, the compare, the
#: release) are about the same for any batch of a split
PER_TABLE_STEPS = ("passive_close", "fence", "sentinel")


@dataclass(frozen=True)
class Measured:
    """A batch's freeze as measured: its tables, how long its clients waited (ms), and its steps' times (ms;
    empty: not known, the freeze taken as growing with the tables alone)."""

    tables: int
    freeze_ms: float
    steps_ms: Mapping[str, float] = field(default_factory=dict)

    def parts(self) -> tuple[float, float] | None:
        """``(fixed ms, ms per table)`` of this freeze (:data:`PER_TABLE_STEPS`), None without its steps."""
        if not self.steps_ms or self.tables <= 0:
            return None
        grows = sum(float(self.steps_ms.get(k) or 0.0) for k in PER_TABLE_STEPS)
        return max(0.0, self.freeze_ms - grows), grows / self.tables

    def after_claim_ms(self) -> float:
        """What this freeze spent after the watchdog's last chance (its flip CAS and release, ms; 0 without
        its steps): part of its fixed part, and what the watchdog's reserve stands in for."""
        return sum(float(self.steps_ms.get(k) or 0.0) for k in AFTER_CLAIM_STEPS)


def count_tables(conn: Any, shards: Iterable[int]) -> dict[int, tuple[int, int]]:
    """``{shard: (tables, bytes)}`` of the shards' dbs on one master (the sentinel not counted)."""
    dbs = {shard_db(s): s for s in shards}
    out = {s: (0, 0) for s in dbs.values()}
    names = sorted(dbs)
    for k in range(0, len(names), 500):
        part = names[k:k + 500]
        marks = ", ".join(["%s"] * len(part))
        for db, n, nbytes in query(
                conn, f"{TAG}SELECT TABLE_SCHEMA, COUNT(*), COALESCE(SUM(DATA_LENGTH + INDEX_LENGTH), 0) "
                      f"FROM information_schema.TABLES WHERE TABLE_SCHEMA IN ({marks}) AND TABLE_TYPE = 'BASE TABLE' "
                      "AND TABLE_NAME <> %s GROUP BY TABLE_SCHEMA", [*part, SENTINEL_TABLE]):
            out[dbs[db]] = (int(n), int(nbytes))
    return out


def shard_tables(counts: Mapping[int, tuple[int, int]]) -> dict[int, int]:
    """``{shard: tables}`` of :func:`count_tables`'s ``{shard: (tables, bytes)}``."""
    return {s: n for s, (n, _) in counts.items()}


def table_count(tables: Mapping[int, int], shards: Iterable[int]) -> int:
    """The tables ``shards`` hold (``tables``: per shard, :func:`shard_tables`): the one count that decides
    whether a move is batched, what a batch of it holds and what the plan shows."""
    return sum(tables.get(s, 0) for s in shards)


def limit_for(budget_ms: float) -> int:
    """Tables per batch, before any batch was measured: the model's freeze (:data:`FIXED_MS` and
    :data:`PER_TABLE_MS` a table) at ``AIM`` x the budget, at most :data:`MAX_TABLES`, at least 1."""
    room = AIM * budget_ms - FIXED_MS
    return max(1, min(MAX_TABLES, int(math.floor(room / PER_TABLE_MS))))


def within_reserve(budget_ms: float, last: Measured | None, limit: int, reserve: Callable[[int], float]) -> int:
    """At most ``limit`` tables, and no more than freeze, as the last batch's freeze grows with its tables
    (:meth:`Measured.parts`; without them, :data:`FIXED_MS` and :data:`PER_TABLE_MS`), within :data:`BOUND` x
    the budget with the watchdog's ``reserve(tables)`` kept back (at most half the budget, as the watchdog takes
    it): what the gate lets freeze (:func:`migrator.engine.cutover.budget.check_budget`), so a batch is not
    handed over only to be refused; the last freeze's flip CAS and release, which follow the claim, are not
    counted beside the reserve that stands for them. At least 1."""
    fixed, per_table = (last.parts() if last is not None else None) or (FIXED_MS, PER_TABLE_MS)
    # the watchdog's last chance is the claim: the flip's CAS and release come after it, in its reserve
    fixed -= last.after_claim_ms() if last is not None and last.parts() is not None else 0.0
    n = limit
    while n > 1 and fixed + per_table * n + min(reserve(n), MAX_RESERVE_SHARE * budget_ms) > BOUND * budget_ms:
        n -= 1
    return max(1, n)


def next_limit(budget_ms: float, last: Measured | None) -> int:
    """Tables for the next batch: :func:`limit_for` before any batch was measured; then from the ``last``
    batch's own freeze, at most twice the last batch (one quiet moment does not make the next one overrun)
    and :data:`MAX_TABLES`, at least 1.

    A freeze is a fixed part (the drain, the two CAS: about the same for any batch) and a part per table
    (:meth:`Measured.parts`): the next batch holds as many tables as freeze within ``AIM`` x the budget on
    top of the last one's fixed part. Without the steps, the whole freeze is taken as growing with the
    tables (``last.tables x AIM x budget / last.freeze_ms``). A batch under the aim makes the next one
    bigger, one over it smaller, and a miss (a freeze over the budget) makes it at most half the one that
    missed."""
    if last is None or last.tables <= 0:
        return limit_for(budget_ms)
    grow = 2 * last.tables
    parts = last.parts()
    if parts is not None:
        fixed, per_table = parts
        room = AIM * budget_ms - fixed
        fits = last.tables // 2 if room <= 0 else grow if per_table <= 0 else int(math.floor(room / per_table))
    else:
        fits = grow if last.freeze_ms <= 0 else int(math.floor(last.tables * AIM * budget_ms / last.freeze_ms))
    if last.freeze_ms > budget_ms:  # a miss (its flip could not be undone): at most half of it, whatever the rate
        fits = min(fits, last.tables // 2)
    return max(1, min(MAX_TABLES, grow, fits))


def cut(shards: Sequence[int], tables: dict[int, int], limit: int) -> list[list[int]]:
    """Consecutive shards in batches of at most ``limit`` tables (a bigger shard alone)."""
    out: list[list[int]] = []
    cur: list[int] = []
    n = 0
    for s in sorted(shards):
        t = tables.get(s, 0)
        if cur and n + t > limit:
            out.append(cur)
            cur, n = [], 0
        cur.append(s)
        n += t
    if cur:
        out.append(cur)
    return out


def runs_of(shards: Sequence[int]) -> list[list[int]]:
    """``[[lo, hi], ...]`` of sorted shards."""
    out: list[list[int]] = []
    for s in sorted(shards):
        if out and out[-1][1] == s - 1:
            out[-1][1] = s
        else:
            out.append([s, s])
    return out


def shards_of(runs: Iterable[Sequence[int]]) -> list[int]:
    return [s for lo, hi in runs for s in range(lo, hi + 1)]


def connection_room(max_connections: int, in_flight: int) -> int:
    """Tables the next batch's rename fence may hold (one connection a table, and its lock's) on a source master
    allowing ``max_connections``, beside the batches still in flight there (``in_flight`` tables: their fences
    hold as many) and :data:`CONNECTIONS_KEPT` for the clients and the migrator's other sessions; at least 1."""
    return max(1, max_connections - CONNECTIONS_KEPT - in_flight - 2 * FENCE_EXTRA_CONNECTIONS)


def next_batch(shards: Sequence[int], tables: dict[int, int], budget_ms: float, last: Measured | None, *,
               room: int = MAX_TABLES, reserve: Callable[[int], float] | None = None) -> list[int]:
    """The shards of the next batch: the first of ``shards`` (consecutive, sorted) up to :func:`next_limit`
    tables and ``room`` (:func:`connection_room`), and within the watchdog's ``reserve`` (:func:`within_reserve`),
    a shard bigger than that alone. ``last``: the freeze of the batch handed over last that froze, None
    before any."""
    if not shards:
        return []
    limit = min(room, next_limit(budget_ms, last))
    if reserve is not None:
        limit = within_reserve(budget_ms, last, limit, reserve)
    return cut(shards, tables, limit)[0]


def batched(fence: str, tables: int) -> bool:
    """A move of ``tables`` tables runs as batches (else as one migration)."""
    return fence != "gate" and tables > MAX_TABLES


def preview(shards: Sequence[int], counts: Mapping[int, tuple[int, int]], budget_ms: float) -> list[dict[str, Any]]:
    """The batches the first size cuts ``shards`` into (``runs``, ``shards``, ``tables``, ``bytes``, ``limit``):
    what a plan shows of a batched move, and what a rebalance record keeps of it (``first_cut``); the sizes
    adapt as batches finish (:func:`next_batch`). ``counts``: :func:`count_tables` of the shards."""
    tables, limit = shard_tables(counts), limit_for(budget_ms)
    return [{"runs": runs_of(b), "shards": len(b), "tables": table_count(tables, b),
             "bytes": sum(counts.get(s, (0, 0))[1] for s in b), "limit": limit}
            for b in cut(shards, tables, limit)]


def plan_batches(zk: ZK, creds: Credentials, spec: Spec) -> list[dict[str, Any]] | None:
    """The :func:`preview` of a planned move too big for one rename fence (counted on its source master),
    else None: such a move is stored as one batched migration (``Spec.batched``), the others as one migration."""
    if spec.kind != "shards" or spec.options.fence == "gate":
        return None
    with mysql_connect(HostRegistry(zk).get(spec.source_master), creds) as conn:
        counts = count_tables(conn, spec.shards)
    if not batched(spec.options.fence, table_count(shard_tables(counts), spec.shards)):
        return None
    return preview(spec.shards, counts, spec.options.freeze_budget_ms)


def expand(rid: str, planned: Sequence[dict[str, Any]], counts: dict[int, tuple[int, int]], budget_ms: float,
           fence: str) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The record's moves for ``planned`` moves, move ``i`` as index and group ``i``; a move that is
    :func:`batched` is marked ``batched`` (its migration hands its shards to batch migrations, which the
    record lists as they come: :func:`migrator.ops.rebalance.record.refresh`). Returns the moves and the
    record's ``batching`` entry (None when no move is batched): the budget, the tables per shard, and the
    batches the first size would cut (:func:`preview`)."""
    tables = shard_tables(counts)
    moves: list[dict[str, Any]] = []
    first_cut: dict[str, list[list[list[int]]]] = {}
    for i, p in enumerate(planned):
        shards = shards_of(p["runs"])
        n = len(p["partition_tables"]) if Move.parse(p).queue else table_count(tables, shards)
        move = {**p, "index": i, "group": i, "migration": migration_id(rid, i), "runs": [list(r) for r in p["runs"]],
                "tables": n, "state": "waiting", "error": None}
        if batched(fence, n):
            move["batched"] = True
            first_cut[str(i)] = [b["runs"] for b in preview(shards, counts, budget_ms)]
        moves.append(move)
    if not first_cut:
        return moves, None
    return moves, {"budget_ms": budget_ms, "shard_tables": {str(s): n for s, n in tables.items()},
                   "first_cut": first_cut, "limit": limit_for(budget_ms)}
