"""The operator's view of migrations: status assembly and live rendering (rich).

Runs in the operator's terminal. :func:`overview` adds to a migration's record
(``command.status``) what an operator asks first: progress per shard db
(tables done, rows), the copy rate and ETA, and the live RQ workers with the
job each one runs. :func:`render` draws it (with the last cutover attempts and
when the pipeline tries again); :func:`follow` redraws it live until the
migration reaches a final phase. Where the output is not a terminal (a log
file, a pipe), :func:`follow_events` prints the same progress as events
instead, one per line: :class:`Tracker` reads what a migration recorded since
it last looked, :class:`RebalanceTracker` the moves or batches of a rebalance
or a batched split. Used by ``migrator status [--watch]`` and by ``migrator
split/move/move-partition/rebalance --yes``.

Every follower reads through one ZooKeeper session for as long as it follows (a
:class:`~migrator.fleet.zk.PatientSession`, the caller's or one of its own): when
ZooKeeper goes away it waits for it (``--zk-patience``), reads again once it is
back, and says so in one line (an event of kind ``zookeeper``); what it missed
meanwhile is in the record and is reported at the next read.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field
from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from migrator.engine.records import (
    Attempt,
    AttemptsNode,
    CatchupNode,
    CatchupPass,
    NextTry,
    Number,
    PhaseChange,
    Record,
    Stopped,
    TableProgress,
)
from migrator.fleet.config import Config
from migrator.fleet.model import shard_runs
from migrator.fleet.zk import PATIENCE_S, ZK, PatientSession
from migrator.ops import command

FINAL = {"done", "cleaned", "aborted", "rolled_back", "failed"}


class CopyStatus(Record):
    """The ``copy`` part of a migration's status: tables, rows and bytes copied (and, from
    :func:`overview`, the rate, the ETA and the sums per shard db)."""

    tables: int = 0
    done: int = 0
    rows: int = 0
    est_rows: int = 0
    bytes: int = 0
    rows_per_s: Number | None = None
    eta_s: Number | None = None
    per_shard: list[dict[str, Any]] = Field(default_factory=list)


class SpecStatus(Record):
    """What a status shows of a migration's spec."""

    source_master: str | None = None
    target_master: str | None = None
    shards: list[int] | None = None


class MigrationStatus(Record):
    """A migration's status (``command.status``, :func:`overview`), read back by what renders it."""

    id: str = ""
    phase: str = ""
    paused: bool = False
    postpone_cutover: bool = False
    error: str | None = None
    stopped: Stopped | None = None
    spec: SpecStatus | None = None
    copy_: CopyStatus = Field(default_factory=CopyStatus, alias="copy")
    passes: list[CatchupPass] = Field(default_factory=list)
    cutover_attempts: list[Attempt] = Field(default_factory=list)
    cutover_next_try: NextTry | None = None
    predicted_freeze_ms: Number | None = None
    freeze_ms: Number | None = None
    verify_mismatches: int | None = None
    workers: list[dict[str, Any]] | None = None


# -- assembling the view ---------------------------------------------------------------------------------

def per_shard(per_table: list[Any]) -> list[dict[str, Any]]:
    """Copy progress summed per shard db: tables done, rows, estimated rows."""
    out: dict[str, dict[str, Any]] = {}
    for t in TableProgress.parse_list(per_table):
        s = out.setdefault(t.db, {"db": t.db, "tables": 0, "done": 0, "rows": 0, "est_rows": 0, "bytes": 0})
        s["tables"] += 1
        s["done"] += 1 if t.done else 0
        s["rows"] += t.rows
        s["est_rows"] += t.est_rows
        s["bytes"] += t.bytes
    return [out[k] for k in sorted(out)]


