"""Catch-up: keep the target following the source master's binlog until the cutover.

The path of a row change, one module each:

- :mod:`migrator.engine.binlog` reads the source binlog in a process of its
  own (GTID-tracked, other tables dropped at their table map, rows decoded
  straight to SQL literals) and hands over whole transactions;
- :mod:`.statements` decides what a DDL statement in a moving schema means
  (replay it, ignore it, or stop the migration) and carries it over;
- :mod:`.lanes` writes row changes idempotently by primary key, on several
  connections at once, in rounds, with the statements :mod:`.sql` builds;
- :mod:`.pacer` says when a round goes to the lanes, and adapts the round
  size and the lane count;
- :mod:`.tailer` joins the reader and the lanes and checkpoints after each
  round every lane committed;
- :mod:`.checkpoint` is the resume contract (the ``catchup`` progress node)
  and opens a tailer for a migration;
- :mod:`.passes` is the runbook: passes until converged, and the drain the
  cutover runs under its fence.

Runs in the catch-up RQ job (``jobs.catch_up.run_passes``), ``migrator
catchup ID``, verify's and the cutover's drains, and a rollback's reverse tail.
"""

from migrator.engine.catch_up.checkpoint import CHECKPOINT_KEY, CatchUpConflict, Checkpoint, copy_start, open_tailer
from migrator.engine.catch_up.passes import (
    NotConverging,
    PassResult,
    drain_to,
    judge,
    not_converging_message,
    run_pass,
    run_passes,
    status,
)
from migrator.engine.catch_up.tailer import CatchUpError, DrainTimeout, Tailer, TailStats

__all__ = [
    "CHECKPOINT_KEY", "CatchUpConflict", "CatchUpError", "Checkpoint", "DrainTimeout", "NotConverging", "PassResult",
    "TailStats", "Tailer", "copy_start", "drain_to", "judge", "not_converging_message", "open_tailer", "run_pass",
    "run_passes", "status",
]
