"""``migrator catchup / verify / cutover / rollback / cleanup ID``: the phase commands.

Each command parses its options, calls the phase of :mod:`migrator.engine` in
this process (or, for ``catchup --enqueue``, hands the passes to RQ workers
through :mod:`migrator.ops.steps`; ``rollback`` hands itself to the workers and
follows it from the record, unless ``--sync``) and prints the result; a
:class:`~migrator.errors.MigratorError` becomes one line on stderr and its exit
code. :func:`register` adds them to the ``migrator`` app after the migration
commands of :mod:`migrator.cli.migrate`.
"""

from __future__ import annotations

import json as _json
import sys
from dataclasses import asdict
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from migrator.engine.catch_up.passes import PassResult, run_passes
from migrator.engine.cleanup import cleanup
from migrator.engine.cutover import cutover
from migrator.engine.rollback import rollback
from migrator.engine.verify.run import verify_migration
from migrator.errors import MigratorError
from migrator.ops.rebalance import command as rebalance_cmd
from migrator.ops.steps import enqueue_passes

PASS_COLUMNS = ("number", "events", "duration_s", "apply_rate", "write_rate", "lag_s", "predicted_freeze_ms",
                "to_gtid", "converged")


def register(app: Any) -> None:
    """Add the phase commands, in the order ``migrator --help`` lists them."""
    register_catchup(app)
    register_verify(app)
    register_cutover(app)
    register_rollback(app)
    register_cleanup(app)


def register_catchup(app: Any) -> None:
    """Add ``catchup ID [--passes N] [--enqueue]`` to a typer app."""

    @app.command("catchup")
    def catchup(
        migration_id: str = typer.Argument(..., help="The migration id."),
        passes: int | None = typer.Option(None, "--passes", "-n",
                                          help="Run exactly N passes (default: until converged)."),
        enqueue: bool = typer.Option(False, "--enqueue", help="Run the passes as RQ jobs instead of in this process."),
        queue: str | None = typer.Option(None, "--queue", help="RQ queue for --enqueue (default: the source "
                                                                "pair's)."),
    ) -> None:
        """Replay the source binlog onto the target in passes until converged."""
        from migrator.cli.main import fail, load_config

        console = Console()
        try:
            cfg = load_config()
            if enqueue:
                console.print(f"enqueued {enqueue_passes(cfg, migration_id, passes, queue=queue)}")
                return
            table = Table(*PASS_COLUMNS, title=f"catch-up of {migration_id}")

            def show(res: PassResult) -> None:
                d = asdict(res)
                table.add_row(*(str(d[c]) for c in PASS_COLUMNS))

            results = run_passes(cfg, migration_id, passes, on_pass=show)
            console.print(table)
            if results and results[-1].converged:
                console.print(f"converged; predicted freeze {results[-1].predicted_freeze_ms:.0f} ms")
        except MigratorError as exc:
            fail(exc, exc.exit_code)


def register_verify(app: Any) -> None:
    """Add ``verify ID`` to a typer app."""

    @app.command("verify")
    def verify_cmd(
        migration_id: str = typer.Argument(..., help="The migration id."),
        no_repair: bool = typer.Option(False, "--no-repair", help="Report differences, change nothing."),
        chunk_rows: int = typer.Option(0, "--chunk-rows", help="Rows per checksum chunk (default: the migration's)."),
        as_json: bool = typer.Option(False, "--json"),
    ) -> None:
        """Checksum the moving tables source vs target by primary-key chunks; re-copy what differs."""
        from migrator.cli.main import fail, load_config

        try:
            rep = verify_migration(load_config(), migration_id, repair=not no_repair, chunk_rows=chunk_rows or None)
        except MigratorError as exc:
            fail(exc, exc.exit_code)
            return
        if as_json:
            print(_json.dumps(rep.to_dict(), indent=2))
        else:
            print(f"{rep.tables} tables, {rep.chunks} chunks, {rep.rows_checked} rows: "
                  f"{len(rep.mismatched_chunks)} chunks differed, {len(rep.differing_rows)} rows differed, "
                  f"{rep.repaired_rows} re-copied, {rep.in_flight_rows} in flight (live writes, re-checked at "
                  f"cutover); {'OK' if rep.ok else 'STILL DIFFERENT'} "
                  f"(as of {rep.verified_gtid}, {rep.seconds:.1f}s)")
            for d in rep.differing_rows[:50]:
                print(f"  {d.table} {list(d.key)}: {d.kind}")
        if not rep.ok:
            raise typer.Exit(1)


def register_cutover(app: Any) -> None:
    """Add ``cutover ID`` to a typer app."""

    @app.command("cutover")
    def cutover_cmd(migration_id: str = typer.Argument(..., help="The migration id."),
                    as_json: bool = typer.Option(False, "--json")) -> None:
        """Freeze, fence, drain, compare and flip the moving ranges to the target pair."""
        from migrator.cli.main import fail, load_config

        try:
            res = cutover(load_config(), migration_id)
        except MigratorError as exc:
            fail(exc, exc.exit_code)
            return
        if as_json:
            print(_json.dumps(res.to_dict(), indent=2))
        else:
            print(f"flipped {migration_id} at epoch {res.flipped_epoch}: write freeze {res.freeze_ms:.0f} ms "
                  f"({', '.join(f'{k} {v:.0f}' for k, v in res.steps_ms.items())}); "
                  f"{res.rows_checked} changed rows compared, {res.rows_repaired} re-copied")


