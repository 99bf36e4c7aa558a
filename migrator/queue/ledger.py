"""The ledger: what a load run was promised and what it saw done, and the check
that proves nothing acknowledged was lost.

The load generator (:mod:`migrator.queue.load`) writes one SQLite file:

* ``enqueued``: every enqueue the service acknowledged (key, job id, call and
  ack times);
* ``executions``: every time a consumer ran a job (key, job id, claim,
  attempt, dequeue and finish times, and the ack's answer: OK, ALREADY_ACKED
  (a retried ack of this execution: its ack was done), STALE_CLAIM, NOT_FOUND,
  or NULL if no answer came back).

:func:`check_ledger` reads it back and asks the queue for the state of every
acknowledged job that the ledger did not see finished: each must exist and be
done or still pending, or it is *lost*. A job executed more than once is a
double execution; it is *allowed* when at most one of its executions was
acknowledged OK (the others lost their lease: at-least-once), and a *bug*
when two executions both got OK (the claim fence failed). ALREADY_ACKED
counts as OK: it answers an execution whose ack was done by an earlier try.

Runs wherever the load ran; the check needs the fleet config to look jobs up.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from migrator.fleet.config import Config
from migrator.queue.model import ACKED

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS enqueued (
  key TEXT PRIMARY KEY, job_id INTEGER NOT NULL, t_call REAL NOT NULL, t_ack REAL NOT NULL);
CREATE TABLE IF NOT EXISTS executions (
  key TEXT NOT NULL, job_id INTEGER NOT NULL, claim TEXT NOT NULL, attempt INTEGER NOT NULL,
  t_dequeue REAL NOT NULL, t_done REAL, ack TEXT);
CREATE INDEX IF NOT EXISTS executions_key ON executions (key);
"""


