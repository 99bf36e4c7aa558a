"""``migrator split / move / move-partition / preflight / copy / status / pause /
resume / abort / set / postpone``: the migration commands of the CLI.

Each command parses options, calls one function of :mod:`migrator.ops.command`
and prints its result; :func:`migrator.cli.main.main` turns whatever it raises
into one line and an exit code. ``split``, ``move`` and ``move-partition`` are
dry runs (nothing stored, nothing locked) unless ``--yes``, which stores the
plan, locks the shards and runs the whole pipeline on the RQ workers
(``--no-start``: stores and locks only, for running the phases by hand), and
follows it: a live view on a terminal, one line per event otherwise, one JSON
document with ``--json`` (:mod:`migrator.cli.report`). The
limits a migration runs under are set at launch with the same flags as
``migrator set`` (:mod:`migrator.cli.options`). The phase commands
(``catchup``, ``verify``, ``cutover``, ``rollback``, ``cleanup``) live in
:mod:`migrator.cli.phases`; :func:`register` adds them after these.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from migrator.cli import phases
from migrator.cli import rebalance as rebalance_cli
from migrator.cli.helpers import (
    FollowOpt,
    JsonOpt,
    MigrationIdArg,
    QueueNameOpt,
    RqQueueOpt,
    ZkPatienceOpt,
    duration,
    human_bytes,
    load_config,
    shard_runs,
)
from migrator.cli.inputs import (
    DURATION_METAVAR,
    HostArg,
    OptionalMigrationIdArg,
    at_least,
    checked,
    duration_parser,
    migration_id_callback,
)
from migrator.cli.options import (
    ChunkTargetOpt,
    KillBlockersOpt,
    KillBlockersRowsOpt,
    LockRetryOpt,
    UsageProblem,
    YesOpt,
    build_options,
    confirm,
    detach_needs_yes,
    dry_run_or_yes,
)
from migrator.cli.report import Report, print_json
from migrator.engine.migration import Options, Phase
from migrator.errors import ExitCode
from migrator.fleet import bounds
from migrator.fleet.zk import PATIENCE_S, PatientSession
from migrator.ops import command, intents
from migrator.ops.rebalance import command as rebalance_cmd

console = Console()
err_console = Console(stderr=True)


# The options split, move and move-partition declare alike (each command keeps its own default); the limits
# (--max-lag, --max-threads-running, --chunk-target-ms, --freeze-budget-ms, --cutover-retry-s) are `migrator set`'s
# too.
LaunchYesOpt = Annotated[bool, typer.Option(
    "--yes", "-y", help="Store the plan, lock the shards and run the whole migration on RQ workers (without it: a "
                        "dry run that stores and locks nothing).")]
DryRunOpt = Annotated[bool, typer.Option(
    "--dry-run", help="Print shards, tables, rows, bytes, ETA; store nothing (the default without --yes).")]
NoStartOpt = Annotated[bool, typer.Option(
    "--no-start", help="With --yes: store the plan and lock the shards, start nothing (run the phases by hand: "
                       "`migrator preflight|copy|catchup|verify|cutover ID`, or `migrator resume ID`).")]
DetachOpt = Annotated[bool, typer.Option("--detach", help="With --yes: do not follow progress.")]
MaxLagOpt = Annotated[float | None, typer.Option(
    "--max-lag", help="Throttle the copy above this target standby lag (s; default 5).", metavar=DURATION_METAVAR,
        parser=duration_parser("--max-lag"))]
MaxThreadsOpt = Annotated[int | None, typer.Option(
    "--max-threads-running",
    help="Throttle the copy while the source runs this many threads (Threads_running; default 50).", metavar="N")]
FreezeBudgetOpt = Annotated[int | None, typer.Option(
    "--freeze-budget-ms", help="Longest write freeze allowed (ms; default 500).", metavar="MS")]
PostponeOpt = Annotated[bool, typer.Option(
    "--postpone-cutover", help="Hold the cutover once caught up, until `migrator postpone ID --release`.")]
CutoverRetryOpt = Annotated[float | None, typer.Option(
    "--cutover-retry-s", help="How long the pipeline keeps retrying a cutover that stopped before the flip (a lock "
                              "on a moving table, a freeze over budget), with backoff (s; default 600; 0: once).",
                                  metavar="S")]
FenceOpt = Annotated[str | None, typer.Option(
    "--fence", help="How the source master is fenced: auto (default) and rename: LOCK TABLES + one queued RENAME "
                    "per table, a move of more than 200 tables runs as batches sized for the freeze budget; gate: "
                    "one migration whose master is closed by triggers (any number of tables, weaker guarantees: "
                    "see docs/guarantees.md).", metavar="MODE")]
ChunkRowsOpt = Annotated[int | None, typer.Option("--chunk-rows",
                                                  help="First copy chunk, rows (adapts after; default 1000).",
                                                  metavar="N")]
WorkersOpt = Annotated[int | None, typer.Option("--workers", help="Tables copied at once (default 4).", metavar="N")]
AllTablesOpt = Annotated[bool, typer.Option(
    "--all-tables", help="List every table of a dry run (else summarised by table name at host scale).")]
#: the id `migrator set` and `migrator postpone` act on
MigrationOrBatchIdArg = Annotated[str, typer.Argument(
    help="The migration id (rb-...: every move of a rebalance or batched split, and the moves it starts later).",
    callback=migration_id_callback(), metavar="ID")]
#: the shards `move` moves
ShardsOpt = Annotated[str, typer.Option("--shards", help="Shards to move, e.g. 4-7 or 4,6 (0..65535).",
                                        callback=checked(bounds.shard_text, "--shards"), metavar="SHARDS")]
#: the queue partition `move-partition` moves
PartitionOpt = Annotated[int, typer.Option("--partition", min=0, help="Partition index.", metavar="N")]
#: the target pair of a move (its master)
TargetOpt = Annotated[str, typer.Option("--to", help="Target pair (its master).",
                                        callback=checked(bounds.host_name, "--to"), metavar="HOST")]


def _options(chunk_rows: int | None = None, chunk_target_ms: int | None = None, workers: int | None = None,
             max_lag: float | None = None, freeze_budget_ms: int | None = None, fence: str | None = None,
             max_threads_running: int | None = None, cutover_retry_s: float | None = None,
             lock_retry_s: float | None = None, kill_blockers: bool | None = None,
             kill_blockers_max_rows: int | None = None) -> Options:
    return build_options(chunk_rows=chunk_rows, chunk_target_ms=chunk_target_ms, copy_workers=workers,
                         max_passive_lag_s=max_lag, freeze_budget_ms=freeze_budget_ms, fence=fence,
                         max_threads_running=max_threads_running, cutover_retry_s=cutover_retry_s,
                         lock_retry_s=lock_retry_s, kill_blockers=kill_blockers,
                         kill_blockers_max_rows=kill_blockers_max_rows)


#: a dry run lists its tables one by one up to this many (more only with --verbose)
TABLES_LISTED = 30


def _tables_table(est: Any, verbose: bool) -> Table:
    """The tables to copy: one row per table, or (at host scale) one per table name across shards."""
    if verbose or len(est.tables) <= TABLES_LISTED:
        t = Table(title="tables to copy")
        for col in ("table", "rows (est.)", "bytes"):
            t.add_column(col, justify="right" if col != "table" else "left")
        for te in est.tables:
            t.add_row(f"{te.db}.{te.table}", f"{te.rows:,}", human_bytes(te.bytes))
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
                      human_bytes(sum(x.bytes for x in tes)), f"{big.db} {human_bytes(big.bytes)}")
    total = [f"{est.rows:,}", human_bytes(est.bytes)]
    t.add_row("total", *(total if len(t.columns) == 3 else ["", *total, ""]), style="bold")
    return t


def _batches_table(result: command.PlanResult) -> Table:
    spec, batches = result.spec, result.batches or []
    limit = batches[0]["limit"] if batches else 0
    t = Table(title=f"copied and tailed once; cut over in about {len(batches)} batches of at most {limit} tables, "
                    f"sized for the freeze budget of {spec.options.freeze_budget_ms} ms (later batches adapt to "
                    "the freezes measured), one after another")
    for col in ("#", "shards", "tables", "bytes"):
        t.add_column(col, justify="right" if col != "shards" else "left")
    for i, b in enumerate(batches):
        t.add_row(str(i), f"{shard_runs(b['runs'])} ({b['shards']})", f"{b['tables']:,}", human_bytes(b["bytes"]))
    return t


def _print_plan(result: command.PlanResult, verbose: bool = False) -> None:
    spec = result.spec
    what = (f"queue {spec.queue} partition {spec.partition} ({', '.join(spec.tables)})"
            if spec.kind == "queue_partition" else
            f"shards {shard_runs(spec.ranges())} ({len(spec.shards)})")
    head = "dry run: would move" if result.estimate is not None else \
        ("move" if not result.stored else "planned " + spec.id + ": move")
    console.print(f"{head} {what} from {spec.source_master}/{spec.source_passive} to "
                  f"{spec.target_master}/{spec.target_passive}", markup=False, highlight=False)
    if result.batches is not None:
        console.print(_batches_table(result))
    est = result.estimate
    if est is not None:
        console.print(_tables_table(est, verbose))
        console.print(f"copy rate {est.rows_per_s:,.0f} rows/s, {human_bytes(est.bytes_per_s)}/s "
                      f"({est.rate_source}); ETA {duration(est.eta_s)}. Nothing was stored or locked.",
                      markup=False, highlight=False)
        console.print(f"ETA {est.method}.", markup=False, highlight=False)
        if result.batches is None:
            console.print("dry run: nothing was stored or locked; run it with --yes", markup=False,
                          highlight=False)
    elif result.stored:
        console.print(f"next: `migrator preflight {spec.id}`, then `migrator copy {spec.id}`",
                      markup=False, highlight=False)


#: what a launch that gives up on ZooKeeper (past ``--zk-patience``) says to do
RUN_AGAIN = ("nothing this run stored is lost: the same command, run again once ZooKeeper is back, takes it up "
             "where this one stopped")


def _reconnected(ps: PatientSession, rep: Report, subject: str) -> None:
    """The one line for each time ZooKeeper came back while this command launched or followed."""
    from migrator.ops import watch

    for ev in watch.reconnects(ps, subject):
        rep.event(ev)


def _launch_batches(cfg: Any, ps: PatientSession, res: command.PlanResult, start: bool, detach: bool,
                    postpone: bool, rep: Report, doc: dict[str, Any]) -> None:
    """A move too big for one fence: one batched migration (copied and tailed once) that hands its shards to
    batch migrations, each cut over on its own, followed through a rebalance record (the record of the same move
    an earlier run stored is taken up: :func:`migrator.ops.rebalance.command.start_split`)."""
    from migrator.ops import watch

    rid = ps.call(lambda zk: rebalance_cmd.start_split(cfg, res.spec, paused=not start, postpone_cutover=postpone,
                                                       zk=zk))
    _reconnected(ps, rep, rid)
    run = doc["run"] = {"rebalance": rid, "batches": len(res.batches or []), "started": start,
                        "followed": start and not detach}
    if not start:
        rep.say(f"planned {rid}: {len(res.batches or [])} batches, not started; start it with "
                f"`migrator resume {rid}` (or drop it with `migrator abort {rid}`)")
        rep.document(doc)
        return
    rep.say(f"running {rid} (one copy and tail, about {len(res.batches or [])} batches cut over one after "
            "another) on RQ workers; start "
            f"workers with `migrator worker`; `migrator status {rid}`, `migrator pause|resume|abort {rid}`")
    if detach:
        rep.document(doc)
        return
    ps.then = watch.follow_again(rid, by_the_command=True)
    end = rebalance_cli.follow(cfg, rid, emit=rep.event, session=ps)
    run.update(end)
    rep.document(doc)
    if end["phase"] != "done":
        print(f"error: {rid} ended {end['phase']}{' (paused)' if end['paused'] else ''} (see "
              f"`migrator status {rid}` for the batch that stopped and its error)", file=sys.stderr, flush=True)
        raise typer.Exit(int(end.get("exit_code") or ExitCode.REFUSED))  # the stopped batch's cause
    rep.say(f"{rid} done: {end['batches']} batches, longest write freeze {end['max_freeze_ms'] or 0:.0f} ms; "
            "tombstones kept for rollback (per batch migration), cleanup scheduled")


def _plan_and_launch(plan: Any, *, yes: bool, dry_run: bool, no_start: bool, detach: bool, postpone: bool,
                     as_json: bool, follow: bool = False, all_tables: bool = False,
                     patience_s: float = PATIENCE_S) -> None:
    """A dry run unless ``yes``; with it, store (and lock), then launch unless ``no_start``. With ``as_json``
    stdout gets one document (the plan, and under ``run`` what was started and how it ended), or with
    ``follow`` JSON lines (:mod:`migrator.cli.report`). ``plan(dry_run, zk)`` plans on the command's one
    ZooKeeper session, which waits ``patience_s`` for ZooKeeper whenever it goes away: every step of the launch
    is safe to run again, so each is run again once it is back, and a run that gives up leaves what it stored
    for the same command to take up."""
    dry_run_or_yes(dry_run, yes)
    if no_start and not yes:
        raise UsageProblem("--no-start goes with --yes (store the plan and lock the shards, start nothing); "
                           "without --yes the command is a dry run")
    detach_needs_yes(detach, yes)
    following = yes and not no_start and not detach
    rep = Report(as_json, follow and following)
    cfg = load_config()
    with PatientSession(cfg, patience_s=patience_s, then=RUN_AGAIN) as ps:
        res = ps.call(lambda zk: plan(not yes, zk))
        doc = res.as_dict()
        _reconnected(ps, rep, res.spec.id)
        if not as_json:
            _print_plan(res, all_tables)
        rep.line("plan", doc)
        if not yes:
            rep.document(doc)
            return
        if res.batches is not None and res.estimate is None:
            _launch_batches(cfg, ps, res, not no_start, detach, postpone, rep, doc)
            return
        if res.adopted:
            rep.say(f"taking up {res.spec.id} ({res.adopted}): the same move, stored by an earlier run")
        if postpone:
            ps.call(lambda zk: command.postpone(cfg, res.spec.id, on=True, zk=zk))
        if no_start:
            rep.document(doc)
            return
        _launch(cfg, ps, res, detach, rep, doc)


def _launch(cfg: Any, ps: PatientSession, res: command.PlanResult, detach: bool, rep: Report,
            doc: dict[str, Any]) -> None:
    from migrator.ops import watch

    migration_id = res.spec.id
    if res.adopted in (None, Phase.PLANNED.value):
        job = ps.call(lambda zk: command.launch(cfg, migration_id, zk=zk))
        _reconnected(ps, rep, migration_id)
        rep.say(f"running {migration_id} on RQ workers (first job {job}); start workers with `migrator worker`")
    else:  # launched by the earlier run: followed, not started twice
        job = None
        rep.say(f"following {migration_id}, running on RQ workers since an earlier run launched it")
    run = doc["run"] = {"migration": migration_id, "job": job, "followed": not detach}
    if detach:
        rep.document(doc)
        return
    ps.then = watch.follow_again(migration_id, by_the_command=True)
    st = _follow(cfg, migration_id, rep, session=ps)
    run.update({k: st.get(k) for k in ("phase", "freeze_ms", "stopped", "error", "cutover_attempts")})
    rep.document(doc)
    stopped = st.get("stopped")
    if stopped and st["phase"] != "done":
        print(f"error: {migration_id} stopped in {stopped.get('step')} (phase {st['phase']}): {stopped.get('reason')} "
              f"(next: {stopped.get('next')})", file=sys.stderr, flush=True)
        raise typer.Exit(int(stopped.get("exit_code") or ExitCode.REFUSED))
    if st["phase"] != "done":
        print(f"error: {migration_id} ended in phase {st['phase']}: {st.get('error') or ''}", file=sys.stderr,
              flush=True)
        raise typer.Exit(ExitCode.FAILED)
    rep.say(f"{migration_id} done: write freeze {st.get('freeze_ms') or 0:.0f} ms; tombstones kept for rollback, "
            "cleanup scheduled")


def _follow(cfg: Any, migration_id: str, rep: Report, *, timeout: float | None = None, every: float = 0.5,
            with_workers: bool = False, session: PatientSession | None = None,
            patience_s: float = PATIENCE_S) -> dict[str, Any]:
    """Follow ``migration_id`` to a final phase (or a stop, or ``timeout``): the live view on a terminal, else one line
    (or JSON line) per event and, for human output, the final view once more; its last status. Through
    ``session`` (or one of its own, waiting ``patience_s`` for ZooKeeper)."""
    from migrator.ops import watch

    if rep.live:
        return watch.follow(cfg, migration_id, every=every, timeout=timeout, console=console, with_workers=with_workers,
                            session=session, patience_s=patience_s)
    st = watch.follow_events(cfg, migration_id, rep.event, every=every, timeout=timeout, with_workers=with_workers,
                             session=session, patience_s=patience_s)
    if not rep.as_json:
        progress, task = watch.new_progress(console)
        console.print(watch.render(st, progress, task))
    return st


def split(
    source: HostArg,
    to: str | None = typer.Option(None, "--to", help="Target pair (its master); default: a spare pair.",
                                  callback=checked(bounds.host_name, "--to"), metavar="HOST"),
    yes: LaunchYesOpt = False,
    dry_run: DryRunOpt = False,
    no_start: NoStartOpt = False,
    detach: DetachOpt = False,
    as_json: JsonOpt = False,
    follow: FollowOpt = False,
    max_lag: MaxLagOpt = None,
    max_threads_running: MaxThreadsOpt = None,
    freeze_budget_ms: FreezeBudgetOpt = None,
    postpone_cutover: PostponeOpt = False,
    cutover_retry_s: CutoverRetryOpt = None,
    lock_retry_s: LockRetryOpt = None,
    kill_blockers: KillBlockersOpt = None,
    kill_blockers_max_rows: KillBlockersRowsOpt = None,
    fence: FenceOpt = None,
    chunk_rows: ChunkRowsOpt = None,
    chunk_target_ms: ChunkTargetOpt = None,
    workers: WorkersOpt = None,
    all_tables: AllTablesOpt = False,
    zk_patience: ZkPatienceOpt = PATIENCE_S,
) -> None:
    """Move the upper half of every range on SOURCE to a spare pair (or --to).

    A dry run unless --yes: shards, tables, rows, bytes and ETA, nothing stored or locked. With --yes it
    stores the plan, locks the shards and runs plan -> preflight -> copy -> catch-up passes -> verify ->
    cutover on RQ workers (`migrator worker`), cleanup scheduled."""
    opts = _options(chunk_rows, chunk_target_ms, workers, max_lag, freeze_budget_ms, fence, max_threads_running,
                    cutover_retry_s, lock_retry_s, kill_blockers, kill_blockers_max_rows)
    _plan_and_launch(lambda dry_run, zk: command.plan_split(load_config(), source, to, dry_run=dry_run,
                                                           batches_ok=True, options=opts, zk=zk),
                     yes=yes, dry_run=dry_run, no_start=no_start, detach=detach, postpone=postpone_cutover,
                     as_json=as_json, follow=follow, all_tables=all_tables, patience_s=zk_patience)


def move(
    shards: ShardsOpt,
    to: TargetOpt,
    yes: LaunchYesOpt = False,
    dry_run: DryRunOpt = False,
    no_start: NoStartOpt = False,
    detach: DetachOpt = False,
    as_json: JsonOpt = False,
    follow: FollowOpt = False,
    max_lag: MaxLagOpt = None,
    max_threads_running: MaxThreadsOpt = None,
    freeze_budget_ms: FreezeBudgetOpt = None,
    postpone_cutover: PostponeOpt = False,
    cutover_retry_s: CutoverRetryOpt = None,
    lock_retry_s: LockRetryOpt = None,
    kill_blockers: KillBlockersOpt = None,
    kill_blockers_max_rows: KillBlockersRowsOpt = None,
    fence: FenceOpt = None,
    chunk_rows: ChunkRowsOpt = None,
    chunk_target_ms: ChunkTargetOpt = None,
    workers: WorkersOpt = None,
    all_tables: AllTablesOpt = False,
    zk_patience: ZkPatienceOpt = PATIENCE_S,
) -> None:
    """Move shards (all on one source pair) to another pair: a dry run unless --yes (as split)."""
    opts = _options(chunk_rows, chunk_target_ms, workers, max_lag, freeze_budget_ms, fence, max_threads_running,
                    cutover_retry_s, lock_retry_s, kill_blockers, kill_blockers_max_rows)
    _plan_and_launch(lambda dry_run, zk: command.plan_move(load_config(), shards, to, dry_run=dry_run,
                                                          batches_ok=True, options=opts, zk=zk),
                     yes=yes, dry_run=dry_run, no_start=no_start, detach=detach, postpone=postpone_cutover,
                     as_json=as_json, follow=follow, all_tables=all_tables, patience_s=zk_patience)


def move_partition(
    queue: QueueNameOpt,
    partition: PartitionOpt,
    to: TargetOpt,
    yes: LaunchYesOpt = False,
    dry_run: DryRunOpt = False,
    no_start: NoStartOpt = False,
    detach: DetachOpt = False,
    as_json: JsonOpt = False,
    follow: FollowOpt = False,
    max_lag: MaxLagOpt = None,
    max_threads_running: MaxThreadsOpt = None,
    freeze_budget_ms: FreezeBudgetOpt = None,
    postpone_cutover: PostponeOpt = False,
    cutover_retry_s: CutoverRetryOpt = None,
    lock_retry_s: LockRetryOpt = None,
    kill_blockers: KillBlockersOpt = None,
    kill_blockers_max_rows: KillBlockersRowsOpt = None,
    chunk_target_ms: ChunkTargetOpt = None,
    zk_patience: ZkPatienceOpt = PATIENCE_S,
) -> None:
    """Move one queue partition (its jobs and dedupe tables) to another pair on its own route in the shard
    map; its shard's other tables and the other partitions keep serving. A dry run unless --yes (as split)."""
    opts = _options(max_lag=max_lag, freeze_budget_ms=freeze_budget_ms, max_threads_running=max_threads_running,
                    cutover_retry_s=cutover_retry_s, lock_retry_s=lock_retry_s, kill_blockers=kill_blockers,
                    kill_blockers_max_rows=kill_blockers_max_rows, chunk_target_ms=chunk_target_ms)
    _plan_and_launch(lambda dry_run, zk: command.plan_move_partition(load_config(), queue, partition, to,
                                                                    dry_run=dry_run, options=opts, zk=zk),
                     yes=yes, dry_run=dry_run, no_start=no_start, detach=detach, postpone=postpone_cutover,
                     as_json=as_json, follow=follow, patience_s=zk_patience)


