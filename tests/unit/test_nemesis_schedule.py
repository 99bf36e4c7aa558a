"""The nemesis schedule is a pure function of its seed and covers every fault."""

from __future__ import annotations

from tests.nemesis import schedule


def test_a_seed_gives_the_same_schedule_every_time():
    assert schedule.make(7) == schedule.make(7)
    assert schedule.make(7).describe() == schedule.make(7).describe()
    assert len({schedule.make(s) for s in range(50)}) > 40


def test_fifty_seeds_cover_every_fault_two_at_once_and_the_cutover():
    plans = [schedule.make(s) for s in range(1, 51)]
    faults = [f for p in plans for f in p.faults]
    kinds = {k for f in faults if f.phase != schedule.CUTOVER for k in f.kinds}
    assert kinds == set(schedule.OUTSIDE)
    assert any(len(f.kinds) == 2 for f in faults)
    assert {f.phase for f in faults} == set(schedule.PHASES)
    cut = [f for f in faults if f.phase == schedule.CUTOVER]
    assert {f.kinds[0] for f in cut} == {"kill", "expire_zk"}
    for p in plans:
        assert 1 <= len(p.faults) <= 4
        assert len(p.in_phase(schedule.CUTOVER)) <= 1
        order = [schedule.PHASES.index(f.phase) for f in p.faults]
        assert order == sorted(order)  # fired in the order the migration reaches the phases
        assert f"--seed {p.seed}" in p.describe()
