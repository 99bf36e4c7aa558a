"""RQ job: advance a rebalance (see :mod:`migrator.ops.rebalance.record`).

Marks the moves whose migration finished, starts the moves that may start now,
and queues itself again a few seconds later while the rebalance runs. Only the
chain the record names goes on, so a resumed rebalance never runs two chains.
"""

from __future__ import annotations

from typing import Any

from rq import get_current_job

from migrator.fleet.zk import PatientSession
from migrator.ops import command
from migrator.ops.rebalance import command as rebalance


def advance(rebalance_id: str, config_path: str | None = None) -> dict[str, Any]:
    cfg = command.load_config(config_path)
    job = get_current_job()
    # one session that waits for ZooKeeper when it goes away (every step here is safe to run again), so a
    # blip does not end the chain of advances
    with PatientSession(cfg) as ps:
        if job is not None and ps.call(lambda zk: rebalance.chain_of(cfg, rebalance_id, zk=zk)) != job.id:
            return {"rebalance": rebalance_id, "skipped": "a newer chain of advances runs this rebalance"}
        out = ps.call(lambda zk: rebalance.advance(cfg, rebalance_id, zk=zk))
        if out["phase"] == "running" and not out["paused"] and job is not None:
            out["next"] = ps.call(lambda zk: rebalance.enqueue_advance(cfg, rebalance_id,
                                                                       delay=rebalance.ADVANCE_EVERY_S, zk=zk))
    return out