class Ledger:
    """Thread-safe appender over one SQLite file (batched commits)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(SCHEMA)
        self._lock = threading.Lock()
        self._pending = 0
        self._last = time.monotonic()

    def set_meta(self, **items: Any) -> None:
        with self._lock:
            self.db.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                                [(k, json.dumps(v)) for k, v in items.items()])
            self.db.commit()

    def meta(self) -> dict[str, Any]:
        with self._lock:
            return {k: json.loads(v) for k, v in self.db.execute("SELECT key, value FROM meta")}

    def enqueued(self, rows: list[tuple[str, int, float, float]]) -> None:
        with self._lock:
            self.db.executemany("INSERT OR REPLACE INTO enqueued VALUES (?, ?, ?, ?)", rows)
            self._tick(len(rows))

    def executed(self, rows: list[tuple[str, int, str, int, float, float | None, str | None]]) -> None:
        with self._lock:
            self.db.executemany("INSERT INTO executions VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
            self._tick(len(rows))

    def _tick(self, n: int) -> None:
        self._pending += n
        now = time.monotonic()
        if self._pending >= 500 or now - self._last > 0.25:
            self.db.commit()
            self._pending = 0
            self._last = now

    def flush(self) -> None:
        with self._lock:
            self.db.commit()
            self._pending = 0

    def close(self) -> None:
        self.flush()
        self.db.close()


def _pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    k = min(len(values) - 1, max(0, int(round(p / 100 * (len(values) - 1)))))
    return values[k]


@dataclass
class LedgerReport:
    queue: str
    enqueued: int = 0
    completed: int = 0
    pending: int = 0
    failed: int = 0
    lost: int = 0
    lost_ids: list[int] = field(default_factory=list)
    executions: int = 0
    double_allowed: int = 0
    double_bug: int = 0
    unacknowledged_executed: int = 0
    duration: float = 0.0
    enqueue_rate: float = 0.0
    complete_rate: float = 0.0
    enqueue_p50_ms: float | None = None
    enqueue_p99_ms: float | None = None
    e2e_p50_ms: float | None = None
    e2e_p99_ms: float | None = None
    #: per double-executed key: (key, executions, OK acks, "allowed"|"bug")
    doubles: list[tuple[str, int, int, str]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.lost == 0 and self.double_bug == 0

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["ok"] = self.ok
        d["doubles"] = self.doubles[:20]
        d["lost_ids"] = self.lost_ids[:20]
        return d

    def to_text(self) -> str:
        def ms(v: float | None) -> str:
            return "-" if v is None else f"{v:.1f} ms"

        lines = [
            f"queue {self.queue}: {self.enqueued} acknowledged enqueues over {self.duration:.1f}s",
            f"  done {self.completed}, still pending {self.pending}, failed {self.failed}, LOST {self.lost}",
            f"  executions {self.executions}; double executions: {self.double_allowed} allowed (lease expiry), "
            f"{self.double_bug} BUG (two OK acks)",
            f"  executed without an acknowledged enqueue (enqueue answer lost): {self.unacknowledged_executed}",
            f"  rates: enqueue {self.enqueue_rate:.0f}/s, complete {self.complete_rate:.0f}/s",
            f"  enqueue latency p50 {ms(self.enqueue_p50_ms)} p99 {ms(self.enqueue_p99_ms)}; "
            f"enqueue->done p50 {ms(self.e2e_p50_ms)} p99 {ms(self.e2e_p99_ms)}",
        ]
        for key, n, oks, verdict in self.doubles[:10]:
            lines.append(f"  double: {key} ran {n}x, {oks} OK ack(s): {verdict}")
        if self.lost_ids:
            lines.append(f"  lost job ids (first 10): {self.lost_ids[:10]}")
        lines.append("RESULT: " + ("OK" if self.ok else "FAILED"))
        return "\n".join(lines)


def check_ledger(config: Config, ledger_path: str | Path, *, service: Any = None) -> LedgerReport:
    """Prove every acknowledged enqueue exists and is done or pending; classify doubles."""
    path = Path(ledger_path)
    if not path.exists():
        from migrator.queue.errors import InvalidArgument

        raise InvalidArgument(f"no ledger at {path}: run `migrator queue load --ledger {path}` first")
    db = sqlite3.connect(str(path))
    try:
        meta = {k: json.loads(v) for k, v in db.execute("SELECT key, value FROM meta")}
        queue = meta.get("queue", "?")
        rep = LedgerReport(queue=queue)
        enq = {k: (jid, tc, ta) for k, jid, tc, ta in db.execute("SELECT key, job_id, t_call, t_ack FROM enqueued")}
        rep.enqueued = len(enq)
        execs: dict[str, list[tuple[int, float, float | None, str | None]]] = {}
        for key, jid, td, tdone, ack in db.execute(
                "SELECT key, job_id, t_dequeue, t_done, ack FROM executions ORDER BY t_dequeue"):
            execs.setdefault(key, []).append((jid, td, tdone, ack))
    finally:
        db.close()
    rep.executions = sum(len(v) for v in execs.values())
    done_keys = {k for k, v in execs.items() if any(a in ACKED for _, _, _, a in v)}
    rep.unacknowledged_executed = sum(1 for k in execs if k not in enq)
    for key, runs in execs.items():
        if len(runs) > 1:
            oks = sum(1 for r in runs if r[3] in ACKED)
            verdict = "bug" if oks > 1 else "allowed"
            if verdict == "bug":
                rep.double_bug += len(runs) - 1
            else:
                rep.double_allowed += len(runs) - 1
            rep.doubles.append((key, len(runs), oks, verdict))
    # ask the queue about everything the ledger did not see finished
    unknown = {k: v[0] for k, v in enq.items() if k not in done_keys}
    rep.completed = sum(1 for k in enq if k in done_keys)
    if unknown:
        own = service is None
        if own:
            from migrator.queue.service import QueueService

            service = QueueService(config)
        try:
            states = service.job_states(queue, list(unknown.values()))
        finally:
            if own:
                service.close()
        for _key, jid in unknown.items():
            s = states.get(jid)
            if s is None:
                rep.lost += 1
                rep.lost_ids.append(jid)
            elif s == "OK":
                rep.completed += 1  # finished, but the ack's answer never reached the ledger
            elif s == "FAIL":
                rep.failed += 1
            else:
                rep.pending += 1
    t0 = meta.get("started") or (min((v[1] for v in enq.values()), default=0.0))
    t1 = meta.get("ended") or time.time()
    rep.duration = max(1e-9, t1 - t0)
    rep.enqueue_rate = rep.enqueued / rep.duration
    rep.complete_rate = len(done_keys) / rep.duration
    lat = [(ta - tc) * 1000 for _, tc, ta in enq.values()]
    rep.enqueue_p50_ms, rep.enqueue_p99_ms = _pct(lat, 50), _pct(lat, 99)
    e2e = []
    for k, runs in execs.items():
        if k in enq:
            fin = [r[2] for r in runs if r[3] in ACKED and r[2] is not None]
            if fin:
                e2e.append((fin[0] - enq[k][2]) * 1000)
    rep.e2e_p50_ms, rep.e2e_p99_ms = _pct(e2e, 50), _pct(e2e, 99)
    return rep
