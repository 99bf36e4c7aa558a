"""The freeze budget is a bound: the watchdog undoes a slow freeze while there is still room for what follows
its last chance (the flip CAS, the release), and a flipped freeze that went over anyway says so."""

from __future__ import annotations

import time

import pytest

from migrator.engine.cutover import cutover
from migrator.engine.cutover.errors import FreezeBudgetExceeded
from migrator.engine.cutover.hooks import CutoverHooks
from migrator.engine.cutover.watchdog import MAX_RESERVE_SHARE
from migrator.engine.migration import MigrationStore, Options, Phase
from migrator.fleet.shard_map import ShardMapStore

from .cutover_setup import prepare_converged

MOVING = (2, 3)
BUDGET_MS = 1500


def _attempts(fleet, prep) -> list[dict]:
    node, _ = MigrationStore(fleet.zk).get_progress(prep.spec.id, "cutover_attempts")
    return node["attempts"]


def test_a_slow_step_before_the_flip_is_undone_within_the_budget_and_the_retry_flips(fleet):
    prep = prepare_converged(fleet, MOVING, options=Options(freeze_budget_ms=BUDGET_MS))
    seen: dict[str, float] = {}

    def slow_compare(view, step):
        if step != "compare" or seen:
            return
        # the compare ends just before the budget, past the watchdog's deadline (the budget less what the
        # flip CAS and the release cost): a claim now would leave the flip too little room
        reserve_ms = min(float(view.record.predicted["after_claim_ms"]), MAX_RESERVE_SHARE * BUDGET_MS)
        seen["reserve_ms"] = reserve_ms
        assert view.record.t_freeze is not None
        until = view.record.t_freeze + (BUDGET_MS - reserve_ms / 2) / 1000
        time.sleep(max(0.0, until - time.monotonic()))

    with pytest.raises(FreezeBudgetExceeded, match="overran its budget"):
        cutover(fleet.config, prep.spec.id, hooks=CutoverHooks(at_step=slow_compare))
    assert not any(ShardMapStore(fleet.zk).read().is_frozen(s) for s in MOVING)
    undone = _attempts(fleet, prep)[-1]
    assert undone["outcome"].startswith("aborted: the freeze overran"), undone
    # the clients were let go before the budget ran out, not after it
    assert undone["freeze_ms"] is not None and undone["freeze_ms"] < BUDGET_MS, (undone["freeze_ms"], seen)
    assert prep.store.state(prep.spec.id)[0].phase == Phase.CONVERGED
    # tried again, it flips within the budget and says it did
    res = cutover(fleet.config, prep.spec.id)
    assert res.freeze_ms <= BUDGET_MS and res.over_budget_ms == 0.0
    flipped = _attempts(fleet, prep)[-1]
    assert flipped["outcome"] == "flipped" and "over_budget_ms" not in flipped, flipped
    # the undo the watchdog made is measured, and kept back by the next attempts' watchdog
    assert undone["undo_ms"] > 0 and flipped["predicted"]["after_claim_from"] == "attempts", flipped["predicted"]
    assert ShardMapStore(fleet.zk).read().master_of(2) == prep.spec.target_master


def test_a_flip_that_goes_over_the_budget_after_its_claim_is_recorded_as_over(fleet):
    """After the claim nothing can be undone: a slow flip makes a freeze over the budget, and the record
    says so (never a silent ``flipped``)."""
    prep = prepare_converged(fleet, (5,), options=Options(freeze_budget_ms=BUDGET_MS))

    def slow_flip(view, step):
        if step == "flip_cas":  # claimed and flipped: the release waits
            time.sleep(BUDGET_MS / 1000 + 0.2)

    res = cutover(fleet.config, prep.spec.id, hooks=CutoverHooks(at_step=slow_flip))
    assert res.freeze_ms > BUDGET_MS and res.over_budget_ms == pytest.approx(res.freeze_ms - BUDGET_MS, abs=1)
    attempt = _attempts(fleet, prep)[-1]
    assert attempt["outcome"].startswith("flipped, over budget by ") and attempt["over_budget_ms"] > 0, attempt
    assert MigrationStore(fleet.zk).get_progress(prep.spec.id, "cutover")[0]["over_budget_ms"] > 0
    assert prep.store.state(prep.spec.id)[0].phase == Phase.DONE
