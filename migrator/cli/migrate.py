"""``migrator split / move / move-partition / preflight / copy / status / pause /
resume / abort / set / postpone``: the migration commands of the CLI.

Each command parses options, calls one function of :mod:`migrator.ops.command`
and prints its result; :func:`migrator.cli.main.main` turns a
:class:`~migrator.errors.MigratorError` into one line and an exit code.
The phase commands (``catchup``, ``verify``, ``cutover``, ``rollback``,
``cleanup``) live in :mod:`migrator.cli.phases`; :func:`register` adds them
after these.
"""

from __future__ import annotations

import json
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from migrator.cli import phases
from migrator.cli import rebalance as rebalance_cli
from migrator.engine.migration import Options
from migrator.ops import command
from migrator.ops.rebalance import command as rebalance_cmd

console = Console()
err_console = Console(stderr=True)


def _cfg() -> Any:
    from migrator.cli.main import load_config

    return load_config()


def _human_bytes(n: float) -> str:
    from migrator.cli.main import human_bytes

    return human_bytes(n)


def _duration(s: float) -> str:
    if s == float("inf"):
        return "unknown"
    s = int(round(s))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}h{m:02d}m{sec:02d}s" if h else (f"{m}m{sec:02d}s" if m else f"{sec}s")


FREEZE_HELP = "Longest write freeze allowed (ms; default 500)."
FENCE_HELP = ("How the source master is fenced: auto (default) and rename: LOCK TABLES + one queued RENAME per "
              "table, a move of more than 200 tables runs as batches sized for the freeze budget; gate: one "
              "migration whose master is closed by triggers (any number of tables, weaker guarantees: see "
              "docs/guarantees.md).")
VERBOSE_HELP = "List every table of a dry run (else summarised by table name at host scale)."


def _options(chunk_rows: int | None, chunk_target_ms: int | None, workers: int | None,
             max_lag: float | None, freeze_budget_ms: int | None = None, fence: str | None = None) -> Options:
    given = {k: v for k, v in {"chunk_rows": chunk_rows, "chunk_target_ms": chunk_target_ms,
                               "copy_workers": workers, "max_standby_lag_s": max_lag,
                               "freeze_budget_ms": freeze_budget_ms, "fence": fence}.items() if v is not None}
    try:
        return Options(**given)
    except Exception as exc:  # pydantic's message names the bad option
        raise typer.BadParameter(str(exc).splitlines()[-1]) from None


#: a dry run lists its tables one by one up to this many (more only with --verbose)
TABLES_LISTED = 30


def _runs(runs: list[Any]) -> str:
    return ",".join(f"{lo}-{hi}" if lo != hi else str(lo) for lo, hi in runs)


def _tables_table(est: Any, verbose: bool) -> Table:
    """The tables to copy: one row per table, or (at host scale) one per table name across shards."""
    if verbose or len(est.tables) <= TABLES_LISTED:
        t = Table(title="tables to copy")
        for col in ("table", "rows (est.)", "bytes"):
            t.add_column(col, justify="right" if col != "table" else "left")
        for te in est.tables:
            t.add_row(f"{te.db}.{te.table}", f"{te.rows:,}", _human_bytes(te.bytes))
    else:
        by_name: dict[str, list[Any]] = {}
        for te in est.tables:
            by_name.setdefault(te.table, []).append(te)
        t = Table(title=f"tables to copy, by name ({len(est.tables):,} tables; each per shard with --verbose)")
        for col in ("table", "shards", "rows (est.)", "bytes", "largest"):
            t.add_column(col, justify="right" if col != "table" else "left")
        for name in sorted(by_name):
            tes = by_name[name]
            big = max(tes, key=lambda x: x.bytes)
            t.add_row(name, f"{len(tes):,}", f"{sum(x.rows for x in tes):,}",
                      _human_bytes(sum(x.bytes for x in tes)), f"{big.db} {_human_bytes(big.bytes)}")
    total = [f"{est.rows:,}", _human_bytes(est.bytes)]
    t.add_row("total", *(total if len(t.columns) == 3 else ["", *total, ""]), style="bold")
    return t


