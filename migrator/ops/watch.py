"""The operator's view of migrations: status assembly and live rendering (rich).

Runs in the operator's terminal. :func:`overview` adds to a migration's record
(``command.status``) what an operator asks first: progress per shard db
(tables done, rows), the copy rate and ETA, and the live RQ workers with the
job each one runs. :func:`render` draws it; :func:`follow` redraws it live
until the migration reaches a final phase. Used by ``migrator status [--watch]``
and by ``migrator split/move/move-partition --yes``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from migrator.fleet.config import Config
from migrator.ops import command

FINAL = {"done", "cleaned", "aborted", "rolled_back", "failed"}


# -- assembling the view ---------------------------------------------------------------------------------

def per_shard(per_table: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Copy progress summed per shard db: tables done, rows, estimated rows."""
    out: dict[str, dict[str, Any]] = {}
    for t in per_table:
        s = out.setdefault(t["db"], {"db": t["db"], "tables": 0, "done": 0, "rows": 0, "est_rows": 0, "bytes": 0})
        s["tables"] += 1
        s["done"] += 1 if t.get("done") else 0
        s["rows"] += int(t.get("rows") or 0)
        s["est_rows"] += int(t.get("est_rows") or 0)
        s["bytes"] += int(t.get("bytes") or 0)
    return [out[k] for k in sorted(out)]


def copy_rate(per_table: list[dict[str, Any]], now: float | None = None) -> tuple[float, float | None]:
    """(rows/s since the first chunk, seconds left) from the tables' progress nodes.

    The ETA is None when nothing was copied yet, 0 when every table is done."""
    now = time.time() if now is None else now
    started = [float(t["started_at"]) for t in per_table if t.get("started_at")]
    rows = sum(int(t.get("rows") or 0) for t in per_table)
    if not started or not rows:
        return 0.0, None
    all_done = all(t.get("done") for t in per_table)
    end = max((float(t.get("finished_at") or now) for t in per_table), default=now) if all_done else now
    elapsed = max(end - min(started), 1e-3)
    rate = rows / elapsed
    if all_done:
        return rate, 0.0
    left = sum(max(0, int(t.get("est_rows") or 0) - int(t.get("rows") or 0))
               for t in per_table if not t.get("done"))
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


def overview(config: Config, mid: str, *, with_workers: bool = True) -> dict[str, Any]:
    """``command.status`` of one migration plus per-shard progress, copy rate, ETA and workers."""
    st = command.status(config, mid)
    c = st["copy"]
    rate, eta = copy_rate(c["per_table"])
    c["rows_per_s"] = round(rate, 1)
    c["eta_s"] = None if eta is None else round(eta, 1)
    c["per_shard"] = per_shard(c["per_table"])
    if with_workers:
        st["workers"] = workers(config)
    return st


def listing(config: Config, *, with_workers: bool = True) -> dict[str, Any]:
    out = command.status(config)
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


def pass_table(passes: list[dict[str, Any]], last: int = 8) -> Table:
    t = Table(title="catch-up passes", expand=False)
    for col in ("#", "delta (events)", "duration", "apply/s", "writes/s", "lag", "pred. freeze", "converged"):
        t.add_column(col, justify="right")
    for p in passes[-last:]:
        t.add_row(str(p.get("number")), f"{p.get('events', 0):,}", f"{p.get('duration_s', 0):.3f}s",
                  f"{p.get('apply_rate', 0):,.0f}", f"{p.get('write_rate', 0):,.0f}", f"{p.get('lag_s', 0):.3f}s",
                  f"{p.get('predicted_freeze_ms', 0):.0f} ms", "yes" if p.get("converged") else "")
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
        stopped = m.get("stopped")
        note = "paused" if m["paused"] else (f"STOPPED in {stopped['step']}" if stopped else (m["error"] or ""))[:60]
        t.add_row(m["id"], m["phase"], m["kind"], ",".join(map(str, m["shards"])), m["source"], m["target"], note)
    return t


def new_progress(console: Console | None = None) -> tuple[Progress, Any]:
    progress = Progress(TextColumn("{task.description}"), BarColumn(),
                        TextColumn("{task.completed:,}/{task.total:,} rows"), TimeRemainingColumn(),
                        console=console)
    return progress, progress.add_task("copy", total=1)


def render(st: dict[str, Any], progress: Progress, task: Any) -> Group:
    c = st.get("copy") or {}
    total = max(int(c.get("est_rows") or 0), int(c.get("rows") or 0), 1)
    progress.update(task, completed=int(c.get("rows") or 0), total=total,
                    description=f"copy {c.get('done', 0)}/{c.get('tables', 0)} tables")
    spec = st.get("spec") or {}
    head = (f"[bold]{st['id']}[/]: phase [cyan]{st['phase']}[/]"
            + (" [yellow](paused)[/]" if st.get("paused") else "")
            + (" [yellow](cutover postponed)[/]" if st.get("postpone_cutover") else "")
            + (f"  {spec.get('source_master')} -> {spec.get('target_master')}, shards {spec.get('shards')}"
               if spec else ""))
    parts: list[Any] = [head, progress]
    if "rows_per_s" in c:
        eta = c.get("eta_s")
        parts.append(f"copy rate {c['rows_per_s']:,.0f} rows/s, ETA "
                     + ("done" if eta == 0 else _duration(eta)))
    if c.get("per_shard"):
        parts.append(shard_table(c["per_shard"]))
    if st.get("passes"):
        parts.append(pass_table(st["passes"]))
    if st.get("predicted_freeze_ms") is not None:
        parts.append(f"predicted freeze {st['predicted_freeze_ms']:.0f} ms")
    if st.get("freeze_ms") is not None:
        parts.append(f"[green]last write freeze {st['freeze_ms']:.0f} ms[/]")
    stopped = st.get("stopped")
    if stopped:
        parts.append(f"[bold red]stopped in {stopped.get('step')}:[/] {escape(str(stopped.get('reason')))}\n"
                     f"[bold]next:[/] {escape(str(stopped.get('next')))}")
    elif st.get("error"):
        parts.append(f"[yellow]note: {escape(str(st['error']))}[/]")
    if "workers" in st:
        parts.append(worker_table(st["workers"]))
    return Group(*parts)