def copy_rate(per_table: list[Any], now: float | None = None) -> tuple[float, float | None]:
    """(rows/s since the first chunk, seconds left) from the tables' progress nodes.

    The ETA is None when nothing was copied yet, 0 when every table is done."""
    now = time.time() if now is None else now
    tables = TableProgress.parse_list(per_table)
    started = [t.started_at for t in tables if t.started_at]
    rows = sum(t.rows for t in tables)
    if not started or not rows:
        return 0.0, None
    all_done = all(t.done for t in tables)
    end = max((t.finished_at or now for t in tables), default=now) if all_done else now
    elapsed = max(end - min(started), 1e-3)
    rate = rows / elapsed
    if all_done:
        return rate, 0.0
    left = sum(t.rows_left for t in tables if not t.done)
    return rate, left / rate if rate > 0 else None


def workers(config: Config) -> list[dict[str, Any]]:
    """Live RQ workers on the configured Redis: name, state, queues, current job (and its migration)."""
    from redis.exceptions import RedisError
    from rq import Worker

    from migrator.fleet import redis_client

    out = []
    try:
        conn = redis_client.connect(config, socket_connect_timeout=2, socket_timeout=5)
        for w in Worker.all(connection=conn):
            job = w.get_current_job()
            state = w.get_state()
            out.append({"name": w.name, "state": str(getattr(state, "value", state)), "queues": w.queue_names(),
                        "job": job.id if job else None, "job_description": job.description if job else None,
                        "migration": (job.meta or {}).get("migration") if job else None,
                        "step": (job.meta or {}).get("step") if job else None})
    except RedisError as exc:
        return [{"name": "?", "state": f"redis unreachable: {exc}", "queues": [], "job": None}]
    return sorted(out, key=lambda w: w["name"])


def overview(config: Config, migration_id: str, *, with_workers: bool = True, zk: ZK | None = None) -> dict[str, Any]:
    """``command.status`` of one migration plus per-shard progress, copy rate, ETA and workers (``zk``: a
    session the caller holds, else one is opened)."""
    st = command.status(config, migration_id, zk=zk)
    c = st["copy"]
    rate, eta = copy_rate(c["per_table"])
    c["rows_per_s"] = round(rate, 1)
    c["eta_s"] = None if eta is None else round(eta, 1)
    c["per_shard"] = per_shard(c["per_table"])
    if with_workers:
        st["workers"] = workers(config)
    return st


def listing(config: Config, *, with_workers: bool = True, zk: ZK | None = None) -> dict[str, Any]:
    out = command.status(config, zk=zk)
    if with_workers:
        out["workers"] = workers(config)
    return out


# -- rendering -------------------------------------------------------------------------------------

def _duration(s: float | None) -> str:
    if s is None:
        return "unknown"
    s = int(round(s))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}h{m:02d}m{sec:02d}s" if h else (f"{m}m{sec:02d}s" if m else f"{sec}s")


def pass_table(passes: list[Any], last: int = 8) -> Table:
    t = Table(title="catch-up passes", expand=False)
    for col in ("#", "delta (events)", "duration", "apply/s", "writes/s", "lag", "pred. freeze", "converged"):
        t.add_column(col, justify="right")
    for p in CatchupPass.parse_list(passes[-last:]):
        t.add_row(str(p.number), f"{p.events:,}", f"{p.duration_s:.3f}s", f"{p.apply_rate:,.0f}",
                  f"{p.write_rate:,.0f}", f"{p.lag_s:.3f}s", f"{p.predicted_freeze_ms:.0f} ms",
                  "yes" if p.converged else "")
    return t


def attempts_table(attempts: list[Any], last: int = 5) -> Table:
    """The last cutover attempts: when, outcome, the reason (a refusal's names its cause), the freeze."""
    t = Table(title=f"cutover attempts (last {min(last, len(attempts))} of {len(attempts)})", expand=False)
    for col in ("when", "outcome", "reason", "freeze"):
        t.add_column(col, overflow="fold", justify="right" if col == "freeze" else "left")
    for a in Attempt.parse_list(attempts[-last:]):
        outcome, _, reason = str(a.outcome or "?").partition(": ")
        t.add_row(clock(a.at), Text(outcome), Text(reason),  # plain text: no markup
                  "" if a.freeze_ms is None else f"{a.freeze_ms:.0f} ms")
    return t


