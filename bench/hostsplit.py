"""Benchmark: a host-sized split under queue load (the seed fleet's host: 512 shards x 5 tables).

    python -m bench.hostsplit [--shards 1024] [--rows N] [--writer-tps M] [--workers 2] [--rate 100]

Not a test (the suite runs a 300-table version: tests/integration/ops/test_host_sized_split.py).
Starts a fresh sandbox of ``--shards`` shards on two pairs and a spare pair, RQ worker
processes and the queue load, then runs ``migrator split MySQL001A --yes`` (half the
shards of MySQL001A: 256 shards, 1,280 tables with the default): one batched migration,
copied, tailed and verified once, that hands its shards to batches of consecutive shards,
each cut over by its own rename fence. It prints the batched migration's phases, each
batch's wall time (from the end of the batch before it), freeze and steps, the target
(1.3 x (copy + catch-up) + 1.5 s per batch), and checks the ledger (0 acknowledged jobs
lost) and every moved table against its tombstone.

``--rows N`` seeds about N rows over the moving shards' tables (the upper half of
MySQL001A's range, which the split moves whatever their size; the other shards are then
left empty; without it, ``--seed-rows`` is the sandbox's own few rows per shard); ``--writer-tps M`` runs
sysbench ``oltp_write_only`` at M transactions/s on the last moving shard throughout,
following it to its new master (it is handed over last, so the batched migration tails
and re-checks its writes the longest). For each batch it prints the window its first
re-check read (rows re-checked / row changes of the moving tables read since the
``verified_gtid`` it inherited, and whether that position was the batch's own start),
and for the batched migration the rows and row changes its own re-check before each
hand-over covered. Last line::

    tables=... shards=... rows=... batches=... total_s=... copy_catchup_s=... total_vs_copy_catchup=...
    target_s=... copy_s=... catchup_s=... verify_s=... batches_s=... per_batch_s=... window_rows_max=...
    window_events_max=... window_events=[...] parent_window_events_max=... windows_from_own_start=.../...
    freeze_p50_ms=... freeze_max_ms=... over_budget=... flipped_over_budget=... writer_tps=... lost=...
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from migrator.engine.migration import MigrationStore
from migrator.engine.plan import plan_split
from migrator.fleet import config as config_mod
from migrator.fleet import zk as zk_mod
from migrator.fleet.ids import shard_db
from migrator.fleet.mysql import connect as mysql_connect
from migrator.fleet.router import ShardRouter
from migrator.fleet.shard_map import HostRegistry, ShardMapStore
from migrator.fleet.topology import seed_rows
from migrator.ops.rebalance.record import RecordStore
from migrator.queue.ledger import check_ledger
from migrator.queue.load import run_load
from migrator.sandbox import Sandbox, find_base_port, stop_pid


def phase_times(history: list[dict[str, Any]]) -> dict[str, float]:
    """Seconds spent in each phase, from the record's history of phase changes."""
    out: dict[str, float] = {}
    marks = [(h.get("to"), h.get("when")) for h in history if h.get("to") and h.get("when")]
    for (phase, at), (_, nxt) in zip(marks, marks[1:]):
        out[phase] = out.get(phase, 0.0) + (nxt - at)
    return out


def seed(zk: Any, creds: Any, moving: list[int], rows: int) -> int:
    """About ``rows`` rows over the tables of the ``moving`` shards, on their master, in two connections;
    returns the rows seeded."""
    master = ShardMapStore(zk).read().master_of(moving[0])
    per_shard = max(1, round(rows / len(moving) / 2.2))  # pins, as many mappings, a tenth as many users, boards
    host = HostRegistry(zk).get(master)

    def part(shards: list[int]) -> None:
        with mysql_connect(host, creds, read_timeout=600) as conn:
            for s in shards:
                conn.select_db(shard_db(s))
                with conn.cursor() as cur:
                    seed_rows(cur, s, per_shard)
                conn.commit()

    with ThreadPoolExecutor(max_workers=2) as pool:
        for done in [pool.submit(part, moving[i::2]) for i in range(2)]:
            done.result()  # a failed seed stops the bench
    return round(per_shard * 2.2) * len(moving)


