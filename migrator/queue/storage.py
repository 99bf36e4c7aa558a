"""Storage of the queue service: the life of a job in one partition's jobs table, in SQL.

Runs inside whatever process serves the queue (API server, broker, load
generator); every function here takes an open PyMySQL connection to the
partition's current master (see :mod:`migrator.queue.executor` for routing).
Where a queue's tables live and their DDL: :mod:`migrator.queue.schema`;
operator reads and bulk changes: :mod:`migrator.queue.admin`.

States: 0 NEW, 1 IPR, 2 OK, 3 FAIL. A claim sets state 1, ``updated_at`` to
the database's now, a random ``claim_token`` and ``lease_until``; the claim
string handed to the worker is ``<token>.<updated_at>.<attempt>``, so a
terminal update addresses the full primary key (one partition) and is fenced
by the token: a claim whose lease expired and was re-claimed matches no row
and answers STALE_CLAIM. An ack keeps its claim's token on the row (only a new
claim, the reaper, a release, a checkpoint back to NEW or a bulk state change
clear it), so an ack retried with the same claim reads ALREADY_ACKED, not
STALE_CLAIM. Every statement carries ``state`` (and, where known,
``updated_at``) so MariaDB prunes to the partitions of that state.
"""

from __future__ import annotations

import datetime as dt
import secrets
from dataclasses import dataclass
from typing import Any

import pymysql

from migrator.fleet.mysql import qualified, rollback_quietly, tag
from migrator.queue import schema
from migrator.queue.errors import InvalidArgument

T = tag("queue")

JOB_COLUMNS = ("local_id, state, updated_at, created_at, run_after, priority, attempts_allowed, "
               "attempts_left, claim_token, lease_until, custom_status, dedupe_key, body")


# -- claims ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Claim:
    token: str
    claimed_at: dt.datetime
    attempt: int

    def encode(self) -> str:
        return f"{self.token}.{self.claimed_at:%Y%m%d%H%M%S%f}.{self.attempt}"

    @classmethod
    def parse(cls, text: str) -> Claim:
        try:
            token, at, attempt = text.split(".")
            if len(token) != 32 or int(token, 16) < 0:
                raise ValueError
            return cls(token, dt.datetime.strptime(at, "%Y%m%d%H%M%S%f"), int(attempt))
        except (ValueError, AttributeError):
            raise InvalidArgument(f"claim {text!r} is malformed: pass the claim string a dequeue returned") from None


# -- enqueue ------------------------------------------------------------------------

@dataclass
class NewJob:
    body: str
    priority: int
    attempts: int
    custom_status: str
    run_after: dt.datetime | None  # None: now
    delay_us: int
    dedupe_key: str | None
    #: the side table's key of a job without a dedupe key in a call with an idempotency key
    #: (:func:`migrator.queue.model.call_dedupe_key`); the row's ``dedupe_key`` column stays NULL
    call_key: str | None = None

    @property
    def side_key(self) -> str | None:
        """The key this job is remembered by in the dedupe side table, if any."""
        return self.dedupe_key if self.dedupe_key is not None else self.call_key