def shard_table(shards: list[dict[str, Any]]) -> Table:
    t = Table(title="copy per shard", expand=False)
    for col in ("shard db", "tables done", "rows", "est. rows"):
        t.add_column(col, justify="right" if col != "shard db" else "left")
    for s in shards:
        t.add_row(s["db"], f"{s['done']}/{s['tables']}", f"{s['rows']:,}", f"{s['est_rows']:,}")
    return t


def worker_table(ws: list[dict[str, Any]]) -> Table:
    t = Table(title=f"workers ({len(ws)})", expand=False)
    for col in ("worker", "state", "queues", "current job"):
        t.add_column(col, overflow="fold")
    for w in ws:
        job = w.get("job_description") or w.get("job") or ""
        t.add_row(w["name"], w["state"], ",".join(w.get("queues") or []), job)
    return t


def migrations_table(migrations: list[dict[str, Any]]) -> Table:
    t = Table(title="migrations")
    t.add_column("id", overflow="fold")
    for col in ("phase", "kind", "shards", "source", "target", "note"):
        t.add_column(col)
    for m in migrations:
        stopped = MigrationStatus.parse(m).stopped
        note = "paused" if m["paused"] else (f"STOPPED in {stopped.step}" if stopped else (m["error"] or ""))[:60]
        t.add_row(m["id"], m["phase"], m["kind"], ",".join(map(str, m["shards"])), m["source"], m["target"], note)
    return t


def new_progress(console: Console | None = None) -> tuple[Progress, Any]:
    progress = Progress(TextColumn("{task.description}"), BarColumn(),
                        TextColumn("{task.completed:,}/{task.total:,} rows"), TimeRemainingColumn(),
                        console=console)
    return progress, progress.add_task("copy", total=1)


def render(status: dict[str, Any], progress: Progress, task: Any) -> Group:
    st = MigrationStatus.parse(status)
    c = st.copy_
    progress.update(task, completed=c.rows, total=max(c.est_rows, c.rows, 1),
                    description=f"copy {c.done}/{c.tables} tables")
    spec = st.spec
    head = (f"[bold]{st.id}[/]: phase [cyan]{st.phase}[/]"
            + (" [yellow](paused)[/]" if st.paused else "")
            + (" [yellow](cutover postponed)[/]" if st.postpone_cutover else "")
            + (f"  {spec.source_master} -> {spec.target_master}, shards {spec.shards}" if spec else ""))
    parts: list[Any] = [head, progress]
    if c.rows_per_s is not None:
        parts.append(f"copy rate {c.rows_per_s:,.0f} rows/s, ETA " + ("done" if c.eta_s == 0 else _duration(c.eta_s)))
    if c.per_shard:
        parts.append(shard_table(c.per_shard))
    if st.passes:
        parts.append(pass_table(st.passes))
    if st.cutover_attempts:
        parts.append(attempts_table(st.cutover_attempts))
    if st.cutover_next_try:
        parts.append(next_try_text(st.cutover_next_try))
    if st.predicted_freeze_ms is not None:
        parts.append(f"predicted freeze {st.predicted_freeze_ms:.0f} ms")
    if st.freeze_ms is not None:
        parts.append(f"[green]last write freeze {st.freeze_ms:.0f} ms[/]")
    if st.stopped:
        parts.append(f"[bold red]stopped in {st.stopped.step}:[/] {escape(str(st.stopped.reason))}\n"
                     f"[bold]next:[/] {escape(str(st.stopped.next))}")
    elif st.error:
        parts.append(f"[yellow]note: {escape(str(st.error))}[/]")
    if st.workers is not None:
        parts.append(worker_table(st.workers))
    return Group(*parts)


