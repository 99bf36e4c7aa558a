"""The RQ jobs of verify/cutover/cleanup, run by a real (burst) worker on the sandbox Redis."""

from __future__ import annotations

from rq import Queue
from rq.registry import ScheduledJobRegistry

from migrator.engine.migration import Options, Phase
from migrator.fleet import redis_client
from migrator.ops.worker import SimpleWorker

from .cutover_setup import prepare_converged


def test_verify_then_cutover_jobs_schedule_the_cleanup(fleet):
    prep = prepare_converged(fleet, (5,), options=Options(freeze_budget_ms=2000))
    mid = prep.spec.id
    redis = redis_client.connect(fleet.config)
    q = Queue("migrator-test", connection=redis)
    jv = q.enqueue("jobs.cutover.verify", mid, config_path=str(fleet.config_path))
    jc = q.enqueue("jobs.cutover.cutover", mid, config_path=str(fleet.config_path), depends_on=jv)
    SimpleWorker([q], connection=redis).work(burst=True)
    jv.refresh()
    jc.refresh()
    assert jv.is_finished and jv.return_value()["ok"], jv.exc_info
    assert jc.is_finished, jc.exc_info
    assert jc.meta["cutover"]["flipped_epoch"] == jc.return_value()["flipped_epoch"]
    st, _ = prep.store.state(mid)
    assert st.phase == Phase.DONE
    scheduled = ScheduledJobRegistry(queue=q).get_job_ids()
    assert len(scheduled) == 1 and scheduled[0].startswith(f"cleanup-{mid}")
    # the cleanup job itself (now=True for the test): the tombstones go, the phase is cleaned
    jd = q.enqueue("jobs.cutover.cleanup", mid, config_path=str(fleet.config_path), now=True)
    SimpleWorker([q], connection=redis).work(burst=True)
    jd.refresh()
    assert jd.is_finished, jd.exc_info
    assert prep.store.state(mid)[0].phase == Phase.CLEANED
