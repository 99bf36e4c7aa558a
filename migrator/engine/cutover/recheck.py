"""The re-checks around a freeze: the rows changed since the last full check.

Runs in the cutover process (and a rollback's). Both take what they read (the sides, the
tables, the drainer) and return what they found; the run records it:

* :func:`refresh_verified_gtid`, before the freeze, in shrinking rounds, so that
  the compare under the fence covers only what came in during the last round;
* :func:`compare_in_freeze`, under the fence: the keys changed since (from the
  drain itself, else a background reader, else the binlog segment) and the
  chunks the full check left suspect, re-copied and checked again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pymysql

from migrator.engine.binlog.rows import string_literal
from migrator.engine.cutover.direction import Direction
from migrator.engine.cutover.errors import CutoverAborted, CutoverError
from migrator.engine.migration import MigrationStore, Spec
from migrator.engine.names import SENTINEL_TABLE
from migrator.engine.records import SuspectChunk, VerifyNode
from migrator.engine.verify import waits
from migrator.engine.verify.changes import ChangeTracker, KeysRead, changed_keys
from migrator.engine.verify.checksums import Side, TableInfo, prepare_session
from migrator.engine.verify.drainers import Drainer
from migrator.engine.verify.repair import CompareStats, check_chunk, check_rows, check_rows_many
from migrator.engine.verify.run import VERIFY_NODE, verify_migration
from migrator.engine.verify.waits import drain_progressing
from migrator.fleet.config import Config, Credentials
from migrator.fleet.gtid import GtidState
from migrator.fleet.model import Host
from migrator.fleet.mysql import binlog_pos
from migrator.fleet.mysql import connect as mysql_connect


@dataclass
class Moving:
    """What a re-check reads: the moving tables of one attempt, between the source and the target."""

    spec: Spec
    direction: Direction
    source: Host
    creds: Credentials
    tables: list[TableInfo]
    target_conn: pymysql.connections.Connection
    drainer: Drainer
    #: ``tables`` name the tables only (no columns yet); this reads one's columns and key, on a source
    #: connection, once a window changed rows of it (a batched migration's re-check before each hand-over
    #: spans hundreds of tables, few of which a window touches)
    resolve: Callable[[pymysql.connections.Connection, TableInfo], TableInfo] | None = None


@dataclass
class Refreshed:
    """Where the last full check now stands, and how the keys changed after it will be known."""

    verified_gtid: str
    #: the drainer follows the source and collects the changed keys itself (no second binlog reader)
    collecting: bool
    #: else a background binlog reader from ``verified_gtid``
    tracker: ChangeTracker | None
    rounds: list[dict[str, float]] = field(default_factory=list)


@dataclass
class Compared:
    """What the compare under the fence looked at and repaired."""

    keys_from: str
    rows_checked: int
    rows_repaired: int
    #: ms until the changed keys were known
    keys_ms: float


def refresh_verified_gtid(config: Config, store: MigrationStore, m: Moving, *, max_rounds: int = 8,
                          quiet_s: float = 0.2, quiet_keys: int = 300, track: bool = True) -> Refreshed:
    """Make the last full check recent: re-check the rows changed since it, outside the freeze.

    Done in shrinking rounds, like catch-up passes: each round drains the
    tail to the source head, re-checks (and re-copies) the rows changed since
    the round before, and starts the next window exactly where the tail now
    is. Under a heavy writer the first round is long (every write since the
    full check); the last one covers only what came in while the one before
    ran, so the compare under the fence looks at a few hundred rows, not at
    everything written since verify. The keys of a window come from the
    drain itself when the drainer collects them (no second binlog reader),
    else from the binlog segment.

    Why nothing is skipped: a round drains the target to a source position
    ``reached``, takes the keys changed in ``(since, reached]`` and re-copies
    those rows from the source; every other row was equal at ``since`` (the
    check before) and no transaction up to ``reached`` touched it, so the
    target, having applied all of them, still holds it as the source does.
    ``since`` becomes ``reached`` only after that round's rows are checked, so
    the windows of successive rounds (and of successive calls: each starts at
    the ``verified_gtid`` the last one stored) are contiguous. Rows changed
    after ``reached`` are the next window's.

    The drain and the key read of a window wait as long as they advance
    (:mod:`migrator.engine.verify.waits`): a window of hours of a host's
    binlog takes as long as it takes, and only a stuck tail or reader is
    refused, naming how far it got. ``track=False`` (a batched migration
    refreshing the check its next batch inherits:
    :func:`migrator.ops.batched.handover.refresh_parent`): no freeze follows, so
    the tail does not follow the source afterwards and no background reader
    is started. Each round records its rows re-checked and the row changes
    of the moving tables read for its window (``events``: the window's size
    in binlog), and its compare (:func:`compared_record`: rows compared and
    their rows/s, set against the writers' rate by ``bench.cutover``). The
    compare is set-wise (:func:`~migrator.engine.verify.repair.check_rows_many`):
    a checksum per group of thousands of keys on each side, side by side, and
    row by row only where a group differs.
    """
    spec, drainer = m.spec, m.drainer
    key, label = m.direction.verify_node, m.direction.label  # a stall is the cutover's, or the rollback's
    node = store.get_progress(spec.id, key)[0] or {}
    if not VerifyNode.parse(node).verified_gtid and key == VERIFY_NODE:
        verify_migration(config, spec.id, drainer=drainer)
        node = store.get_progress(spec.id, key)[0] or {}
    since = VerifyNode.parse(node).verified_gtid
    if not since:
        raise CutoverError(f"no verified position in {key}: verify first (`migrator verify ID`)", phase=label)
    want = {(t.db, t.table): t.pk for t in m.tables}
    want.update({(db, SENTINEL_TABLE): ("token",) for db in spec.databases})
    # the tail resumes exactly where the last check ended (a batch handed over right after its parent's
    # check was brought up to the hand-over, or a retry of the cutover): the first window's keys come from
    # its drain too, with no second binlog reader going over the window. Opened first, so that its position
    # is known (a tail already open, or following, stays as it is)
    drainer.open()
    collecting = _resumes_at(drainer, since) and drainer.collect(want)
    rounds: list[dict[str, float]] = []
    src = mysql_connect(m.source, m.creds, read_timeout=600)
    try:
        prepare_session(src)
        dst = Side(m.target_conn, m.direction.target_db_of)
        for n in range(max_rounds):
            t0 = time.monotonic()
            stats = drain_progressing(drainer, binlog_pos(src), what=f"re-check of {spec.id}", phase=label)
            # the tail may have gone past the head in some domain: the window ends where it really is
            reached = drainer.position or binlog_pos(src)
            read = KeysRead()
            collected = collecting
            if collecting:
                got = drainer.collected()
                keys = {t.name: got.get((t.db, t.table), set()) for t in m.tables}
                read.events = stats.events if stats is not None else 0  # the drain read the window
            else:
                keys = changed_keys(m.source, m.creds, m.tables, since, reached, stall_s=waits.STALL_S, read=read,
                                    phase=label)
            # the next window starts exactly here; from here the tail follows the source in the
            # background (through the re-check and up to the fence), collecting the window's keys
            collecting = drainer.collect(want)
            if collecting and track:
                drainer.follow()
            work = [(m.resolve(src, t) if m.resolve is not None else t, keys[t.name]) for t in m.tables
                    if keys[t.name]]
            cmp = CompareStats()
            check_rows_many(Side(src), dst, work, repair=True, stats=cmp)
            since = reached
            changed = sum(len(v) for v in keys.values())
            rounds.append({"rows": changed, "events": read.events, "s": round(time.monotonic() - t0, 3),
                           "from": "drain" if collected else "binlog", **compared_record(cmp)})
            if n and (time.monotonic() - t0 < quiet_s or changed < quiet_keys):
                break
    finally:
        src.close()
    node["verified_gtid"] = since
    node["at"] = time.time()
    store.put_progress(spec.id, key, node)
    # from here on the keys changed are collected from the drain itself (the tail
    # applies them anyway), else read by a background binlog reader
    tracker = None if collecting or not track else ChangeTracker(m.source, m.creds, m.tables, since).start()
    return Refreshed(since, collecting, tracker, rounds)


def compared_record(cmp: CompareStats) -> dict[str, float]:
    """A round's compare, for its record: rows compared, how long it took (s) and so how many rows a second
    it compared (the rate to set against the writers'), the statements each side ran and the groups of
    keys that differed (compared row by row)."""
    return {"compared": cmp.rows, "compare_s": round(cmp.s, 3),
            "compared_per_s": round(cmp.rows / cmp.s, 1) if cmp.s > 0 else 0.0,
            "queries": cmp.queries, "groups_differ": cmp.groups_differ}


def _resumes_at(drainer: Drainer, since: str) -> bool:
    """The drainer's tail, opened and not following, has applied exactly up to ``since``: a drain from here
    collects every key changed after it (:class:`~migrator.engine.verify.changes.KeyCollector`). Opens
    nothing: a drainer not opened yet knows no position."""
    if drainer.following:
        return False
    at = drainer.position
    if not at or not since:
        return False
    a, b = GtidState.parse(str(at)), GtidState.parse(since)
    return a.reaches(b) and b.reaches(a)


def compare_in_freeze(m: Moving, writer: pymysql.connections.Connection, refreshed: Refreshed | None,
                      verified: str, suspect: list[dict[str, Any]], *, token: str, fence_gtid: str,
                      remaining_s: Callable[[], float]) -> Compared:
    """Under the fence: the keys changed since ``verified`` (from the drain itself, else the background
    reader, else the binlog segment) and the chunks the full check left suspect, re-copied and checked
    again; raises when rows still differ after the re-copy."""
    t0 = time.monotonic()
    src, dst = Side(writer), Side(m.target_conn, m.direction.target_db_of)
    keys = None
    keys_from = ""
    if refreshed is not None and refreshed.collecting and refreshed.verified_gtid == verified:
        got = m.drainer.collected()
        # trust the set only if the sentinel row the drain applied is in it
        mark = (string_literal(token),)
        if all(mark in got.get((db, SENTINEL_TABLE), set()) for db in m.spec.databases):
            keys = {t.name: got.get((t.db, t.table), set()) for t in m.tables}
            keys_from = "drain"
    tracker = refreshed.tracker if refreshed is not None else None
    if keys is None and tracker is not None and tracker.since == verified:
        keys = tracker.keys_until(fence_gtid, remaining_s(), phase=m.direction.label)
        keys_from = "reader"
    if keys is None and verified:
        keys = changed_keys(m.source, m.creds, m.tables, verified, fence_gtid, timeout=remaining_s(),
                            phase=m.direction.label)
        keys_from = "binlog"
    if keys is None:
        keys = {t.name: set() for t in m.tables}
    keys_ms = round((time.monotonic() - t0) * 1000, 2)
    by_name = {t.name: t for t in m.tables}
    work = [(t, keys[t.name]) for t in m.tables if keys[t.name]]
    checked = sum(len(ks) for _, ks in work)
    repaired = 0
    for t, diffs, fixed in check_rows_many(src, dst, work, repair=True):
        repaired += fixed
        if diffs and check_rows(src, dst, t, keys[t.name], repair=False)[0]:
            raise CutoverAborted(f"{t.name}: rows still differ after re-copy inside the freeze",
                                 phase=m.direction.label)
    for ch in SuspectChunk.parse_list(suspect):
        t = by_name.get(ch.table)
        if t is None:
            continue
        lo = tuple(ch.lo) if ch.lo is not None else None
        hi = tuple(ch.hi) if ch.hi is not None else None
        diffs, fixed = check_chunk(src, dst, t, lo, hi, repair=True)
        repaired += fixed
        if diffs and check_chunk(src, dst, t, lo, hi, repair=False)[0]:
            raise CutoverAborted(f"{t.name}: chunk {lo}..{hi} still differs after re-copy", phase=m.direction.label)
    return Compared(keys_from, checked, repaired, keys_ms)
