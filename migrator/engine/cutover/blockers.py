"""Who holds the moving tables when a freeze runs out waiting for their locks.

Runs in the cutover process, after an attempt was undone and before it is
recorded (:func:`migrator.engine.cutover._cutover`). A freeze that ran out in
``fence`` (LOCK TABLES, the queued RENAMEs, or the master's write gate) or in
``passive_close`` (the passive member's write gate) waited for a metadata
lock some other connection holds: usually a client's open transaction on a
moving table. Raising the freeze budget only makes the next freeze longer; the
operator needs that connection, so the refusal names it (id, user, host, how
long, what it runs) and says to wait for it or end it. How the holders are read
is :mod:`migrator.engine.mdl`'s.
"""

from __future__ import annotations

from typing import Any

from migrator.engine.mdl import Blocker, named, read_blockers

__all__ = ["LOCK_STEPS", "Blocker", "after_overrun", "named", "read_blockers"]

#: the freeze steps that wait for a lock, and whose host they wait on
LOCK_STEPS = ("fence", "passive_close")


def after_overrun(run: Any) -> list[Blocker]:
    """The blockers of an attempt whose freeze ran out (or failed) waiting for a lock: read on the host the
    pending step waited on (the source master in ``fence``, the passive member in ``passive_close``);
    [] when the attempt stopped in another step, or when they cannot be read (the refusal stands without
    them)."""
    from migrator.fleet.mysql import connect as mysql_connect

    if run.record.t_freeze is None:
        return []
    step = run.record.overrun_step or run.pending_step()
    if step not in LOCK_STEPS:
        return []
    host = run.fences.passive_host if step == "passive_close" else run.direction.source
    try:
        with mysql_connect(host, run.creds, read_timeout=10) as conn:
            return read_blockers(conn, [(t.db, t.table) for t in run.tables], server=host.name)
    except Exception:  # noqa: BLE001 - the refusal is worth more than its detail
        return []
