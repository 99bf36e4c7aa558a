"""Cutover pieces that need no server: tombstone names, the watchdog, the fence SQL."""

from __future__ import annotations

import threading
import time

import pytest

from migrator.engine.cutover.rename_fence import Fence, Move
from migrator.engine.cutover.watchdog import Watchdog
from migrator.engine.names import tomb_db, tomb_suffix
from migrator.fleet.model import Host
from migrator.fleet.mysql import IDENT_RE


def test_tombstone_names_are_stable_valid_identifiers():
    mid = "m-20261122-151727-0f8e69"
    assert tomb_db(mid, "db00005") == f"_tomb_{tomb_suffix(mid)}_db00005"
    assert tomb_db(mid, "db00005") == tomb_db(mid, "db00005")
    assert tomb_db(mid, "db00005") != tomb_db("m-other", "db00005")
    assert IDENT_RE.match(tomb_db(mid, "db04095"))


def test_watchdog_fires_once_and_then_refuses_the_flip():
    fired = threading.Event()
    wd = Watchdog(0.05, fired.set).start()
    assert fired.wait(2)
    assert wd.fired and not wd.claim()


def test_claimed_watchdog_never_fires():
    fired = threading.Event()
    wd = Watchdog(0.05, fired.set).start()
    assert wd.claim()
    time.sleep(0.15)
    assert not fired.is_set() and not wd.fired


def test_watchdog_fires_the_reserve_before_the_budget():
    """What follows the claim (the flip CAS, the release) is reserved: the watchdog fires that much earlier,
    never earlier than half the budget."""
    fired = threading.Event()
    t0 = time.monotonic()
    wd = Watchdog(1.0, fired.set, reserve_s=0.3).start()
    assert fired.wait(2)
    assert 0.6 <= time.monotonic() - t0 < 0.95 and wd.deadline_s == pytest.approx(0.7)
    assert Watchdog(1.0, fired.set, reserve_s=5.0).deadline_s == pytest.approx(0.5)


def test_a_claim_after_the_deadline_is_refused_and_undoes_even_before_the_timer_runs():
    fired = threading.Event()
    wd = Watchdog(0.05, fired.set, reserve_s=0.01).start()
    wd._timer.cancel()  # the timer thread not scheduled in time
    time.sleep(0.06)
    assert not wd.claim() and wd.fired and fired.is_set()


def test_fence_locks_every_table_and_the_sentinel():
    host = Host(name="MySQL001A", port=3306, partner="MySQL001B")
    f = Fence(host, None, [Move("db00002", "pins", "_tomb_x_db00002"), Move("db00002", "boards", "_tomb_x_db00002")],
              [("db00002", "_migrator_sentinel")])  # type: ignore[arg-type]
    sql = f.lock_sql()
    assert sql.endswith("LOCK TABLES `db00002`.`pins` WRITE, `db00002`.`boards` WRITE, "
                        "`db00002`.`_migrator_sentinel` WRITE")


def test_the_fence_ends_only_statements_that_name_a_moving_table():
    host = Host(name="MySQL001A", port=3306, partner="MySQL001B")
    f = Fence(host, None, [Move("db00002", "pins", "_t"), Move("db00002", "jobs_q_p2", "_t")])  # type: ignore[arg-type]
    named = [
        (None, "INSERT INTO `db00002`.`pins` (data) VALUES (1)"),
        (None, "insert into db00002.pins values (1)"),
        (None, "UPDATE `db00002` . jobs_q_p2 SET state = 1"),
        ("db00002", "UPDATE pins SET data = 1"),
        ("db00002", "SELECT * FROM `pins` WHERE id = 1"),
    ]
    not_named = [
        (None, "UPDATE pins SET data = 1"),  # bare, run in another database
        ("db00003", "UPDATE pins SET data = 1"),
        (None, "INSERT INTO db00002.pins_archive VALUES (1)"),
        (None, "SELECT * FROM db00012.pins"),
        ("db00002", "SELECT * FROM other.pins"),
        ("db00002", "SELECT * FROM `other`.`pins`"),
        (None, "UPDATE db00002.jobs_q_p22 SET state = 1"),
        ("db00002", None),
    ]
    assert all(f.names_moving(db, sql) for db, sql in named)
    assert not any(f.names_moving(db, sql) for db, sql in not_named)


def test_the_fixed_part_of_a_freeze_leaves_out_its_drain_and_the_pair_wait():
    from migrator.engine.cutover.freeze_stats import fixed_part

    flipped = {"freeze_ms": 150.0, "steps_ms": {"freeze_cas": 10, "passive_sync": 30, "drain": 40, "flip_cas": 8}}
    assert fixed_part(flipped) == 80.0
    assert fixed_part({"freeze_ms": 150.0, "steps_ms": {"drain": 40}}) is None  # never flipped
    assert fixed_part({"freeze_ms": None, "steps_ms": {"flip_cas": 8}}) is None


