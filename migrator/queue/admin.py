"""Operator reads and bulk changes of a queue's jobs: lookup, counts, scans,
retry-failed and cancel (state moves) and delete.

Runs in the queue service's admin API and CLI (``migrator queue lookup / counts
/ scan / retry-failed / delete``). The functions take an open connection to
one partition's current master; :class:`QueueAdmin`, a part of
:class:`~migrator.queue.service.QueueService`, runs them on every partition of
a queue through the service's shard executor. Like every statement on the jobs
table, each one names ``state`` so MariaDB prunes to that state's partitions.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pymysql

from migrator.fleet.ids import shard_db
from migrator.fleet.mysql import qualified, rollback_quietly, tag
from migrator.queue.catalog import QueueCatalog
from migrator.queue.errors import InvalidArgument, JobNotFound
from migrator.queue.model import (
    MAX_BATCH,
    JobFilter,
    JobInfo,
    JobState,
    PartitionRecord,
    QueueRecord,
    job_id,
    split_job_id,
)
from migrator.queue.schema import from_epoch, to_epoch

T = tag("queue")


SELECT_INFO = ("local_id, state, updated_at, created_at, run_after, priority, attempts_allowed, attempts_left, "
               "lease_until, custom_status, dedupe_key, body")


def row_info(r: tuple[Any, ...]) -> dict[str, Any]:
    return {
        "local_id": int(r[0]), "state": JobState(int(r[1])).name, "updated_at": to_epoch(r[2]),
        "created_at": to_epoch(r[3]), "run_after": to_epoch(r[4]), "priority": int(r[5]),
        "attempts_allowed": int(r[6]), "attempts_left": int(r[7]), "lease_until": to_epoch(r[8]),
        "custom_status": r[9], "dedupe_key": r[10], "body": r[11],
    }


def lookup_job(conn: pymysql.connections.Connection, db: str, table: str, local_id: int) -> dict[str, Any] | None:
    with conn.cursor() as cur:
        cur.execute(f"{T}SELECT {SELECT_INFO} FROM {qualified(db, table)} "
                    "WHERE local_id = %s AND state IN (0, 1, 2, 3)", (local_id,))
        rows = cur.fetchall()
    if not rows:
        return None
    return row_info(rows[0])


def count_states(conn: pymysql.connections.Connection, db: str, table: str) -> dict[str, int]:
    out = {s.name: 0 for s in JobState}
    with conn.cursor() as cur:
        for s in JobState:
            cur.execute(f"{T}SELECT COUNT(*) FROM {qualified(db, table)} WHERE state = %s", (int(s),))
            out[s.name] = int(cur.fetchone()[0])
    return out


def filter_sql(f: JobFilter | None) -> tuple[str, list[Any]]:
    """Extra ``AND`` conditions with bound arguments (no value is interpolated)."""
    if f is None:
        return "", []
    parts: list[str] = []
    args: list[Any] = []
    if f.priority is not None:
        parts.append("priority = %s")
        args.append(f.priority)
    if f.custom_status is not None:
        parts.append("custom_status = %s")
        args.append(f.custom_status)
    if f.created_before is not None:
        parts.append("created_at < %s")
        args.append(from_epoch(f.created_before))
    if f.created_after is not None:
        parts.append("created_at >= %s")
        args.append(from_epoch(f.created_after))
    if f.ids is not None:
        if not f.ids:
            parts.append("FALSE")
        else:
            parts.append(f"local_id IN ({','.join(['%s'] * len(f.ids))})")
            args.extend(f.ids)
    return "".join(f" AND {p}" for p in parts), args


def scan_jobs(conn: pymysql.connections.Connection, db: str, table: str, state: JobState, after: int,
              limit: int, f: JobFilter | None) -> list[dict[str, Any]]:
    extra, args = filter_sql(f)
    with conn.cursor() as cur:
        cur.execute(
            f"{T}SELECT {SELECT_INFO} FROM {qualified(db, table)} WHERE state = %s AND local_id > %s{extra} "
            "ORDER BY local_id LIMIT %s",
            (int(state), after, *args, limit),
        )
        return [row_info(r) for r in cur.fetchall()]


def move_state(conn: pymysql.connections.Connection, db: str, table: str, from_state: JobState,
               to_state: JobState, limit: int, f: JobFilter | None, *, attempts: int | None = None,
               custom_status: str | None = None) -> int:
    """Move up to ``limit`` jobs from one state to another (retry failed: FAIL -> NEW; cancel: NEW -> FAIL)."""
    t = qualified(db, table)
    extra, args = filter_sql(f)
    conn.begin()
    try:
        with conn.cursor() as cur:
            cur.execute(
                f"{T}SELECT local_id FROM {t} WHERE state = %s{extra} ORDER BY local_id LIMIT %s FOR UPDATE",
                (int(from_state), *args, limit),
            )
            ids = [int(r[0]) for r in cur.fetchall()]
            if ids:
                marks = ",".join(["%s"] * len(ids))
                cur.execute(
                    f"{T}UPDATE {t} SET state = %s, updated_at = NOW(6), run_after = NOW(6), claim_token = NULL, "
                    "lease_until = NULL, attempts_left = COALESCE(%s, attempts_allowed), "
                    "attempts_allowed = GREATEST(attempts_allowed, COALESCE(%s, 0)), "
                    f"custom_status = COALESCE(%s, custom_status) WHERE local_id IN ({marks}) AND state = %s",
                    (int(to_state), attempts, attempts, custom_status, *ids, int(from_state)),
                )
                n = cur.rowcount
            else:
                n = 0
        conn.commit()
    except BaseException:
        rollback_quietly(conn)
        raise
    return n


def delete_jobs(conn: pymysql.connections.Connection, db: str, table: str, state: JobState, limit: int,
                f: JobFilter | None) -> int:
    """Delete up to ``limit`` jobs of one state matching the filter (an operator action;
    routine purging is DROP PARTITION by maintenance)."""
    extra, args = filter_sql(f)
    with conn.cursor() as cur:
        cur.execute(
            f"{T}DELETE FROM {qualified(db, table)} WHERE state = %s{extra} ORDER BY local_id LIMIT %s",
            (int(state), *args, limit),
        )
        return int(cur.rowcount)


def states_by_ids(conn: pymysql.connections.Connection, db: str, table: str, ids: list[int]) -> dict[int, str]:
    """State name of each existing local id (bulk lookup for the ledger check)."""
    out: dict[int, str] = {}
    with conn.cursor() as cur:
        for i in range(0, len(ids), 1000):
            chunk = ids[i:i + 1000]
            marks = ",".join(["%s"] * len(chunk))
            cur.execute(f"{T}SELECT local_id, state FROM {qualified(db, table)} "
                        f"WHERE local_id IN ({marks}) AND state IN (0, 1, 2, 3)", chunk)
            for local, state in cur.fetchall():
                out[int(local)] = JobState(int(state)).name
    return out


class QueueAdmin:
    """The operator methods of :class:`~migrator.queue.service.QueueService` (mixed into it)."""

    catalog: QueueCatalog
    _enqueued: threading.Condition
    _run: Callable[..., Any]

    def lookup(self, queue: str, job: int) -> JobInfo:
        rec = self.catalog.get(queue)
        shard, local = split_job_id(job)
        for part in rec.partitions_for_shard(shard):
            row = self._run(rec, part,
                            lambda c, part=part: lookup_job(c, shard_db(part.shard), part.table, local),
                            write=False, what=f"lookup in {part.table}")
            if row is not None:
                return self._info(rec, part, row)
        raise JobNotFound(f"job {job} is not in queue {queue} (never enqueued there, deleted, or purged)")

    @staticmethod
    def _info(rec: QueueRecord, part: PartitionRecord, row: dict[str, Any]) -> JobInfo:
        local = row.pop("local_id")
        return JobInfo(queue=rec.name, id=job_id(part.shard, local), partition=part.index, **row)

    def job_states(self, queue: str, ids: list[int]) -> dict[int, str]:
        """State of each job id that exists (missing ids are absent from the result)."""
        rec = self.catalog.get(queue)
        by_shard: dict[int, list[int]] = {}
        for v in ids:
            shard, local = split_job_id(v)
            by_shard.setdefault(shard, []).append(local)
        out: dict[int, str] = {}
        for shard, locals_ in by_shard.items():
            for part in rec.partitions_for_shard(shard):
                got = self._run(rec, part, lambda c, part=part, locals_=locals_: states_by_ids(
                    c, shard_db(part.shard), part.table, locals_), write=False, what=f"states in {part.table}")
                out.update({job_id(shard, k): v for k, v in got.items()})
        return out

    def partition_counts(self, queue: str) -> dict[int, dict[str, int]]:
        """Jobs per state in each partition, by partition index."""
        rec = self.catalog.get(queue)
        out = {}
        for part in rec.partitions:
            c = self._run(rec, part,
                          lambda conn, part=part: count_states(conn, shard_db(part.shard), part.table),
                          write=False, what=f"count {part.table}")
            out[part.index] = {**{s.name: 0 for s in JobState}, **c}
        return out

    def counts(self, queue: str) -> dict[str, int]:
        total = {s.name: 0 for s in JobState}
        for c in self.partition_counts(queue).values():
            for k, v in c.items():
                total[k] += v
        return total

    def scan(self, queue: str, state: JobState | str | int, limit: int = 100, cursor: str | None = None,
             filter: JobFilter | None = None) -> tuple[list[JobInfo], str | None]:
        """One page of jobs in ``state``, ordered by (partition, local id).

        ``cursor`` is the opaque ``next_cursor`` of the previous page (keyset
        pagination: no OFFSET). Returns (jobs, next_cursor or None at the end).
        """
        state = self._state(state)
        if not 1 <= limit <= MAX_BATCH:
            raise InvalidArgument(f"limit must be 1..{MAX_BATCH}")
        rec = self.catalog.get(queue)
        start_part, after = 0, 0
        if cursor:
            try:
                a, b = cursor.split(":")
                start_part, after = int(a), int(b)
            except ValueError:
                raise InvalidArgument(f"cursor {cursor!r} is malformed; pass the next_cursor of a previous "
                                      "page") from None
        f = self._local_filter(rec, filter)
        out: list[JobInfo] = []
        for part in sorted(rec.partitions, key=lambda p: p.index):
            if part.index < start_part:
                continue
            pf = self._filter_for(part, filter, f)
            if pf is False:
                continue
            a = after if part.index == start_part else 0
            rows = self._run(rec, part, lambda c, part=part, a=a, pf=pf: scan_jobs(
                c, shard_db(part.shard), part.table, state, a, limit - len(out), pf),  # type: ignore[arg-type]
                write=False, what=f"scan {part.table}")
            out.extend(self._info(rec, part, r) for r in rows)
            if len(out) >= limit:
                last = out[-1]
                return out, f"{last.partition}:{split_job_id(last.id)[1]}"
        return out, None

    @staticmethod
    def _state(state: JobState | str | int) -> JobState:
        try:
            return JobState.parse(state)
        except (KeyError, ValueError):
            raise InvalidArgument(f"unknown state {state!r}; use NEW, IPR, OK or FAIL") from None

    @staticmethod
    def _local_filter(rec: QueueRecord, f: JobFilter | None) -> dict[int, list[int]] | None:
        """Job ids of a filter grouped by shard (their local ids)."""
        if f is None or f.ids is None:
            return None
        by_shard: dict[int, list[int]] = {}
        for v in f.ids:
            shard, local = split_job_id(v)
            by_shard.setdefault(shard, []).append(local)
        return by_shard

    @staticmethod
    def _filter_for(part: PartitionRecord, f: JobFilter | None,
                    by_shard: dict[int, list[int]] | None) -> JobFilter | None | bool:
        if f is None:
            return None
        if by_shard is None:
            return f
        locals_ = by_shard.get(part.shard)
        if not locals_:
            return False
        return f.model_copy(update={"ids": locals_})

    def _move(self, queue: str, frm: JobState, to: JobState, limit: int, filter: JobFilter | None,
              attempts: int | None = None, custom_status: str | None = None) -> int:
        if not 1 <= limit <= 100000:
            raise InvalidArgument("limit must be 1..100000")
        rec = self.catalog.get(queue)
        by_shard = self._local_filter(rec, filter)
        n = 0
        for part in rec.partitions:
            pf = self._filter_for(part, filter, by_shard)
            if pf is False:
                continue
            while n < limit:
                chunk = min(1000, limit - n)
                moved = self._run(rec, part, lambda c, part=part, chunk=chunk, pf=pf: move_state(
                    c, shard_db(part.shard), part.table, frm, to, chunk, pf, attempts=attempts,  # type: ignore[arg-type]
                    custom_status=custom_status), what=f"move jobs in {part.table}")
                n += moved
                if moved < chunk:
                    break
        with self._enqueued:
            self._enqueued.notify_all()
        return n

    def retry_failed(self, queue: str, limit: int = 1000, attempts: int | None = None,
                     filter: JobFilter | None = None) -> int:
        """FAIL -> NEW, with ``attempts`` tries (default: each job's attempts allowed)."""
        return self._move(queue, JobState.FAIL, JobState.NEW, limit, filter, attempts=attempts)

    def cancel(self, queue: str, limit: int = 1000, filter: JobFilter | None = None) -> int:
        """NEW -> FAIL with custom status 'cancelled' (kept until FAIL retention)."""
        return self._move(queue, JobState.NEW, JobState.FAIL, limit, filter, attempts=0, custom_status="cancelled")

    def delete_jobs(self, queue: str, state: JobState | str | int, limit: int = 1000,
                    filter: JobFilter | None = None) -> int:
        state = self._state(state)
        if not 1 <= limit <= 100000:
            raise InvalidArgument("limit must be 1..100000")
        rec = self.catalog.get(queue)
        by_shard = self._local_filter(rec, filter)
        n = 0
        for part in rec.partitions:
            pf = self._filter_for(part, filter, by_shard)
            if pf is False:
                continue
            n += self._run(rec, part, lambda c, part=part, pf=pf, n=n: delete_jobs(
                c, shard_db(part.shard), part.table, state, limit - n, pf),  # type: ignore[arg-type]
                what=f"delete from {part.table}")
            if n >= limit:
                break
        return n