def render_listing(out: dict[str, Any]) -> Group:
    parts: list[Any] = [migrations_table(out["migrations"])]
    if "workers" in out:
        parts.append(worker_table(out["workers"]))
    return Group(*parts)


@contextmanager
def patient(config: Config, session: PatientSession | None = None, *, patience_s: float = PATIENCE_S,
            then: str = "") -> Iterator[PatientSession]:
    """``session``, or one of the follower's own (closed after it) that waits ``patience_s`` for ZooKeeper."""
    if session is not None:
        yield session
        return
    with PatientSession(config, patience_s=patience_s, then=then) as own:
        yield own


def reconnects(session: PatientSession, subject: str) -> list[Event]:
    """An event (kind ``zookeeper``) for each time ``session`` came back from ZooKeeper going away since the
    last look: the one line a follower prints about it."""
    return [Event("zookeeper", subject, time.time(), o.text(), o.as_dict()) for o in session.reconnected()]


def follow_again(migration_id: str, *, by_the_command: bool = False) -> str:
    """What a follower's give-up line says to do once ZooKeeper is back (``by_the_command``: running the
    command that launched it again follows it too, as it takes up what an earlier run stored)."""
    again = ", as does the same command" if by_the_command else ""
    if migration_id.startswith("rb-"):
        return (f"{migration_id} goes on in the workers (its RQ chain advances it): `migrator status {migration_id}` "
                f"shows it once ZooKeeper is back{again}")
    return (f"{migration_id} goes on in the workers: `migrator status {migration_id} --watch` follows it again "
            f"once ZooKeeper is back{again}")


def follow(config: Config, migration_id: str, *, every: float = 0.5, timeout: float | None = None,
           console: Console | None = None, until: set[str] | None = None,
           with_workers: bool = False, session: PatientSession | None = None,
           patience_s: float = PATIENCE_S) -> dict[str, Any]:
    """Render live until the migration reaches a phase in ``until`` (default: final ones), or the
    pipeline stopped on a step (the record's ``stopped``: it will not go on by itself). Reads through
    ``session`` (or one of its own): see the module doc."""
    until = until or FINAL
    console = console or Console()
    progress, task = new_progress(console)
    deadline = None if timeout is None else time.monotonic() + timeout
    with patient(config, session, patience_s=patience_s, then=follow_again(migration_id)) as ps:
        def read(zk: ZK) -> dict[str, Any]:
            return overview(config, migration_id, with_workers=with_workers, zk=zk)

        st = ps.call(read)
        with Live(render(st, progress, task), console=console, refresh_per_second=4, transient=False) as live:
            while st["phase"] not in until and not MigrationStatus.parse(st).stopped:
                if deadline is not None and time.monotonic() > deadline:
                    break
                time.sleep(every)
                st = ps.call(read)
                for ev in reconnects(ps, migration_id):
                    console.print(ev.line(), markup=False, highlight=False)
                live.update(render(st, progress, task))
    console.line()
    return st


# -- progress as events (a log file, a script) ------------------------------------------------------

@dataclass(frozen=True)
class Event:
    """One thing a migration did, read from its record: what the CLI prints as one line (or one JSON
    line) when its output is not a terminal. ``kind``: ``phase`` (a phase change), ``copy`` (copy progress,
    at most every :data:`Tracker.COPY_EVERY_S`), ``pass`` (a catch-up pass), ``attempt`` (a cutover attempt
    and its outcome), ``next_try`` (when the pipeline tries the cutover again), ``stopped`` (the pipeline
    gave up on a step), ``batch`` (a batch, or a move, of a batched split or a rebalance changed state)."""

    kind: str
    migration: str
    at: float
    text: str
    data: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        return f"{clock(self.at)} {self.migration}: {self.text}"

    def as_dict(self) -> dict[str, Any]:
        return {"event": self.kind, "migration": self.migration, "at": round(self.at, 3), "text": self.text,
                "data": self.data}


