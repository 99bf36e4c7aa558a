"""Batched cutovers: a move of more tables than one rename fence takes cuts over in batches.

A host-sized split (512 shards x 5 tables) cannot be fenced by one
:class:`~migrator.engine.cutover.rename_fence.Fence`: it holds one connection per table
(at most :data:`~migrator.engine.cutover.rename_fence.MAX_TABLES`). Such a move is one
**batched** migration (``Spec.batched``): preflighted, copied, tailed and
verified once, for all its shards. Its pipeline then hands its shards over
in **batches** of consecutive shards, one at a time, each to a batch migration
that starts converged and runs the normal rename-fenced cutover of only its
ranges (:mod:`migrator.engine.handover`); between two batches the map is
valid, with part of the ranges moved. The rebalance record lists the batches as
they are handed over (:func:`migrator.ops.rebalance.record.refresh`).

Batch size follows the freeze budget: the first batch is sized by the cutover's
model of the rename fence's freeze (:mod:`migrator.engine.cutover.budget`: a fixed
part and a part per table; here the fixed part, :data:`FIXED_MS`, also holds a
drain, :data:`DRAIN_MS`), aimed at :data:`AIM` of the budget; every later batch by the freezes
measured so far (:func:`measured_costs`, :func:`next_batch`), growing at most to twice
the biggest finished batch. A table costs the freeze its lock, its queued RENAME
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
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

from migrator.engine.cutover.budget import FENCE_PER_TABLE_MS, FIXED_FREEZE_MS
from migrator.engine.fencing import MAX_TABLES
from migrator.engine.names import SENTINEL_TABLE
from migrator.fleet.ids import shard_db
from migrator.fleet.mysql import query, tag
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
#: the steps of a rename-fenced freeze that grow with the batch's tables
PER_TABLE_STEPS = ("fence", "sentinel", "release")
#: batches this small do not measure the per-table rate
RATE_MIN_TABLES = 20
#: finished batches whose fixed cost counts
RECENT = 5


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


def limit_for(budget_ms: float, fixed_ms: float = FIXED_MS, per_table_ms: float = PER_TABLE_MS) -> int:
    """Tables per batch for a freeze of ``AIM`` x the budget, at most :data:`MAX_TABLES`, at least 1."""
    room = AIM * budget_ms - fixed_ms
    if per_table_ms <= 0:
        return MAX_TABLES
    return max(1, min(MAX_TABLES, int(math.floor(room / per_table_ms))))


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


def measured_costs(done: Sequence[dict[str, Any]]) -> tuple[float, float] | None:
    """``(fixed_ms, per_table_ms)`` measured by finished batches, or None if none was measured.

    The per-table part of a freeze is its fence (a lock and a queued RENAME per
    table), sentinel (one row per db) and release steps; the rest (the two CAS, the passive
    member's close, the drain, the compare) is fixed. The fixed part is the median
    of the last :data:`RECENT` batches (one slow drain does not shrink every later
    batch); the per-table part is the worst of the batches of at least
    :data:`RATE_MIN_TABLES` tables (smaller ones measure the latency of one
    statement, not a rate), else :data:`PER_TABLE_MS`."""
    fixed, per = [], []
    for m in Move.parse_list(done):
        steps, freeze, n = m.steps_ms, m.freeze_ms, m.tables
        if freeze is None or not n:
            continue
        scaled = sum(float(steps.get(k, 0.0)) for k in PER_TABLE_STEPS)
        fixed.append(max(0.0, float(freeze) - scaled))
        if n >= RATE_MIN_TABLES:
            per.append(scaled / n)
    if not fixed:
        return None
    return statistics.median(fixed[-RECENT:]), max(per) if per else PER_TABLE_MS


def next_batch(shards: Sequence[int], tables: dict[int, int], budget_ms: float,
               done: Sequence[dict[str, Any]]) -> list[int]:
    """The shards of the next batch: the first of ``shards`` (consecutive, sorted) up to the batch size.

    ``done``: the finished batches, oldest first (``freeze_ms``, ``steps_ms``, ``tables``). The first batch
    is sized by the model of the rename fence's freeze (:func:`limit_for`); every later one by the freezes
    measured so far (:func:`measured_costs`), growing at most to twice the biggest finished batch, so one
    quiet moment does not make the next batch overrun. A batch whose freeze went over the budget (a miss:
    its flip could not be undone) makes the next one at most half its size, whatever the model says: the
    model was wrong about it."""
    if not shards:
        return []
    costs = measured_costs(done)
    if costs is None:
        limit = limit_for(budget_ms)
    else:
        moves = Move.parse_list(done)
        last = max((m.tables or 1 for m in moves), default=MAX_TABLES)
        limit = min(limit_for(budget_ms, *costs), 2 * last)
        missed = moves[-1] if moves and (moves[-1].freeze_ms or 0.0) > budget_ms else None
        if missed is not None:
            limit = max(1, min(limit, (missed.tables or 1) // 2))
    return cut(shards, tables, limit)[0]


def batched(fence: str, tables: int) -> bool:
    """A move of ``tables`` tables runs as batches (else as one migration)."""
    return fence != "gate" and tables > MAX_TABLES


def expand(rid: str, planned: Sequence[dict[str, Any]], counts: dict[int, tuple[int, int]], budget_ms: float,
           fence: str) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """The record's moves for ``planned`` moves, move ``i`` as index and group ``i``; a move that is
    :func:`batched` is marked ``batched`` (its migration hands its shards to batch migrations, which the
    record lists as they come: :func:`migrator.ops.rebalance.record.refresh`). Returns the moves and the
    record's ``batching`` entry (None when no move is batched): the budget, the tables per shard, and the
    batches the first size would cut (what a plan shows; the sizes adapt as batches finish)."""
    tables = {s: n for s, (n, _) in counts.items()}
    moves: list[dict[str, Any]] = []
    preview: dict[str, list[list[list[int]]]] = {}
    for i, p in enumerate(planned):
        shards = shards_of(p["runs"])
        n = len(p["partition_tables"]) if Move.parse(p).queue else sum(tables.get(s, 0) for s in shards)
        move = {**p, "index": i, "group": i, "migration": migration_id(rid, i), "runs": [list(r) for r in p["runs"]],
                "tables": n, "state": "waiting", "error": None}
        if batched(fence, n):
            move["batched"] = True
            preview[str(i)] = [runs_of(b) for b in cut(shards, tables, limit_for(budget_ms))]
        moves.append(move)
    if not preview:
        return moves, None
    return moves, {"budget_ms": budget_ms, "shard_tables": {str(s): n for s, n in tables.items()},
                   "first_cut": preview, "limit": limit_for(budget_ms)}
