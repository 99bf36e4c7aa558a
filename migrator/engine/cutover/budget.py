"""The freeze budget, checked before the freeze: does the predicted write freeze fit it?

Runs in the cutover process after the run is prepared (fence connections
open, sentinels in place) and before anything is frozen. The prediction is
a timed drain to the source head (with the tail warm), plus the lag inside the
source pair (the freeze waits, after closing the passive member, until the
master has applied its last writes: :func:`pair_lag_ms` times a marker row
the same way), plus the fixed cost of a freeze, learned from this migration's
earlier attempts, else from the fleet's recent freezes. A migration that
does not pass is left converged and serving from the source.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from typing import Any

from migrator.engine.cutover import freeze_stats
from migrator.engine.cutover.errors import FreezeBudgetExceeded
from migrator.engine.cutover.run import CutoverRun
from migrator.engine.cutover.watchdog import AFTER_CLAIM_MS, MAX_RESERVE_SHARE
from migrator.engine.migration import Node
from migrator.engine.records import FreezeSample
from migrator.engine.verify.waits import drain_progressing
from migrator.fleet.mysql import MarkRefused, binlog_pos, wait_applied, write_mark
from migrator.fleet.mysql import connect as mysql_connect

#: what a freeze costs besides the drain (two CAS, the gates, fence, sentinel, compare, release) when
#: this migration has no earlier attempt to learn it from (measured: docs/performance.md, "Constants
#: measured by the benchmarks"); a batched split sizes its first batch with it too
#: (:mod:`migrator.ops.batched.sizing`)
FIXED_FREEZE_MS = 100.0
#: what the watchdog keeps back over the most an undo or a flip's CAS and release was measured to cost
RESERVE_MARGIN = 1.25
#: an undo's cost per table under the rename fence, before any undo was measured (its kills of the queued
#: RENAMEs, sent in one statement, and each RENAME's end awaited: 70-170 ms for 200 tables at a load of 8
#: on the 2-core box; docs/performance.md)
UNDO_PER_TABLE_MS = 1.0
#: the least time the lag probe waits for the master to apply the passive member's marker row
PAIR_LAG_MIN_WAIT_S = 2.0


#: the rename fence's cost per table inside the freeze (its lock and its queued RENAME, which runs after
#: the freeze), when this migration has no earlier attempt
FENCE_PER_TABLE_MS = 2.0


#: how long the tail follows the source before the timed drain: at least the minimum, then until it
#: reaches a fresh head within the steady time (it has caught up with what the untimed catch-up left
#: behind), at most the maximum
FOLLOW_MIN_S = 0.5
FOLLOW_MAX_S = 5.0
FOLLOW_STEADY_S = 0.1
#: timed drains taken (the median counts) and how long the tail follows between two
DRAIN_SAMPLES = 3
SAMPLE_GAP_S = 0.2


def fixed_cost_ms(run: CutoverRun, recent: list[dict[str, Any]]) -> tuple[float, str]:
    """What this freeze will cost besides its drain and the source pair's lag, and where that came from:
    the median of this migration's earlier flipped attempts (``attempts``), else of the fleet's recent
    freezes ``recent`` with the same fence (``fleet``, :func:`~migrator.engine.cutover.freeze_stats.recent`), else
    :data:`FIXED_FREEZE_MS` plus, under the rename fence, :data:`FENCE_PER_TABLE_MS` per table
    (``default``). A freeze ends once the clients waiting on the fence are let go (its tombstone renames
    run after it), so these are every step that holds clients."""
    node, _ = run.store.get_progress(run.spec.id, Node.CUTOVER_ATTEMPTS)
    costs = [c for a in (node or {}).get("attempts", []) if (c := freeze_stats.fixed_part(a)) is not None]
    if costs:
        return statistics.median(costs), "attempts"
    fleet = freeze_stats.recent_fixed_ms(recent, fence=run.fences.mode, tables=len(run.tables),
                                         per_table_ms=FENCE_PER_TABLE_MS)
    if fleet is not None:
        return fleet, "fleet"
    fence = FENCE_PER_TABLE_MS * len(run.tables) if run.fences.mode == "rename" else 0.0
    return FIXED_FREEZE_MS + fence, "default"


def flip_part_ms(run: CutoverRun, recent: list[dict[str, Any]], fixed_from: str) -> float:
    """What of the fixed part (:func:`fixed_cost_ms`, learnt from flipped freezes) the flip's CAS and release
    took: they follow the watchdog's last chance, so the claim comes that much before the predicted end. The
    median of the same freezes the fixed part came from; 0 for the default (nothing measured)."""
    if fixed_from == "attempts":
        node, _ = run.store.get_progress(run.spec.id, Node.CUTOVER_ATTEMPTS)
        got = [c for a in (node or {}).get("attempts", [])
               if freeze_stats.fixed_part(a) is not None and (c := freeze_stats.after_claim_part(a)) is not None]
    elif fixed_from == "fleet":
        got = [float(e.after_claim_ms) for e in FreezeSample.parse_list(recent)
               if e.fence == run.fences.mode and e.after_claim_ms is not None]
    else:
        got = []
    return statistics.median(got) if got else 0.0


def after_claim_ms(run: CutoverRun, recent: list[dict[str, Any]] | list[Any],
                   undos: Sequence[Any] = ()) -> tuple[float, str]:
    """What this freeze will spend after the watchdog's last chance (the claim): its flip CAS and its release,
    or the undo should the watchdog fire, the watchdog's reserve (:class:`~migrator.engine.cutover.watchdog.Watchdog`),
    and where that came from. The most, not the median (a flip cannot be undone once claimed), of:
    this migration's earlier attempts, flipped or undone (``attempts``:
    :func:`~migrator.engine.cutover.freeze_stats.after_claim_part`), the fleet's recent undos scaled to this
    move's tables (``undos``: :func:`~migrator.engine.cutover.freeze_stats.undo_reserve_ms`) and the fleet's
    recent flips; each measured figure with :data:`RESERVE_MARGIN` on top (an undo under a busier moment
    costs more than the last one did: the watchdog's own timer is late then too). Before anything was
    measured: :data:`~migrator.engine.cutover.watchdog.AFTER_CLAIM_MS` plus, under the rename fence,
    :data:`UNDO_PER_TABLE_MS` per table (its undo kills one queued RENAME a table) (``default``)."""
    node, _ = run.store.get_progress(run.spec.id, Node.CUTOVER_ATTEMPTS)
    own = [c for a in (node or {}).get("attempts", []) if (c := freeze_stats.after_claim_part(a)) is not None]
    return reserve_ms(own, undos, recent, fence=run.fences.mode, tables=len(run.tables))


def reserve_ms(own: Sequence[float], undos: Sequence[Any], recent: Sequence[Any], *, fence: str,
               tables: int) -> tuple[float, str]:
    """The watchdog's reserve for a freeze of ``tables`` tables (:func:`after_claim_ms`), from what this
    migration's attempts spent after their claim (``own``), the fleet's recent undos and its recent flips: what
    the gate predicts with, and what a batched split sizes its batches with (so a batch is not made bigger
    than the gate lets freeze: :mod:`migrator.ops.batched.sizing`)."""
    fleet_undo = freeze_stats.undo_reserve_ms(list(undos), fence=fence, tables=tables, per_table_ms=UNDO_PER_TABLE_MS)
    fleet_flip = freeze_stats.recent_after_claim_ms(list(recent), fence=fence)
    if own or fleet_undo is not None:
        most, where = (max(own), "attempts") if own else (0.0, "fleet")
        if fleet_undo is not None and fleet_undo > most:
            most, where = fleet_undo, "fleet"
        return max(most, fleet_flip or 0.0) * RESERVE_MARGIN, where
    per_table = UNDO_PER_TABLE_MS * tables if fence == "rename" else 0.0
    # the fleet keeps flips apart from undos, and an undo costs more than a flip's CAS and release: without an
    # undo measured, the default is the least kept back
    if fleet_flip is not None and fleet_flip * RESERVE_MARGIN > AFTER_CLAIM_MS + per_table:
        return fleet_flip * RESERVE_MARGIN, "fleet"
    return AFTER_CLAIM_MS + per_table, "default"


def _follow_until_steady(run: CutoverRun, conn: Any) -> None:
    """With the tail following: wait at least :data:`FOLLOW_MIN_S`, then until it reaches a fresh
    head within :data:`FOLLOW_STEADY_S` (it has caught up with what piled up meanwhile and follows at
    its steady lag; each step is shorter, as passes are), at most :data:`FOLLOW_MAX_S`."""
    deadline = time.monotonic() + FOLLOW_MAX_S
    time.sleep(FOLLOW_MIN_S)
    while time.monotonic() < deadline:
        mark, t = binlog_pos(conn), time.monotonic()
        while time.monotonic() < deadline and not run.drainer.reached(mark):
            time.sleep(0.01)
        if time.monotonic() - t < FOLLOW_STEADY_S:
            return


def pair_lag_ms(run: CutoverRun, timeout_s: float) -> float | None:
    """How late the source master applies its pair partner's writes now, in ms: a marker row written
    on the passive member (:func:`~migrator.fleet.mysql.write_mark`), timed until the master has
    applied it. The freeze's ``passive_sync`` step waits for the same thing. None when the cutover
    fences no passive member, or the member refuses writes (read_only: its clients cannot write
    either); ``inf`` when the master had not applied it within ``timeout_s``."""
    passive = run.direction.passive
    if passive is None or run.fences.passive is None:
        return None
    with mysql_connect(passive, run.creds) as p, \
            mysql_connect(run.direction.source, run.creds, read_timeout=int(timeout_s) + 30) as m:
        try:
            mark = write_mark(p, f"pair_lag:{passive.name}")
        except MarkRefused:
            return None
        t0 = time.monotonic()
        if not wait_applied(m, mark, timeout_s):
            return math.inf
        return (time.monotonic() - t0) * 1000


def predict_freeze_ms(run: CutoverRun) -> tuple[float, dict[str, Any]]:
    """The freeze this cutover would make now, in ms, and its parts (for the record): a timed drain to
    the current source head after the tail followed the source for a while (what the drain under the
    fence will be: the follower stopped, then its lag applied), scaled by the fleet's recent freezes
    (:func:`~migrator.engine.cutover.freeze_stats.ratio_of`), the lag inside the source pair and the
    fixed cost. Reads the run; changes nothing of it.

    The drainer is warmed first: starting its reader process is not part of a freeze."""
    if not run.warmed:
        run.drainer.warm()
    conn = mysql_connect(run.direction.source, run.creds)
    try:
        # first catch up with what was written since the last pass (verify, prepare: seconds of
        # writes the tail will have applied long before the fence), untimed, and for as long as the tail
        # advances: outside the freeze, a long backlog (a batch handed over after hours of a host's
        # writes) is applied, not refused on every retry
        t0 = time.monotonic()
        drain_progressing(run.drainer, binlog_pos(conn), what=f"catch-up before the gate of {run.spec.id}",
                          phase=run.direction.label)
        catch_up_ms = (time.monotonic() - t0) * 1000
        # a drain to a fixed position leaves behind what was written while it ran (seconds of writes
        # after a verify); the cutover's tail follows the source up to its fence, so let it follow now
        # until it keeps up, then time the drain from there: stopping the follower and applying its
        # lag, as under the fence
        if run.drainer.follow():
            _follow_until_steady(run, conn)
        # the median of a few timed drains, the tail following between them: one drain can meet a
        # lane's deadlock retry or a slow commit, which says nothing of the drain under the fence
        samples = []
        for k in range(DRAIN_SAMPLES):
            if k and run.drainer.follow():
                time.sleep(SAMPLE_GAP_S)
            head = binlog_pos(conn)
            t0 = time.monotonic()
            got = run.drainer.drain_to(head, 30, save=False)  # as the drain under the fence
            samples.append(((time.monotonic() - t0) * 1000, got))
    finally:
        conn.close()
    samples.sort(key=lambda x: x[0])
    sampled_ms, stats = samples[len(samples) // 2]
    # the drain under the fence is shorter than a timed one under live writes (the routed clients stop
    # at the freeze, and the tail keeps following through the steps before the drain): scaled by what
    # the fleet's recent freezes drained against what was sampled before them
    recent = freeze_stats.recent(run.zk)  # one read for the ratio and the fixed part
    ratio = freeze_stats.ratio_of(recent)
    drain_ms = sampled_ms * (ratio if ratio is not None else 1.0)
    fixed, fixed_from = fixed_cost_ms(run, recent)
    reserve, reserve_from = after_claim_ms(run, recent, freeze_stats.recent_undos(run.zk))
    flip_ms = flip_part_ms(run, recent, fixed_from)
    # timed past the budget (a lag over it refuses with its size), up to a bound for a link that is stuck
    lag = pair_lag_ms(run, max(2 * run.spec.options.freeze_budget_ms / 1000, PAIR_LAG_MIN_WAIT_S))
    parts: dict[str, Any] = {"drain_ms": round(drain_ms, 1), "drain_sampled_ms": round(sampled_ms, 1),
                             "drain_ratio": round(ratio, 3) if ratio is not None else None,
                             "fixed_ms": round(fixed, 1), "fixed_from": fixed_from,
                             "catch_up_ms": round(catch_up_ms, 1),
                             "after_claim_ms": round(reserve, 1), "after_claim_from": reserve_from,
                             "flip_ms": round(flip_ms, 1),
                             "drain_samples_ms": [round(ms, 1) for ms, _ in samples]}
    if lag is not None:
        parts["pair_lag_ms"] = round(lag, 1) if math.isfinite(lag) else None
    if stats is not None:
        parts.update({f"drain_{k}": v for k, v in stats.drain_record().items()})
    return drain_ms + fixed + (lag or 0.0), parts


def check_budget(run: CutoverRun, from_passes: float | None) -> tuple[float, dict[str, Any]]:
    """The predicted freeze, timed now, and its parts (the last pass's own estimate, ``from_passes``,
    assumes a tail idle for a whole pass: the cutover's tail follows the source up to its fence, so it
    overestimates, and is kept only for the record); raises :class:`FreezeBudgetExceeded` (its
    ``predicted`` the parts) when it exceeds the migration's budget."""
    predicted, p = predict_freeze_ms(run)
    p = {**p, "timed_ms": round(predicted, 1) if math.isfinite(predicted) else None, "from_passes_ms": from_passes}
    try:
        _refuse_over_budget(run, predicted, p)
    except FreezeBudgetExceeded as exc:
        exc.predicted = p
        raise
    return predicted, p


def _refuse_over_budget(run: CutoverRun, predicted: float, p: dict[str, Any]) -> None:
    budget = run.spec.options.freeze_budget_ms
    source = run.direction.source.name
    passive = run.direction.passive.name if run.direction.passive is not None else "the passive member"
    if "pair_lag_ms" in p and p["pair_lag_ms"] is None:
        raise FreezeBudgetExceeded(
            f"the source pair lags: {source} had not applied a write of {passive} within "
            f"{max(2 * budget / 1000, PAIR_LAG_MIN_WAIT_S):.0f} s, and a "
            f"freeze waits for that member's last writes before it fences; repair or wait out the replication "
            f"{passive} -> {source} (SHOW SLAVE STATUS on {source}), then retry", phase=run.direction.label)
    reserve = min(float(p.get("after_claim_ms") or 0.0), MAX_RESERVE_SHARE * budget)
    # the claim comes before the flip's CAS and release, which the predicted freeze holds
    claim_at = predicted - float(p.get("flip_ms") or 0.0)
    if predicted <= budget and claim_at + reserve > budget:
        # it would fit if flipped, but the watchdog undoes a freeze whose steps before the claim leave less
        # than its reserve: refused now rather than frozen and undone (its clients would wait for nothing)
        raise FreezeBudgetExceeded(
            f"predicted freeze {predicted:.0f} ms (its claim at {claim_at:.0f} ms) leaves less than the "
            f"{reserve:.0f} ms the watchdog keeps back for an undo within the budget of {budget} ms "
            f"(the undo grows with the tables fenced: "
            f"{len(run.tables)} here): fence fewer tables at once, let catch-up converge further, or raise "
            "freeze_budget_ms", phase=run.direction.label)
    if predicted > budget:
        parts = []
        if "drain_ms" in p:
            parts.append(f"a drain of {p['drain_ms']:.0f} ms for {p.get('drain_events', '?')} row changes the tail "
                         "lagged behind")
        if p.get("pair_lag_ms"):
            parts.append(f"{p['pair_lag_ms']:.0f} ms for {passive}'s writes to reach {source}")
        if "fixed_ms" in p:
            parts.append(f"{p['fixed_ms']:.0f} ms for the freeze's other steps")
        lagging = p.get("pair_lag_ms") and p["pair_lag_ms"] > p.get("drain_ms", 0) + p.get("fixed_ms", 0)
        todo = (f"the replication {passive} -> {source} lags: let it catch up (SHOW SLAVE STATUS on "
                f"{source}), then retry" if lagging else
                "let catch-up converge further (lower write load) or raise freeze_budget_ms")
        raise FreezeBudgetExceeded(
            f"predicted freeze {predicted:.0f} ms ({', '.join(parts)}) exceeds the budget of {budget} ms: {todo}",
            phase=run.direction.label)
