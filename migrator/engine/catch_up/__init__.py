"""Catch-up: keep the target following the source master's binlog until the cutover.

The path of a row change, one module each:

- :mod:`.streamer` reads the source binlog (GTID-tracked, filtered to the
  moving schemas before rows are decoded) and hands over whole transactions;
- :mod:`.statements` decides what a DDL statement in a moving schema means
  (replay it, ignore it, or stop the migration);
- :mod:`.applier` writes row changes idempotently by primary key, in batches;
- :mod:`.tailer` joins the two and checkpoints after each committed batch;
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
