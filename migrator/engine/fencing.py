"""How a move's source will be fenced at its cutover: the mode, and the limit that chooses it.

Decided long before the cutover (the plan sizes batches by it, preflight checks
what the mode needs, the copy prepares for it), so it lives below the cutover
package: the phases before the cutover read it without importing the cutover.
:mod:`migrator.engine.cutover.rename_fence` and :mod:`migrator.engine.cutover.trigger_gate`
are the fences themselves.
"""

from __future__ import annotations

from migrator.errors import MigratorError


class FenceError(MigratorError):
    component = "fence"


#: one connection per moving table is held during a freeze; a bigger move runs as batches of at most this
#: many tables, each a migration handed its shards by one batched migration (migrator.ops.batched.handover), or,
#: with fence=gate, as one gated move
MAX_TABLES = 200


def fence_mode(option: str, tables: int) -> str:
    """``rename`` or ``gate`` for a move of ``tables`` tables, given the migration option ``fence``."""
    if option == "auto":
        return "rename" if tables <= MAX_TABLES else "gate"
    if option == "rename" and tables > MAX_TABLES:
        raise FenceError(f"{tables} tables would need {tables} fence connections (at most {MAX_TABLES}) with "
                         "the option fence=rename; use fence=auto or fence=gate", phase="cutover")
    return option
