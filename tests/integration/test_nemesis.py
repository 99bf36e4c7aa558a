"""The nemesis in every run of the suite: a few fixed seeds of the seeded fault schedule
(:mod:`tests.nemesis`), each a migration under queue load and sysbench with its faults fired and
recovered, ending with the ledger (0 lost), every moved table equal to its tombstone, no write on a
tombstone, and replication healthy on every pair. A longer soak: ``python -m tests.nemesis --seeds 50``.

The seeds are chosen to cover between them every fault of the schedule: kill -9 of the workers, the
source's active and passive members and the target restarted, the workers' ZooKeeper sessions expired,
Redis wiped, lag inside the source pair, two faults at once, and the cutover's worker killed inside the
freeze.
"""

from __future__ import annotations

import pytest

from tests.conftest import own_sandbox
from tests.nemesis import schedule
from tests.nemesis.__main__ import run_one
from tests.nemesis.rebalance import FLEET

#: split 2: the source master restarted while it applies its partner's writes 2 s late (lag inside the
#: source pair, with a sysbench on the passive member); split 57: the workers killed during catch-up, then the
#: cutover's worker killed after its compare; rebalance 22: the workers' ZooKeeper sessions expired with the
#: target restarted, then the passive member restarted with Redis wiped
SPLIT_SEEDS = [2, 57]
REBALANCE_SEEDS = [22]


def _kinds(seeds: list[int], scenario: str) -> set[str]:
    return {k for s in seeds for f in schedule.make(s, scenario).faults for k in f.kinds}


def test_the_fixed_seeds_cover_every_fault():
    kinds = _kinds(SPLIT_SEEDS, "split") | _kinds(REBALANCE_SEEDS, "rebalance")
    assert set(schedule.OUTSIDE) | {"kill"} <= kinds, sorted(set(schedule.OUTSIDE) - kinds)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("seed", SPLIT_SEEDS)
def test_split_survives_the_seeds_faults(sandbox, tmp_path, seed):
    out = run_one(sandbox, tmp_path, seed, "split")
    assert out.ok, f"{out.line()}\nreplay: python -m tests.nemesis --seed {seed}\n{out.error}"


@pytest.fixture(scope="module")
def four_pairs():
    with own_sandbox("migrator-nemesis-", **FLEET) as sb:
        yield sb


@pytest.mark.timeout(400)
@pytest.mark.parametrize("seed", REBALANCE_SEEDS)
def test_rebalance_survives_the_seeds_faults(four_pairs, tmp_path, seed):
    out = run_one(four_pairs, tmp_path, seed, "rebalance")
    assert out.ok, f"{out.line()}\nreplay: python -m tests.nemesis --rebalance --seed {seed}\n{out.error}"