def test_the_drain_ratio_is_the_median_of_recent_freezes_within_its_bounds():
    from migrator.engine.cutover.freeze_stats import DRAIN_RATIO_BOUNDS, ratio_of

    assert ratio_of([]) is None
    assert ratio_of([{"drain_ms": 10.0, "drain_sampled_ms": None}]) is None  # sampled before this was kept
    assert ratio_of([{"drain_ms": 16.0, "drain_sampled_ms": 110.0}, {"drain_ms": 20.0, "drain_sampled_ms": 100.0},
                     {"drain_ms": 30.0, "drain_sampled_ms": 100.0}]) == 0.2
    assert ratio_of([{"drain_ms": 0.0, "drain_sampled_ms": 10.0}]) == 0.5  # a drain is never free: 5 ms at least
    assert ratio_of([{"drain_ms": 1.0, "drain_sampled_ms": 900.0}]) == DRAIN_RATIO_BOUNDS[0]
    assert ratio_of([{"drain_ms": 900.0, "drain_sampled_ms": 10.0}]) == DRAIN_RATIO_BOUNDS[1]


def test_the_watchdog_reserve_is_the_most_what_followed_the_last_chance_ever_cost():
    from migrator.engine.cutover.freeze_stats import after_claim_part, recent_after_claim_ms

    flipped = {"freeze_ms": 150.0, "steps_ms": {"drain": 40, "flip_cas": 8, "release": 30}}
    assert after_claim_part(flipped) == 38.0
    assert after_claim_part({"freeze_ms": 900.0, "steps_ms": {"drain": 40}, "undo_ms": 120.0}) == 120.0
    assert after_claim_part({"freeze_ms": 900.0, "steps_ms": {"drain": 40}}) is None
    kept = [{"fixed_ms": 80.0, "fence": "rename", "after_claim_ms": 38.0},
            {"fixed_ms": 90.0, "fence": "rename", "after_claim_ms": 120.0},
            {"fixed_ms": 60.0, "fence": "gate", "after_claim_ms": 500.0},
            {"fixed_ms": 70.0, "fence": "rename"}]  # kept before the reserve was
    assert recent_after_claim_ms(kept, fence="rename") == 120.0
    assert recent_after_claim_ms([], fence="rename") is None


def test_an_undo_s_reserve_grows_by_a_per_table_part_past_the_tables_it_fenced_never_down():
    from migrator.engine.cutover.freeze_stats import undo_reserve_ms

    kept = [{"undo_ms": 80.0, "fence": "rename", "tables": 200}, {"undo_ms": 30.0, "fence": "rename", "tables": 10},
            {"undo_ms": 400.0, "fence": "gate", "tables": 50}]
    assert undo_reserve_ms(kept, fence="rename", tables=5) == 80.0  # a smaller batch: the whole undo kept
    assert undo_reserve_ms(kept, fence="rename", tables=400) == 420.0  # 30 ms for 10 tables and 1 ms for 390 more
    assert undo_reserve_ms(kept, fence="rename", tables=400, per_table_ms=0.5) == 225.0
    assert undo_reserve_ms(kept, fence="gate", tables=500) == 400.0  # a gate's undo does not grow with tables
    assert undo_reserve_ms([], fence="rename", tables=5) is None


def test_a_freeze_the_watchdog_would_undo_is_refused_before_it_starts():
    """A prediction under the budget whose steps before the claim leave the watchdog less than its reserve
    for an undo is refused: frozen, it would only be undone (its clients waiting for nothing)."""
    from types import SimpleNamespace

    import pytest

    from migrator.engine.cutover import budget
    from migrator.engine.cutover.errors import FreezeBudgetExceeded

    run = SimpleNamespace(spec=SimpleNamespace(options=SimpleNamespace(freeze_budget_ms=500)), tables=[1] * 80,
                          direction=SimpleNamespace(source=SimpleNamespace(name="MySQL001A"), passive=None,
                                                    label="cutover"))
    budget._refuse_over_budget(run, 300.0, {"after_claim_ms": 150.0})  # fits, with room for an undo
    with pytest.raises(FreezeBudgetExceeded, match="keeps back for an undo .* 80 here"):
        budget._refuse_over_budget(run, 400.0, {"after_claim_ms": 150.0})
    # the reserve is at most half the budget, as the watchdog takes it
    with pytest.raises(FreezeBudgetExceeded, match="250 ms the watchdog"):
        budget._refuse_over_budget(run, 300.0, {"after_claim_ms": 900.0})
    # the flip's CAS and release the predicted freeze holds come after the claim: not counted twice
    budget._refuse_over_budget(run, 400.0, {"after_claim_ms": 150.0, "flip_ms": 60.0})
    with pytest.raises(FreezeBudgetExceeded, match=r"its claim at 360 ms"):
        budget._refuse_over_budget(run, 400.0, {"after_claim_ms": 150.0, "flip_ms": 40.0})


def test_a_fence_and_a_gate_name_the_direction_they_serve_in_their_errors():
    """A rollback's fences say ``rollback``, not ``cutover``: the phase comes from the direction."""
    import pytest

    from migrator.engine.cutover.rename_fence import FenceError
    from migrator.engine.cutover.trigger_gate import GateError, TriggerGate

    host = Host(name="MySQL001A", address="127.0.0.1", port=1, partner="MySQL001B")
    too_many = [Move("db00000", f"t{i}", "tomb") for i in range(10_000)]
    for phase in ("cutover", "rollback"):
        with pytest.raises(FenceError) as err:
            Fence(host, None, [], phase=phase)  # type: ignore[arg-type]
        assert err.value.phase == phase
        with pytest.raises(FenceError) as err:
            Fence(host, None, too_many, phase=phase)  # type: ignore[arg-type]
        assert err.value.phase == phase
        with pytest.raises(GateError) as err:
            TriggerGate(host, None, [], "sfx", {}, phase=phase)  # type: ignore[arg-type]
        assert err.value.phase == phase