def _batches_table(result: command.PlanResult) -> Table:
    spec, batches = result.spec, result.batches or []
    limit = batches[0]["limit"] if batches else 0
    t = Table(title=f"{len(batches)} batches of at most {limit} tables, sized for the freeze budget of "
                    f"{spec.options.freeze_budget_ms} ms (later batches adapt to the freezes measured), "
                    "one after another")
    for col in ("#", "shards", "tables", "bytes"):
        t.add_column(col, justify="right" if col != "shards" else "left")
    for i, b in enumerate(batches):
        t.add_row(str(i), f"{_runs(b['runs'])} ({b['shards']})", f"{b['tables']:,}", _human_bytes(b["bytes"]))
    return t


def _print_plan(result: command.PlanResult, as_json: bool, verbose: bool = False) -> None:
    if as_json:
        print(json.dumps(result.as_dict(), indent=2, default=str))
        return
    spec = result.spec
    what = (f"queue {spec.queue} partition {spec.partition} ({', '.join(spec.tables)})"
            if spec.kind == "queue_partition" else
            f"shards {_runs(spec.ranges())} ({len(spec.shards)})")
    head = "dry run: would move" if result.estimate is not None else \
        ("move" if not result.stored else "planned " + spec.id + ": move")
    console.print(f"{head} {what} from {spec.source_master}/{spec.source_slave} to "
                  f"{spec.target_master}/{spec.target_slave}", markup=False, highlight=False)
    if result.batches is not None:
        console.print(_batches_table(result))
    est = result.estimate
    if est is not None:
        console.print(_tables_table(est, verbose))
        console.print(f"copy rate {est.rows_per_s:,.0f} rows/s, {_human_bytes(est.bytes_per_s)}/s "
                      f"({est.rate_source}); ETA {_duration(est.eta_s)}. Nothing was stored or locked.",
                      markup=False, highlight=False)
        console.print(f"ETA {est.method}.", markup=False, highlight=False)
    elif result.stored:
        console.print(f"next: `migrator preflight {spec.id}`, then `migrator copy {spec.id}`",
                      markup=False, highlight=False)


def _launch_batches(res: command.PlanResult, yes: bool, detach: bool) -> None:
    """A move too big for one fence: its batches run as a chain of migrations (a rebalance record)."""
    cfg = _cfg()
    rid = rebalance_cmd.start_split(cfg, res.spec, paused=not yes)
    if not yes:
        console.print(f"planned {rid}: {len(res.batches or [])} batches, not started; start it with "
                      f"`migrator resume {rid}` (or drop it with `migrator abort {rid}`)", markup=False,
                      highlight=False)
        return
    console.print(f"running {rid} ({len(res.batches or [])} batches, one migration each) on RQ workers; start "
                  f"workers with `migrator worker`; `migrator status {rid}`, `migrator pause|resume|abort {rid}`",
                  markup=False, highlight=False)
    if detach:
        return
    end = rebalance_cli.follow(cfg, rid)
    if end["phase"] != "done":
        console.print(f"{rid} ended {end['phase']}{' (paused)' if end['paused'] else ''}: see "
                      f"`migrator status {rid}` for the batch that stopped and its error", markup=False,
                      highlight=False)
        raise typer.Exit(3)
    console.print(f"{rid} done: {end['done']} batches, longest write freeze {end['max_freeze_ms'] or 0:.0f} ms; "
                  "tombstones kept for rollback (per batch migration), cleanup scheduled", markup=False,
                  highlight=False)


