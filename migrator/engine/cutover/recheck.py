"""The re-checks around a freeze: the rows changed since the last full check.

Runs in the cutover process (and a rollback's), for :class:`~migrator.engine.cutover.run.CutoverRun`:

* :func:`refresh_verified_gtid`, before the freeze, in shrinking rounds, so that
  the compare under the fence covers only what came in during the last round;
* :func:`compare_in_freeze`, under the fence: the keys changed since (from the
  drain itself, else a background reader, else the binlog segment) and the
  chunks the full check left suspect, re-copied and checked again.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from migrator.engine.binlog.rows import string_literal
from migrator.engine.cutover.errors import CutoverAborted, CutoverError
from migrator.engine.names import SENTINEL_TABLE
from migrator.engine.verify.changes import ChangeTracker, changed_keys
from migrator.engine.verify.checksums import Side, prepare_session
from migrator.engine.verify.repair import check_chunk, check_rows, check_rows_many
from migrator.engine.verify.run import VERIFY_NODE, verify_migration
from migrator.fleet.mysql import binlog_pos
from migrator.fleet.mysql import connect as mysql_connect

if TYPE_CHECKING:  # the run calls these; they read and update the run
    from migrator.engine.cutover.run import CutoverRun


def refresh_verified_gtid(run: CutoverRun, *, max_rounds: int = 8, quiet_s: float = 0.2, quiet_keys: int = 300) -> str:
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
    """
    key = run.direction.verify_node
    node, _ = run.store.get_progress(run.spec.id, key)
    if (not node or not node.get("verified_gtid")) and key == VERIFY_NODE:
        verify_migration(run.config, run.spec.id, drainer=run.drainer)
        node, _ = run.store.get_progress(run.spec.id, key)
    if not node or not node.get("verified_gtid"):
        raise CutoverError(f"no verified position in {key}: verify first (`migrator verify ID`)",
                           phase=run.direction.label)
    since = node["verified_gtid"]
    want = {(t.db, t.table): t.pk for t in run.tables}
    want.update({(db, SENTINEL_TABLE): ("token",) for db in run.spec.databases})
    collect = getattr(run.drainer, "collect", None)
    run.collecting = False
    src = mysql_connect(run.source, run.creds, read_timeout=600)
    try:
        prepare_session(src)
        dst = Side(run.target_conn, run.direction.target_db_of)  # type: ignore[arg-type]
        for n in range(max_rounds):
            t0 = time.monotonic()
            run.drainer.drain_to(binlog_pos(src), 120)
            # the tail may have gone past the head in some domain: the window ends where it really is
            reached = getattr(run.drainer, "position", None) or binlog_pos(src)
            if run.collecting:
                got = run.drainer.collected()  # type: ignore[attr-defined]
                keys = {t.name: got.get((t.db, t.table), set()) for t in run.tables}
            else:
                keys = changed_keys(run.source, run.creds, run.tables, since, reached, timeout=120)
            # the next window starts exactly here; from here the tail follows the source in the
            # background (through the re-check and up to the fence), collecting the window's keys
            run.collecting = bool(collect and collect(want))
            if run.collecting:
                run.drainer.follow()  # type: ignore[attr-defined]
            check_rows_many(Side(src), dst, [(t, keys[t.name]) for t in run.tables], repair=True)
            since = reached
            changed = sum(len(v) for v in keys.values())
            run.refresh_rounds.append({"rows": changed, "s": round(time.monotonic() - t0, 3)})
            if n and (time.monotonic() - t0 < quiet_s or changed < quiet_keys):
                break
    finally:
        src.close()
    node["verified_gtid"] = since
    node["at"] = time.time()
    run.store.put_progress(run.spec.id, key, node)
    # from here on the keys changed are collected from the drain itself (the tail
    # applies them anyway), else read by a background binlog reader
    if not run.collecting:
        run.tracker = ChangeTracker(run.source, run.creds, run.tables, since).start()
    run.verified_from = since
    return since


def compare_in_freeze(run: CutoverRun, verified: str, suspect: list[dict[str, Any]]) -> None:
    assert run.writer is not None and run.target_conn is not None
    src, dst = Side(run.writer), Side(run.target_conn, run.direction.target_db_of)
    keys = None
    if run.collecting and run.verified_from == verified:
        got = run.drainer.collected()  # type: ignore[attr-defined]
        # trust the set only if the sentinel row the drain applied is in it
        mark = (string_literal(run.token),)
        if all(mark in got.get((db, SENTINEL_TABLE), set()) for db in run.spec.databases):
            keys = {t.name: got.get((t.db, t.table), set()) for t in run.tables}
            run.keys_from = "drain"
    if keys is None and run.tracker is not None and run.tracker.since == verified:
        keys = run.tracker.keys_until(run.fence_gtid, run.remaining_s())
        run.keys_from = "reader"
    if keys is None and verified:
        keys = changed_keys(run.source, run.creds, run.tables, verified, run.fence_gtid,
                            timeout=run.remaining_s())
        run.keys_from = "binlog"
    if keys is None:
        keys = {t.name: set() for t in run.tables}
    run.steps["compare_keys"] = round((time.monotonic() - run.t_compare) * 1000, 2)
    by_name = {t.name: t for t in run.tables}
    work = [(t, keys[t.name]) for t in run.tables if keys[t.name]]
    run.rows_checked += sum(len(ks) for _, ks in work)
    for t, diffs, fixed in check_rows_many(src, dst, work, repair=True):
        run.rows_repaired += fixed
        if diffs and check_rows(src, dst, t, keys[t.name], repair=False)[0]:
            raise CutoverAborted(f"{t.name}: rows still differ after re-copy inside the freeze", phase="cutover")
    for ch in suspect:
        t = by_name.get(ch["table"])
        if t is None:
            continue
        lo = tuple(ch["lo"]) if ch.get("lo") is not None else None
        hi = tuple(ch["hi"]) if ch.get("hi") is not None else None
        diffs, fixed = check_chunk(src, dst, t, lo, hi, repair=True)
        run.rows_repaired += fixed
        if diffs and check_chunk(src, dst, t, lo, hi, repair=False)[0]:
            raise CutoverAborted(f"{t.name}: chunk {lo}..{hi} still differs after re-copy", phase="cutover")