def insert_jobs(conn: pymysql.connections.Connection, db: str, table: str,
                jobs: list[NewJob]) -> list[tuple[int, bool]]:
    """Insert a batch in one transaction; returns (local id, deduplicated) per job.

    A job whose dedupe key (or call key) is already present returns the
    existing job's id (the dedupe table row is the lock; a concurrent insert of
    the same key deadlocks or waits and the caller's retry resolves it).
    """
    t = qualified(db, table)
    dt_name = qualified(db, schema.dedupe_table_name(table))
    out: list[tuple[int, bool] | None] = [None] * len(jobs)
    conn.begin()
    try:
        with conn.cursor() as cur:
            keyed = [(i, j.side_key) for i, j in enumerate(jobs) if j.side_key is not None]
            existing: dict[str, int] = {}
            if keyed:
                keys = sorted({k for _, k in keyed})
                marks = ",".join(["%s"] * len(keys))
                cur.execute(f"{T}SELECT dedupe_key, local_id FROM {dt_name} WHERE dedupe_key IN ({marks}) "
                            "FOR UPDATE", keys)
                existing = {k: int(v) for k, v in cur.fetchall()}
            to_insert: list[int] = []
            first_of_key: dict[str, int] = {}
            for i, j in enumerate(jobs):
                k = j.side_key
                if k is not None and k in existing:
                    out[i] = (existing[k], True)
                elif k is not None and k in first_of_key:
                    pass  # resolved after insert, to the first job of the batch with this key
                else:
                    if k is not None:
                        first_of_key[k] = i
                    to_insert.append(i)
            if to_insert:
                ids = _insert_rows(cur, t, [jobs[i] for i in to_insert])
                for i, local in zip(to_insert, ids):
                    out[i] = (local, False)
                for i, j in enumerate(jobs):
                    if out[i] is None and j.side_key is not None:
                        out[i] = (out[first_of_key[j.side_key]][0], True)  # type: ignore[index]
                fresh = [(k, out[i][0]) for k, i in first_of_key.items()]  # type: ignore[index]
                if fresh:
                    cur.executemany(
                        f"{T}INSERT INTO {dt_name} (dedupe_key, local_id, created_at) VALUES (%s, %s, NOW(6))",
                        fresh,
                    )
        conn.commit()
    except BaseException:
        rollback_quietly(conn)
        raise
    return out  # type: ignore[return-value]


def _insert_rows(cur: Any, t: str, jobs: list[NewJob]) -> list[int]:
    values = []
    args: list[Any] = []
    for j in jobs:
        if j.run_after is not None:
            values.append("(0, NOW(6), NOW(6), GREATEST(NOW(6), %s), %s, %s, %s, %s, %s, %s)")
            args.append(j.run_after)
        else:
            values.append("(0, NOW(6), NOW(6), NOW(6) + INTERVAL %s MICROSECOND, %s, %s, %s, %s, %s, %s)")
            args.append(j.delay_us)
        args += [j.priority, j.attempts, j.attempts, j.custom_status, j.dedupe_key, j.body]
    sql = (f"{T}INSERT INTO {t} (state, updated_at, created_at, run_after, priority, attempts_allowed, "
           f"attempts_left, custom_status, dedupe_key, body) VALUES ")
    step, mode = _autoinc(cur)
    if int(mode) == 2:
        # interleaved autoinc: a multi-row insert's ids are not consecutive, so one row at a time
        return [_insert_one(cur, sql + v, _args_of(j)) for v, j in zip(values, jobs)]
    cur.execute(sql + ", ".join(values), args)
    first = int(cur.lastrowid)
    # "simple inserts" get consecutive values (lock mode 0/1), spaced by the increment
    return [first + k * int(step) for k in range(len(jobs))]


def _autoinc(cur: Any) -> tuple[int, int]:
    """The session's auto-increment step and the server's lock mode, asked once per connection (neither
    changes under an open session: the step is a session variable, the lock mode read-only)."""
    conn = cur.connection
    known = getattr(conn, "_queue_autoinc", None)
    if known is None:
        cur.execute("SELECT @@auto_increment_increment, @@innodb_autoinc_lock_mode")
        step, mode = cur.fetchone()
        known = conn._queue_autoinc = (int(step), int(mode))
    return known


def _args_of(j: NewJob) -> list[Any]:
    head: list[Any] = [j.run_after if j.run_after is not None else j.delay_us]
    return head + [j.priority, j.attempts, j.attempts, j.custom_status, j.dedupe_key, j.body]


def _insert_one(cur: Any, sql: str, args: list[Any]) -> int:
    cur.execute(sql, args)
    return int(cur.lastrowid)


