"""What recent freezes on this fleet cost besides their drain, and how their drain compared with the one
timed before them: what the gate's prediction learns from.

Runs in the cutover process. A freeze is its drain (timed before each attempt), the wait for the source
pair's passive member (timed too) and a part that is about the same from one cutover to the next on a
fleet: two CAS, the gates, the fence, the sentinel, the compare, the release (:func:`fixed_part`). A
migration's own earlier attempts say best what that part costs it; a migration's first attempt takes it
from the fleet's recent flipped freezes (``stats/freeze_fixed`` in ZooKeeper, the last :data:`KEEP`, by
fence mode), the rename fence's per-table share scaled to its own table count. The drain under the
fence is shorter than one timed under live writes (routed clients stop at the freeze, and the tail follows
through the steps before the drain): the gate scales its timed drain by the median ratio of the recent
freezes' (:func:`ratio_of`).
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

from kazoo.exceptions import NoNodeError
from pydantic import Field

from migrator.engine.records import Attempt, FreezeSample, Record, UndoSample
from migrator.fleet.zk import ZK

FREEZE_STATS = "stats/freeze_fixed"
#: recent undone freezes: what their undo cost (the watchdog keeps that back from the next freezes)
UNDO_STATS = "stats/freeze_undo"
#: recent flipped freezes kept
KEEP = 20
#: the steps of a freeze that are the drain (the rest is its fixed cost)
DRAIN_STEPS = ("drain", "drain_follow_stop")  # (drain_follow_stop: recorded before the drain waited for the follower)
#: the step of a freeze that waits for the source pair's passive member (predicted apart)
PAIR_STEPS = ("passive_sync",)
#: the steps of a freeze after the watchdog's last chance, the claim (its reserve: :func:`after_claim_part`)
AFTER_CLAIM_STEPS = ("flip_cas", "release")
#: the least drain (ms) a ratio is taken of: a drain is never free (the sentinel's own round)
DRAIN_RATIO_FLOOR_MS = 5.0
#: how far the fleet's freezes may scale a timed drain (a ratio outside is taken as its bound)
DRAIN_RATIO_BOUNDS = (0.1, 2.0)


def fixed_part(attempt: dict[str, Any] | Attempt) -> float | None:
    """The fixed part of a flipped attempt's freeze (ms), None for an attempt that did not flip."""
    a = Attempt.parse(attempt)
    if not a.freeze_ms or "flip_cas" not in a.steps_ms:
        return None
    return max(0.0, a.freeze_ms - sum(a.steps_ms.get(k, 0.0) for k in (*DRAIN_STEPS, *PAIR_STEPS)))


def after_claim_part(attempt: dict[str, Any] | Attempt) -> float | None:
    """What an attempt's freeze spent after the watchdog's last chance, ms: a flipped one's flip CAS and
    release (the claim is the first thing the ``flip_cas`` step does), an undone one's undo (the fences
    opened, the ranges unfrozen: clients wait through it too); None for an attempt that measured neither."""
    a = Attempt.parse(attempt)
    if a.undo_ms is not None:
        return float(a.undo_ms)
    if "flip_cas" not in a.steps_ms or "release" not in a.steps_ms:
        return None
    return float(sum(a.steps_ms.get(k, 0.0) for k in AFTER_CLAIM_STEPS))


def drained_ms(attempt: dict[str, Any] | Attempt) -> float:
    """How long an attempt's freeze drained (its drain steps, ms)."""
    steps = Attempt.parse(attempt).steps_ms
    return float(sum(steps.get(k, 0.0) for k in DRAIN_STEPS))


def remember(zk: ZK, attempt: dict[str, Any], *, fence: str, tables: int, migration: str) -> None:
    """Keep a flipped attempt's fixed part for the next migrations' first attempts. Best effort: a lost
    race with another cutover (the write is on the version read) drops one sample, never the cutover."""
    fixed = fixed_part(attempt)
    if fixed is None:
        return
    entry = {"fixed_ms": round(fixed, 1), "fence": fence, "tables": tables, "migration": migration,
             "at": round(time.time(), 1), "drain_ms": round(drained_ms(attempt), 1),
             "drain_sampled_ms": Attempt.parse(attempt).predicted.get("drain_sampled_ms"),
             "after_claim_ms": after_claim_part(attempt)}
    _keep(zk, FREEZE_STATS, entry)


def remember_undo(zk: ZK, undo_ms: float, *, fence: str, tables: int, migration: str) -> None:
    """Keep what an undone freeze's undo cost (its fences opened, its ranges unfrozen), for the next freezes'
    watchdogs: an undo costs more than a flip's CAS and release, and grows with the tables fenced. Called
    once the attempt has ended (never from the watchdog, which may have fired because ZooKeeper did not
    answer); best effort, as :func:`remember`."""
    _keep(zk, UNDO_STATS, {"undo_ms": round(undo_ms, 1), "fence": fence, "tables": tables, "migration": migration,
                           "at": round(time.time(), 1)})


