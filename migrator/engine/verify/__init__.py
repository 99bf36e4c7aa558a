"""Verify: prove the target holds what the source holds, chunk by chunk.

- :mod:`.checksums` compares a table on both sides in primary-key chunks;
- :mod:`.repair` re-checks rows by key and re-copies the ones that differ;
- :mod:`.changes` finds the rows changed between two binlog positions (what
  the cutover re-checks under its fence);
- :mod:`.drainers` gets the target to a source position (through catch-up);
- :mod:`.run` is the full check of a migration (:func:`verify_migration`).
"""

from migrator.engine.verify.drainers import CatchUpDrainer, Drainer, default_drainer
from migrator.engine.verify.run import VERIFY_NODE, VerifyReport, verify_migration

__all__ = ["VERIFY_NODE", "CatchUpDrainer", "Drainer", "VerifyReport", "default_drainer", "verify_migration"]