# -- dequeue ------------------------------------------------------------------------

@dataclass
class ClaimedRow:
    local_id: int
    body: str
    priority: int
    attempts_allowed: int
    attempts_left: int
    custom_status: str
    created_at: dt.datetime
    lease_until: dt.datetime
    claim: Claim


def claim_jobs(conn: pymysql.connections.Connection, db: str, table: str, limit: int,
               lease_us: int, *, fifo: bool = False) -> list[ClaimedRow]:
    """Claim up to ``limit`` ready NEW jobs (``FOR UPDATE SKIP LOCKED``)."""
    t = qualified(db, table)
    order = "local_id" if fifo else "priority, run_after, local_id"
    conn.begin()
    try:
        with conn.cursor() as cur:
            cur.execute(f"{T}SELECT NOW(6)")
            now = cur.fetchone()[0]
            cur.execute(
                f"{T}SELECT local_id FROM {t} WHERE state = 0 AND run_after <= %s "
                f"ORDER BY {order} LIMIT %s FOR UPDATE SKIP LOCKED",
                (now, limit),
            )
            ids = [int(r[0]) for r in cur.fetchall()]
            if not ids:
                conn.commit()
                return []
            token = secrets.token_hex(16)
            lease_until = now + dt.timedelta(microseconds=lease_us)
            marks = ",".join(["%s"] * len(ids))
            cur.execute(
                f"{T}UPDATE {t} SET state = 1, updated_at = %s, claim_token = %s, lease_until = %s, "
                f"attempts_left = attempts_left - 1 WHERE local_id IN ({marks}) AND state = 0",
                (now, token, lease_until, *ids),
            )
            cur.execute(
                f"{T}SELECT local_id, body, priority, attempts_allowed, attempts_left, custom_status, created_at "
                f"FROM {t} WHERE local_id IN ({marks}) AND state = 1 AND updated_at = %s AND claim_token = %s",
                (*ids, now, token),
            )
            rows = {int(r[0]): r for r in cur.fetchall()}
        conn.commit()
    except BaseException:
        rollback_quietly(conn)
        raise
    out = []
    for local in ids:  # keep the dequeue order
        r = rows.get(local)
        if r is None:
            continue
        allowed, left = int(r[3]), int(r[4])
        out.append(ClaimedRow(local, r[1], int(r[2]), allowed, left, r[5], r[6], lease_until,
                              Claim(token, now, allowed - left)))
    return out


# -- fenced updates -------------------------------------------------------------------

@dataclass
class Finish:
    local_id: int
    claim: Claim
    success: bool
    retry_delay_us: int = 0
    custom_status: str | None = None


def finish_jobs(conn: pymysql.connections.Connection, db: str, table: str,
                items: list[Finish]) -> list[str]:
    """Ack: IPR -> OK, or on failure -> NEW after a delay (FAIL when no attempts are left).

    Each update addresses the claimed row's full primary key and its token, and
    leaves the token on the row. Per item, in one transaction: ``OK`` (this ack
    finished the job), else what the row says (:func:`why_missed`):
    ``ALREADY_ACKED``, ``STALE_CLAIM`` or ``NOT_FOUND``.
    """
    t = qualified(db, table)
    hit = []
    conn.begin()
    try:
        with conn.cursor() as cur:
            for it in items:
                if it.success:
                    cur.execute(
                        f"{T}UPDATE {t} SET state = 2, updated_at = NOW(6), lease_until = NULL, "
                        "custom_status = COALESCE(%s, custom_status) "
                        "WHERE local_id = %s AND state = 1 AND updated_at = %s AND claim_token = %s",
                        (it.custom_status, it.local_id, it.claim.claimed_at, it.claim.token),
                    )
                else:
                    cur.execute(
                        f"{T}UPDATE {t} SET state = IF(attempts_left > 0, 0, 3), updated_at = NOW(6), "
                        "run_after = NOW(6) + INTERVAL %s MICROSECOND, lease_until = NULL, "
                        "custom_status = COALESCE(%s, custom_status) "
                        "WHERE local_id = %s AND state = 1 AND updated_at = %s AND claim_token = %s",
                        (it.retry_delay_us, it.custom_status, it.local_id, it.claim.claimed_at, it.claim.token),
                    )
                hit.append(cur.rowcount == 1)
            missed = [(it.local_id, it.claim) for it, ok in zip(items, hit) if not ok]
            why = why_missed(cur, t, missed) if missed else {}
        conn.commit()
    except BaseException:
        rollback_quietly(conn)
        raise
    return ["OK" if ok else why[it.local_id] for it, ok in zip(items, hit)]


