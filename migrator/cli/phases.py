"""``migrator catchup / verify / cutover / rollback / cleanup ID``: the phase commands.

Each command parses its options, calls the phase (of :mod:`migrator.engine`, or
:mod:`migrator.ops.command`) and prints the result; what it raises becomes one
line on stderr and an exit code in :func:`migrator.cli.main.main`. ``catchup``
and ``rollback`` hand their work to the RQ workers (as ``copy`` and ``run`` do)
and ``--sync`` runs it in this process instead. ``verify`` only reports unless
``--repair``. ``cutover``, ``rollback`` and ``cleanup --now`` switch traffic or
end the chance of a rollback: each shows what it will do and asks
(``--yes`` skips the question; without a terminal it is refused without it).
:func:`register` adds them to the ``migrator`` app after the migration commands
of :mod:`migrator.cli.migrate`.
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from migrator.cli.helpers import FollowOpt, JsonOpt, RqQueueOpt, ZkPatienceOpt, load_config
from migrator.cli.inputs import DURATION_METAVAR, at_least, checked, duration_parser, migration_id_callback
from migrator.cli.options import YesOpt, confirm
from migrator.cli.report import Report, print_json
from migrator.engine.catch_up.passes import PassResult, run_passes
from migrator.engine.cleanup import cleanup
from migrator.engine.cutover import cutover
from migrator.engine.rollback import rollback
from migrator.engine.verify.run import verify_migration
from migrator.errors import ExitCode
from migrator.fleet.model import wire_keys
from migrator.fleet.zk import PATIENCE_S
from migrator.ops import intents
from migrator.ops.rebalance import command as rebalance_cmd
from migrator.ops.steps import enqueue_passes

PASS_COLUMNS = ("number", "events", "duration_s", "apply_rate", "write_rate", "lag_s", "predicted_freeze_ms",
                "to_gtid", "converged")

#: the migration a phase command (catchup, verify, cutover, cleanup) acts on
PhaseMigrationIdArg = Annotated[str, typer.Argument(help="The migration id.", callback=migration_id_callback(),
                                                    metavar="ID")]


def register(app: Any) -> None:
    """Add the phase commands, in the order ``migrator --help`` lists them."""
    register_catchup(app)
    register_verify(app)
    register_cutover(app)
    register_rollback(app)
    register_cleanup(app)


def catchup(
    migration_id: PhaseMigrationIdArg,
    passes: int | None = typer.Option(None, "--passes", min=1,
                                      help="Run exactly N passes (default: until converged).", metavar="N"),
    sync: bool = typer.Option(False, "--sync", help="Run the passes in this process instead of RQ workers."),
    queue: RqQueueOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Replay the source binlog onto the target in passes until converged (on RQ workers; --sync: here)."""
    console = Console()
    cfg = load_config()
    if not sync:
        job = enqueue_passes(cfg, migration_id, passes, queue=queue)
        if as_json:
            print_json({"migration": migration_id, "job": job})
            return
        console.print(f"enqueued {job}; follow with `migrator status {migration_id}`", markup=False,
                      highlight=False)
        return
    table = Table(*PASS_COLUMNS, title=f"catch-up of {migration_id}")

    def show(res: PassResult) -> None:
        d = asdict(res)
        table.add_row(*(str(d[c]) for c in PASS_COLUMNS))

    results = run_passes(cfg, migration_id, passes, on_pass=None if as_json else show)
    if as_json:
        print_json({"migration": migration_id, "passes": [asdict(r) for r in results],
                    "converged": bool(results and results[-1].converged)})
        return
    console.print(table)
    if results and results[-1].converged:
        console.print(f"converged; predicted freeze {results[-1].predicted_freeze_ms:.0f} ms")


def register_catchup(app: Any) -> None:
    """Add ``catchup ID [--passes N] [--sync] [--queue Q]`` to a typer app."""
    app.command("catchup")(catchup)


def verify_cmd(
    migration_id: PhaseMigrationIdArg,
    repair: bool = typer.Option(False, "--repair/--no-repair",
                                help="Re-copy the chunks that differ (default: report only, change nothing)."),
    chunk_rows: int = typer.Option(0, "--chunk-rows", min=0,
                                   help="Rows per checksum chunk of the verify (default: the migration's "
                                        "--chunk-rows).", metavar="N"),
    as_json: JsonOpt = False,
    yes: YesOpt = False,
) -> None:
    """Checksum the moving tables source vs target by primary-key chunks and report what differs
    (--repair: re-copy it, after asking). Exits 1 when rows still differ."""
    if repair:
        confirm(f"re-copy onto the target of {migration_id} every chunk whose rows differ from the source "
                "(overwriting the target's rows there)", yes)
    rep = verify_migration(load_config(), migration_id, repair=repair, chunk_rows=chunk_rows or None)
    if as_json:
        print_json(rep.to_dict())
    else:
        print(f"{rep.tables} tables, {rep.chunks} chunks, {rep.rows_checked} rows: "
              f"{len(rep.mismatched_chunks)} chunks differed, {len(rep.differing_rows)} rows differed, "
              f"{rep.repaired_rows} re-copied, {rep.in_flight_rows} in flight (live writes, re-checked at "
              f"cutover); {'OK' if rep.ok else 'STILL DIFFERENT'} "
              f"(as of {rep.verified_gtid}, {rep.seconds:.1f}s)")
        for d in rep.differing_rows[:50]:
            print(f"  {d.table} {list(d.key)}: {d.kind}")
        if not rep.ok and not repair:
            print(f"report only: `migrator verify {migration_id} --repair` re-copies what differs")
    if not rep.ok:
        raise typer.Exit(ExitCode.FAILED)