def _maybe_launch(res: command.PlanResult, yes: bool, detach: bool) -> None:
    if res.batches is not None and res.estimate is None:
        _launch_batches(res, yes, detach)
        return
    if not yes or not res.stored:
        return
    from migrator.ops import watch

    cfg = _cfg()
    mid = res.spec.id
    job = command.launch(cfg, mid)
    console.print(f"running {mid} on RQ workers (first job {job}); start workers with `migrator worker`",
                  markup=False, highlight=False)
    if detach:
        return
    st = watch.follow(cfg, mid, console=console, until={"done", "cleaned", "aborted", "rolled_back", "failed"})
    stopped = st.get("stopped")
    if stopped and st["phase"] != "done":
        console.print(f"{mid} stopped in {stopped.get('step')} (phase {st['phase']}): {stopped.get('reason')}\n"
                      f"next: {stopped.get('next')}", markup=False, highlight=False)
        raise typer.Exit(3)
    if st["phase"] != "done":
        console.print(f"{mid} ended in phase {st['phase']}: {st.get('error') or ''}", markup=False)
        raise typer.Exit(1)
    console.print(f"{mid} done: write freeze {st.get('freeze_ms') or 0:.0f} ms; tombstones kept for rollback, "
                  "cleanup scheduled", markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    """Add the migration commands to the ``migrator`` app."""

    @app.command("split")
    def split(
        source: str = typer.Argument(..., help="The master whose ranges split, e.g. MySQL001A."),
        to: str | None = typer.Option(None, "--to", help="Target pair (its master); default: a spare pair."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Print shards, tables, rows, bytes, ETA; store nothing."),
        as_json: bool = typer.Option(False, "--json"),
        chunk_rows: int | None = typer.Option(None, "--chunk-rows", help="First chunk size (adapts after)."),
        chunk_target_ms: int | None = typer.Option(None, "--chunk-target-ms", help="Time target per chunk."),
        workers: int | None = typer.Option(None, "--workers", help="Tables copied at once by --sync."),
        max_lag: float | None = typer.Option(None, "--max-lag", help="Throttle above this target standby lag (s)."),
        freeze_budget_ms: int | None = typer.Option(None, "--freeze-budget-ms", help=FREEZE_HELP),
        fence: str | None = typer.Option(None, "--fence", help=FENCE_HELP),
        yes: bool = typer.Option(False, "--yes", "-y", help="Run the whole migration on RQ workers now."),
        detach: bool = typer.Option(False, "--detach", help="With --yes: do not follow progress."),
        verbose: bool = typer.Option(False, "--verbose", "-v", help=VERBOSE_HELP),
    ) -> None:
        """Move the upper half of every range on SOURCE to a spare pair (or --to).

        Without --yes it plans (records and locks); with --yes it also runs plan -> preflight -> copy ->
        catch-up passes -> verify -> cutover on RQ workers (`migrator worker`), cleanup scheduled."""
        res = command.plan_split(_cfg(), source, to, dry_run=dry_run, batches_ok=True,
                                 options=_options(chunk_rows, chunk_target_ms, workers, max_lag, freeze_budget_ms,
                                                  fence))
        _print_plan(res, as_json, verbose)
        _maybe_launch(res, yes and not dry_run, detach)

    @app.command("move")
    def move(
        shards: str = typer.Option(..., "--shards", help="Shards to move, e.g. 4-7 or 4,6."),
        to: str = typer.Option(..., "--to", help="Target pair (its master)."),
        dry_run: bool = typer.Option(False, "--dry-run"),
        as_json: bool = typer.Option(False, "--json"),
        chunk_rows: int | None = typer.Option(None, "--chunk-rows"),
        chunk_target_ms: int | None = typer.Option(None, "--chunk-target-ms"),
        workers: int | None = typer.Option(None, "--workers"),
        max_lag: float | None = typer.Option(None, "--max-lag"),
        freeze_budget_ms: int | None = typer.Option(None, "--freeze-budget-ms", help=FREEZE_HELP),
        fence: str | None = typer.Option(None, "--fence", help=FENCE_HELP),
        yes: bool = typer.Option(False, "--yes", "-y", help="Run the whole migration on RQ workers now."),
        detach: bool = typer.Option(False, "--detach"),
        verbose: bool = typer.Option(False, "--verbose", "-v", help=VERBOSE_HELP),
    ) -> None:
        """Move shards (all on one source pair) to another pair."""
        res = command.plan_move(_cfg(), shards, to, dry_run=dry_run, batches_ok=True,
                                options=_options(chunk_rows, chunk_target_ms, workers, max_lag, freeze_budget_ms,
                                                 fence))
        _print_plan(res, as_json, verbose)
        _maybe_launch(res, yes and not dry_run, detach)

    @app.command("move-partition")
    def move_partition(
        queue: str = typer.Option(..., "--queue", help="Queue name."),
        partition: int = typer.Option(..., "--partition", help="Partition index."),
        to: str = typer.Option(..., "--to", help="Target pair (its master)."),
        dry_run: bool = typer.Option(False, "--dry-run"),
        as_json: bool = typer.Option(False, "--json"),
        yes: bool = typer.Option(False, "--yes", "-y", help="Run the whole migration on RQ workers now."),
        detach: bool = typer.Option(False, "--detach"),
    ) -> None:
        """Move one queue partition's jobs table to another pair."""
        res = command.plan_move_partition(_cfg(), queue, partition, to, dry_run=dry_run)
        _print_plan(res, as_json)
        _maybe_launch(res, yes and not dry_run, detach)

    @app.command("preflight")
    def preflight(migration_id: str = typer.Argument(...), as_json: bool = typer.Option(False, "--json")) -> None:
        """Check every precondition of the copy; exits non-zero on a failure."""
        res = command.preflight(_cfg(), migration_id)
        if as_json:
            print(json.dumps(res.as_dict(), indent=2, default=str))
        else:
            for line in res.lines():
                console.print(line, markup=False, highlight=False)
            console.print(f"{len(res.failures)} failure(s), {len(res.warnings)} warning(s)", markup=False)
        if not res.ok:
            raise typer.Exit(6)

    @app.command("copy")
    def copy(
        migration_id: str = typer.Argument(...),
        sync: bool = typer.Option(False, "--sync", help="Copy in this process instead of RQ workers."),
        workers: int | None = typer.Option(None, "--workers", help="Threads for --sync."),
        queue: str | None = typer.Option(None, "--queue", help="RQ queue (default: the source pair's, which "
                                                                 "`migrator worker` serves)."),
    ) -> None:
        """Preflight, then copy schema and rows (RQ jobs; --sync runs here)."""
        cfg = _cfg()
        if not sync:
            from migrator.ops import steps

            queue = queue or steps.queue_of(cfg, migration_id)
            job = command.start_copy(cfg, migration_id, queue=queue)
            console.print(f"enqueued {job} on queue {queue!r}; follow with `migrator status {migration_id}`",
                          markup=False, highlight=False)
            return
        from migrator.ops import watch

        st = command.status(cfg, migration_id)
        progress, on_progress = watch.copy_progress(console, total_rows=int(st["copy"].get("est_rows") or 1))
        with progress:
            out = command.run_copy(cfg, migration_id, workers=workers, on_progress=on_progress)
        console.print(f"copied {out['rows']:,} rows ({_human_bytes(out['bytes'])}) in {out['seconds']:.1f}s; "
                      f"phase {out['phase']}", markup=False, highlight=False)

    @app.command("status")
    def status(
        migration_id: str | None = typer.Argument(None),
        as_json: bool = typer.Option(False, "--json", help="Everything as JSON (for scripts)."),
        watch_: bool = typer.Option(False, "--watch", "-w", help="Redraw live (until a final phase, or Ctrl-C)."),
        interval: float = typer.Option(1.0, "--interval", help="Seconds between redraws with --watch."),
        timeout: float | None = typer.Option(None, "--timeout", help="Stop watching after this many seconds."),
    ) -> None:
        """Every migration's phase and the live workers; with an ID: per-shard copy progress, copy rate and
        ETA, the catch-up pass table, predicted and last freeze, and the workers."""
        from migrator.ops import watch

        cfg = _cfg()
        if migration_id is not None and rebalance_cmd.is_rebalance_id(migration_id):
            rebalance_cli.show_status(cfg, migration_id, as_json)
            return
        if watch_ and not as_json:
            if migration_id is None:
                try:
                    watch.follow_all(cfg, every=interval, timeout=timeout, console=console)
                except KeyboardInterrupt:
                    pass
                return
            try:
                watch.follow(cfg, migration_id, every=interval, timeout=timeout, console=console, with_workers=True)
            except KeyboardInterrupt:
                pass
            return
        out = watch.listing(cfg) if migration_id is None else watch.overview(cfg, migration_id)
        if as_json:
            print(json.dumps(out, indent=2, default=str))
            return
        if migration_id is None:
            console.print(watch.render_listing(out))
            if rebalance_cmd.status(cfg)["rebalances"]:
                rebalance_cli.show_status(cfg, None, False)
            return
        progress, task = watch.new_progress(console)
        console.print(watch.render(out, progress, task))
        if out.get("history"):
            last = out["history"][-1]
            console.print(f"last change: {last.get('from') or '-'} -> {last['to']} by {last['who']}",
                          markup=False, highlight=False)

    @app.command("pause")
    def pause(migration_id: str = typer.Argument(...)) -> None:
        """Copy workers stop between chunks (resume with `migrator resume ID`); a rebalance id pauses
        all its moves and starts no new one."""
        if rebalance_cmd.is_rebalance_id(migration_id):
            out = rebalance_cmd.pause(_cfg(), migration_id)
            console.print(f"{migration_id} paused ({len(out['migrations'])} running moves paused)", markup=False)
            return
        out = command.pause(_cfg(), migration_id)
        console.print(f"{migration_id} paused in phase {out['phase']}", markup=False)

    @app.command("resume")
    def resume(migration_id: str = typer.Argument(...),
               queue: str | None = typer.Option(None, "--queue", help="RQ queue (default: the source pair's).")
               ) -> None:
        """Clear the pause flag and re-enqueue the current step from the ZooKeeper record (a rebalance id:
        all its paused moves, and its schedule)."""
        if rebalance_cmd.is_rebalance_id(migration_id):
            out = rebalance_cmd.resume(_cfg(), migration_id)
            console.print(f"{migration_id} resumed: {out['running']} running, {out['waiting']} waiting",
                          markup=False)
            return
        out = command.resume(_cfg(), migration_id, queue=queue)
        console.print(f"{migration_id} in phase {out['phase']}: " +
                      (f"enqueued {out['job']}" if out["job"] else "no queued step for this phase"), markup=False)

    @app.command("abort")
    def abort(migration_id: str = typer.Argument(...),
              yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation.")) -> None:
        """Stop a migration before cutover: drop the target copies, release the locks."""
        if not yes and not typer.confirm(f"abort {migration_id} and drop its copies on the target?"):
            raise typer.Exit(1)
        if rebalance_cmd.is_rebalance_id(migration_id):
            out = rebalance_cmd.abort(_cfg(), migration_id)
            console.print(f"{migration_id} aborted: {len(out['aborted'])} moves aborted, "
                          f"{len(out['left_running'])} past their flip left to finish", markup=False)
            return
        out = command.abort(_cfg(), migration_id)
        console.print(f"{migration_id} aborted (was {out['was']}); dropped on the target: "
                      f"{', '.join(out['dropped']) or 'nothing'}", markup=False, highlight=False)

    @app.command("set")
    def set_(
        migration_id: str = typer.Argument(...),
        max_lag: float | None = typer.Option(None, "--max-lag",
                                                help="Throttle the copy above this standby lag (s)."),
        max_threads_running: int | None = typer.Option(None, "--max-threads-running",
                                                          help="Throttle the copy while the source is this busy."),
        chunk_target_ms: int | None = typer.Option(None, "--chunk-target-ms", help="Time target per chunk."),
        freeze_budget_ms: int | None = typer.Option(None, "--freeze-budget-ms",
                                                       help="Longest write freeze allowed."),
        as_json: bool = typer.Option(False, "--json"),
    ) -> None:
        """Change a running migration's limits: copy jobs pick them up at their next slice,
        catch-up at its next pass."""
        changes = {"max_standby_lag_s": max_lag, "max_threads_running": max_threads_running,
                   "chunk_target_ms": chunk_target_ms, "freeze_budget_ms": freeze_budget_ms}
        if all(v is None for v in changes.values()):
            raise typer.BadParameter("give at least one of --max-lag, --max-threads-running, --chunk-target-ms, "
                                     "--freeze-budget-ms")
        try:
            out = command.set_options(_cfg(), migration_id, **changes)
        except ValueError as exc:  # pydantic names the option and the bound
            raise typer.BadParameter(str(exc).splitlines()[-1]) from None
        if as_json:
            print(json.dumps(out, indent=2))
            return
        o = out["options"]
        console.print(f"{migration_id}: max lag {o['max_standby_lag_s']}s, max threads running "
                      f"{o['max_threads_running']}, chunk target {o['chunk_target_ms']} ms, freeze budget "
                      f"{o['freeze_budget_ms']} ms", markup=False, highlight=False)

    @app.command("postpone")
    def postpone(
        migration_id: str = typer.Argument(...),
        release: bool = typer.Option(False, "--release", help="Let the pipeline cut over again."),
    ) -> None:
        """Hold the cutover (catch-up keeps the target current); --release lets it go ahead."""
        out = command.postpone(_cfg(), migration_id, on=not release)
        console.print(f"{migration_id} ({out['phase']}): cutover "
                      + ("postponed; release with `migrator postpone ID --release`" if out["postpone_cutover"]
                         else "released"), markup=False, highlight=False)

    phases.register(app)
