"""Benchmark: a real rebalance with K = 1 and K = 2 moves at once, against the simulated schedule.

    python -m bench.concurrency [--rows 50000] [--shards 8] [--repeat 1] [--workers-per-pair 2]
                                [--dir /tmp/bench-conc-...] [--no-down]

Not a test. Starts a sandbox of two pairs holding ``--shards`` shards of ``--rows`` pins each and two
empty spare pairs, and plans one rebalance onto the spare pairs (``migrator rebalance --add-pair
MySQL003A --add-pair MySQL004A``: the library's ``plan_live``), which moves shards of each source pair
to its own spare pair: two moves on disjoint pairs. Then it runs that same plan ``--repeat`` times
with ``--max-concurrent 1`` and ``--max-concurrent 2`` (alternating which goes first), each run on the
same data: the fleet reset and seeded again (``reset_fleet``), a fresh ZooKeeper root, Redis emptied,
and fresh RQ worker processes, ``--workers-per-pair`` per pair (``migrator worker --pairs P --queue
migrator``: each pair's jobs on its own workers, the rebalance advances on any of them), every one
registered and idle before the clock starts. The run is driven as ``migrator rebalance --yes`` drives
it (``start``, then ``advance`` every second until the record is done); its time is from ``start`` to
the last move's flip (the migration records' history).

Each run prints its moves' timelines and where their time went, from the phase history of their
migration records in ZooKeeper (queued: waiting for a worker; preflight; copy; catch-up; verify, with
the wait for its job; cutover, its checks before the freeze included), and what the box did
meanwhile: the share of its cores busy and in iowait (/proc/stat), and the CPU seconds of the MariaDB
servers of each pair, of ZooKeeper and Redis, of the RQ workers (their forked jobs included), of this
process, and of everything else on the machine (another benchmark, if one runs). Against the
measured ratio K=1/K=2 it prints the simulated one
(:func:`migrator.ops.rebalance.schedule.simulate` of the same moves with K = 1 and 2) with the default
``Rates`` and with rates measured in the K=1 runs (the copy rate the last copy stored; the rest of a
move's time as its fixed cost). The simulation knows no contention: the gap between the two ratios is
what the box (cores, disk) takes back. Medians over the repeats. The last line::

    k1_s=... k2_s=... ratio_measured=... ratio_simulated=... cpu_busy_k1=... cpu_busy_k2=...
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rq import Worker

from bench.fleet import seeded_root
from bench.hostsplit import phase_times
from migrator.cli.helpers import shard_runs
from migrator.engine import eta
from migrator.engine.migration import MigrationStore, Node, Options
from migrator.fleet import config as config_mod
from migrator.fleet import redis_client
from migrator.fleet import zk as zk_mod
from migrator.ops.rebalance import command as rebalance
from migrator.ops.rebalance.command import LivePlan
from migrator.ops.rebalance.record import RecordStore
from migrator.ops.rebalance.schedule import Rates, simulate
from migrator.sandbox import Sandbox, find_base_port, stop_pid

#: where a move's time goes, as the report names it (:func:`breakdown`)
PHASES = ("queued", "preflight", "copy", "catch-up", "verify", "cutover")
TICKS = os.sysconf("SC_CLK_TCK")


# -- CPU accounting -----------------------------------------------------------------------------

def cpu_times() -> tuple[float, float, float]:
    """Seconds since boot of all cores together: (busy, iowait, total), from /proc/stat."""
    with open("/proc/stat") as f:
        vals = [int(v) for v in f.readline().split()[1:]]
    user, nice, system, idle, iowait, irq, softirq, steal = (vals + [0] * 8)[:8]
    busy = user + nice + system + irq + softirq + steal
    return busy / TICKS, iowait / TICKS, (busy + idle + iowait) / TICKS


def proc_cpu(pid: int) -> float:
    """CPU seconds of ``pid`` and of its children it has reaped (an RQ worker's forked jobs)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return sum(int(v) for v in fields[11:15]) / TICKS  # utime, stime, cutime, cstime


def own_cpu() -> float:
    t = os.times()
    return t.user + t.system


def busy_share(a: tuple[float, float, float], b: tuple[float, float, float]) -> tuple[float, float]:
    """Share of all cores busy, and in iowait, between two :func:`cpu_times` samples."""
    total = b[2] - a[2]
    return ((b[0] - a[0]) / total, (b[1] - a[1]) / total) if total > 0 else (0.0, 0.0)


# -- the runs -----------------------------------------------------------------------------------

@dataclass
class Run:
    k: int
    wall_s: float = 0.0
    busy: float = 0.0
    iowait: float = 0.0
    cpu_s: dict[str, float] = field(default_factory=dict)
    moves: list[dict[str, Any]] = field(default_factory=list)
    max_running: int = 0
    copy_rate: dict[str, Any] | None = None


def breakdown(history: list[dict[str, Any]], verified_at: float | None) -> dict[str, float]:
    """A move's seconds by :data:`PHASES`, from its phase history and the end of its verify (the
    verify node's ``at``): the phase ``converged`` holds the wait for the finish job, the verify and
    the cutover's checks before its freeze, so it is cut there (without a verify time it all counts
    as cutover)."""
    t = phase_times(history)
    converged = t.get("converged", 0.0) + t.get("verifying", 0.0)
    start = when(history, "converged")
    verify = min(converged, max(0.0, verified_at - start)) if verified_at and start else 0.0
    return {"queued": t.get("planned", 0.0), "preflight": t.get("preflight", 0.0), "copy": t.get("copying", 0.0),
            "catch-up": t.get("catching_up", 0.0), "verify": verify,
            "cutover": converged - verify + t.get("cutover", 0.0)}


def when(history: list[dict[str, Any]], phase: str) -> float | None:
    return next((h["when"] for h in history if h.get("to") == phase), None)


def fresh_root(sb: Sandbox, rows: int) -> tuple[config_mod.Config, Path]:
    """The fleet reset to the same seeded data under a new ZooKeeper root; Redis emptied."""
    cfg, path = seeded_root(sb, "benchconc", rows, reason="bench.concurrency")
    # the previous run's jobs (a cleanup scheduled for the end of its retention, its advances) go too
    redis_client.connect(cfg).flushdb()
    return cfg, path


def start_workers(sb: Sandbox, cfg_path: Path, per_pair: int, tag: str) -> list[subprocess.Popen]:
    procs = []
    for a, _ in sb.pairs():
        for i in range(per_pair):
            log = open(sb.dir / f"worker-{tag}-{a}-{i}.log", "ab")  # noqa: SIM115 - the worker writes it until it stops
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "migrator", "--config", str(cfg_path), "worker", "--pairs", a,
                 "--queue", "migrator", "--name", f"conc-{tag}-{a}-{i}"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True))
            log.close()
    # every worker registered and idle before the clock starts: a worker still importing would delay
    # the first jobs of the moves that start at once (K=2) more than those of a lone move
    conn = redis_client.connect(config_mod.load(cfg_path))
    deadline = time.monotonic() + 120
    while True:
        dead = [p.args for p in procs if p.poll() is not None]
        if dead:
            raise RuntimeError(f"workers exited at start: {dead} (see {sb.dir}/worker-{tag}-*.log)")
        ready = [w for w in Worker.all(connection=conn) if w.get_state() == "idle"]
        if len(ready) >= len(procs):
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(ready)} of {len(procs)} workers ready after 120 s (see {sb.dir}/worker-*.log)")
        time.sleep(0.2)
    time.sleep(1.0)
    return procs