def why_missed(cur: Any, t: str, items: list[tuple[int, Claim]]) -> dict[int, str]:
    """Why a claim-fenced ack matched no row, per local id: ``ALREADY_ACKED`` (the row is out of IPR and still
    carries this claim's token: an ack with this claim finished it, and nobody claimed it since),
    ``NOT_FOUND`` (no row of that id) or ``STALE_CLAIM`` (the row is someone else's now, or back in NEW
    without a claim). Reads by ``local_id`` alone, so every partition of the table is probed: only for the
    items that missed."""
    marks = ",".join(["%s"] * len(items))
    cur.execute(f"{T}SELECT local_id, state, claim_token FROM {t} WHERE local_id IN ({marks})",
                [local for local, _ in items])
    rows: dict[int, list[tuple[int, str | None]]] = {}
    for local, state, token in cur.fetchall():
        rows.setdefault(int(local), []).append((int(state), token))
    return {local: answer_for(claim, rows.get(local, [])) for local, claim in items}


def answer_for(claim: Claim, rows: list[tuple[int, str | None]]) -> str:
    """The answer to an ack whose fenced update missed, from the rows of its id ((state, claim token) each)."""
    if not rows:
        return "NOT_FOUND"
    if any(state != 1 and token == claim.token for state, token in rows):
        return "ALREADY_ACKED"
    return "STALE_CLAIM"


def extend_leases(conn: pymysql.connections.Connection, db: str, table: str,
                  items: list[tuple[int, Claim]], lease_us: int) -> list[bool]:
    """Push ``lease_until`` to now + lease (never shorter); the claim stays valid."""
    return _fenced_updates(
        conn,
        f"{T}UPDATE {qualified(db, table)} SET lease_until = GREATEST(lease_until, NOW(6) + INTERVAL %s MICROSECOND) "
        "WHERE local_id = %s AND state = 1 AND updated_at = %s AND claim_token = %s AND lease_until >= NOW(6)",
        [(lease_us, local, claim.claimed_at, claim.token) for local, claim in items],
    )


def _fenced_updates(conn: pymysql.connections.Connection, sql: str, rows: list[tuple[Any, ...]]) -> list[bool]:
    """Run one claim-fenced UPDATE per row in one transaction; True where it hit its row."""
    out = []
    conn.begin()
    try:
        with conn.cursor() as cur:
            for args in rows:
                cur.execute(sql, args)
                out.append(cur.rowcount == 1)
        conn.commit()
    except BaseException:
        rollback_quietly(conn)
        raise
    return out


@dataclass
class Checkpoint:
    local_id: int
    claim: Claim
    body: str | None
    to_pending: bool
    run_after: dt.datetime | None
    delay_us: int
    attempts: int | None
    custom_status: str | None


