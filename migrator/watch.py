"""Live progress of a migration for foreground commands (rich).

Polls the migration record (``command.status``) and renders the phase, a copy
progress bar with rate and ETA, the catch-up pass table and the freeze. Used by
``migrator split --yes`` (and move, move-partition) and ``migrator status --watch``.
"""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console, Group
from rich.live import Live
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table

from migrator import command
from migrator.config import Config

FINAL = {"done", "cleaned", "aborted", "rolled_back", "failed"}


def pass_table(passes: list[dict[str, Any]], last: int = 8) -> Table:
    t = Table(title="catch-up passes", expand=False)
    for col in ("#", "events", "duration", "apply/s", "writes/s", "lag", "pred. freeze", "converged"):
        t.add_column(col, justify="right")
    for p in passes[-last:]:
        t.add_row(str(p.get("number")), f"{p.get('events', 0):,}", f"{p.get('duration_s', 0):.3f}s",
                  f"{p.get('apply_rate', 0):,.0f}", f"{p.get('write_rate', 0):,.0f}", f"{p.get('lag_s', 0):.3f}s",
                  f"{p.get('predicted_freeze_ms', 0):.0f} ms", "yes" if p.get("converged") else "")
    return t


def render(st: dict[str, Any], progress: Progress, task: Any) -> Group:
    c = st.get("copy") or {}
    total = max(int(c.get("est_rows") or 0), int(c.get("rows") or 0), 1)
    progress.update(task, completed=int(c.get("rows") or 0), total=total,
                    description=f"copy {c.get('done', 0)}/{c.get('tables', 0)} tables")
    head = (f"[bold]{st['id']}[/]: phase [cyan]{st['phase']}[/]"
            + (" (paused)" if st.get("paused") else "")
            + (" (cutover postponed)" if st.get("postpone_cutover") else ""))
    parts: list[Any] = [head, progress]
    if st.get("passes"):
        parts.append(pass_table(st["passes"]))
    if st.get("predicted_freeze_ms") is not None:
        parts.append(f"predicted freeze {st['predicted_freeze_ms']:.0f} ms")
    if st.get("freeze_ms") is not None:
        parts.append(f"[green]write freeze {st['freeze_ms']:.0f} ms[/]")
    if st.get("error"):
        parts.append(f"[yellow]note: {st['error']}[/]")
    return Group(*parts)


def follow(config: Config, mid: str, *, every: float = 0.5, timeout: float | None = None,
           console: Console | None = None, until: set[str] | None = None) -> dict[str, Any]:
    """Render live until the migration reaches a phase in ``until`` (default: final ones)."""
    until = until or FINAL
    console = console or Console()
    progress = Progress(TextColumn("{task.description}"), BarColumn(),
                        TextColumn("{task.completed:,}/{task.total:,} rows"), TimeRemainingColumn(), console=console)
    task = progress.add_task("copy", total=1)
    deadline = None if timeout is None else time.monotonic() + timeout
    st = command.status(config, mid)
    with Live(render(st, progress, task), console=console, refresh_per_second=4, transient=False) as live:
        while st["phase"] not in until:
            if deadline is not None and time.monotonic() > deadline:
                break
            time.sleep(every)
            st = command.status(config, mid)
            live.update(render(st, progress, task))
    return st