def render_listing(out: dict[str, Any]) -> Group:
    parts: list[Any] = [migrations_table(out["migrations"])]
    if "workers" in out:
        parts.append(worker_table(out["workers"]))
    return Group(*parts)


def follow(config: Config, mid: str, *, every: float = 0.5, timeout: float | None = None,
           console: Console | None = None, until: set[str] | None = None,
           with_workers: bool = False) -> dict[str, Any]:
    """Render live until the migration reaches a phase in ``until`` (default: final ones), or the
    pipeline stopped on a step (the record's ``stopped``: it will not go on by itself)."""
    until = until or FINAL
    console = console or Console()
    progress, task = new_progress(console)
    deadline = None if timeout is None else time.monotonic() + timeout
    st = overview(config, mid, with_workers=with_workers)
    with Live(render(st, progress, task), console=console, refresh_per_second=4, transient=False) as live:
        while st["phase"] not in until and not st.get("stopped"):
            if deadline is not None and time.monotonic() > deadline:
                break
            time.sleep(every)
            st = overview(config, mid, with_workers=with_workers)
            live.update(render(st, progress, task))
    console.line()
    return st


def rollback_events(config: Config, mid: str, since: float, *, every: float = 0.5,
                    timeout: float | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
    """What a rollback handed to the workers at ``since`` does, as it is recorded: ``("pass",
    row)`` for each reverse pass, ``("freeze", {})`` when a fenced flip back starts (phase
    ``rolling_back``), ``("attempt", row)`` for each attempt stopped before the flip, then one of
    ``("rolled_back", result)``, ``("stopped", stopped)`` (the chain gave up: reason and next
    step), ``("ended", {"phase": ...})`` (the migration left ``done`` some other way) or
    ``("timeout", {})``. Reads only the record in ZooKeeper, so it follows the chain across
    workers and a ``migrator resume ID``."""
    from migrator.engine.migration import MigrationStore, Node, Phase
    from migrator.engine.rollback import PASSES_NODE
    from migrator.fleet import zk as zk_mod
    from migrator.fleet.config import load_credentials

    deadline = None if timeout is None else time.monotonic() + timeout
    seen_pass, seen_attempt, seen_freeze = 0, 0.0, 0.0
    with zk_mod.connect(config, load_credentials(config)) as zk:
        store = MigrationStore(zk)
        while True:
            st, _ = store.state(mid)
            node = store.get_progress(mid, PASSES_NODE)[0] or {}
            for p in node.get("passes") or []:
                if float(p.get("started_at") or 0) >= since and int(p.get("number") or 0) > seen_pass:
                    seen_pass = int(p["number"])
                    yield "pass", p
            # a freeze lasts well under a poll: the phase history says each flip back that began
            for h in st.history:
                at = float(h.get("when") or 0)
                if h.get("to") == Phase.ROLLING_BACK.value and at >= since and at > seen_freeze:
                    seen_freeze = at
                    yield "freeze", {"at": at}
            for a in node.get("attempts") or []:
                at = float(a.get("at") or 0)
                if at >= since and at > seen_attempt:
                    seen_attempt = at
                    if a.get("outcome") != "flipped back":
                        yield "attempt", a
            if st.phase == Phase.ROLLED_BACK:
                result = store.get_progress(mid, Node.ROLLBACK)[0] or {}
                yield "rolled_back", {"freeze_ms": st.freeze_ms, "flipped_epoch": st.flipped_epoch, **result}
                return
            stopped = st.stopped or {}
            if stopped.get("step") == "rollback" and float(stopped.get("at") or 0) >= since:
                yield "stopped", stopped
                return
            if st.phase not in (Phase.DONE, Phase.ROLLING_BACK):
                yield "ended", {"phase": st.phase.value, "error": st.error}
                return
            if deadline is not None and time.monotonic() > deadline:
                yield "timeout", {}
                return
            time.sleep(every)


def follow_all(config: Config, *, every: float = 1.0, timeout: float | None = None,
               console: Console | None = None) -> dict[str, Any]:
    """Render every migration and the workers live (until ``timeout`` or Ctrl-C)."""
    console = console or Console()
    deadline = None if timeout is None else time.monotonic() + timeout
    out = listing(config)
    with Live(render_listing(out), console=console, refresh_per_second=2, transient=False) as live:
        while deadline is None or time.monotonic() < deadline:
            time.sleep(every)
            out = listing(config)
            live.update(render_listing(out))
    console.line()
    return out


def copy_progress(console: Console, *, total_rows: int = 1) -> tuple[Progress, Callable[[dict[str, Any]], None]]:
    """A progress bar for ``migrator copy --sync``: one overall bar with rate and ETA, fed per chunk."""
    progress, task = new_progress(console)
    seen: dict[str, dict[str, Any]] = {}

    def on_progress(view: dict[str, Any]) -> None:
        seen[f"{view['db']}.{view['table']}"] = view
        rows = sum(int(v.get("rows") or 0) for v in seen.values())
        est = sum(int(v.get("est_rows") or 0) for v in seen.values())
        done = sum(1 for v in seen.values() if v.get("done"))
        progress.update(task, completed=rows, total=max(total_rows, est, rows, 1),
                        description=f"copy {done}/{len(seen)} tables")

    return progress, on_progress
