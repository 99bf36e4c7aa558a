"""``python -m tests.nemesis [--rebalance] [--seed N ...] [--seeds K [--first S]] [--sandbox DIR]``

Runs each seed's schedule over a split (or, with ``--rebalance``, over a rebalance of four pairs).
Starts a sandbox of its own in a temporary directory (or uses the running one in ``--sandbox``), runs
each seed on a fresh fleet (shard databases reseeded, a new ZooKeeper root), rebuilds the sandbox when
a seed left it broken, and prints the seeds run and the failures with their seeds. Exit status 1 when
a seed failed.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from . import schedule
from .run import Outcome, SplitNemesis


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.nemesis", description=__doc__.split("\n\n")[1])
    ap.add_argument("--seed", type=int, action="append", default=[], help="run this seed (repeatable)")
    ap.add_argument("--seeds", type=int, default=0, help="run this many consecutive seeds")
    ap.add_argument("--first", type=int, default=1, help="the first of --seeds (default 1)")
    ap.add_argument("--rebalance", action="store_true", help="fault a rebalance instead of a split")
    ap.add_argument("--sandbox", help="a running sandbox directory to use instead of starting one "
                    "(a rebalance needs 3 pairs of 24 shards and a spare pair)")
    ap.add_argument("--schedule-only", action="store_true", help="print the schedules and run nothing")
    args = ap.parse_args(argv)
    seeds = args.seed + list(range(args.first, args.first + args.seeds))
    if not seeds:
        ap.error("give --seed N or --seeds K")
    scenario = "rebalance" if args.rebalance else "split"
    if args.schedule_only:
        for s in seeds:
            print(schedule.make(s, scenario).describe())
        return 0
    outcomes = run_seeds(seeds, args.sandbox, scenario)
    failed = [o for o in outcomes if not o.ok]
    print(f"\nseeds run: {len(outcomes)}; failures: {len(failed)}")
    for o in outcomes:
        print(f"  {o.line()}")
    if failed:
        flag = " --rebalance" if args.rebalance else ""
        print(f"replay a failure with: python -m tests.nemesis{flag} --seed "
              + " --seed ".join(str(o.seed) for o in failed))
    return 1 if failed else 0


@contextmanager
def _sandbox(sandbox_dir: str | None, scenario: str) -> Iterator[Any]:
    from migrator.sandbox import Sandbox
    from tests.conftest import own_sandbox

    from .rebalance import FLEET

    if sandbox_dir is not None:
        sb = Sandbox(sandbox_dir)
        if not sb.running():
            sys.exit(f"no running sandbox in {sandbox_dir}: start one with `migrator sandbox up --dir {sandbox_dir}`")
        yield sb
    else:  # the suite's layout for a split: 2 pairs of 8 shards (20 rows) and a spare pair
        params = FLEET if scenario == "rebalance" else dict(pairs=2, spare_pairs=1, shards=8, rows=20)
        with own_sandbox("migrator-nemesis-", **params) as sb:
            yield sb


def run_seeds(seeds: list[int], sandbox_dir: str | None, scenario: str = "split") -> list[Outcome]:
    out = []
    d = Path(tempfile.mkdtemp(prefix="migrator-nemesis-"))
    with _sandbox(sandbox_dir, scenario) as sb:
        for seed in seeds:
            work = d / f"seed-{seed}"
            work.mkdir()
            o = run_one(sb, work, seed, scenario)
            if o.ok:
                shutil.rmtree(work, ignore_errors=True)
                print(o.line())
            else:
                print(f"{o.line()}\n{o.error}\nworker logs and the ledger are kept in {work}")
            out.append(o)
    if all(o.ok for o in out):
        shutil.rmtree(d, ignore_errors=True)
    return out


def run_one(sb: Any, work: Path, seed: int, scenario: str, *, log: Any = print) -> Outcome:
    """One seed on a fresh fleet of ``sb`` (rebuilt first when a run before left it broken)."""
    from tests.conftest import ensure_healthy, rebuild
    from tests.fleet import open_fleet, reset_shards

    from .rebalance import RebalanceNemesis

    rows = 5 if scenario == "rebalance" else 20
    ensure_healthy(sb)
    try:
        reset_shards(sb, rows)
    except Exception as exc:  # noqa: BLE001 - a fleet that cannot be reset is rebuilt once
        rebuild(sb, f"resetting the shard databases failed: {exc}")
        reset_shards(sb, rows)
    kind = RebalanceNemesis if scenario == "rebalance" else SplitNemesis
    with open_fleet(sb, work) as fleet:
        return kind(fleet, work, schedule.make(seed, scenario), log=log).execute()


if __name__ == "__main__":
    sys.exit(main())
