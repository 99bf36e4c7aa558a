"""``migrator rebalance``: measure the fleet, plan moves that even it out, print the plan, run it.

The plan: each move (shards, bytes, ETA, predicted freeze), the ranges in the map
before and after, and a bar chart of the objective per pair before and after.
``--yes`` stores the rebalance and follows it; ``migrator status | pause | resume |
abort REBALANCE_ID`` act on all its moves (the dispatch is in
:mod:`migrator.cli.migrate`, which calls :func:`show_status` and the ops functions).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import typer
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from migrator.cli.helpers import FollowOpt, ZkPatienceOpt, duration, human_bytes, load_config, shard_runs
from migrator.cli.inputs import DURATION_METAVAR, AddPairOpt, DrainOpt, at_least, checked, duration_parser
from migrator.cli.options import (
    ChunkTargetOpt,
    KillBlockersOpt,
    KillBlockersRowsOpt,
    LockRetryOpt,
    UsageProblem,
    build_options,
    detach_needs_yes,
    dry_run_or_yes,
)
from migrator.cli.report import Report, print_json
from migrator.errors import ExitCode
from migrator.fleet.zk import PATIENCE_S, PatientSession
from migrator.ops import watch
from migrator.ops.rebalance import command as rebalance
from migrator.ops.rebalance.planner import OBJECTIVES

console = Console()
BAR_WIDTH = 16


def _fmt(objective: str, v: float) -> str:
    if objective == "bytes":
        return human_bytes(v)
    if objective == "rows":
        return f"{v:,.0f} rows"
    return f"{v:,.1f}/s"


def bars(plan: dict[str, Any]) -> Table:
    """Per pair: the objective before and after, as bars against the band around the mean."""
    obj, mean, t = plan["objective"], plan["mean"], plan["threshold"]
    before, after = plan["load_before"], plan["load_after"]
    top = max([*before.values(), *after.values(), mean * (1 + t)]) or 1.0
    tab = Table(title=f"{obj} per pair (mean {_fmt(obj, mean)}, band ±{t:.0%}; | marks the band)", box=None)
    tab.add_column("pair")
    tab.add_column("before", justify="right")
    tab.add_column("")
    tab.add_column("after", justify="right")
    tab.add_column("")
    lo_mark, hi_mark = int(mean * (1 - t) / top * BAR_WIDTH), int(mean * (1 + t) / top * BAR_WIDTH)

    def bar(v: float, ok: bool) -> Text:
        n = int(round(v / top * BAR_WIDTH))
        cells = ["█" if i < n else " " for i in range(BAR_WIDTH + 1)]
        for m in (lo_mark, hi_mark):
            if cells[m] == " ":
                cells[m] = "|"
        return Text("".join(cells), style="green" if ok else "red")

    for p in plan["pairs"]:
        drained = p in plan["drain"]
        lo, hi = (0.0, 0.0) if drained else (mean * (1 - t), mean * (1 + t))
        ok_b = lo - 1e-6 * mean <= before[p] <= hi + 1e-6 * mean
        ok_a = lo - 1e-6 * mean <= after[p] <= hi + 1e-6 * mean
        name = p + (" (drain)" if drained else " (new)" if p in plan["add"] else "")
        tab.add_row(name, _fmt(obj, before[p]), bar(before[p], ok_b), _fmt(obj, after[p]), bar(after[p], ok_a))
    return tab


def render_plan(out: dict[str, Any]) -> Group:
    moves = Table(title="moves (a wave: moves that run at once, one per pair)")
    for col in ("#", "wave", "from", "to", "shards", "bytes", "ETA", "freeze"):
        moves.add_column(col, justify="right" if col in ("#", "wave", "bytes", "ETA", "freeze") else "left")
    for i, m in enumerate(out["moves"]):
        what = (f"{m['queue']}[{m['partition']}] (shard {m['runs'][0][0]}, on its own)" if m.get("queue")
                else f"{shard_runs(m['runs'])} ({m['shards']})")
        moves.add_row(str(i), str(m["wave"]), m["source"], m["target"], what,
                      human_bytes(m["bytes"]), duration(m["eta_s"]), f"{m['freeze_ms']:.0f} ms")
    lines = [
        Text(f"imbalance (max/mean of {out['objective']}) {out['imbalance_before']:.3f} -> "
             f"{out['imbalance_after']:.3f}; {len(out['moves'])} moves in {out['waves']} waves, "
             f"{human_bytes(out['bytes_moved'])} to copy; ranges in the map {len(out['ranges_before'])} -> "
             f"{len(out['ranges_after'])}; total ETA {duration(out['total_s'])} (rates: {out['rate_source']}); "
             f"planned in {out['plan_s']:.2f} s"),
    ]
    if out["unbalanced"]:
        lines.append(Text(f"still outside the band after the plan: {', '.join(out['unbalanced'])} "
                          "(a shard too big to place, or a pair with nothing at its range edges)", style="yellow"))
    ranges = Table(title="ranges after", box=None)
    for col in ("range", "pair"):
        ranges.add_column(col)
    for lo, hi, p in out["ranges_after"]:
        ranges.add_row(shard_runs([(lo, hi)]), p)
    return Group(moves, ranges, bars(out), *lines)


def show_status(cfg: Any, rid: str | None, as_json: bool) -> None:
    out = rebalance.status(cfg, rid)
    if as_json:
        print_json(out)
        return
    rows = out["rebalances"] if rid is None else [out]
    tab = Table(title="rebalances")
    for col in ("id", "phase", "done", "running", "waiting", "failed", "bytes done", "max at once"):
        tab.add_column(col)
    for s in rows:
        tab.add_row(s["id"], s["phase"] + (" (paused)" if s["paused"] else ""), str(s["done"]), str(s["running"]),
                    str(s["waiting"]), str(s["failed"]),
                    f"{human_bytes(s['bytes_done'])} / {human_bytes(s['bytes'])}", str(s["max_running"]))
    console.print(tab)
    if rid is not None:
        rec = out["record"]
        mt = Table(title="the batched move and its batches (each cut over on its own, one after another)"
                   if rec.get("kind") == "split" else "moves")
        for col in ("#", "migration", "from", "to", "shards", "tables", "bytes", "freeze", "state"):
            mt.add_column(col)
        for m in rec["moves"]:
            freeze = f"{m['freeze_ms']:.0f} ms" if m.get("freeze_ms") is not None else ""
            mt.add_row(str(m["index"]), m["migration"], m["source"], m["target"], shard_runs(m["runs"]),
                       str(m.get("tables") or ""), human_bytes(m["bytes"]), freeze,
                       m["state"] + (f": {m['error']}" if m.get("error") else ""))
        console.print(mt)
        batching = rec.get("batching") or {}
        if batching:
            console.print(f"batches: the first sized to {batching.get('limit')} tables for the budget of "
                          f"{batching['budget_ms']:.0f} ms, the later ones to the freezes measured", markup=False)


def follow(cfg: Any, rid: str, *, every: float = 2.0, timeout: float | None = None,
           emit: Callable[[watch.Event], None] | None = None, session: PatientSession | None = None,
           patience_s: float = PATIENCE_S) -> dict[str, Any]:
    """Advance until the rebalance ends (the RQ chain advances it too), emitting each event as it is
    recorded (:class:`~migrator.ops.watch.RebalanceTracker`; default: a line on stdout) and a line of
    counts whenever they change; the last summary. Through ``session`` (or one of its own, waiting
    ``patience_s`` for ZooKeeper): an advance and a read are safe to run again, so each is run again once
    ZooKeeper is back."""
    emit = emit or (lambda ev: print(ev.line(), flush=True))
    t0 = time.monotonic()
    last = None
    tracker = watch.RebalanceTracker(rid)
    with watch.patient(cfg, session, patience_s=patience_s, then=watch.follow_again(rid)) as ps:
        while True:
            out = ps.call(lambda zk: rebalance.advance(cfg, rid, zk=zk))
            events = ps.call(tracker.poll)
            for ev in watch.reconnects(ps, rid) + events:
                emit(ev)
            text = (f"{out['phase']}{' (paused)' if out['paused'] else ''}: {out['done']} done, "
                    f"{out['running']} running, {out['waiting']} waiting, {out['failed']} failed")
            if text != last:
                emit(watch.Event("rebalance", rid, time.time(), text, dict(out)))
                last = text
            if out["phase"] != "running" or out["paused"]:
                return out
            if timeout is not None and time.monotonic() - t0 > timeout:
                return out
            time.sleep(every)


def rebalance_cmd(
    objective: str = typer.Option("bytes", "--objective", help=f"What to even out: {', '.join(OBJECTIVES)}.",
                                  metavar="OBJECTIVE"),
    threshold: float = typer.Option(0.10, "--threshold", help="Every pair within this share of the mean (0 or "
                                                              "more).",
                                    callback=checked(at_least(0), "--threshold"), metavar="SHARE"),
    add_pair: AddPairOpt = [],  # noqa: B006 - typer's default, never mutated
    drain: DrainOpt = [],  # noqa: B006 - typer's default, never mutated
    max_moves_per_pair: int = typer.Option(1, "--max-moves-per-pair", min=1,
                                           help="Moves a pair takes part in at once.", metavar="N"),
    max_concurrent: int | None = typer.Option(None, "--max-concurrent", min=1,
                                              help="Moves running at once (default: no limit but "
                                                   "--max-moves-per-pair).",
                                              metavar="N"),
    freeze_budget_ms: int | None = typer.Option(None, "--freeze-budget-ms",
                                                help="Write-freeze budget of each move's cutover (ms; default 500).",
                                                metavar="MS"),
    max_lag: float | None = typer.Option(None, "--max-lag", help="Throttle each move's copy above this "
                                                                 "target standby lag (s; default 5).",
                                                                     metavar=DURATION_METAVAR,
                                                                         parser=duration_parser("--max-lag")),
    max_threads_running: int | None = typer.Option(None, "--max-threads-running",
                                                   help="Throttle each move's copy while its source is this "
                                                        "busy (Threads_running; default 50).", metavar="N"),
    cutover_retry_s: float | None = typer.Option(None, "--cutover-retry-s",
                                                 help="How long each move's pipeline retries a cutover that "
                                                      "stopped before the flip (s; default 600).", metavar="S"),
    lock_retry_s: LockRetryOpt = None,
    kill_blockers: KillBlockersOpt = None,
    kill_blockers_max_rows: KillBlockersRowsOpt = None,
    chunk_target_ms: ChunkTargetOpt = None,
    postpone_cutover: bool = typer.Option(False, "--postpone-cutover",
                                          help="Every move holds its cutover once caught up, until "
                                               "`migrator postpone RB --release`."),
    workers: int | None = typer.Option(None, "--workers", help="Tables each move copies at once (default 4).",
                                       metavar="N"),
    window: float = typer.Option(5.0, "--window", help="Seconds of binlog to sample write rates from.",
                                 callback=checked(at_least(0), "--window"), metavar=DURATION_METAVAR,
                                     parser=duration_parser("--window")),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan; store nothing (the default "
                                                          "without --yes)."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Run the plan on RQ workers and follow it."),
    detach: bool = typer.Option(False, "--detach", help="With --yes: start it and return."),
    as_json: bool = typer.Option(False, "--json", help="The plan as one JSON document on stdout (with --yes, "
                                                        "under `run`, the rebalance and how it ended)."),
    follow_: FollowOpt = False,
    zk_patience: ZkPatienceOpt = PATIENCE_S,
) -> None:
    """Measure each shard (bytes, rows, writes/s), plan moves that bring every pair within the threshold
    of the mean, moving few bytes and keeping the map compact; print the plan; with --yes run it."""
    if objective not in OBJECTIVES:
        raise UsageProblem(f"--objective {objective}: choose one of {', '.join(OBJECTIVES)}")
    dry_run_or_yes(dry_run, yes)
    detach_needs_yes(detach, yes)
    options = build_options(freeze_budget_ms=freeze_budget_ms, copy_workers=workers, max_passive_lag_s=max_lag,
                            max_threads_running=max_threads_running, cutover_retry_s=cutover_retry_s,
                            lock_retry_s=lock_retry_s, kill_blockers=kill_blockers,
                            kill_blockers_max_rows=kill_blockers_max_rows, chunk_target_ms=chunk_target_ms)
    cfg = load_config()
    with PatientSession(cfg, patience_s=zk_patience, then="nothing was stored: run it again once it is back") as ps:
        _run(cfg, ps, rep=Report(as_json, follow_ and yes and not detach), as_json=as_json, yes=yes, detach=detach,
             plan=lambda zk: rebalance.plan_live(cfg, objective=objective, threshold=threshold,
                                                 add_pairs=list(add_pair), drain=list(drain),
                                                 max_moves_per_pair=max_moves_per_pair,
                                                 max_concurrent=max_concurrent, window_s=window, zk=zk),
             start=lambda live, rid, zk: rebalance.start(cfg, live, max_concurrent=max_concurrent, options=options,
                                                         postpone_cutover=postpone_cutover, zk=zk, rid=rid))


def _run(cfg: Any, ps: PatientSession, *, rep: Report, as_json: bool, yes: bool, detach: bool,
         plan: Callable[[Any], Any], start: Callable[[Any, str, Any], str]) -> None:
    """Plan, print, and with ``yes`` store, start and follow, on the command's one patient session (each step is
    run again once ZooKeeper is back: the record's id is chosen once, so a store run twice stores one)."""
    live = ps.call(plan)
    out = live.as_dict()
    if not as_json:
        console.print(render_plan(out))
    rep.line("plan", out)
    if not yes:
        if not as_json:
            console.print("dry run: nothing was stored; run it with --yes", markup=False)
        rep.document(out)
        return
    if not live.plan.moves:
        rep.say("every pair is within the threshold: nothing to do")
        rep.document({**out, "run": None})
        return
    rid = rebalance.new_id()
    ps.then = (f"{rid} may be stored: `migrator status {rid}` shows it once ZooKeeper is back, and "
               f"`migrator resume {rid}` starts what it did not")
    ps.call(lambda zk: start(live, rid, zk))
    run = out["run"] = {"rebalance": rid, "followed": not detach}
    rep.say(f"rebalance {rid} started on RQ workers (start them with `migrator worker`); "
            f"`migrator status {rid}`, `migrator pause|resume|abort {rid}`")
    if detach:
        rep.document(out)
        return
    ps.then = watch.follow_again(rid)
    end = follow(cfg, rid, emit=rep.event, session=ps)
    run.update(end)
    rep.document(out)
    if end["phase"] != "done":
        print(f"error: {rid} ended {end['phase']} (see `migrator status {rid}`)", file=sys.stderr, flush=True)
        raise typer.Exit(int(end.get("exit_code") or ExitCode.REFUSED))  # the stopped move's cause
    rep.say(f"{rid} done: {end['done']} moves, at most {end['max_running']} at once")


def register(app: typer.Typer) -> None:
    """Add ``rebalance`` to the ``migrator`` app."""
    app.command("rebalance")(rebalance_cmd)