def preflight(migration_id: MigrationIdArg, as_json: JsonOpt = False) -> None:
    """Check every precondition of the copy; exits non-zero on a failure."""
    res = command.preflight(load_config(), migration_id)
    if as_json:
        print_json(res.as_dict())
    else:
        for line in res.lines():
            console.print(line, markup=False, highlight=False)
        console.print(f"{len(res.failures)} failure(s), {len(res.warnings)} warning(s)", markup=False)
    if not res.ok:
        raise typer.Exit(ExitCode.REFUSED)


def copy(
    migration_id: MigrationIdArg,
    sync: bool = typer.Option(False, "--sync", help="Copy in this process instead of RQ workers."),
    workers: int | None = typer.Option(None, "--workers",
                                       help="Tables copied at once with --sync (default: the migration's --workers, 4 "
                                            "unless set).",
                                       metavar="N"),
    queue: RqQueueOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Preflight, then copy schema and rows (RQ jobs; --sync runs here)."""
    cfg = load_config()
    if not sync:
        from migrator.ops import steps

        queue = queue or steps.queue_of(cfg, migration_id)
        job = command.start_copy(cfg, migration_id, queue=queue)
        if as_json:
            print_json({"migration": migration_id, "job": job, "queue": queue})
            return
        console.print(f"enqueued {job} on queue {queue!r}; follow with `migrator status {migration_id}`",
                      markup=False, highlight=False)
        return
    from migrator.ops import watch

    st = command.status(cfg, migration_id)
    progress, on_progress = watch.copy_progress(err_console if as_json else console,
                                                total_rows=int(st["copy"].get("est_rows") or 1))
    with progress:
        out = command.run_copy(cfg, migration_id, workers=workers, on_progress=on_progress)
    if as_json:
        print_json({"migration": migration_id, **out})
        return
    console.print(f"copied {out['rows']:,} rows ({human_bytes(out['bytes'])}) in {out['seconds']:.1f}s; "
                  f"phase {out['phase']}", markup=False, highlight=False)


def status(
    migration_id: OptionalMigrationIdArg = None,
    as_json: bool = typer.Option(False, "--json", help="Everything as one JSON document on stdout (for "
                                                        "scripts); with --follow and an ID: JSON lines."),
    follow: FollowOpt = False,
    watch_: bool = typer.Option(False, "--watch", "-w", help="Redraw live (until a final phase, or Ctrl-C); "
                                                             "when stdout is not a terminal, one line per event."),
    interval: float = typer.Option(1.0, "--interval", help="Seconds between redraws with --watch (above 0).",
                                   callback=checked(at_least(0, exclusive=True), "--interval"),
                                       metavar=DURATION_METAVAR, parser=duration_parser("--interval")),
    timeout: float | None = typer.Option(None, "--timeout", help="Stop watching after this many seconds (exit "
                                                                 "code 7 when it ends the watch; default: never).",
                                         callback=checked(at_least(0), "--timeout"), metavar=DURATION_METAVAR,
                                             parser=duration_parser("--timeout")),
    zk_patience: ZkPatienceOpt = PATIENCE_S,
) -> None:
    """Every migration's phase and the live workers; with an ID: per-shard copy progress, copy rate and
    ETA, the catch-up pass table, the last cutover attempts and when the next is due, predicted and last
    freeze, and the workers."""
    from migrator.ops import watch

    cfg = load_config()
    if migration_id is not None and rebalance_cmd.is_rebalance_id(migration_id):
        rebalance_cli.show_status(cfg, migration_id, as_json)
        return
    if migration_id is not None and (watch_ and not as_json or as_json and follow):
        rep = Report(as_json, follow)
        try:
            st = _follow(cfg, migration_id, rep, timeout=timeout, every=interval, with_workers=True,
                         patience_s=zk_patience)
        except KeyboardInterrupt:
            return
        rep.document(st)
        if st["phase"] not in watch.FINAL and not st.get("stopped"):
            _still_running(timeout, migration_id)
        return
    if watch_ and not as_json:
        try:
            watch.follow_all(cfg, every=interval, timeout=timeout, console=console, patience_s=zk_patience)
        except KeyboardInterrupt:
            return
        _still_running(timeout, "the migrations")
        return
    out = watch.listing(cfg) if migration_id is None else watch.overview(cfg, migration_id)
    if as_json:
        print_json(out)
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


def _still_running(timeout: float | None, what: str) -> None:
    """The watch ended at its ``--timeout`` while the work goes on: exit code 7 (STILL_RUNNING)."""
    if timeout is None:
        return
    print(f"error: stopped watching {what} after --timeout {timeout:g} s; the work goes on (`migrator status`)",
          file=sys.stderr, flush=True)
    raise typer.Exit(ExitCode.STILL_RUNNING)


def pause(migration_id: MigrationIdArg, as_json: JsonOpt = False) -> None:
    """Copy workers stop between chunks (resume with `migrator resume ID`); a rebalance id pauses
    all its moves and starts no new one."""
    if rebalance_cmd.is_rebalance_id(migration_id):
        out = rebalance_cmd.pause(load_config(), migration_id)
        if as_json:
            return print_json(out)
        console.print(f"{migration_id} paused ({len(out['migrations'])} running moves paused)", markup=False)
        return
    out = command.pause(load_config(), migration_id)
    if as_json:
        return print_json(out)
    console.print(f"{migration_id} paused in phase {out['phase']}", markup=False)


def resume(migration_id: MigrationIdArg,
           queue: str | None = typer.Option(None, "--queue", help="RQ queue (default: the source pair's).",
                                            metavar="QUEUE"),
           as_json: JsonOpt = False) -> None:
    """Clear the pause flag and re-enqueue the current step from the ZooKeeper record (a rebalance id:
    all its paused moves, and its schedule)."""
    if rebalance_cmd.is_rebalance_id(migration_id):
        out = rebalance_cmd.resume(load_config(), migration_id)
        if as_json:
            return print_json(out)
        console.print(f"{migration_id} resumed: {out['running']} running, {out['waiting']} waiting",
                      markup=False)
        return
    out = command.resume(load_config(), migration_id, queue=queue)
    if as_json:
        return print_json(out)
    console.print(f"{migration_id} in phase {out['phase']}: " +
                  (f"enqueued {out['job']}" if out["job"] else "no queued step for this phase"), markup=False)


def abort(migration_id: MigrationIdArg,
          yes: YesOpt = False,
          as_json: JsonOpt = False) -> None:
    """Stop a migration before cutover: drop the target copies, release the locks (shows what it drops and
    asks)."""
    confirm(intents.abort(load_config(), migration_id), yes)
    if rebalance_cmd.is_rebalance_id(migration_id):
        out = rebalance_cmd.abort(load_config(), migration_id)
        if as_json:
            return print_json(out)
        console.print(f"{migration_id} aborted: {len(out['aborted'])} moves aborted, "
                      f"{len(out['left_running'])} past their flip left to finish", markup=False)
        return
    out = command.abort(load_config(), migration_id)
    if as_json:
        return print_json(out)
    console.print(f"{migration_id} aborted (was {out['was']}); dropped on the target: "
                  f"{', '.join(out['dropped']) or 'nothing'}; cutover gates on the source pair: {out['gates']}",
                  markup=False, highlight=False)


def set_(
    migration_id: MigrationOrBatchIdArg,
    max_lag: MaxLagOpt = None,
    max_threads_running: MaxThreadsOpt = None,
    chunk_target_ms: ChunkTargetOpt = None,
    freeze_budget_ms: FreezeBudgetOpt = None,
    cutover_retry_s: CutoverRetryOpt = None,
    lock_retry_s: LockRetryOpt = None,
    kill_blockers: KillBlockersOpt = None,
    kill_blockers_max_rows: KillBlockersRowsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Change a running migration's limits: copy jobs pick them up at their next slice,
    catch-up at its next pass, the pipeline at its next cutover attempt."""
    changes = {"max_standby_lag_s": max_lag, "max_threads_running": max_threads_running,
               "chunk_target_ms": chunk_target_ms, "freeze_budget_ms": freeze_budget_ms,
               "cutover_retry_s": cutover_retry_s, "lock_retry_s": lock_retry_s, "kill_blockers": kill_blockers,
               "kill_blockers_max_rows": kill_blockers_max_rows}
    if all(v is None for v in changes.values()):
        raise UsageProblem("give at least one of --max-lag, --max-threads-running, --chunk-target-ms, "
                           "--freeze-budget-ms, --cutover-retry-s, --lock-retry-s, --kill-blockers, "
                           "--kill-blockers-max-rows")
    build_options(**changes)  # a bad value is refused here, naming its flag, before anything is read
    if rebalance_cmd.is_rebalance_id(migration_id):
        out = rebalance_cmd.set_options(load_config(), migration_id, **changes)
    else:
        out = command.set_options(load_config(), migration_id, **changes)
    if as_json:
        print_json(out)
        return
    o = out["options"]
    console.print(f"{migration_id}: max lag {o['max_standby_lag_s']}s, max threads running "
                  f"{o['max_threads_running']}, chunk target {o['chunk_target_ms']} ms, freeze budget "
                  f"{o['freeze_budget_ms']} ms, cutover retried for {o['cutover_retry_s']:g} s, lock tries for "
                  f"{o['lock_retry_s']:g} s, holders {'ended' if o['kill_blockers'] else 'named'}"
                  + (f" ({len(out['migrations'])} running moves changed)" if "migrations" in out else ""),
                  markup=False, highlight=False)


def postpone(
    migration_id: MigrationOrBatchIdArg,
    release: bool = typer.Option(False, "--release", help="Let the pipeline cut over again."),
    as_json: JsonOpt = False,
) -> None:
    """Hold the cutover (catch-up keeps the target current); --release lets it go ahead."""
    if rebalance_cmd.is_rebalance_id(migration_id):
        out = rebalance_cmd.postpone(load_config(), migration_id, on=not release)
        if as_json:
            return print_json(out)
        console.print(f"{migration_id}: cutovers " + (
            f"postponed ({len(out['migrations'])} running moves, and every move it starts); release with "
            f"`migrator postpone {migration_id} --release`" if not release else
            f"released ({len(out['migrations'])} running moves)"), markup=False, highlight=False)
        return
    out = command.postpone(load_config(), migration_id, on=not release)
    if as_json:
        return print_json(out)
    console.print(f"{migration_id} ({out['phase']}): cutover "
                  + (f"postponed; release with `migrator postpone {migration_id} --release`"
                     if out["postpone_cutover"] else "released"), markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    """Add the migration commands to the ``migrator`` app, then the phase commands."""
    app.command("split")(split)
    app.command("move")(move)
    app.command("move-partition")(move_partition)
    app.command("preflight")(preflight)
    app.command("copy")(copy)
    app.command("status")(status)
    app.command("pause")(pause)
    app.command("resume")(resume)
    app.command("abort")(abort)
    app.command("set")(set_)
    app.command("postpone")(postpone)
    phases.register(app)