def register_verify(app: Any) -> None:
    """Add ``verify ID [--repair]`` to a typer app."""
    app.command("verify")(verify_cmd)


def cutover_cmd(migration_id: PhaseMigrationIdArg,
                yes: YesOpt = False,
                as_json: JsonOpt = False) -> None:
    """Freeze, fence, drain, compare and flip the moving ranges to the target pair (switches traffic:
    shows what it will do and asks)."""
    cfg = load_config()
    confirm(intents.cutover(cfg, migration_id), yes)
    res = cutover(cfg, migration_id)
    if as_json:
        print_json(res.to_dict())
    else:
        print(f"flipped {migration_id} at epoch {res.flipped_epoch}: write freeze {res.freeze_ms:.0f} ms "
              f"({', '.join(f'{k} {v:.0f}' for k, v in res.steps_ms.items())}); "
              f"{res.rows_checked} changed rows compared, {res.rows_repaired} re-copied")


def register_cutover(app: Any) -> None:
    """Add ``cutover ID [--yes]`` to a typer app."""
    app.command("cutover")(cutover_cmd)


def _reverse_pass_text(p: dict[str, Any]) -> str:
    return (f"reverse pass {p.get('number')}: {p.get('events', 0)} events in {p.get('duration_s', 0):.2f}s "
            f"(apply {p.get('apply_rate', 0):.0f}/s, writes {p.get('write_rate', 0):.0f}/s), predicted freeze "
            f"{p.get('predicted_freeze_ms', 0):.0f} ms{' converged' if p.get('converged') else ''}")


def rollback_cmd(
    migration_id: str = typer.Argument(..., help="The migration id (rb-...: every finished move of a batched "
                                                  "split or rebalance, last finished first).",
                                       callback=migration_id_callback(), metavar="ID"),
    queue: RqQueueOpt = None,
    detach: bool = typer.Option(False, "--detach", help="Enqueue and return; follow with `migrator status ID`."),
    timeout: float | None = typer.Option(None, "--timeout", help="Stop following after this many seconds "
                                                                  "(the rollback goes on; default: never).",
                                         callback=checked(at_least(0), "--timeout"), metavar=DURATION_METAVAR,
                                             parser=duration_parser("--timeout")),
    sync: bool = typer.Option(False, "--sync", help="Run it in this process instead of RQ workers."),
    yes: YesOpt = False,
    as_json: JsonOpt = False,
    follow: FollowOpt = False,
    zk_patience: ZkPatienceOpt = PATIENCE_S,
) -> None:
    """Tail the new master back into the tombstones in converging passes, verify, and flip the ranges back
    (retrying a stopped attempt), on RQ workers: follows each reverse pass, the freeze and the result, and
    exits non-zero with the verdict and the next step when the rollback gives up. Switches traffic: shows
    what it will do and asks."""
    from migrator.ops import command

    cfg = load_config()
    confirm(intents.rollback(cfg, migration_id), yes)
    rep = Report(as_json, follow and not detach)
    if rebalance_cmd.is_rebalance_id(migration_id):
        # a batched split (or a rebalance): each finished move rolled back, last finished first
        migration_ids = rebalance_cmd.to_roll_back(cfg, migration_id)
        doc: dict[str, Any] = {"rollback": migration_id, "migrations": []}
        rep.say(f"rolling back {len(migration_ids)} migrations of {migration_id}, last finished first")
        for i, move_id in enumerate(migration_ids, 1):
            rep.say(f"[{i}/{len(migration_ids)}] {move_id}")
            code, one = _roll_back_one(cfg, move_id, rep, queue=queue, timeout=timeout, sync=sync,
                                       patience_s=zk_patience)
            doc["migrations"].append(one)
            if code:
                rep.document(doc)
                print(f"{migration_id}: stopped at {move_id}; {len(migration_ids) - i} not rolled back "
                      f"({', '.join(migration_ids[i:]) or 'none'}); run `migrator rollback {migration_id}` again "
                      "once it is fixed", file=sys.stderr)
                raise typer.Exit(code)
        rep.document(doc)
        return
    if not sync and detach:
        out = command.start_rollback(cfg, migration_id, queue=queue)
        rep.say(f"rollback of {migration_id} enqueued on {out['queue']} (first job {out['job']}); "
                "`migrator worker` runs it")
        rep.document({"migration": migration_id, **out})
        return
    code, one = _roll_back_one(cfg, migration_id, rep, queue=queue, timeout=timeout, sync=sync,
                               patience_s=zk_patience)
    rep.document(one)
    if code:
        raise typer.Exit(code)