def clock(at: float) -> str:
    """An epoch time as the local ``HH:MM:SS`` of a log line."""
    return time.strftime("%H:%M:%S", time.localtime(at))


def attempt_text(a: Any) -> str:
    """A cutover attempt as ``refused: <reason>`` / ``flipped: write freeze 120 ms``."""
    a = Attempt.parse(a)
    outcome = str(a.outcome or "?")
    if outcome.startswith("flipped"):
        return f"{outcome}: write freeze {a.freeze_ms or 0:.0f} ms"
    return outcome


def next_try_text(n: Any, now: float | None = None) -> str:
    now = time.time() if now is None else now
    n = NextTry.parse(n)
    return (f"next cutover try (attempt {n.attempt}) at {clock(n.at)} "
            f"(in {_duration(max(0.0, n.at - now))}); the pipeline retries until {clock(n.until or n.at)}")


def pass_text(p: Any) -> str:
    p = CatchupPass.parse(p)
    return (f"catch-up pass {p.number}: {p.events:,} events in {p.duration_s:.2f}s, lag {p.lag_s:.2f}s, "
            f"predicted freeze {p.predicted_freeze_ms:.0f} ms" + (", converged" if p.converged else ""))


class Tracker:
    """What of one migration's record was already reported: each :meth:`poll` returns the events
    recorded since the last one (phase changes, catch-up passes, cutover attempts, the next try, a stop).
    Reads only ZooKeeper, so it follows the pipeline across workers and a ``migrator resume ID``."""

    #: copy progress is reported at most this often (a copy of thousands of tables would flood a log)
    COPY_EVERY_S = 30.0

    def __init__(self, migration_id: str, *, kinds: set[str] | None = None):
        self.migration_id = migration_id
        self.kinds = kinds
        self.history_seen = 0
        self.passes_seen: set[tuple[Any, Any]] = set()
        self.attempt_seen = 0.0
        self.next_try_seen: float | None = None
        self.stopped_seen: float | None = None
        self.copy_at = 0.0
        self.copy_last: tuple[int, int] | None = None

    def poll(self, zk: Any) -> tuple[list[Event], Any]:
        """The new events, and the migration's state as read."""
        return self.events(self.read(zk))

    def read(self, zk: Any) -> Snapshot:
        """What :meth:`events` needs of the record, read first: a read that fails (ZooKeeper went away) leaves
        what was reported as it was, and the next one reports everything since."""
        from migrator.engine import copy as copy_mod
        from migrator.engine.migration import MigrationStore, Node, Phase

        store = MigrationStore(zk)
        st, _ = store.state(self.migration_id)
        now = time.time()
        tables = (copy_mod.table_records(zk, self.migration_id)
                  if st.phase == Phase.COPYING and now - self.copy_at >= self.COPY_EVERY_S else None)
        catchup = CatchupNode.parse(store.get_progress(self.migration_id, Node.CATCHUP)[0])
        attempts = AttemptsNode.parse(store.get_progress(self.migration_id, Node.CUTOVER_ATTEMPTS)[0])
        return Snapshot(st, now, tables, catchup, attempts)

    def events(self, snap: Snapshot) -> tuple[list[Event], Any]:
        """The events of ``snap`` not reported yet (it reads nothing), and the migration's state."""
        from migrator.engine.migration import Phase

        st, now = snap.state, snap.at
        out: list[Event] = []
        for h in PhaseChange.parse_list(st.history[self.history_seen:]):
            text = f"phase {h.to}" + (f" (from {h.from_})" if h.from_ else "")
            if h.error and (h.from_, h.to) != ("cutover", "converged"):
                text += f": {h.error}"  # an attempt undone says why in its own line
            out.append(Event("phase", self.migration_id, h.when or now, text,
                             {"from": h.from_, "to": h.to, "who": h.who, "error": h.error}))
        self.history_seen = len(st.history)
        if snap.tables is not None:
            tables = snap.tables
            rows, done = sum(t.rows for t in tables), sum(1 for t in tables if t.done)
            if tables and (rows, done) != self.copy_last:
                rate, eta = copy_rate(tables, now)
                est = sum(t.est_rows for t in tables)
                out.append(Event("copy", self.migration_id, now,
                                 f"copy {done}/{len(tables)} tables, {rows:,}/{est:,} rows, {rate:,.0f} rows/s, "
                                 f"ETA {_duration(eta)}", {"tables": len(tables), "done": done, "rows": rows,
                                                           "est_rows": est, "rows_per_s": round(rate, 1),
                                                           "eta_s": None if eta is None else round(eta, 1)}))
                self.copy_last = (rows, done)
            self.copy_at = now
        for p in snap.catchup.passes:
            key = (p.number, p.started_at)
            if key not in self.passes_seen:
                self.passes_seen.add(key)
                out.append(Event("pass", self.migration_id, p.started_at or now, pass_text(p), p.dump()))
        node = snap.attempts
        for a in node.attempts:
            if a.at > self.attempt_seen:
                self.attempt_seen = a.at
                shown = a.dump()
                out.append(Event("attempt", self.migration_id, a.at, f"cutover attempt {attempt_text(a)}",
                                 {k: shown[k] for k in ("outcome", "freeze_ms", "steps_ms", "blockers") if k in shown}))
        nxt = node.next_try
        if nxt and nxt.at != self.next_try_seen and not st.stopped and st.phase in (
                Phase.CONVERGED, Phase.CATCHING_UP):
            self.next_try_seen = nxt.at
            out.append(Event("next_try", self.migration_id, now, next_try_text(nxt, now), nxt.dump()))
        if st.stopped:
            stopped = Stopped.parse(st.stopped)
            if stopped.at != self.stopped_seen:
                self.stopped_seen = stopped.at
                out.append(Event("stopped", self.migration_id, stopped.at or now,
                                 f"stopped in {stopped.step}: {stopped.reason} (next: {stopped.next})",
                                 dict(st.stopped)))
        if self.kinds is not None:
            out = [e for e in out if e.kind in self.kinds]
        return sorted(out, key=lambda e: e.at), st


