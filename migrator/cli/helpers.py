"""What the command modules of the CLI share: the config of this invocation, how numbers print, and the
options and arguments several commands declare alike.

:data:`state` holds what the root options (``--config``) chose; the root callback of :mod:`migrator.cli.main` sets it
before any command runs, and every command reads the config through :func:`load_config`. This
module imports no other command module, so any of them can import it at module level.

The ``...Opt`` / ``...Arg`` aliases are typer parameters declared once for every command that takes them the
same way (same flag, type and help); the default stays at the command: ``as_json: JsonOpt = False``.
"""

from __future__ import annotations

from typing import Annotated

import typer

from migrator.cli.inputs import DURATION_METAVAR, MigrationIdArg, at_least, checked, duration_parser
from migrator.fleet import bounds
from migrator.fleet import config as config_mod
from migrator.fleet.model import shard_runs
from migrator.fleet.zk import PATIENCE_S

__all__ = ["JsonOpt", "MigrationIdArg", "QueueNameOpt", "RqQueueOpt", "State", "ZkPatienceOpt", "duration",
           "human_bytes", "load_config", "shard_runs", "state"]


class State:
    """The root options of one ``migrator`` invocation."""

    config_path: str | None = None


state = State()

#: ``--json``: exactly one JSON document on stdout, nothing else there (:mod:`migrator.cli.report`)
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the result as one JSON document on stdout, "
                                                      "nothing else there (human lines go to stderr).")]
#: ``--follow``: with --json, JSON lines as the command follows progress (:mod:`migrator.cli.report`)
FollowOpt = Annotated[bool, typer.Option("--follow", help="With --json, while it follows progress: one JSON "
                                                          "line per event as it happens, the last the result "
                                                          "(instead of one document at the end).")]
#: ``--zk-patience``: how long a command that launches or follows work waits for ZooKeeper to come back
ZkPatienceOpt = Annotated[float, typer.Option(
    "--zk-patience", help=f"How long to wait for ZooKeeper when it goes away (a lost connection, an expired "
                          f"session) before giving up with exit 4; the work goes on in the workers meanwhile "
                          f"(s; default {PATIENCE_S:g}).",
    callback=checked(at_least(0, exclusive=True), "--zk-patience"), metavar=DURATION_METAVAR,
    parser=duration_parser("--zk-patience"))]
#: the RQ queue a migration step is enqueued on
RqQueueOpt = Annotated[str | None, typer.Option("--queue", help="RQ queue (default: the source pair's, which "
                                                                "`migrator worker` serves).", metavar="QUEUE")]
#: a queue of the MySQL-backed job queue
QueueNameOpt = Annotated[str, typer.Option("--queue", help="Queue name.",
                                           callback=checked(bounds.queue_name, "--queue"), metavar="QUEUE")]


def load_config() -> config_mod.Config:
    """The config named by ``--config`` (else ``$MIGRATOR_CONFIG``, else the sandbox's)."""
    return config_mod.load(state.config_path)


def duration(s: float) -> str:
    """Seconds as ``1h02m03s`` / ``2m03s`` / ``3s``; ``unknown`` for infinity."""
    if s == float("inf"):
        return "unknown"
    s = int(round(s))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}h{m:02d}m{sec:02d}s" if h else (f"{m}m{sec:02d}s" if m else f"{sec}s")


def human_bytes(n: float) -> str:
    """A byte count in B, KiB, MiB, GiB or TiB."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


