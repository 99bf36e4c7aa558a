"""The command line's arguments, checked as they are parsed: before any config is read or server asked.

Each ``...Arg`` / ``...Opt`` here is a typer parameter whose callback runs one check of
:mod:`migrator.fleet.bounds` (the same checks a playbook's parameters pass) and turns its refusal into
one line naming the flag and the value (:class:`~migrator.cli.options.UsageProblem`, exit 2). A value
that can be refused locally never waits on ZooKeeper's connect timeout.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Annotated, Any

import typer

from migrator.cli.failures import short
from migrator.cli.options import UsageProblem
from migrator.fleet import bounds


def checked(check: Callable[[Any], Any], name: str) -> Callable[[Any], Any]:
    """A typer callback running ``check`` on the value (each item of a list; None: not given), its refusal one
    line: ``<name> <value>: <why>``."""
    def callback(value: Any) -> Any:
        if value is None:
            return value
        try:
            return [check(v) for v in value] if isinstance(value, list) else check(value)
        except ValueError as exc:
            shown = ",".join(map(str, value)) if isinstance(value, list) else value
            raise UsageProblem(f"{name} {short(shown)}: {exc}") from None
    return callback


def at_least(minimum: float, *, exclusive: bool = False) -> Callable[[Any], Any]:
    """The check of a number that is at least ``minimum`` (above it when ``exclusive``), kept as given."""
    def check(value: Any) -> Any:
        bounds.number(value, minimum=minimum, exclusive=exclusive)
        return value
    return check


#: a duration's unit suffixes, in seconds
DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION = re.compile(r"\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(ms|s|m|h)?\s*", re.IGNORECASE)
#: the metavar of every duration flag: a bare number in the flag's unit, or a number with its own unit
DURATION_METAVAR = "DURATION"


def parse_duration(text: Any, unit: str = "s") -> float:
    """A duration as a number of ``unit`` (``s`` or ``ms``): a bare number is in ``unit``; ``1.5s``, ``1500ms``,
    ``2m`` and ``1h`` carry their own. ValueError, saying what to give, for anything else."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        return float(text)
    m = _DURATION.fullmatch(str(text))
    if m is None:
        raise ValueError(f"not a duration: give a number of {'seconds' if unit == 's' else 'milliseconds'}, "
                         "or one with its unit: 1.5s, 1500ms, 2m, 1h")
    value = float(m.group(1))
    suffix = (m.group(2) or unit).lower()
    out = value * DURATION_UNITS[suffix] / DURATION_UNITS[unit]
    if not math.isfinite(out):
        raise ValueError("not a finite duration")
    return out


def duration_parser(flag: str, unit: str = "s", *, whole: bool = False) -> Callable[[Any], Any]:
    """The typer ``parser=`` of the duration flag ``flag`` (:func:`parse_duration`); ``whole``: a whole number of
    ``unit`` (an int) is required. Its refusal is one line naming the flag (exit 2)."""
    def parser(value: Any) -> Any:
        try:
            out = parse_duration(value, unit)
            if whole:
                if out != int(out):
                    raise ValueError(f"give whole {'seconds' if unit == 's' else 'milliseconds'} (e.g. 2 or 2s)")
                return int(out)
            return out
        except ValueError as exc:
            raise UsageProblem(f"{flag} {short(str(value))}: {exc}") from None
    return parser


def migration_id_callback(name: str = "migration id") -> Callable[[Any], Any]:
    return checked(bounds.migration_id, name)


def job_state(text: str) -> str:
    """A job state of the queue service (NEW, IPR, OK, FAIL, or an alias such as pending); kept as given."""
    from migrator.queue.model import JobState

    try:
        JobState.parse(text)
    except (KeyError, ValueError):
        raise ValueError("give one of NEW, IPR, OK, FAIL") from None
    return text


#: the migration a command acts on
MigrationIdArg = Annotated[str, typer.Argument(
    help="The migration id (m-...; rb-...: every move of a rebalance or batched split).",
    callback=migration_id_callback(), metavar="ID")]
#: a migration id that may be left out (every migration)
OptionalMigrationIdArg = Annotated[str | None, typer.Argument(
    help="The migration id (m-... or rb-...); none: every migration.", callback=migration_id_callback(), metavar="ID")]
#: a playbook run
RunIdArg = Annotated[str, typer.Argument(help="The playbook run id (run-...).",
                                         callback=checked(bounds.run_id, "run id"), metavar="RUN_ID")]
#: a host of the registry given as an argument
HostArg = Annotated[str, typer.Argument(help="A master of the registry, e.g. MySQL001A.",
                                        callback=checked(bounds.host_name, "host"), metavar="HOST")]
#: a queue of the queue service given as an argument
QueueNameArg = Annotated[str, typer.Argument(help="The queue's name (1-40 letters, digits or underscores).",
                                             callback=checked(bounds.queue_name, "queue"), metavar="QUEUE")]
#: --state of the queue commands
JobStateOpt = Annotated[str, typer.Option("--state", help="NEW, IPR, OK or FAIL.",
                                          callback=checked(job_state, "--state"), metavar="STATE")]
#: host names given by a repeatable option (``rebalance --add-pair/--drain``)
AddPairOpt = Annotated[list[str], typer.Option("--add-pair", help="A new, empty registered pair to fill.",
                                               callback=checked(bounds.host_name, "--add-pair"), metavar="HOST")]
DrainOpt = Annotated[list[str], typer.Option("--drain", help="A pair to empty.",
                                             callback=checked(bounds.host_name, "--drain"), metavar="HOST")]
#: queue names given by a repeatable option (``partitions maintain --queue``)
QueueNamesOpt = Annotated[list[str] | None, typer.Option("--queue",
                                                         help="Only these queues; repeatable (default: every queue).",
                                                         callback=checked(bounds.queue_name, "--queue"),
                                                         metavar="QUEUE")]