@dataclass(frozen=True)
class Snapshot:
    """What one :meth:`Tracker.read` read of a migration's record: its state (and when), the copy's tables
    (when a copy line is due), the catch-up passes and the cutover attempts."""

    state: Any
    at: float
    tables: list[TableProgress] | None
    catchup: CatchupNode
    attempts: AttemptsNode


def follow_events(config: Config, migration_id: str, emit: Callable[[Event], None], *, every: float = 0.5,
                  timeout: float | None = None, until: set[str] | None = None,
                  with_workers: bool = False, session: PatientSession | None = None,
                  patience_s: float = PATIENCE_S) -> dict[str, Any]:
    """Emit each event of ``migration_id`` as it is recorded (:class:`Tracker`) until it reaches a phase in ``until``
    (default: final ones) or the pipeline stopped on a step; then its status (as :func:`overview`, without
    the workers unless ``with_workers``). The line-by-line twin of :func:`follow`, for output that is not a
    terminal; reads through ``session`` (or one of its own), as :func:`follow`."""
    until = until or FINAL
    deadline = None if timeout is None else time.monotonic() + timeout
    tracker = Tracker(migration_id)
    with patient(config, session, patience_s=patience_s, then=follow_again(migration_id)) as ps:
        while True:
            events, st = ps.call(tracker.poll)
            for ev in reconnects(ps, migration_id) + events:
                emit(ev)
            if st.phase.value in until or st.stopped:
                break
            if deadline is not None and time.monotonic() > deadline:
                break
            time.sleep(every)
        return ps.call(lambda zk: overview(config, migration_id, with_workers=with_workers, zk=zk))


