"""Benchmark: the rebalance planner on modelled fleets.

    python -m bench.rebalance [--shards 4096] [--zipf 0.5] [--threshold 0.10] [--seed 7]

Not a test; no servers. Builds fleets of ``--shards`` virtual shards whose sizes
follow a Zipf law (the shard of rank i weighs i^-zipf, ranks shuffled over the
shard ids; rows follow bytes at ~67 bytes a row, writes/s follow a second,
independent Zipf draw), laid out evenly over the pairs as the sandbox does, and
plans a rebalance of each:

* ``8->16``: 8 pairs, then 8 empty pairs added (``--add-pair`` x 8);
* ``64``: 64 pairs rebalanced in place.

For each it prints the imbalance (max/mean of bytes over the pairs that stay)
before and after, the bytes moved against the lower bound (the bytes above
mean x (1 + threshold), summed over pairs: no plan moves less), the ranges in
the map before and after, the number of moves and waves, the planning time,
and a simulated schedule: total hours with K = 1, 2, 4, 8 concurrent moves (one
per pair at a time), each move timed from the rates of
:class:`migrator.ops.rebalance.schedule.Rates` (copy and apply rates measured by
``bench.copy`` and ``bench.catchup`` on this kind of machine; override with
``--copy-mb-s`` and ``--apply-rows-s``).

The last line is the 64-pair fleet's::

    imbalance_after=... moved_vs_lower_bound=... plan_s=... ranges_after=... hours_k4=...

Baseline for the ratio: the lower bound itself (1.0 is a perfect plan).
"""

from __future__ import annotations

import argparse
import random

from migrator.fleet.model import even_layout, pair_names
from migrator.ops.rebalance.planner import Plan, ShardCost, lower_bound, plan
from migrator.ops.rebalance.schedule import Rates, simulate

BYTES_PER_ROW = 67


def zipf_fleet(shards: int, exponent: float, total_bytes: float, seed: int) -> list[ShardCost]:
    rng = random.Random(seed)
    ranks = list(range(1, shards + 1))
    rng.shuffle(ranks)
    weights = [r ** -exponent for r in ranks]
    scale = total_bytes / sum(weights)
    wranks = list(range(1, shards + 1))
    rng.shuffle(wranks)
    out = []
    for w, wr in zip(weights, wranks, strict=True):
        b = int(w * scale)
        out.append(ShardCost(bytes=b, rows=b // BYTES_PER_ROW, writes=round(200.0 * wr ** -1.0, 3)))
    return out


def layout(shards: int, pairs: int) -> list[tuple[int, int, str]]:
    smap = even_layout(shards, [pair_names(i + 1) for i in range(pairs)])
    return [(r.lo, r.hi, r.master) for r in smap]


def report(name: str, p: Plan, rates: Rates) -> dict[str, float]:
    bound = lower_bound(p.load_before, p.pairs, p.drain, p.threshold)
    hours = {k: simulate(p.moves, k, rates) / 3600 for k in (1, 2, 4, 8)}
    out = {"imbalance_before": p.imbalance(False), "imbalance_after": p.imbalance(True),
           "moved_vs_lower_bound": p.bytes_moved / bound if bound else 1.0, "plan_s": p.plan_s,
           "ranges_before": len(p.ranges_before), "ranges_after": len(p.ranges_after),
           "moves": len(p.moves), "waves": p.waves, **{f"hours_k{k}": h for k, h in hours.items()}}
    print(f"{name}: pairs={len(p.pairs)} imbalance {out['imbalance_before']:.3f} -> {out['imbalance_after']:.3f}, "
          f"moved {p.bytes_moved / 1e9:.1f} GB vs lower bound {bound / 1e9:.1f} GB "
          f"({out['moved_vs_lower_bound']:.3f}x), ranges {out['ranges_before']} -> {out['ranges_after']}, "
          f"{out['moves']} moves in {out['waves']} waves, plan {p.plan_s:.3f} s, unbalanced {p.unbalanced or 'none'}")
    print("   hours with K concurrent moves: " + ", ".join(f"K={k} {h:.2f}" for k, h in hours.items()))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.rebalance", description=__doc__.splitlines()[0])
    ap.add_argument("--shards", type=int, default=4096)
    ap.add_argument("--zipf", type=float, default=0.5, help="Zipf exponent of shard sizes")
    ap.add_argument("--total-gb", type=float, default=2048.0, help="bytes of the whole fleet, GB")
    ap.add_argument("--threshold", type=float, default=0.10)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--copy-mb-s", type=float, default=None, help="copy rate of one stream, MB/s")
    ap.add_argument("--apply-rows-s", type=float, default=None, help="catch-up apply rate, rows/s")
    args = ap.parse_args(argv)
    rates = Rates()
    if args.copy_mb_s:
        rates = Rates(**{**rates.__dict__, "copy_bytes_per_s": args.copy_mb_s * 1e6})
    if args.apply_rows_s:
        rates = Rates(**{**rates.__dict__, "apply_rows_per_s": args.apply_rows_s})
    print(f"fleet: {args.shards} shards, Zipf({args.zipf}) sizes, {args.total_gb:.0f} GB; rates: copy "
          f"{rates.copy_bytes_per_s / 1e6:.1f} MB/s x {rates.copy_streams} streams, apply "
          f"{rates.apply_rows_per_s:,.0f} rows/s, {rates.fixed_s:.0f} s fixed per move")
    costs = zipf_fleet(args.shards, args.zipf, args.total_gb * 1e9, args.seed)
    added = [pair_names(i)[0] for i in range(9, 17)]
    report("8->16", plan(layout(args.shards, 8), costs, threshold=args.threshold, add_pairs=added), rates)
    out = report("64", plan(layout(args.shards, 64), costs, threshold=args.threshold), rates)
    print(f"imbalance_after={out['imbalance_after']:.3f} moved_vs_lower_bound={out['moved_vs_lower_bound']:.3f} "
          f"plan_s={out['plan_s']:.3f} ranges_after={out['ranges_after']} hours_k4={out['hours_k4']:.2f}")


if __name__ == "__main__":
    main()
