"""What every command of the CLI means the same way: ``--yes``, ``--listen``, the migration limits.

- ``--yes`` / ``-y`` means one thing everywhere: *go ahead*. A command that
  destroys or switches traffic shows what it will do and asks (:func:`confirm`);
  ``--yes`` skips the question, and a run that cannot ask (no terminal on stdin)
  is refused without it. ``split``, ``move``, ``move-partition`` and
  ``rebalance`` are dry runs without it.
- ``--listen HOST:PORT`` is every listen address (:func:`listen_address`).
- The limits a migration runs under (``--max-lag``, ``--max-threads-running``,
  ``--freeze-budget-ms``, ``--chunk-target-ms``, ``--cutover-retry-s``, ...)
  have the same flag at launch and in ``migrator set``
  (:func:`build_options`, :data:`OPTION_FLAGS`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from migrator.cli.failures import pydantic_reason, short
from migrator.engine.migration import Options
from migrator.errors import ExitCode, MigratorError
from migrator.fleet.model import WIRE_NAMES

# the limits every launch (split, move, move-partition, rebalance) and `migrator set` take alike
ChunkTargetOpt = Annotated[int | None, typer.Option(
    "--chunk-target-ms", help="Time target per copy chunk (ms; default 500).", metavar="MS")]
LockRetryOpt = Annotated[float | None, typer.Option(
    "--lock-retry-s", help="How long a statement that needs a live table's metadata lock outside the freeze (the "
                           "write gates' triggers, the renames after the flip) keeps trying; each try waits at most "
                           "half the freeze budget, so no client queues behind it longer (s; default 30).",
                               metavar="S")]
KillBlockersOpt = Annotated[bool | None, typer.Option(
    "--kill-blockers/--no-kill-blockers",
    help="When those tries are over, end the connections that held the lock through all of them (KILL) and try "
         "once more, instead of stopping and naming them (default: off).")]
KillBlockersRowsOpt = Annotated[int | None, typer.Option(
    "--kill-blockers-max-rows", help="With --kill-blockers: never end a transaction that changed more rows than "
                                     "this (default 0: only read-only ones).", metavar="N")]


class UsageProblem(MigratorError):
    """A value given on the command line is wrong; nothing was touched."""

    component = "cli"
    exit_code = ExitCode.USAGE


class NotConfirmed(MigratorError):
    """A destroying or switching command was not confirmed; nothing was done."""

    component = "cli"
    exit_code = ExitCode.REFUSED


YES_HELP = "Go ahead without asking (needed when stdin is not a terminal)."
#: ``--yes`` / ``-y`` of a command that asks before it destroys or switches (:func:`confirm`)
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help=YES_HELP)]

#: the flag of each migration option a command line can set (launch and `migrator set` alike)
OPTION_FLAGS = {
    "chunk_rows": "--chunk-rows",
    "chunk_target_ms": "--chunk-target-ms",
    "copy_workers": "--workers",
    "max_passive_lag_s": "--max-lag",
    "max_threads_running": "--max-threads-running",
    "freeze_budget_ms": "--freeze-budget-ms",
    "fence": "--fence",
    "cutover_retry_s": "--cutover-retry-s",
    "lock_retry_s": "--lock-retry-s",
    "kill_blockers": "--kill-blockers",
    "kill_blockers_max_rows": "--kill-blockers-max-rows",
}
#: an option named by its config key (stored, `migrator set`) where that differs from its field's name
OPTION_FLAGS.update({wire: OPTION_FLAGS[name] for name, wire in WIRE_NAMES.items() if name in OPTION_FLAGS})


def old_spelling(flag: str, new: str, **bounds: Any) -> Any:
    """The old spelling of a renamed flag (``--shards`` for a count, now ``--shard-count``): hidden from the
    help, still accepted, with the same bounds; None when not given. Deprecated: scripts should move to ``new``."""
    return typer.Option(None, flag, hidden=True, help=f"Deprecated spelling of {new}.", **bounds)


def build_options(base: Options | None = None, **given: Any) -> Options:
    """Options from the flags given (None: not given), on top of ``base``; a bad value is one line naming
    its flag (``--freeze-budget-ms -5: Input should be greater than or equal to 1``)."""
    values = {k: v for k, v in given.items() if v is not None}
    try:
        return Options(**{**(base.model_dump() if base is not None else {}), **values})
    except ValidationError as exc:
        raise UsageProblem(pydantic_reason(exc, OPTION_FLAGS)) from None


def listen_address(text: str, flag: str = "--listen") -> tuple[str, int]:
    """``HOST:PORT`` (``:PORT`` or ``PORT`` alone: 127.0.0.1) as (host, port); one line when it is not one."""
    host, sep, port = text.strip().rpartition(":")
    if not sep:
        host, port = "", text.strip()
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise UsageProblem(f"{flag} {short(text)}: give HOST:PORT with a port from 0 to 65535, "
                           "e.g. 127.0.0.1:8080 (0: any free port where a command allows it)")
    return host, int(port)


def confirm(what: str, yes: bool, *, ask: Callable[[str], bool] | None = None,
            interactive: bool | None = None) -> None:
    """Show ``what`` the command will do and ask; ``yes`` skips the question. Refused (nothing done) when
    the answer is no, or when nobody can answer (stdin is not a terminal) and ``yes`` was not given."""
    if yes:
        return
    if interactive is None:
        interactive = sys.stdin.isatty()
    if not interactive:
        raise NotConfirmed(f"not confirmed: this would {what}; stdin is not a terminal, so nothing was done: "
                           "give --yes to go ahead")
    if ask is None:
        def ask(prompt: str) -> bool:
            return typer.confirm(prompt, default=False)

    print(f"this will {what}", file=sys.stderr, flush=True)
    if not ask("go ahead?"):
        raise NotConfirmed("not confirmed: nothing was done")


def dry_run_or_yes(dry_run: bool, yes: bool) -> None:
    """``--dry-run`` (the default) and ``--yes`` contradict each other."""
    if dry_run and yes:
        raise UsageProblem("--dry-run and --yes contradict each other: without --yes the command is a dry run; "
                           "give one of them")


def detach_needs_yes(detach: bool, yes: bool) -> None:
    """``--detach`` without ``--yes`` is refused, not ignored: without ``--yes`` the command is a dry run."""
    if detach and not yes:
        raise UsageProblem("--detach goes with --yes (start it on the workers and return); without --yes the "
                           "command is a dry run and nothing would start: add --yes, or drop --detach")