class RebalanceTracker:
    """The events of a rebalance or a batched split (``rb-...``): each move's (or batch's) change of state
    (kind ``batch``), and the events of the migrations it runs (a :class:`Tracker` each; a batch's only
    from its cutover on: its attempts, the next try, a stop). A move is looked at once more after it
    ended, for its last attempt."""

    def __init__(self, rid: str):
        self.rid = rid
        self.states: dict[int, str] = {}
        self.trackers: dict[str, Tracker] = {}
        self.ended: set[str] = set()

    def poll(self, zk: Any) -> list[Event]:
        """The new events. Reads everything first, so a read that fails (ZooKeeper went away) reports nothing
        and leaves what was reported as it was."""
        from migrator.engine.migration import MigrationNotFound
        from migrator.ops.rebalance.record import Move, RecordStore

        rec, _ = RecordStore(zk).get(self.rid)
        read: dict[str, tuple[Tracker, Snapshot | None]] = {}
        for m in rec["moves"]:
            migration_id = m["migration"]
            if m["state"] != "waiting" and migration_id not in self.ended:
                tracker = self.trackers.get(migration_id) or Tracker(
                    migration_id, kinds={"attempt", "next_try", "stopped"} if "batch_of" in m else None)
                try:
                    read[migration_id] = (tracker, tracker.read(zk))
                except MigrationNotFound:
                    # claimed, not stored yet: its first poll after it is stored reports it all
                    read[migration_id] = (tracker, None)
        now, out = time.time(), []
        for m in rec["moves"]:
            migration_id, state = m["migration"], m["state"]
            if migration_id in read:
                tracker, snap = read[migration_id]
                self.trackers[migration_id] = tracker
                if snap is not None:
                    out += tracker.events(snap)[0]
                if state in ("done", "failed"):
                    self.ended.add(migration_id)
            if self.states.get(m["index"]) == state:
                continue
            self.states[m["index"]] = state
            move = Move.parse(m)
            what = (f"batch {move.index} ({move.tables:,} tables)" if "batch_of" in m
                    else f"move {move.index} {move.source} -> {move.target}")
            text = f"{what}, shards {shard_runs(m.get('runs') or [])}: {state}"
            if state == "done" and move.freeze_ms is not None:
                text += f", write freeze {move.freeze_ms:.0f} ms"
            if move.error:
                text += f": {move.error}"
            out.append(Event("batch", migration_id, now, text, {k: m.get(k) for k in (
                "index", "batch_of", "source", "target", "runs", "tables", "state", "freeze_ms", "error")}))
        return out


