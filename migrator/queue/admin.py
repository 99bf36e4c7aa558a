"""Operator reads and bulk changes of one partition's jobs: lookup, counts, scans,
retry-failed (a state move) and delete.

Runs in the queue service's admin API and CLI (``migrator queue lookup / counts
/ scan / retry-failed / delete``); every function takes an open connection to
the partition's current master. Like every statement on the jobs table, each
one names ``state`` so MariaDB prunes to that state's partitions.
"""

from __future__ import annotations

from typing import Any

import pymysql

from migrator.fleet.mysql import qualified, rollback_quietly, tag
from migrator.queue.model import JobFilter, JobState
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