def _keep(zk: ZK, node: str, entry: dict[str, Any]) -> None:
    """Append ``entry`` to the ``recent`` list of stats ``node`` (the last :data:`KEEP`), on the version read."""
    path = zk.path(node)
    try:
        try:
            data, stat = zk.client.get(path)
            kept = list(json.loads(data).get("recent", []))
            zk.client.set(path, json.dumps({"recent": (kept + [entry])[-KEEP:]}).encode(), version=stat.version)
        except NoNodeError:
            zk.ensure(zk.path("stats"))
            zk.client.create(path, json.dumps({"recent": [entry]}).encode(), acl=zk.protected_acl())
    except Exception:  # noqa: BLE001 - bookkeeping never hides the cutover's own outcome (a lost race, ZooKeeper)
        pass


class FreezeStats(Record):
    """The ``stats/freeze`` node: the fleet's recent flipped freezes."""

    recent: list[FreezeSample] = Field(default_factory=list)


def recent(zk: ZK) -> list[FreezeSample]:
    """The fleet's recent flipped freezes as :func:`remember` kept them, oldest first."""
    try:
        data, _ = zk.client.get(zk.path(FREEZE_STATS))
        return FreezeStats.parse(json.loads(data)).recent
    except (NoNodeError, ValueError):
        return []


def recent_undos(zk: ZK) -> list[UndoSample]:
    """The fleet's recent undone freezes as :func:`remember_undo` kept them, oldest first."""
    try:
        data, _ = zk.client.get(zk.path(UNDO_STATS))
        return UndoSample.parse_list(json.loads(data).get("recent", []))
    except (NoNodeError, ValueError, AttributeError):
        return []


def undo_reserve_ms(entries: list[Any], *, fence: str, tables: int, per_table_ms: float = 1.0) -> float | None:
    """What an undo of a freeze of ``tables`` tables may cost, from the recent undos ``entries``
    (:func:`recent_undos`) with the same fence: the most of them, each with ``per_table_ms`` for every table
    past the ones it fenced (under the rename fence an undo kills one queued RENAME a table; the rest of it,
    the unfreeze and the gates reopened, is about the same for any freeze), never less than it measured;
    None when none is kept. (Scaled in proportion, a 60 ms undo of 10 tables would keep back 600 ms for 100.)"""
    same = [e for e in UndoSample.parse_list(entries) if e.fence == fence and e.undo_ms is not None]
    if not same:
        return None
    per = per_table_ms if fence == "rename" else 0.0
    return max(float(e.undo_ms) + per * max(0, tables - e.tables) for e in same)


def recent_fixed_ms(entries: list[Any], *, fence: str, tables: int, per_table_ms: float) -> float | None:
    """The median fixed part of the recent freezes ``entries`` (:func:`recent`) with the same fence, for
    ``tables`` tables (each sample's per-table share, ``per_table_ms`` under the rename fence, taken out
    and this move's put in); None when none is kept."""
    same = [e for e in FreezeSample.parse_list(entries) if e.fence == fence]
    if not same:
        return None
    per = per_table_ms if fence == "rename" else 0.0
    base = statistics.median(max(0.0, e.fixed_ms - per * e.tables) for e in same)
    return base + per * tables


def recent_after_claim_ms(entries: list[Any], *, fence: str) -> float | None:
    """The most the recent freezes ``entries`` with the same fence spent after their claim (the flip CAS and
    the release); None when none kept it. The most, not the median: it is a reserve, not a prediction."""
    got = [float(e.after_claim_ms) for e in FreezeSample.parse_list(entries)
           if e.fence == fence and e.after_claim_ms is not None]
    return max(got) if got else None


def ratio_of(entries: list[Any]) -> float | None:
    """The median, over freezes, of the drain under the fence against the drain timed before it
    (:data:`DRAIN_RATIO_FLOOR_MS` at least each, so a drain of nothing is not a ratio of 0), within
    :data:`DRAIN_RATIO_BOUNDS`; None when no freeze kept both."""
    ratios = [max(DRAIN_RATIO_FLOOR_MS, e.drain_ms) / max(DRAIN_RATIO_FLOOR_MS, e.drain_sampled_ms)
              for e in FreezeSample.parse_list(entries) if e.drain_ms is not None and e.drain_sampled_ms is not None]
    if not ratios:
        return None
    lo, hi = DRAIN_RATIO_BOUNDS
    return min(hi, max(lo, statistics.median(ratios)))
