"""RQ jobs of the verify, cutover, rollback and cleanup steps.

Thin: each loads the config, calls the command function of
:mod:`migrator.ops.command` (verify and cleanup call the engine for the
fuller summary and the refusal they report), and puts a small summary in
``job.meta``. Every connection (ZooKeeper, MySQL, the
binlog) is opened inside the job, never at import time; arguments are ids and
paths only, never credentials.

``cutover`` enqueues ``cleanup`` for ``State.cleanup_after`` when the worker
runs with the scheduler (``rq worker --with-scheduler``); otherwise the
operator runs ``migrator cleanup ID`` after the retention.
"""

from __future__ import annotations

import time
from typing import Any

from migrator.engine import cleanup as cleanup_mod
from migrator.engine.migration import MigrationStore, Phase
from migrator.engine.verify.run import verify_migration
from migrator.fleet import config as config_mod
from migrator.ops import command
from migrator.ops.steps import enqueue_cleanup_at


def _meta(key: str, value: dict[str, Any]) -> Any:
    from rq import get_current_job

    job = get_current_job()
    if job is not None:
        job.meta[key] = value
        job.save_meta()
    return job


def verify(migration_id: str, config_path: str | None = None, repair: bool = True) -> dict[str, Any]:
    """Chunked checksums source vs target; re-copy what differs."""
    rep = verify_migration(config_mod.load(config_path), migration_id, repair=repair)
    summary = {"migration": migration_id, "chunks": rep.chunks, "mismatched": len(rep.mismatched_chunks),
               "differing_rows": len(rep.differing_rows), "repaired": rep.repaired_rows, "ok": rep.ok,
               "verified_gtid": rep.verified_gtid}
    _meta("verify", summary)
    return summary


def cutover(migration_id: str, config_path: str | None = None, schedule_cleanup: bool = True) -> dict[str, Any]:
    """The fenced cutover; on success, cleanup is scheduled for the end of the retention."""
    cfg = config_mod.load(config_path)
    summary = command.cutover(cfg, migration_id)
    job = _meta("cutover", summary)
    if schedule_cleanup and job is not None:
        with command.session(cfg) as (zk, _):
            st, _ = MigrationStore(zk).state(migration_id)
        if st.cleanup_after is not None:
            enqueue_cleanup_at(job.connection, migration_id, st.cleanup_after, config_path, queue=job.origin)
    return summary


def rollback(migration_id: str, config_path: str | None = None) -> dict[str, Any]:
    """The whole rollback in one job (an earlier entry point, kept for jobs queued under its name);
    ``migrator rollback ID`` runs it as a chain of slices, :func:`jobs.rollback.run`."""
    summary = command.rollback(config_mod.load(config_path), migration_id)
    _meta("rollback", summary)
    return summary


def cleanup(migration_id: str, config_path: str | None = None, now: bool = False) -> dict[str, Any]:
    """Drop the tombstones (refuses before the retention unless ``now``)."""
    cfg = config_mod.load(config_path)
    with command.session(cfg) as (zk, _):
        st, _ = MigrationStore(zk).state(migration_id)
    if st.phase not in (Phase.DONE, Phase.ROLLED_BACK):
        return {"migration": migration_id, "skipped": f"phase is {st.phase.value}"}
    try:
        res = cleanup_mod.cleanup(cfg, migration_id, now=now)
    except cleanup_mod.RollbackUnderWay as exc:  # the tombstones are in use: look again later
        job = command.schedule_cleanup(cfg, migration_id, at=time.time() + command.ROLLBACK_RECHECK_S)
        return {"migration": migration_id, "skipped": exc.message, "scheduled": job}
    summary = res.to_dict()
    _meta("cleanup", summary)
    return summary
