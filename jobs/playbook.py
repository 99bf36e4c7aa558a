"""RQ entry point for playbook runs.

``advance(run_id)`` executes the run from its cursor until it must wait, then
enqueues itself again; progress lives in ZooKeeper, so a lost Redis or a
killed worker only costs re-enqueueing (``migrator playbook resume RUN``).
Runs inside a forking ``rq worker``: connections are opened here, per job.
"""

from __future__ import annotations

from typing import Any

from rq import get_current_job

from migrator.fleet import config as config_mod
from migrator.fleet import zk as zk_mod
from migrator.ops import playbook as playbook
from migrator.ops.steps import enqueue_playbook, playbook_queue


def advance(run_id: str, config_path: str | None = None, wait_budget_s: float = 20.0) -> dict[str, Any]:
    cfg = config_mod.load(config_path)
    # one session that waits for ZooKeeper when it goes away (a step it interrupted runs again once it is
    # back), so a blip does not end the chain of advances
    with zk_mod.PatientSession(cfg) as ps:
        out = ps.call(lambda zk: playbook.advance(cfg, zk, run_id, wait_budget_s=wait_budget_s))
        state, _ = ps.call(lambda zk: playbook.RunStore(zk).get(run_id))
        migration_id = playbook.PlaybookRun.parse(state).context.migration
        queue = ps.call(lambda zk: playbook_queue(zk, migration_id))
    job = get_current_job()
    if job is not None:
        job.meta.update({"run": run_id, "playbook": state["playbook"], "migration": migration_id,
                         "status": out.status, "step": out.step, "message": out.message[:300]})
        job.save_meta()
        if out.status in ("waiting", "busy"):
            enqueue_playbook(run_id, config_path, connection=job.connection, playbook_name=state["playbook"],
                    migration=migration_id, step=out.step, queue=queue)
    return {"status": out.status, "step": out.step, "message": out.message}