def count_rows(zk: Any, creds: Any, specs: list[Any]) -> int:
    """Rows of the moved tables on their new master (exact counts)."""
    hosts = HostRegistry(zk).all()
    total = 0
    with mysql_connect(hosts[specs[0].target_master], creds, read_timeout=600) as conn, conn.cursor() as cur:
        for spec in specs:
            for db in spec.databases:
                cur.execute("SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
                            "AND TABLE_TYPE = 'BASE TABLE'", (db,))
                for (table,) in cur.fetchall():
                    cur.execute(f"SELECT COUNT(*) FROM `{db}`.`{table}`")
                    total += int(cur.fetchone()[0])
    return total


def _print_attempts(cfg, creds, rid: str) -> None:
    """Each batch's cutover attempts, for a split that failed: what each freeze cost, what its undo cost and
    what the watchdog kept back."""
    with zk_mod.connect(cfg, creds) as zk:
        rec, _ = RecordStore(zk).get(rid)
        store = MigrationStore(zk)
        for m in rec["moves"]:
            if m.get("batched"):
                continue
            atts = (store.get_progress(m["migration"], "cutover_attempts")[0] or {}).get("attempts", [])
            tables = len(store.spec(m["migration"]).shards)
            for a in atts:
                p = a.get("predicted") or {}
                print(f"  {m['migration']} shards={tables} {str(a.get('outcome'))[:60]!r}"
                      f" freeze_ms={a.get('freeze_ms')} undo_ms={a.get('undo_ms')}"
                      f" predicted={p.get('timed_ms')} fixed={p.get('fixed_ms')}"
                      f"/{p.get('fixed_from')} reserve={p.get('after_claim_ms')}/{p.get('after_claim_from')} "
                      f"flip={p.get('flip_ms')} drain={p.get('drain_ms')}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shards", type=int, default=1024)
    ap.add_argument("--rows", type=int, default=0, help="rows seeded over the moving tables (about)")
    ap.add_argument("--seed-rows", type=int, default=10, help="the sandbox's rows per shard")
    ap.add_argument("--writer-tps", type=int, default=0, help="sysbench transactions/s on a moving shard")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rate", type=float, default=100.0, help="queue jobs/s")
    ap.add_argument("--freeze-budget-ms", type=int, default=500)
    args = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="migrator-bench-hostsplit-"))
    sb = Sandbox(tmp / "sandbox")
    t_up = time.monotonic()
    # with --rows the moving shards are seeded afterwards, into empty tables (the seed maps every pin it finds)
    sb.up(pairs=2, spare_pairs=1, shards=args.shards, rows=0 if args.rows > 0 else args.seed_rows,
          base_port=find_base_port(100),
          log=lambda *_: None)
    print(f"sandbox of {args.shards} shards up in {time.monotonic() - t_up:.0f}s", flush=True)
    procs: list[subprocess.Popen] = []
    stop = threading.Event()
    out: dict[str, Any] = {}
    writer = None
    # the bench's own ZooKeeper client (the plan, the seed, the sysbench writer's router): closed before the
    # sandbox stops, else it reconnects to the stopped ensemble for ever and the bench never exits
    session = None
    try:
        cfg = config_mod.load(sb.config_file)
        creds = config_mod.load_credentials(cfg)
        ledger = tmp / "ledger.sqlite"
        session = zk = zk_mod.connect(cfg, creds)
        moving = list(plan_split(zk, "MySQL001A").shards)
        if args.rows > 0:
            t_seed = time.monotonic()
            seeded = seed(zk, creds, moving, args.rows)
            print(f"seeded {seeded} rows over the {len(moving)} moving shards in {time.monotonic() - t_seed:.0f}s",
                  flush=True)
        if args.writer_tps > 0:
            from bench.cutover import FollowingSysbench

            writer = FollowingSysbench(ShardRouter(zk, creds).start(), creds, moving[-1], args.writer_tps).start()

        def load() -> None:
            try:
                out["load"] = run_load(cfg, "hostsplit", args.rate, 24 * 3600, ledger, stop, partitions=8)
            except BaseException as exc:  # reported below
                out["error"] = exc

        loader = threading.Thread(target=load, daemon=True)
        loader.start()
        for i in range(args.workers):
            log = open(sb.dir / f"worker-{i}.log", "ab")  # noqa: SIM115 - the worker writes it until it stops
            procs.append(subprocess.Popen([sys.executable, "-m", "migrator", "--config", str(sb.config_file),
                                           "worker", "--name", f"hostsplit-{i}"], stdout=log,
                                          stderr=subprocess.STDOUT, start_new_session=True))
        t0 = time.monotonic()
        run = subprocess.run([sys.executable, "-m", "migrator", "--config", str(sb.config_file), "split",
                              "MySQL001A", "--yes", "--freeze-budget-ms", str(args.freeze_budget_ms)],
                             env={**os.environ, "COLUMNS": "160"}, capture_output=True, text=True)
        total = time.monotonic() - t0
        stop.set()
        loader.join(120)
        written = writer.stop() if writer is not None else None
        writer = None
        print(run.stdout[-3000:], run.stderr[-2000:], sep="\n")
        found = re.search(r"\brb-[0-9]{8}-[0-9]{6}-[0-9a-f]+", run.stdout)
        if run.returncode != 0 or found is None:
            print(f"split failed (exit {run.returncode})")
            if found is not None:
                _print_attempts(cfg, creds, found.group(0))
            return 1
        rid = found.group(0)
        with zk_mod.connect(cfg, creds) as zk:
            rec, _ = RecordStore(zk).get(rid)
            store = MigrationStore(zk)
            (lead,) = [m for m in rec["moves"] if m.get("batched")]
            parent = store.state(lead["migration"])[0]
            checked = store.get_progress(lead["migration"], "verify")[0] or {}
            ids = [m["migration"] for m in rec["moves"] if m.get("batch_of") == lead["index"]]
            batches = [(store.spec(b), store.state(b)[0], store.get_progress(b, "cutover")[0]) for b in ids]
            # where a batch's time goes: the pipeline's steps around its cutover, and the attempt's before its freeze
            around = [(store.get_progress(b, "handover")[0] or {}).get("attempts") or [{}] for b in ids]
            attempts = [(store.get_progress(b, "cutover_attempts")[0] or {}).get("attempts", []) for b in ids]
            before = [[a.get("before_freeze_ms") or {} for a in atts] for atts in attempts]
            # the window a batch's first re-check read: its first attempt's first round
            windows = [next((a["refresh_rounds"][0] for a in atts if a.get("refresh_rounds")), {})
                       for atts in attempts]
            # the check each batch inherited starts at its own start (the hand-over's checkpoint)
            from_start = [bool((store.get_progress(b, "verify")[0] or {}).get("from_start")) for b in ids]
            hosts = HostRegistry(zk).all()
        from tests.faults.harness import compare_moved_batches

        first = batches[0][0]
        moved = len(compare_moved_batches(hosts[first.source_master], hosts[first.target_master], creds,
                                          [(spec, cut["target_gtid"]) for spec, _, cut in batches]))
        lead_times = phase_times(parent.history)
        print("batched migration " + lead["migration"] + ": "
              + ", ".join(f"{k} {v:.1f} s" for k, v in lead_times.items())
              + f"; its one verify {float(checked.get('seconds') or 0):.1f} s")
        # a batch's wall time: from the end of the one that ended before it (or of the verify) to its own end,
        # in the order they ended (batches overlap, and one made smaller gives its shards to one listed after it)
        ended = [float(h["when"]) for h in parent.history if h.get("to") == "converged"][-1] + \
            float(checked.get("seconds") or 0)
        walls, freezes = [], []

        def done_at_of(state: Any) -> float:
            return max(float(h["when"]) for h in state.history if h.get("to") == "done")

        rows = sorted(zip(batches, around, before, windows, from_start, strict=True),
                      key=lambda row: done_at_of(row[0][1]))
        for (spec, state, cut), steps_around, steps_before, window, own in rows:
            done_at = done_at_of(state)
            walls.append(done_at - ended)
            ended = done_at
            freezes.append(cut["freeze_ms"])
            steps = ", ".join(f"{k} {v:.0f}" for k, v in (cut.get("steps_ms") or {}).items())
            phases = ", ".join(f"{k} {v:.1f}" for k, v in phase_times(state.history).items())
            print(f"{spec.id}: {len(spec.shards)} shards, {parent.batch_tables.get(spec.id, 0)} tables, "
                  f"{walls[-1]:.1f} s, freeze {cut['freeze_ms']:.0f} ms ({steps}); seconds by phase: {phases}; "
                  f"first re-check window: {window.get('rows', '?')} rows / {window.get('events', '?')} events "
                  f"in {window.get('s', '?')} s (keys from the {window.get('from', '?')}; window from the batch's "
                  f"own start: {'yes' if own else 'NO'})")
            print("    pipeline s: " + "; ".join(", ".join(f"{k} {v:.2f}" for k, v in a.items()) for a in steps_around)
                  + " | before the freeze ms: "
                  + "; ".join(", ".join(f"{k} {v:.0f}" for k, v in b.items()) for b in steps_before))
        lost = check_ledger(cfg, ledger).lost if ledger.exists() else 0
        freezes.sort()
        copy_s, catchup_s = lead_times.get("copying", 0.0), lead_times.get("catching_up", 0.0)
        target = 1.3 * (copy_s + catchup_s) + 1.5 * len(batches)
        parent_rows = [a.get("parent_recheck_rows") for atts in around for a in atts
                       if a.get("parent_recheck_rows") is not None]
        parent_events = [int(a.get("parent_recheck_events") or 0) for atts in around for a in atts
                         if a.get("parent_recheck_rows") is not None]
        print(f"{moved} moved tables equal their tombstones; {len(batches)} batches; the batched migration's "
              f"re-checks before hand-overs: {len(parent_rows)}, rows {[int(r) for r in parent_rows]}, "
              f"events {parent_events}")
        every = [a for atts in attempts for a in atts]
        undos = [a["undo_ms"] for a in every if a.get("undo_ms") is not None]
        refused = sum(1 for a in every if str(a.get("outcome", "")).startswith("refused"))
        held = sum(1 for a in every if str(a.get("outcome", "")).startswith("held"))
        print(f"attempts: {len(every)} for {len(batches)} batches; undone by the watchdog {len(undos)} (undo ms "
              f"{sorted(round(u) for u in undos)}), refused by the prediction {refused}, held behind a batch that "
              f"did not flip {held}")
        if written is not None:
            print(f"sysbench on db{moving[-1]:05d}: {written.transactions} transactions in {written.seconds:.0f} s "
                  f"({written.tps:.0f} tps), {written.errors} errors (a fenced table refuses writes)")
        with zk_mod.connect(cfg, creds) as zk2:
            rows = count_rows(zk2, creds, [b[0] for b in batches])
        wins = [w for w in windows if w]
        copy_catchup = copy_s + catchup_s
        print(f"tables={moved} shards={sum(len(b[0].shards) for b in batches)} rows={rows} batches={len(batches)} "
              f"total_s={total:.0f} copy_catchup_s={copy_catchup:.0f} "
              f"total_vs_copy_catchup={total / copy_catchup if copy_catchup else 0:.2f} "
              f"target_s={target:.0f} copy_s={copy_s:.0f} catchup_s={catchup_s:.0f} "
              f"verify_s={float(checked.get('seconds') or 0):.0f} batches_s={sum(walls):.0f} "
              f"per_batch_s={statistics.median(walls):.1f} "
              f"window_rows_max={max((w.get('rows', 0) for w in wins), default=0)} "
              f"window_events_max={max((w.get('events', 0) for w in wins), default=0)} "
              f"window_events={[w.get('events', 0) for w in windows]} "
              f"parent_window_events_max={max(parent_events, default=0)} "
              f"windows_from_own_start={sum(from_start)}/{len(from_start)} "
              f"freeze_p50_ms={freezes[len(freezes) // 2]:.0f} "
              f"freeze_max_ms={freezes[-1]:.0f} over_budget={sum(f > args.freeze_budget_ms for f in freezes)} "
              # a flip that went over the budget after its claim says so in its result (must be 0 too)
              f"flipped_over_budget={sum(1 for _, _, cut in batches if cut.get('over_budget_ms'))} "
              f"writer_tps={written.tps if written is not None else 0:.0f} lost={lost}")
        return 0 if lost == 0 else 1
    finally:
        stop.set()
        if writer is not None:
            writer.stop()
        if session is not None:
            session.close()
        for p in procs:
            stop_pid(p.pid, timeout=15)
        sb.down(purge=True)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