def rollback_events(config: Config, migration_id: str, since: float, *, every: float = 0.5,
                    timeout: float | None = None, session: PatientSession | None = None,
                    patience_s: float = PATIENCE_S) -> Iterator[tuple[str, dict[str, Any]]]:
    """What a rollback handed to the workers at ``since`` does, as it is recorded: ``("pass",
    row)`` for each reverse pass, ``("freeze", {})`` when a fenced flip back starts (phase
    ``rolling_back``), ``("attempt", row)`` for each attempt stopped before the flip, then one of
    ``("rolled_back", result)``, ``("stopped", stopped)`` (the chain gave up: reason and next
    step), ``("ended", {"phase": ...})`` (the migration left ``done`` some other way) or
    ``("timeout", {})``; ``("zookeeper", outage)`` each time ZooKeeper came back after it went away.
    Reads only the record in ZooKeeper, so it follows the chain across workers and a ``migrator
    resume ID``; through ``session`` (or one of its own), as :func:`follow`."""
    from migrator.engine.migration import MigrationStore, Node, Phase
    from migrator.engine.rollback import PASSES_NODE

    deadline = None if timeout is None else time.monotonic() + timeout
    seen_pass, seen_attempt, seen_freeze = 0, 0.0, 0.0

    def read(zk: ZK) -> tuple[Any, AttemptsNode, dict[str, Any] | None]:
        store = MigrationStore(zk)
        st, _ = store.state(migration_id)
        node = AttemptsNode.parse(store.get_progress(migration_id, PASSES_NODE)[0])
        result = (store.get_progress(migration_id, Node.ROLLBACK)[0] or {}) if st.phase == Phase.ROLLED_BACK else None
        return st, node, result

    then = (f"the rollback of {migration_id} goes on in the workers: `migrator status {migration_id}` shows it once "
            "ZooKeeper is back")
    with patient(config, session, patience_s=patience_s, then=then) as ps:
        while True:
            st, node, result = ps.call(read)
            for ev in reconnects(ps, migration_id):
                yield "zookeeper", {"text": ev.text, **ev.data}
            for p in node.passes:
                if (p.started_at or 0) >= since and (p.number or 0) > seen_pass:
                    seen_pass = p.number or 0
                    yield "pass", p.dump()
            # a freeze lasts well under a poll: the phase history says each flip back that began
            for h in PhaseChange.parse_list(st.history):
                at = h.when or 0.0
                if h.to == Phase.ROLLING_BACK.value and at >= since and at > seen_freeze:
                    seen_freeze = at
                    yield "freeze", {"at": at}
            for a in node.attempts:
                if a.at >= since and a.at > seen_attempt:
                    seen_attempt = a.at
                    if a.outcome != "flipped back":
                        yield "attempt", a.dump()
            if result is not None:
                yield "rolled_back", {"freeze_ms": st.freeze_ms, "flipped_epoch": st.flipped_epoch, **result}
                return
            stopped = Stopped.parse(st.stopped)
            if stopped.step == "rollback" and (stopped.at or 0) >= since:
                yield "stopped", st.stopped
                return
            if st.phase not in (Phase.DONE, Phase.ROLLING_BACK):
                yield "ended", {"phase": st.phase.value, "error": st.error}
                return
            if deadline is not None and time.monotonic() > deadline:
                yield "timeout", {}
                return
            time.sleep(every)


def follow_all(config: Config, *, every: float = 1.0, timeout: float | None = None,
               console: Console | None = None, session: PatientSession | None = None,
               patience_s: float = PATIENCE_S) -> dict[str, Any]:
    """Render every migration and the workers live (until ``timeout`` or Ctrl-C), through ``session`` (or one
    of its own), as :func:`follow`."""
    console = console or Console()
    deadline = None if timeout is None else time.monotonic() + timeout
    with patient(config, session, patience_s=patience_s,
                 then="the migrations go on in the workers: `migrator status --watch` again once it is back") as ps:
        def read(zk: ZK) -> dict[str, Any]:
            return listing(config, zk=zk)

        out = ps.call(read)
        with Live(render_listing(out), console=console, refresh_per_second=2, transient=False) as live:
            while deadline is None or time.monotonic() < deadline:
                time.sleep(every)
                out = ps.call(read)
                for ev in reconnects(ps, "every migration"):
                    console.print(ev.line(), markup=False, highlight=False)
                live.update(render_listing(out))
    console.line()
    return out


def copy_progress(console: Console, *, total_rows: int = 1) -> tuple[Progress, Callable[[dict[str, Any]], None]]:
    """A progress bar for ``migrator copy --sync``: one overall bar with rate and ETA, fed per chunk."""
    progress, task = new_progress(console)
    seen: dict[str, dict[str, Any]] = {}

    def on_progress(view: dict[str, Any]) -> None:
        seen[f"{view['db']}.{view['table']}"] = view
        views = TableProgress.parse_list(list(seen.values()))
        rows, est, done = sum(v.rows for v in views), sum(v.est_rows for v in views), sum(1 for v in views if v.done)
        progress.update(task, completed=rows, total=max(total_rows, est, rows, 1),
                        description=f"copy {done}/{len(seen)} tables")

    return progress, on_progress