def checkpoint_jobs(conn: pymysql.connections.Connection, db: str, table: str,
                    items: list[Checkpoint]) -> list[bool]:
    """Save progress of claimed jobs: new body / status / attempts; optionally back to NEW."""
    t = qualified(db, table)
    out = []
    conn.begin()
    try:
        with conn.cursor() as cur:
            for it in items:
                fence = (it.local_id, it.claim.claimed_at, it.claim.token)
                if it.to_pending:
                    if it.run_after is not None:
                        ra_sql, ra_arg = "GREATEST(NOW(6), %s)", it.run_after
                    else:
                        ra_sql, ra_arg = "NOW(6) + INTERVAL %s MICROSECOND", it.delay_us
                    cur.execute(
                        f"{T}UPDATE {t} SET state = 0, updated_at = NOW(6), run_after = {ra_sql}, "
                        "claim_token = NULL, lease_until = NULL, body = COALESCE(%s, body), "
                        "attempts_left = COALESCE(%s, attempts_left), "
                        "attempts_allowed = GREATEST(attempts_allowed, COALESCE(%s, 0)), "
                        "custom_status = COALESCE(%s, custom_status) "
                        "WHERE local_id = %s AND state = 1 AND updated_at = %s AND claim_token = %s",
                        (ra_arg, it.body, it.attempts, it.attempts, it.custom_status, *fence),
                    )
                else:
                    cur.execute(
                        f"{T}UPDATE {t} SET body = COALESCE(%s, body), "
                        "attempts_left = COALESCE(%s, attempts_left), "
                        "attempts_allowed = GREATEST(attempts_allowed, COALESCE(%s, 0)), "
                        "custom_status = COALESCE(%s, custom_status) "
                        "WHERE local_id = %s AND state = 1 AND updated_at = %s AND claim_token = %s",
                        (it.body, it.attempts, it.attempts, it.custom_status, *fence),
                    )
                out.append(cur.rowcount == 1)
        conn.commit()
    except BaseException:
        rollback_quietly(conn)
        raise
    return out


# -- reaper -----------------------------------------------------------------------------

def reap_expired(conn: pymysql.connections.Connection, db: str, table: str, limit: int = 500) -> tuple[int, int]:
    """Return IPR jobs whose lease expired to NEW, or to FAIL when no attempts are left.

    Returns (to_pending, to_failed). Rows being acked right now are locked and
    skipped; their ack decides.
    """
    t = qualified(db, table)
    conn.begin()
    try:
        with conn.cursor() as cur:
            cur.execute(f"{T}SELECT NOW(6)")
            now = cur.fetchone()[0]
            cur.execute(
                f"{T}SELECT local_id, updated_at, attempts_left FROM {t} WHERE state = 1 AND lease_until < %s "
                "LIMIT %s FOR UPDATE SKIP LOCKED",
                (now, limit),
            )
            rows = cur.fetchall()
            pending = failed = 0
            for local, updated, left in rows:
                cur.execute(
                    f"{T}UPDATE {t} SET state = IF(attempts_left > 0, 0, 3), updated_at = %s, run_after = %s, "
                    "claim_token = NULL, lease_until = NULL "
                    "WHERE local_id = %s AND state = 1 AND updated_at = %s",
                    (now, now, local, updated),
                )
                if cur.rowcount:
                    if int(left) > 0:
                        pending += 1
                    else:
                        failed += 1
        conn.commit()
    except BaseException:
        rollback_quietly(conn)
        raise
    return pending, failed


def release_jobs(conn: pymysql.connections.Connection, db: str, table: str,
                 items: list[tuple[int, Claim]]) -> list[bool]:
    """Give claimed-but-unstarted jobs back (a broker letting go of its buffer):
    IPR -> NEW at once, the attempt refunded. Fenced like an ack."""
    return _fenced_updates(
        conn,
        f"{T}UPDATE {qualified(db, table)} SET state = 0, updated_at = NOW(6), run_after = NOW(6), "
        "claim_token = NULL, lease_until = NULL, attempts_left = LEAST(attempts_allowed, attempts_left + 1) "
        "WHERE local_id = %s AND state = 1 AND updated_at = %s AND claim_token = %s",
        [(local, claim.claimed_at, claim.token) for local, claim in items],
    )