def _show_reverse_pass(p: dict[str, Any]) -> None:
    print(f"reverse pass {p.get('number')}: {p.get('events', 0)} events in {p.get('duration_s', 0):.2f}s "
          f"(apply {p.get('apply_rate', 0):.0f}/s, writes {p.get('write_rate', 0):.0f}/s), predicted freeze "
          f"{p.get('predicted_freeze_ms', 0):.0f} ms{' converged' if p.get('converged') else ''}", flush=True)


def register_rollback(app: Any) -> None:
    """Add ``rollback ID [--queue Q] [--detach] [--timeout S] [--sync]`` to a typer app."""

    @app.command("rollback")
    def rollback_cmd(
        migration_id: str = typer.Argument(..., help="The migration id (rb-...: every finished move of a batched "
                                                      "split or rebalance, last finished first)."),
        queue: str | None = typer.Option(None, "--queue", help="RQ queue (default: the source pair's, which "
                                                                "`migrator worker` serves)."),
        detach: bool = typer.Option(False, "--detach", help="Enqueue and return; follow with `migrator status ID`."),
        timeout: float | None = typer.Option(None, "--timeout", help="Stop following after this many seconds "
                                                                      "(the rollback goes on)."),
        sync: bool = typer.Option(False, "--sync", help="Run it in this process instead of RQ workers."),
    ) -> None:
        """Tail the new master back into the tombstones in converging passes, verify, and flip the ranges back
        (retrying a stopped attempt), on RQ workers: follows each reverse pass, the freeze and the result, and
        exits non-zero with the verdict and the next step when the rollback gives up."""
        from migrator.cli.main import fail, load_config
        from migrator.ops import command

        try:
            cfg = load_config()
            if rebalance_cmd.is_rebalance_id(migration_id):
                # a batched split (or a rebalance): each finished move rolled back, last finished first
                mids = rebalance_cmd.to_roll_back(cfg, migration_id)
                print(f"rolling back {len(mids)} migrations of {migration_id}, last finished first", flush=True)
                for i, mid in enumerate(mids, 1):
                    print(f"[{i}/{len(mids)}] {mid}", flush=True)
                    code = _roll_back_one(cfg, mid, queue=queue, timeout=timeout, sync=sync)
                    if code:
                        print(f"{migration_id}: stopped at {mid}; {len(mids) - i} not rolled back "
                              f"({', '.join(mids[i:]) or 'none'}); run `migrator rollback {migration_id}` again "
                              "once it is fixed", file=sys.stderr)
                        raise typer.Exit(code)
                return
            if not sync and detach:
                out = command.start_rollback(cfg, migration_id, queue=queue)
                print(f"rollback of {migration_id} enqueued on {out['queue']} (first job {out['job']}); "
                      "`migrator worker` runs it", flush=True)
                return
            code = _roll_back_one(cfg, migration_id, queue=queue, timeout=timeout, sync=sync)
            if code:
                raise typer.Exit(code)
        except MigratorError as exc:
            fail(exc, exc.exit_code)


def _roll_back_one(cfg: Any, migration_id: str, *, queue: str | None, timeout: float | None, sync: bool) -> int:
    """Roll one migration back (on RQ workers, followed; or in this process) and print it; the exit code."""
    from migrator.ops import command, watch

    if sync:
        res = rollback(cfg, migration_id, on_pass=lambda p: _show_reverse_pass(asdict(p)))
        print(f"rolled back {migration_id} at epoch {res.flipped_epoch}: write freeze {res.freeze_ms:.0f} ms")
        return 0
    out = command.start_rollback(cfg, migration_id, queue=queue)
    print(f"rollback of {migration_id} enqueued on {out['queue']} (first job {out['job']}); "
          "`migrator worker` runs it", flush=True)
    for kind, ev in watch.rollback_events(cfg, migration_id, out["requested_at"], timeout=timeout):
        if kind == "pass":
            _show_reverse_pass(ev)
        elif kind == "freeze":
            print("freeze: fenced flip back under way", flush=True)
        elif kind == "attempt":
            print(f"attempt stopped before the flip back: {ev.get('outcome')}; more passes, then again", flush=True)
        elif kind == "rolled_back":
            print(f"rolled back {migration_id} at epoch {ev.get('flipped_epoch')}: write freeze "
                  f"{ev.get('freeze_ms') or 0:.0f} ms")
            return 0
        elif kind == "stopped":
            print(f"rollback of {migration_id} stopped: {ev.get('reason')}\nnext: {ev.get('next')}", file=sys.stderr)
            return 3
        elif kind == "ended":
            print(f"rollback of {migration_id}: the migration is {ev['phase']} now: {ev.get('error') or ''}",
                  file=sys.stderr)
            return 1
        else:
            print(f"still running after {timeout:.0f}s; follow with `migrator status {migration_id}`",
                  file=sys.stderr)
            return 4
    return 0


def register_cleanup(app: Any) -> None:
    """Add ``cleanup ID [--now]`` to a typer app."""

    @app.command("cleanup")
    def cleanup_cmd(migration_id: str = typer.Argument(..., help="The migration id."),
                    now: bool = typer.Option(False, "--now", help="Do not wait for the retention to pass.")) -> None:
        """Drop the tombstones after the retention; release the migration's locks and pauses."""
        from migrator.cli.main import fail, load_config

        try:
            res = cleanup(load_config(), migration_id, now=now)
        except MigratorError as exc:
            fail(exc, exc.exit_code)
            return
        print(f"dropped {len(res.dropped)} schemas ({res.bytes_freed / 1e6:.1f} MB): {', '.join(res.dropped) or '-'}; "
              f"released {res.released_locks} shard locks, {res.released_pauses} maintenance pauses")
        for lag in res.standby_lag:
            print(f"warning: {lag}; its replication applies them in time (a move onto that pair is refused "
                  "by its preflight until then)", file=sys.stderr)