def run_once(sb: Sandbox, live: LivePlan, k: int, args: argparse.Namespace, tag: str) -> Run:
    cfg, cfg_path = fresh_root(sb, args.rows)
    creds = config_mod.load_credentials(cfg)
    workers = start_workers(sb, cfg_path, args.workers_per_pair, tag)
    assert sb.state is not None
    servers = {p.name: p.pid for p in sb.state.procs.values()}  # MariaDB, ZooKeeper, Redis
    try:
        cpu0, own0 = cpu_times(), own_cpu()
        proc0 = {**{n: proc_cpu(pid) for n, pid in servers.items()},
                 **{f"w{w.pid}": proc_cpu(w.pid) for w in workers}}
        t0 = time.time()
        rid = rebalance.start(cfg, live, max_concurrent=k, options=Options(freeze_budget_ms=args.freeze_budget_ms))
        deadline = time.monotonic() + args.timeout
        while True:  # as `migrator rebalance --yes` follows it
            out = rebalance.advance(cfg, rid)
            if out["phase"] != "running" or out["paused"]:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{rid} (K={k}) still running after {args.timeout:.0f}s: {out}")
            time.sleep(1.0)
        cpu1, own1 = cpu_times(), own_cpu()
        proc1 = {**{n: proc_cpu(pid) for n, pid in servers.items()},
                 **{f"w{w.pid}": proc_cpu(w.pid) for w in workers}}
    finally:
        for w in workers:
            stop_pid(w.pid, timeout=15)
    if out["phase"] != "done":
        raise RuntimeError(f"{rid} (K={k}) ended {out['phase']}: see `migrator --config {cfg_path} status {rid}`")
    run = Run(k=k, max_running=out["max_running"])
    with zk_mod.connect(cfg, creds) as zk:
        rec, _ = RecordStore(zk).get(rid)
        store = MigrationStore(zk)
        for m in rec["moves"]:
            st, _ = store.state(m["migration"])
            verified = (store.get_progress(m["migration"], Node.VERIFY)[0] or {}).get("at")
            run.moves.append({"index": m["index"], "source": m["source"], "target": m["target"],
                              "runs": m["runs"], "bytes": m["bytes"], "freeze_ms": m.get("freeze_ms"),
                              "start": (when(st.history, "planned") or t0) - t0,
                              "flip": (when(st.history, "done") or time.time()) - t0,
                              **breakdown(st.history, verified)})
        run.copy_rate = eta.stored_rate(zk)
    run.wall_s = max(m["flip"] for m in run.moves)
    run.busy, run.iowait = busy_share(cpu0, cpu1)
    elapsed = cpu1[2] - cpu0[2]  # core-seconds of the whole machine over the run
    by_pair: dict[str, float] = {}
    for a, b in sb.pairs():
        by_pair[f"mariadbd {a[:-1]}"] = sum(proc1[n] - proc0[n] for n in (a, b))
    run.cpu_s = {**by_pair, "zookeeper+redis": sum(proc1[n] - proc0[n] for n in ("zookeeper", "redis")),
                 "workers": sum(proc1[n] - proc0[n] for n in proc0 if n.startswith("w")),
                 "bench": own1 - own0}
    ours = sum(run.cpu_s.values())
    run.cpu_s["other"] = max(0.0, (cpu1[0] - cpu0[0]) - ours)
    run.cpu_s["idle+iowait"] = elapsed - (cpu1[0] - cpu0[0])
    return run


