"""The fault schedule of one nemesis run: a pure function of its seed.

``make(seed)`` draws from ``random.Random(seed)`` only, so a run is replayed by
its seed (``python -m tests.nemesis --seed N``): the same faults, in the same
phases, at the same offsets. What the servers do in between is not
deterministic (timing on a busy box), which is why the schedule is printed at
the start of every run and the run reports the phase each fault really hit.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

#: faults fired from outside while the migration copies or catches up
KILL_WORKERS = "kill_workers"  # kill -9 of every RQ worker and its work-horse; new workers are started
RESTART_SOURCE = "restart_source"  # mysqld of the source pair's active member stopped and started
RESTART_PASSIVE = "restart_passive"  # ... of the source pair's passive member
RESTART_TARGET = "restart_target"  # ... of the target master
EXPIRE_ZK = "expire_zk"  # the workers stopped (SIGSTOP) past their ZooKeeper session timeout, then continued
WIPE_REDIS = "wipe_redis"  # FLUSHALL: every RQ job and registry gone; resumed from the ZooKeeper record
LAG_PAIR = "lag_pair"  # the source master applies its partner's writes late (MASTER_DELAY) for a while
OUTSIDE = (KILL_WORKERS, RESTART_SOURCE, RESTART_PASSIVE, RESTART_TARGET, EXPIRE_ZK, WIPE_REDIS, LAG_PAIR)

COPYING = "copying"
CATCHING_UP = "catching_up"
CUTOVER = "cutover"
PHASES = (COPYING, CATCHING_UP, CUTOVER)
#: a rebalance's faults fire at offsets from its start (its moves run at once, each in its own phase)
REBALANCE = "rebalance"

#: faults inside the cutover, run by a worker at an exact point (tests/faults/fault_jobs.py):
#: kill -9 of that worker right after a named step of the freeze, or its ZooKeeper session expired at a hook
CUTOVER_KILL_STEPS = ("freeze_cas", "passive_close", "passive_sync", "fence", "sentinel", "drain", "compare",
                      "flip_cas", "release", "passive_finish")
CUTOVER_EXPIRE_HOOKS = ("after_freeze", "before_flip", "after_flip")


@dataclass(frozen=True)
class Fault:
    """``kinds`` fire together (two at once when there are two) in ``phase``, ``offset_s`` after it began.
    A cutover fault has one kind, ``kill`` or ``expire_zk``, at ``at`` (a step or a hook)."""

    phase: str
    kinds: tuple[str, ...]
    offset_s: float
    at: str | None = None

    def describe(self) -> str:
        what = " + ".join(self.kinds)
        if self.phase == CUTOVER:
            return f"{self.phase}: {what} at {self.at}"
        if self.phase == REBALANCE:
            return f"{self.offset_s:.1f}s into the rebalance: {what}"
        return f"{self.phase} +{self.offset_s:.1f}s: {what}"


@dataclass(frozen=True)
class Schedule:
    seed: int
    scenario: str  # "split" | "rebalance"
    faults: tuple[Fault, ...]
    sysbench_rate: int  # transactions/s of sysbench oltp_write_only on a moving shard of the source
    queue_rate: float  # jobs/s of the queue load

    def in_phase(self, phase: str) -> list[Fault]:
        return [f for f in self.faults if f.phase == phase]

    def describe(self) -> str:
        lines = [f"nemesis {self.scenario} seed {self.seed}: sysbench {self.sysbench_rate} tps, "
                 f"queue load {self.queue_rate:.0f}/s, {len(self.faults)} fault(s)"]
        lines += [f"  {i + 1}. {f.describe()}" for i, f in enumerate(self.faults)]
        flag = " --rebalance" if self.scenario == "rebalance" else ""
        lines.append(f"  replay: python -m tests.nemesis{flag} --seed {self.seed}")
        return "\n".join(lines)


def _outside(rng: random.Random) -> tuple[str, ...]:
    """One fault from outside, or (a quarter of the time) two at once."""
    return tuple(sorted(rng.sample(OUTSIDE, 2))) if rng.random() < 0.25 else (rng.choice(OUTSIDE),)


def make(seed: int, scenario: str = "split") -> Schedule:
    """The schedule of ``seed`` for a split (:func:`make_split`) or a rebalance (:func:`make_rebalance`)."""
    return {"split": make_split, "rebalance": make_rebalance}[scenario](seed)


def make_rebalance(seed: int) -> Schedule:
    """Two or three faults from outside at offsets in the first 20 s of a rebalance of four pairs."""
    rng = random.Random(seed)
    faults = sorted((Fault(REBALANCE, _outside(rng), round(rng.uniform(1.0, 20.0), 1))
                     for _ in range(rng.randint(2, 3))), key=lambda f: f.offset_s)
    return Schedule(seed, "rebalance", tuple(faults), sysbench_rate=rng.choice((20, 40)),
                    queue_rate=float(rng.choice((20, 40))))


def make_split(seed: int) -> Schedule:
    """The schedule of ``seed``: one to three faults outside the cutover (a quarter of them two at once)
    and, every other seed, one inside the cutover."""
    rng = random.Random(seed)
    faults = []
    for _ in range(rng.randint(1, 3)):
        phase = rng.choice((COPYING, CATCHING_UP))
        kinds = _outside(rng)
        offset = round(rng.uniform(0.0, 1.0 if phase == COPYING else 3.0), 1)
        faults.append(Fault(phase, kinds, offset))
    if rng.random() < 0.5:
        if rng.random() < 0.7:
            faults.append(Fault(CUTOVER, ("kill",), 0.0, rng.choice(CUTOVER_KILL_STEPS)))
        else:
            faults.append(Fault(CUTOVER, ("expire_zk",), 0.0, rng.choice(CUTOVER_EXPIRE_HOOKS)))
    faults.sort(key=lambda f: (PHASES.index(f.phase), f.offset_s))
    return Schedule(seed, "split", tuple(faults), sysbench_rate=rng.choice((20, 40, 60)),
                    queue_rate=float(rng.choice((20, 40))))
