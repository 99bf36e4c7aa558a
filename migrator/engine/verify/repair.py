"""Re-check rows by primary key and re-copy the ones that differ.

Runs in the verify pass (differing chunks, outside the freeze) and inside the
cutover freeze (the rows changed since the last full check, and the chunks it
left suspect, on a fenced source where the comparison is exact).

Why a repair outside the freeze is safe: the full pass records the source
position it started from (``verified_gtid``). A repair can only lose a race
with the applier for a row the source changed *after* that position, and every
such row is checked again inside the cutover freeze (:func:`check_rows`), where
the source is fenced and the comparison exact. The keys changed since
``verified_gtid`` come from the binlog: :func:`changed_keys` reads a segment,
:class:`ChangeTracker` keeps reading in the background, and a drainer that is a
:class:`KeyCollector` hands over the keys its own drain applied (the cheapest:
no second reader). So the freeze check grows with the write rate, not with the
shard size.

A re-copy REPLACEs the source rows into the target and DELETEs the target rows
the source does not have; both are idempotent. The rows are read exactly
(:func:`migrator.engine.values.read_expr`: a FLOAT as DOUBLE, an ENUM or SET as
its number, text as its bytes), so the row written is the row read, bit for
bit: through the text protocol a FLOAT keeps only 6 significant digits.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pymysql
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_random

from migrator.engine.catch_up.statements import WHOLE_TABLE
from migrator.engine.chunks import decode_key
from migrator.engine.verify.checksums import (
    TAG,
    Key,
    LiteralKey,
    RowDiff,
    Side,
    TableInfo,
    diff_hashes,
    group_sums,
    keys_where,
    row_hashes,
    row_hashes_for,
)
from migrator.fleet.mysql import ident, qualified, query

#: InnoDB chose this statement as a deadlock victim / gave up waiting for a row lock: the cutover's
#: tail applies to the same tables while the re-check repairs them, so either can happen
RETRYABLE = (1213, 1205)


def _retryable(exc: BaseException) -> bool:
    return isinstance(exc, pymysql.err.OperationalError) and bool(exc.args) and exc.args[0] in RETRYABLE


def repair_rows(src: pymysql.connections.Connection, dst: pymysql.connections.Connection,
                s_t: TableInfo, d_t: TableInfo, diffs: Sequence[RowDiff], per_query: int = 200) -> int:
    """Re-copy ``diffs``: REPLACE the source image, DELETE rows the source lacks.

    A deadlock or lock wait timeout on the target (a tail applying beside it) rolls back and
    repeats the whole repair: it re-reads the source rows, so repeating it is harmless."""
    for attempt in Retrying(stop=stop_after_attempt(5), wait=wait_random(0.01, 0.1),
                            retry=retry_if_exception(_retryable), reraise=True):
        with attempt:
            try:
                return _repair_rows_once(src, dst, s_t, d_t, diffs, per_query)
            except pymysql.err.OperationalError as exc:
                if _retryable(exc) and not dst.get_autocommit():
                    dst.rollback()
                raise
    raise AssertionError("unreachable")


def _repair_rows_once(src: pymysql.connections.Connection, dst: pymysql.connections.Connection,
                      s_t: TableInfo, d_t: TableInfo, diffs: Sequence[RowDiff], per_query: int) -> int:
    if not diffs:
        return 0
    copy_keys = [d.key for d in diffs if d.kind != "extra_on_target"]
    drop_keys = [d.key for d in diffs if d.kind == "extra_on_target"]
    cols = s_t.writable or s_t.columns
    col_sql = ", ".join(ident(c) for c in cols)
    done = 0
    with dst.cursor() as dcur:
        for i in range(0, len(copy_keys), per_query):
            part = copy_keys[i:i + per_query]
            rows = query(src, f"{TAG}SELECT {s_t.read(cols)} FROM {qualified(s_t.db, s_t.table)} "
                              f"WHERE {keys_where(s_t.pk, len(part))}", [v for k in part for v in k])
            present = {tuple(r[cols.index(c)] for c in s_t.pk) for r in rows}
            gone = [k for k in part if k not in present]  # deleted on the source since the check
            drop_keys.extend(gone)
            if rows:
                marks = "(" + ", ".join(["%s"] * len(cols)) + ")"
                dcur.executemany(f"{TAG}REPLACE INTO {qualified(d_t.db, d_t.table)} ({col_sql}) VALUES {marks}",
                                 [tuple(r) for r in rows])
                done += len(rows)
        for i in range(0, len(drop_keys), per_query):
            part = drop_keys[i:i + per_query]
            dcur.execute(f"{TAG}DELETE FROM {qualified(d_t.db, d_t.table)} WHERE {keys_where(d_t.pk, len(part))}",
                         [v for k in part for v in k])
            done += len(part)
    if not dst.get_autocommit():
        dst.commit()
    return done


def check_chunk(src: Side, dst: Side, t: TableInfo, lo: Key | None, hi: Key | None, *,
                repair: bool) -> tuple[list[RowDiff], int]:
    """Row-level diff of one chunk, optionally re-copied; returns (diffs, rows repaired).

    ``lo``/``hi`` are key values, or their JSON form as the verify record keeps a suspect chunk's
    bounds (:func:`migrator.engine.chunks.encode_key`: bytes, decimals and times tagged)."""
    lo = decode_key(list(lo)) if lo is not None else None
    hi = decode_key(list(hi)) if hi is not None else None
    s_t, d_t = t.on(src.db_of(t.db)), t.on(dst.db_of(t.db))
    diffs = diff_hashes(t.name, row_hashes(src.conn, s_t, lo, hi), row_hashes(dst.conn, d_t, lo, hi))
    fixed = repair_rows(src.conn, dst.conn, s_t, d_t, diffs) if (repair and diffs) else 0
    return diffs, fixed


def check_rows(src: Side, dst: Side, t: TableInfo, keys: Iterable[Key], *,
               repair: bool) -> tuple[list[RowDiff], int]:
    """Compare (and optionally re-copy) the given rows by primary key (key values, or
    :class:`~migrator.engine.verify.checksums.LiteralKey` tuples from the binlog). The key
    :data:`~migrator.engine.catch_up.statements.WHOLE_TABLE` among them (a statement removed
    rows without row events) makes it compare, and re-copy, the whole table."""
    _, diffs, fixed = check_rows_many(src, dst, [(t, keys)], repair=repair)[0]
    return diffs, fixed


#: (these three: docs/performance.md, "Constants measured by the benchmarks")
#: changed keys compared by one checksum per side (:func:`~migrator.engine.verify.checksums.group_sums`):
#: only a group whose checksums differ is compared row by row, in one query per side
GROUP_KEYS = 2000
#: keys in one statement at most: its groups may be of several tables, so a re-check of many tables with few
#: changed rows each costs a few round trips, not one per table
STATEMENT_KEYS = 8000
#: the SQL text of one statement at most (literal keys written out), well under ``max_allowed_packet``
STATEMENT_BYTES = 1 << 20
#: groups in one statement at most (one ``UNION ALL`` part each: a batch's re-check may touch a row in each
#: of hundreds of tables, and the sentinel check unions as many)
STATEMENT_GROUPS = 200


@dataclass
class CompareStats:
    """What a grouped compare did (:func:`check_rows_many`): rows compared, the groups they were summed in,
    the groups that differed (compared row by row) and the statements each side ran."""

    rows: int = 0
    groups: int = 0
    groups_differ: int = 0
    queries: int = 0
    s: float = 0.0


@dataclass
class _Group:
    place: int  # the table's place in the result
    t: TableInfo
    keys: list[Key]

    @property
    def literal(self) -> bool:
        return isinstance(self.keys[0], LiteralKey)

    @property
    def size(self) -> int:
        """The group's share of a statement's text (literal keys are written out; values are bound)."""
        if self.literal:
            return sum(len(v) + 1 for k in self.keys for v in k) + 200
        return 24 * len(self.keys) * len(self.t.pk) + 200


def check_rows_many(src: Side, dst: Side, work: Sequence[tuple[TableInfo, Iterable[Key]]], *,
                    repair: bool, stats: CompareStats | None = None) -> list[tuple[TableInfo, list[RowDiff], int]]:
    """:func:`check_rows` for several tables, set-wise: the changed keys of each table are cut into
    groups of :data:`GROUP_KEYS`, each side sums every group's row hashes in one statement for several
    groups (and tables) at once, and only a group whose sums differ is compared row by row and its
    differing rows named and re-copied. The two sides are read at the same time: the source in this
    thread, the target in a helper thread (each side's connection is only ever used by one thread).

    Why equal sums are equal rows: a group's sum is the chunk checksum (row count, BIT_XOR and SUM of
    the same per-row CRC32 of the exact row image the row-by-row compare uses) over the same keys on
    both sides, so a group is called equal only where the chunk check would call a chunk equal, and a
    changed row escapes only if its CRC32 does too (which the row-by-row compare would miss as well).
    ``stats``: filled with what the compare did, when given."""
    t0 = time.monotonic()
    out: list[tuple[TableInfo, list[RowDiff], int]] = []
    groups: list[_Group] = []
    for t, keys in work:
        ks = sorted(set(keys), key=repr)
        if WHOLE_TABLE in ks:
            out.append((t, *check_chunk(src, dst, t, None, None, repair=repair)))
            continue
        literal = [k for k in ks if isinstance(k, LiteralKey)]
        for part in (literal, [k for k in ks if not isinstance(k, LiteralKey)]):
            groups += [_Group(len(out), t, part[i:i + GROUP_KEYS]) for i in range(0, len(part), GROUP_KEYS)]
        out.append((t, [], 0))
    statements = _statements(groups)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="check-target") as pool:
        theirs = pool.submit(_sums_of, dst, groups, statements)
        ours = _sums_of(src, groups, statements)
        differ = [g for g, s, d in zip(groups, ours, theirs.result(), strict=True) if s != d]
        # into the groups that differ: row by row, both sides at once, each table's groups together
        by_place: dict[int, tuple[TableInfo, list[Key]]] = {}
        for g in differ:
            by_place.setdefault(g.place, (g.t, []))[1].extend(g.keys)
        pairs = list(by_place.values())
        if pairs:
            theirs_rows = pool.submit(_hashes_of, dst, pairs)
            ours_rows = _hashes_of(src, pairs)
            for i, (t, _), s, d in zip(by_place, pairs, ours_rows, theirs_rows.result(), strict=True):
                diffs = diff_hashes(t.name, s, d)
                fixed = repair_rows(src.conn, dst.conn, t.on(src.db_of(t.db)), t.on(dst.db_of(t.db)), diffs) \
                    if (repair and diffs) else 0
                out[i] = (t, diffs, fixed)
    if stats is not None:
        stats.rows += sum(len(g.keys) for g in groups)
        stats.groups += len(groups)
        stats.groups_differ += len(differ)
        stats.queries += len(statements) + len(differ)  # a differing group: about one row-by-row query
        stats.s += time.monotonic() - t0
    return out


def _statements(groups: Sequence[_Group]) -> list[list[int]]:
    """The groups (by index) each statement sums: in order, literal and value groups apart, at most
    :data:`STATEMENT_KEYS` keys, :data:`STATEMENT_GROUPS` groups and about :data:`STATEMENT_BYTES` of text
    each."""
    out: list[list[int]] = []
    keys = size = 0
    for i, g in enumerate(groups):
        if not out or groups[out[-1][0]].literal != g.literal or keys + len(g.keys) > STATEMENT_KEYS \
                or size + g.size > STATEMENT_BYTES or len(out[-1]) >= STATEMENT_GROUPS:
            out.append([])
            keys = size = 0
        out[-1].append(i)
        keys += len(g.keys)
        size += g.size
    return out


def _sums_of(side: Side, groups: Sequence[_Group], statements: Sequence[list[int]]) -> list[tuple[int, int, int]]:
    """Each group's (rows, bit_xor, sum) on one side, one statement per entry of ``statements``."""
    got: list[tuple[int, int, int]] = [(0, 0, 0)] * len(groups)
    for idx in statements:
        sums = group_sums(side.conn, [(groups[i].t.on(side.db_of(groups[i].t.db)), groups[i].keys) for i in idx])
        for i, s in zip(idx, sums, strict=True):
            got[i] = s
    return got


def _hashes_of(side: Side, todo: Sequence[tuple[TableInfo, list[Key]]]) -> list[dict[Key, int]]:
    """Row hashes of the given keys of each table on one side (binlog literals and values apart)."""
    got = []
    for t, keys in todo:
        on = t.on(side.db_of(t.db))
        h: dict[Key, int] = {}
        literal = [k for k in keys if isinstance(k, LiteralKey)]
        for group in (literal, [k for k in keys if not isinstance(k, LiteralKey)]):
            if group:
                h.update(row_hashes_for(side.conn, on, group, per_query=GROUP_KEYS))
        got.append(h)
    return got
