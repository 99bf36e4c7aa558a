"""Verify: the full check of a migration, source against target.

Runs in the migration worker (``migrator verify ID``, the verify job) while
catch-up keeps the target following the source, and again inside the cutover
freeze for the rows changed since the last full check.

The runbook of a check (:func:`verify_migration`):

1. record the source position the pass starts from (``verified_gtid``) and
   drain the target to it;
2. checksum every chunk of every moving table on both sides
   (:mod:`.checksums`);
3. drain again, then diff the differing chunks row by row; a row the source
   changed since the pass began is in flight (:mod:`.changes`), every other
   differing row is re-copied (:mod:`.repair`);
4. record the result; chunks that still differ are *suspect* and the cutover
   checks them again under its fence.

Progress node ``verify`` of the migration record holds the last full check:
``{"verified_gtid", "suspect_chunks", "at", "chunks", "mismatched", "repaired"}``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from migrator.engine.chunks import encode_key
from migrator.engine.migration import MigrationStore, Node, Phase
from migrator.engine.verify import waits
from migrator.engine.verify.changes import as_values, changed_keys
from migrator.engine.verify.checksums import (
    ChunkResult,
    Key,
    RowDiff,
    Side,
    TableInfo,
    VerifyError,
    compare_chunks,
    diff_hashes,
    load_tables,
    prepare_session,
    row_hashes,
)
from migrator.engine.verify.drainers import CatchUpDrainer, Drainer, default_drainer
from migrator.engine.verify.repair import check_rows, repair_rows
from migrator.engine.verify.waits import drain_progressing
from migrator.fleet import zk as zk_mod
from migrator.fleet.config import Config, load_credentials
from migrator.fleet.mysql import binlog_pos
from migrator.fleet.mysql import connect as mysql_connect
from migrator.fleet.shard_map import HostRegistry

VERIFY_NODE = Node.VERIFY


@dataclass
class VerifyReport:
    """What a check found and did."""

    migration_id: str
    verified_gtid: str | None = None
    tables: int = 0
    chunks: int = 0
    rows_checked: int = 0
    mismatched_chunks: list[dict[str, Any]] = field(default_factory=list)
    differing_rows: list[RowDiff] = field(default_factory=list)
    repaired_rows: int = 0
    #: rows that differed only because the source changed them during the pass (checked again at cutover)
    in_flight_rows: int = 0
    #: chunks that still differed after repair (a live write, re-checked in the freeze)
    suspect_chunks: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.suspect_chunks and (not self.differing_rows or self.repaired_rows >= len(self.differing_rows))

    def to_dict(self) -> dict[str, Any]:
        return {
            "migration_id": self.migration_id,
            "verified_gtid": self.verified_gtid,
            "tables": self.tables,
            "chunks": self.chunks,
            "rows_checked": self.rows_checked,
            "mismatched_chunks": self.mismatched_chunks,
            "differing_rows": [d.to_dict() for d in self.differing_rows],
            "repaired_rows": self.repaired_rows,
            "in_flight_rows": self.in_flight_rows,
            "suspect_chunks": self.suspect_chunks,
            "seconds": round(self.seconds, 3),
            "ok": self.ok,
        }


def verify_migration(config: Config, migration_id: str, *, repair: bool = True, chunk_rows: int | None = None,
                     drainer: Drainer | None = None, drain_timeout: float | None = None,
                     record: bool = True) -> VerifyReport:
    """Checksum every moving table source vs target; re-check and re-copy differing chunks.

    With a ``drainer`` (catch-up), the target is drained to the source head
    before the pass and again before each re-check. Without one (catch-up not
    running) the re-check happens at once. The drains and the binlog read of
    the keys changed meanwhile wait as long as they advance
    (:mod:`.waits`); ``drain_timeout``: a fixed limit instead. The result is stored in the
    migration's ``verify`` progress node (unless ``record`` is False).
    """
    creds = load_credentials(config)
    t0 = time.monotonic()
    with zk_mod.connect(config, creds) as zk:
        store = MigrationStore(zk)
        spec = store.spec(migration_id)
        state, _ = store.state(migration_id)
        if state.phase in (Phase.CUTOVER, Phase.DONE, Phase.ROLLING_BACK, Phase.ROLLED_BACK, Phase.CLEANED,
                           Phase.ABORTED):
            raise VerifyError(f"migration {migration_id} is {state.phase.value}: verify compares the source with "
                              "the target before the cutover (a rollback verifies the tombstones itself)",
                              phase="verify")
        reg = HostRegistry(zk)
        src_host, dst_host = reg.get(spec.source_master), reg.get(spec.target_master)
        own_drainer = drainer is None
        if drainer is None:
            drainer = default_drainer(config, migration_id, state.phase)
            if isinstance(drainer, CatchUpDrainer):
                # its applier lock first, then the spec: a hand-over (migrator.ops.batched.handover) takes the same
                # lock to move shards out of a batched migration, and this check must not repair their rows
                # beside the tail that applies them now
                drainer.open()
                spec = store.spec(migration_id)
        src = mysql_connect(src_host, creds, read_timeout=600)
        dst = mysql_connect(dst_host, creds, read_timeout=600)
        try:
            prepare_session(src)
            prepare_session(dst)
            tables = load_tables(src, spec.databases, spec.tables)

            def changes(since: str, until: str) -> dict[str, set[Key]]:
                if drain_timeout is None:
                    return changed_keys(src_host, creds, tables, since, until, stall_s=waits.STALL_S)
                return changed_keys(src_host, creds, tables, since, until, timeout=drain_timeout)

            report = run_full_check(Side(src), Side(dst), tables, migration_id, changes=changes,
                                    step=chunk_rows or spec.options.chunk_rows, repair=repair,
                                    drainer=drainer, drain_timeout=drain_timeout)
        finally:
            src.close()
            dst.close()
            if own_drainer and drainer is not None:
                drainer.close()
        report.seconds = time.monotonic() - t0
        if record:
            store.put_progress(migration_id, VERIFY_NODE, {
                "verified_gtid": report.verified_gtid,
                "suspect_chunks": report.suspect_chunks,
                "at": time.time(),
                "chunks": report.chunks,
                "mismatched": len(report.mismatched_chunks),
                "repaired": report.repaired_rows,
                "seconds": round(report.seconds, 2),
            })
    return report


ChangesFn = Callable[[str, str], dict[str, set[Key]]]


def run_full_check(src: Side, dst: Side, tables: Sequence[TableInfo], migration_id: str, *, step: int,
                   repair: bool, drainer: Drainer | None, drain_timeout: float | None = None,
                   changes: ChangesFn | None = None) -> VerifyReport:
    """The full pass on open connections (what :func:`verify_migration` runs).

    ``changes(since, until)`` gives the keys the source binlog touched between
    two positions; with it, a row that differs only because the source changed
    it after the pass began (a live write catch-up has not applied yet) is
    counted as in flight, not repaired: the cutover checks it again under its
    fence. Every other difference is real and is re-copied. The drains go on
    as long as the tail advances (``drain_timeout`` None: :mod:`.waits`), else
    within ``drain_timeout``.
    """
    report = VerifyReport(migration_id, tables=len(tables))
    start = report.verified_gtid = binlog_pos(src.conn)

    def drain(pos: str) -> None:
        if drainer is None:
            return
        if drain_timeout is None:
            drain_progressing(drainer, pos, what=f"verify of {migration_id}")
        else:
            drainer.drain_to(pos, drain_timeout)

    drain(start)
    by_name = {t.name: t for t in tables}
    results, rows = compare_chunks(src, dst, tables, step)
    report.chunks, report.rows_checked = len(results), rows
    bad = [r for r in results if not r.equal]
    report.mismatched_chunks = [_chunk_dict(r) for r in bad]
    if not bad:
        return report
    drain(binlog_pos(src.conn))
    per_chunk: list[tuple[ChunkResult, list[RowDiff]]] = []
    for r in bad:
        t = by_name[r.table]
        s_t, d_t = t.on(src.db_of(t.db)), t.on(dst.db_of(t.db))
        diffs = diff_hashes(t.name, row_hashes(src.conn, s_t, r.lo, r.hi), row_hashes(dst.conn, d_t, r.lo, r.hi))
        if diffs:
            per_chunk.append((r, diffs))
    moved: dict[str, set[Key]] = {}
    if per_chunk and changes is not None:
        moved = changes(start, binlog_pos(src.conn))  # read after the diffs: covers every write they saw
    moved_values: dict[str, set[Key]] = {}
    for r, diffs in per_chunk:
        t = by_name[r.table]
        if t.name not in moved_values:
            # the binlog's keys are literals: look them up on both sides to get comparable values
            sides = ((src.conn, t.on(src.db_of(t.db))), (dst.conn, t.on(dst.db_of(t.db))))
            moved_values[t.name] = as_values(sides, moved.get(t.name, set()))
        real = [d for d in diffs if d.key not in moved_values[t.name]]
        report.in_flight_rows += len(diffs) - len(real)
        report.differing_rows.extend(real)
        if not real:
            continue
        s_t, d_t = t.on(src.db_of(t.db)), t.on(dst.db_of(t.db))
        if repair:
            report.repaired_rows += repair_rows(src.conn, dst.conn, s_t, d_t, real)
        left = check_rows(src, dst, t, [d.key for d in real], repair=False)[0] if repair else real
        if left:
            report.suspect_chunks.append(_chunk_dict(r))
    return report


def _chunk_dict(r: ChunkResult) -> dict[str, Any]:
    """A chunk as the record keeps it; its bounds in the copy checkpoint's JSON form, exact for every
    key type (the cutover compares a suspect chunk again by them: :func:`.repair.check_chunk`)."""
    return {
        "table": r.table,
        "lo": encode_key(r.lo),
        "hi": encode_key(r.hi),
        "source_rows": r.source[0],
        "target_rows": r.target[0],
    }