def register_rollback(app: Any) -> None:
    """Add ``rollback ID [--queue Q] [--detach] [--timeout S] [--sync]`` to a typer app."""
    app.command("rollback")(rollback_cmd)


def _roll_back_one(cfg: Any, migration_id: str, rep: Report, *, queue: str | None, timeout: float | None,
                   sync: bool, patience_s: float = PATIENCE_S) -> tuple[int, dict[str, Any]]:
    """Roll one migration back (on RQ workers, followed; or in this process), each event as a line (a JSON
    line with ``--json --follow``); the exit code and the outcome (for the JSON document)."""
    from migrator.ops import command, watch

    def event(kind: str, text: str, data: dict[str, Any]) -> None:
        rep.event(watch.Event(kind, migration_id, time.time(), text, data))

    if sync:
        res = rollback(cfg, migration_id, on_pass=lambda p: event("pass", _reverse_pass_text(asdict(p)), asdict(p)))
        rep.say(f"rolled back {migration_id} at epoch {res.flipped_epoch}: write freeze {res.freeze_ms:.0f} ms")
        return 0, {"migration": migration_id, "outcome": "rolled_back", **res.to_dict()}
    out = command.start_rollback(cfg, migration_id, queue=queue)
    rep.say(f"rollback of {migration_id} enqueued on {out['queue']} (first job {out['job']}); "
            "`migrator worker` runs it")
    for kind, ev in watch.rollback_events(cfg, migration_id, out["requested_at"], timeout=timeout,
                                          patience_s=patience_s):
        if kind == "zookeeper":
            event("zookeeper", ev["text"], ev)
        elif kind == "pass":
            event("pass", _reverse_pass_text(ev), ev)
        elif kind == "freeze":
            event("freeze", "freeze: fenced flip back under way", ev)
        elif kind == "attempt":
            event("attempt", f"attempt stopped before the flip back: {ev.get('outcome')}; more passes, then again",
                  ev)
        elif kind == "rolled_back":
            rep.say(f"rolled back {migration_id} at epoch {ev.get('flipped_epoch')}: write freeze "
                    f"{ev.get('freeze_ms') or 0:.0f} ms")
            return 0, {"migration": migration_id, "outcome": kind, **ev}
        elif kind == "stopped":
            print(f"error: rollback of {migration_id} stopped: {ev.get('reason')} (next: {ev.get('next')})",
                  file=sys.stderr)
            return int(ev.get("exit_code") or ExitCode.REFUSED), {"migration": migration_id, "outcome": kind, **ev}
        elif kind == "ended":
            print(f"error: rollback of {migration_id}: the migration is {ev['phase']} now: {ev.get('error') or ''}",
                  file=sys.stderr)
            return int(ExitCode.FAILED), {"migration": migration_id, "outcome": kind, **ev}
        else:
            print(f"error: rollback of {migration_id} still running after {timeout:.0f}s (follow it with "
                  f"`migrator status {migration_id}`)", file=sys.stderr)
            return int(ExitCode.STILL_RUNNING), {"migration": migration_id, "outcome": "still running"}
    return 0, {"migration": migration_id}


def cleanup_cmd(migration_id: PhaseMigrationIdArg,
                now: bool = typer.Option(False, "--now", help="Do not wait for the retention to pass: ends any "
                                                               "chance of a rollback (shows what it drops and "
                                                               "asks)."),
                yes: YesOpt = False,
                as_json: JsonOpt = False) -> None:
    """Drop the tombstones after the retention; release the migration's locks and pauses."""
    cfg = load_config()
    if now:
        confirm(intents.cleanup_now(cfg, migration_id), yes)
    res = cleanup(cfg, migration_id, now=now)
    if as_json:
        print_json({"migration": migration_id, **wire_keys(asdict(res))})
        return
    print(f"dropped {len(res.dropped)} schemas ({res.bytes_freed / 1e6:.1f} MB): {', '.join(res.dropped) or '-'}; "
          f"released {res.released_locks} shard locks, {res.released_pauses} maintenance pauses")
    for lag in res.passive_lag:
        print(f"warning: {lag}; its replication applies them in time (a move onto that pair is refused "
              "by its preflight until then)", file=sys.stderr)


def register_cleanup(app: Any) -> None:
    """Add ``cleanup ID [--now] [--yes]`` to a typer app."""
    app.command("cleanup")(cleanup_cmd)