# -- the report ---------------------------------------------------------------------------------

def show_run(i: int, run: Run) -> None:
    print(f"\nrun {i}: K={run.k}: {run.wall_s:.1f} s to the last flip, at most {run.max_running} moves at once; "
          f"cores busy {run.busy:.0%}, iowait {run.iowait:.0%}")
    print(f"  {'move':<32} {'start':>6} {'flip':>6} " + " ".join(f"{n:>9}" for n in PHASES) + f" {'freeze':>7}")
    for m in run.moves:
        what = f"{m['index']} {m['source'][:-1]}->{m['target'][:-1]} shards {shard_runs(m['runs'])}"
        print(f"  {what:<32} {m['start']:>6.1f} {m['flip']:>6.1f} " + " ".join(f"{m[n]:>9.1f}" for n in PHASES)
              + f" {m['freeze_ms'] or 0:>5.0f}ms")
    print("  CPU seconds: " + ", ".join(f"{n} {v:.1f}" for n, v in run.cpu_s.items()))


def measured_rates(runs: list[Run]) -> Rates | None:
    """Rates from the K=1 runs: the copy rate the copies stored, the rest of a move's time as fixed."""
    k1 = [r for r in runs if r.k == 1]
    rates = [r.copy_rate["bytes_per_s"] for r in k1 if r.copy_rate and r.copy_rate.get("bytes_per_s")]
    if not rates:
        return None
    base = Rates(copy_bytes_per_s=statistics.median(rates), copy_streams=1)
    rest = []
    for r in k1:
        for m in r.moves:
            copy_s = m["bytes"] / base.copy_bytes_per_s
            rest.append(max(0.0, (m["flip"] - m["start"]) - copy_s - copy_s / base.verify_factor))
    return Rates(**{**base.__dict__, "fixed_s": statistics.median(rest)})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.concurrency", description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=50000, help="pins per shard (plus users, boards, mappings)")
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=1, help="runs of each K (medians are reported)")
    ap.add_argument("--workers-per-pair", type=int, default=2,
                    help="RQ worker processes per pair (a lone move's copy groups run on this many)")
    ap.add_argument("--freeze-budget-ms", type=int, default=Options().freeze_budget_ms)
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds one rebalance may take")
    ap.add_argument("--dir", default=None, help="sandbox directory (default: a new /tmp/bench-conc-*)")
    ap.add_argument("--down", action=argparse.BooleanOptionalAction, default=True,
                    help="stop the sandbox at the end (and delete its directory unless --dir named it)")
    args = ap.parse_args(argv)
    sb_dir = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bench-conc-", dir="/tmp")) / "sandbox"
    sb = Sandbox(sb_dir)
    t_up = time.monotonic()
    runs: list[Run] = []
    try:
        if not sb.running():
            sb.up(pairs=2, spare_pairs=2, shards=args.shards, rows=0, base_port=find_base_port(100),
                  log=lambda *_: None)
        print(f"sandbox in {sb.dir} up in {time.monotonic() - t_up:.0f}s; {os.cpu_count()} cores, load average "
              f"{os.getloadavg()[0]:.2f} before the runs", flush=True)
        cfg, _ = fresh_root(sb, args.rows)
        spares = [a for a, _ in sb.pairs(spare=True)]
        live = rebalance.plan_live(cfg, add_pairs=spares, window_s=1.0)
        moves = live.plan.moves
        listed = ", ".join(f"{m.source}->{m.target} {m.runs} {m.bytes / 1e6:.1f} MB" for m in moves)
        print(f"plan: {len(moves)} moves ({listed}); {args.rows} pins per shard; {args.workers_per_pair} workers "
              "per pair", flush=True)
        pairs_of = [{m.source, m.target} for m in moves]
        if len(moves) < 2 or any(a & b for i, a in enumerate(pairs_of) for b in pairs_of[i + 1:]):
            print("warning: the plan's moves are not two on disjoint pairs: K=2 cannot run them all at once")
        for rep in range(args.repeat):
            for k in ((1, 2) if rep % 2 == 0 else (2, 1)):
                run = run_once(sb, live, k, args, f"r{rep}k{k}")
                runs.append(run)
                show_run(len(runs), run)
    finally:
        if args.down:
            sb.down(purge=not args.dir)  # a directory given with --dir is kept
            if not args.dir:
                try:
                    sb_dir.parent.rmdir()
                except OSError:
                    pass
        else:
            print(f"sandbox left running: `migrator sandbox down --dir {sb.dir}`")

    k1 = statistics.median(r.wall_s for r in runs if r.k == 1)
    k2 = statistics.median(r.wall_s for r in runs if r.k == 2)
    busy1 = statistics.median(r.busy for r in runs if r.k == 1)
    busy2 = statistics.median(r.busy for r in runs if r.k == 2)
    io1 = statistics.median(r.iowait for r in runs if r.k == 1)
    io2 = statistics.median(r.iowait for r in runs if r.k == 2)
    default = Rates()
    sim_d = (simulate(moves, 1, default), simulate(moves, 2, default))
    fitted = measured_rates(runs)
    sim_m = (simulate(moves, 1, fitted), simulate(moves, 2, fitted)) if fitted else sim_d
    other = statistics.median(r.cpu_s["other"] / (r.wall_s or 1) for r in runs)
    print(f"\nmedians over {args.repeat} run(s) of each K: K=1 {k1:.1f} s, K=2 {k2:.1f} s, measured ratio "
          f"{k1 / k2:.2f}; cores busy {busy1:.0%} / {busy2:.0%}, iowait {io1:.0%} / {io2:.0%} "
          f"(of {os.cpu_count()} cores); CPU of processes not this benchmark's: {other:.2f} cores on average")
    print(f"simulated (default Rates): K=1 {sim_d[0]:.1f} s, K=2 {sim_d[1]:.1f} s, ratio {sim_d[0] / sim_d[1]:.2f}")
    if fitted:
        print(f"simulated (rates of the K=1 runs: copy {fitted.copy_bytes_per_s / 1e6:.1f} MB/s, "
              f"{fitted.fixed_s:.1f} s fixed per move): K=1 {sim_m[0]:.1f} s, K=2 {sim_m[1]:.1f} s, "
              f"ratio {sim_m[0] / sim_m[1]:.2f}")
    print(f"k1_s={k1:.1f} k2_s={k2:.1f} ratio_measured={k1 / k2:.2f} ratio_simulated={sim_m[0] / sim_m[1]:.2f} "
          f"cpu_busy_k1={busy1:.2f} cpu_busy_k2={busy2:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
