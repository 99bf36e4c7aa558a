"""Benchmark: the write freeze of a cutover under a background write load.

    python -m bench.cutover [--rounds 50] [--dir /tmp/migrator-bench-cutover] [--queue-rate 300]
                            [--sysbench-rate 300] [--rate 50] [--attempts 10]

Not a test. Starts (or reuses) a sandbox fleet in ``--dir``, makes a fresh
ZooKeeper root, and moves the same shards back and forth between pair 1 and
the spare pair ``--rounds`` times through the whole pipeline of the library
(plan -> copy -> catch-up -> verify -> cutover -> cleanup --now), while three
loads run, each in its own processes as clients would:

* the queue load through ``migrator queue serve --broker`` over HTTP
  (producers and consumers of a queue with a partition on every shard, the
  moving ones included; ``--queue-rate`` jobs/s), with its ledger;
* sysbench ``oltp_write_only`` at ``--sysbench-rate`` tps into a moving shard,
  restarted on the shard's new master after each flip (a client that follows
  the map);
* a routed probe writer (``--rate`` writes/s) that inserts and updates rows of
  the moving shards (and one shard that stays) through a
  :class:`~migrator.fleet.router.ShardRouter`, retrying on the new master after
  1146/1049/1317, and times every write;
* a probe on the *passive* member of the moving shards' pair (a reporting
  client reads there, as in most master-master fleets): a read of a moving
  table every 20 ms, timed, following the map's standby after each flip; with
  ``--report-s S`` a report beside it holds a read transaction on that table
  for S seconds out of every S + 1 (the holder every statement the cutover runs
  on a live table must not make clients wait behind).

Per cutover it prints the freeze (ms, from the commit of the freeze CAS until
the clients waiting on the fence were let go at the flip; the tombstone
renames run behind it, in their own column), the gate's prediction, its steps,
and what two clients that follow the map felt: the probe's slowest write
overlapping the freeze and the queue client's slowest acknowledged enqueue
overlapping it (from its ledger), each next to its latency outside freezes
(sysbench, which writes to one host, cannot time a freeze: see the code where
its line is printed). An attempt stopped before the flip (the watchdog, a conflict) is retried after one more
catch-up pass, and its freeze (how long writes waited in it) counts in the
percentiles too. At the end every write the probe saw acknowledged is looked
up on the master the map names for its shard, and the queue's ledger is
checked: ``lost`` counts both. The last line is::

    cutovers=… attempts=… aborted=… over_budget=… flipped_over_budget=… recheck_rows_per_s=… write_rows_per_s=…
    recheck_vs_writes=… freeze_p50_ms=… freeze_p99_ms=… freeze_max_ms=… predicted_ok=… probe_stall_p50_ms=…
    queue_stall_p50_ms=… longest_wait_outside_ms=… passive_longest_ms=… lost=…

(one line; ``over_budget``: every attempt's freeze over the budget, undone ones too; ``flipped_over_budget``:
flips whose result records a freeze over the budget after their claim (both must be 0);
``recheck_rows_per_s``: rows the re-checks before the freezes compared per second of their compares,
``write_rows_per_s``: row changes on the moving tables per second meanwhile (:func:`recheck_rates`);
``predicted_ok``: attempts with |predicted/measured - 1| <= 1).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import threading
import time
import traceback
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymysql
from rich.console import Console
from rich.table import Table

from bench import sysbench
from bench.fleet import seeded_root
from bench.queue_http import Server as QueueServer
from migrator.engine.migration import MigrationStore, Options
from migrator.fleet import config as config_mod
from migrator.fleet import zk as zk_mod
from migrator.fleet.mysql import MOVED_CODES
from migrator.fleet.mysql import connect as mysql_connect
from migrator.fleet.router import ShardRouter
from migrator.fleet.shard_map import ShardMapStore
from migrator.queue.errors import UnknownQueue
from migrator.queue.ledger import check_ledger
from migrator.queue.load import run_load
from migrator.queue.model import QueueConfig
from migrator.sandbox import Sandbox, find_base_port

MOVING = (2, 3)
STAYING = 1
#: the moving shard sysbench writes into
SYSBENCH_SHARD = MOVING[0]
STEPS = ("freeze_cas", "passive_close", "passive_sync", "fence", "sentinel", "drain", "compare", "flip_cas", "release",
         "renames")


@dataclass
class Load:
    """Background writer: inserts and updates pins, records acks and latencies."""

    router: ShardRouter
    shards: tuple[int, ...]
    rate: float
    acks: dict[tuple[int, int], str] = field(default_factory=dict)
    calls: list[tuple[float, float, int, bool]] = field(default_factory=list)  # start, end, retries, ok
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _conns: dict[tuple[str, int], Any] = field(default_factory=dict)
    _recent: dict[int, list[int]] = field(default_factory=dict)
    _thread: threading.Thread | None = None

    def start(self) -> Load:
        self._thread = threading.Thread(target=self._run, daemon=True, name="bench-load")
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(30)
        for c in self._conns.values():
            try:
                c.close()
            except Exception:
                pass

    def _conn(self, shard: int) -> tuple[Any, str]:
        host = self.router.master_for(shard)
        key = (host.name, shard)
        if key not in self._conns:
            self._conns[key] = mysql_connect(host, self.router.credentials, read_timeout=30)
        return self._conns[key], host.name

    def _one(self, rng: random.Random) -> None:
        shard = rng.choice(self.shards)
        data = json.dumps({"v": rng.random()})
        mine = self._recent.setdefault(shard, [])
        update = bool(mine) and rng.random() < 0.3
        t0 = time.monotonic()
        retries = 0
        ok = False
        for _ in range(100):
            conn, hname = self._conn(shard)
            try:
                with conn.cursor() as cur:
                    if update:
                        lid = rng.choice(mine)
                        cur.execute(f"UPDATE `db{shard:05d}`.pins SET data = %s WHERE local_id = %s", (data, lid))
                    else:
                        cur.execute(f"INSERT INTO `db{shard:05d}`.pins (data) VALUES (%s)", (data,))
                        lid = cur.lastrowid
                self.acks[(shard, lid)] = data
                if not update:
                    mine.append(lid)
                    del mine[:-200]
                ok = True
                break
            except pymysql.err.MySQLError as exc:
                code = exc.args[0] if exc.args else None
                retries += 1
                if code in MOVED_CODES:
                    self.router.refresh()
                    continue
                if code in (2006, 2013):
                    self._conns.pop((hname, shard), None)
                    continue
                self.errors.append(f"{code}: {exc}")
                break
        self.calls.append((t0, time.monotonic(), retries, ok))

    def _run(self) -> None:
        rng = random.Random(7)
        gap = 1.0 / self.rate
        nxt = time.monotonic()
        while not self._stop.is_set():
            self._one(rng)
            nxt += gap
            pause = nxt - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            else:
                nxt = time.monotonic()


def _load_process(config_path: str, shards: tuple[int, ...], rate: float, stop: Any, out: Any) -> None:
    """The load runs in its own process, like real clients: it must not share the
    cutover's interpreter (and GIL)."""
    cfg = config_mod.load(config_path)
    creds = config_mod.load_credentials(cfg)
    zk = zk_mod.connect(cfg, creds)
    router = ShardRouter(zk, creds).start()
    load = Load(router, shards, rate)
    load._stop = stop  # type: ignore[assignment]
    load._run()
    for c in load._conns.values():
        try:
            c.close()
        except Exception:
            pass
    out.put({"acks": load.acks, "calls": load.calls, "errors": load.errors})
    zk.close()


class Spawned:
    """A client in a process of its own (spawned: it shares nothing with the cutover's interpreter): started,
    then told to stop; :meth:`stop` returns what it put on its queue."""

    def __init__(self, target: Any, *args: Any):
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        self._stop = ctx.Event()
        self._out = ctx.Queue()
        self._proc = ctx.Process(target=target, args=(*args, self._stop, self._out), daemon=True)

    def start(self) -> Any:
        self._proc.start()
        return self

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        res = self._out.get(timeout=120)
        self._proc.join(30)
        return res


class LoadProcess(Spawned):
    """Start/stop :func:`_load_process`; after :meth:`stop` it has the Load's fields."""

    def __init__(self, config_path: str, shards: tuple[int, ...], rate: float):
        super().__init__(_load_process, config_path, shards, rate)
        self.acks: dict[tuple[int, int], str] = {}
        self.calls: list[tuple[float, float, int, bool]] = []
        self.errors: list[str] = []

    def stop(self) -> dict[str, Any]:
        res = super().stop()
        self.acks, self.calls, self.errors = res["acks"], res["calls"], res["errors"]
        return res

    def calls_so_far(self) -> list[tuple[float, float, int, bool]]:
        return self.calls


class FollowingSysbench:
    """sysbench at a fixed rate into one shard, restarted on the shard's master whenever the map moves it."""

    def __init__(self, router: ShardRouter, creds: Any, shard: int, rate: int, *, threads: int = 4,
                 tables: int = 2, table_size: int = 5000):
        self.router, self.creds, self.shard, self.rate = router, creds, shard, rate
        self.kw = {"threads": threads, "tables": tables, "table_size": table_size}
        self.db = f"db{shard:05d}"
        self.results: list[sysbench.Result] = []
        self.restarts = 0
        self._run: sysbench.Background | None = None
        self._master = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True, name="bench-sysbench")

    def start(self) -> FollowingSysbench:
        host = self.router.master_for(self.shard)
        sysbench.prepare(host, self.creds, self.db, tables=self.kw["tables"], table_size=self.kw["table_size"])
        self._begin(host)
        self._thread.start()
        return self

    def _begin(self, host: Any) -> None:
        self._master = host.name
        # text statements, not server-side prepared ones: a statement prepared before the cutover's
        # gate triggers were created fails on the gate table until it is prepared again (MariaDB
        # MDEV-26048; docs/guarantees.md), which would take sysbench's writes away from the load
        self._run = sysbench.Background(host, self.creds, self.db, rate=self.rate, prepared=False, **self.kw)

    def _watch(self) -> None:
        while not self._stop.wait(0.05):
            host = self.router.master_for(self.shard)
            if host.name != self._master and self._run is not None:
                self.results.append(self._run.stop())
                self.restarts += 1
                self._begin(host)

    def stop(self) -> sysbench.Result:
        self._stop.set()
        self._thread.join(30)
        if self._run is not None:
            self.results.append(self._run.stop())
        return sysbench.Result(sum(r.transactions for r in self.results), sum(r.seconds for r in self.results),
                               sum(r.errors for r in self.results))


def _member_probe_process(config_path: str, shard: int, report_s: float, stop: Any, out: Any) -> None:
    """Reads a moving table on the passive member of the shard's pair every 20 ms, timing each read; with
    ``report_s``, a report holds a read transaction on the same table beside it. In its own process."""
    cfg = config_mod.load(config_path)
    creds = config_mod.load_credentials(cfg)
    zk = zk_mod.connect(cfg, creds)
    maps = ShardMapStore(zk)
    from migrator.fleet.shard_map import HostRegistry

    hosts = HostRegistry(zk)
    table = f"`db{shard:05d}`.pins"
    calls: list[tuple[float, float, bool]] = []
    reports = {"held": 0, "ended_by_migrator": 0}
    conn = None
    report = None
    report_until = 0.0
    next_report = time.monotonic() + 1.0
    while not stop.is_set():
        if conn is None:
            try:
                conn = mysql_connect(hosts.get(maps.read().range_of(shard).passive), creds, read_timeout=120)
            except Exception:  # noqa: BLE001 - a member being restarted: try again
                time.sleep(0.1)
                continue
        now = time.monotonic()
        if report_s > 0 and report is None and now >= next_report:
            try:
                report = mysql_connect(hosts.get(maps.read().range_of(shard).passive), creds, read_timeout=120)
                with report.cursor() as cur:
                    cur.execute("BEGIN")
                    cur.execute(f"SELECT COUNT(*) FROM {table}")
                reports["held"] += 1
                report_until = now + report_s
            except pymysql.err.MySQLError:
                report = None
                next_report = now + 1.0
        if report is not None and now >= report_until:
            try:
                report.rollback()
            except pymysql.err.MySQLError:
                reports["ended_by_migrator"] += 1
            report.close()
            report = None
            next_report = now + 1.0
        t0 = time.monotonic()
        ok = True
        try:
            with conn.cursor() as cur:
                cur.execute(f"SELECT COUNT(*) FROM {table} WHERE local_id < 5")
                cur.fetchall()
        except pymysql.err.MySQLError:
            ok = False  # renamed on this member (1146), or it went away: read the map's standby again
            try:
                conn.close()
            except Exception:  # noqa: BLE001
                pass
            conn = None
        calls.append((t0, time.monotonic(), ok))
        time.sleep(0.02)
    for c in (conn, report):
        if c is not None:
            try:
                c.close()
            except Exception:  # noqa: BLE001
                pass
    out.put({"calls": calls, **reports})
    zk.close()


class MemberProbe(Spawned):
    """Start/stop :func:`_member_probe_process`; after :meth:`stop`: ``calls`` (start, end, ok) and the
    reports held."""

    def __init__(self, config_path: str, shard: int, report_s: float):
        super().__init__(_member_probe_process, config_path, shard, report_s)
        self.calls: list[tuple[float, float, bool]] = []
        self.held = self.ended_by_migrator = 0

    def stop(self) -> dict[str, Any]:
        res = super().stop()
        self.calls, self.held, self.ended_by_migrator = res["calls"], res["held"], res["ended_by_migrator"]
        return res


def _queue_load_process(config_path: str, url: str, token: str | None, rate: float, ledger: str,
                        partitions: int, stop: Any, out: Any) -> None:
    """The queue's producers and consumers, in their own process (not the cutover's interpreter)."""
    cfg = config_mod.load(config_path)
    try:
        res = run_load(cfg, "bench", rate, 24 * 3600, ledger, stop, url=url, token=token, partitions=partitions,
                       producers=3, consumers=3)
        out.put({"result": res.to_text(), "enqueued": res.enqueued, "acked_ok": res.acked_ok})
    except BaseException as exc:  # reported by the parent
        out.put({"error": f"{type(exc).__name__}: {exc}"})


class QueueLoad:
    """The queue load over HTTP: ``queue serve --broker`` and a process of producers and consumers."""

    def __init__(self, cfg_path: str, token: str | None, rate: float, ledger: Path, partitions: int):
        import multiprocessing as mp

        self.server = QueueServer(Path(cfg_path), token)
        # the queue (its jobs tables in every shard) exists before any move is planned: a table
        # created in a moving shard during catch-up stops the migration, as it should
        with self.server.client() as client:
            try:
                client.get_queue("bench")
            except UnknownQueue:
                client.create_queue("bench", QueueConfig(partitions=partitions))
        ctx = mp.get_context("spawn")
        self._stop = ctx.Event()
        self._out = ctx.Queue()
        self._proc = ctx.Process(target=_queue_load_process,
                                 args=(cfg_path, self.server.url, token, rate, str(ledger), partitions,
                                       self._stop, self._out), daemon=True)

    def start(self) -> QueueLoad:
        self._proc.start()
        return self

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        try:
            res = self._out.get(timeout=180)
        finally:
            self._proc.join(30)
            self.server.stop()
        if "error" in res:
            raise RuntimeError(f"the queue load failed: {res['error']}")
        return res


def fresh_root(sb: Sandbox) -> tuple[config_mod.Config, Any, str]:
    cfg, path = seeded_root(sb, "bench", rows=200, reason="bench")
    return cfg, zk_mod.connect(cfg, config_mod.load_credentials(cfg)), str(path)


def move(cfg: config_mod.Config, target: str, window: dict[str, float],
         aborts: list[dict[str, Any]], attempts: int = 5, fence: str = "auto") -> tuple[str, dict[str, Any]]:
    """One migration of MOVING to ``target``'s pair through the library's phases.

    A cutover that stops before the flip (the watchdog, a conflict) is retried
    after one more catch-up pass, as the pipeline does; each such abort is
    recorded with how long writes waited in it.
    """
    from migrator.engine import catch_up
    from migrator.engine.catch_up.tailer import DrainTimeout
    from migrator.engine.cleanup import cleanup
    from migrator.engine.cutover import cutover
    from migrator.engine.cutover.errors import CutoverAborted, FreezeBudgetExceeded
    from migrator.engine.cutover.hooks import CutoverHooks
    from migrator.engine.verify.run import verify_migration
    from migrator.ops import command

    plan = command.plan_move(cfg, list(MOVING), target, options=Options(fence=fence))
    migration_id = plan.spec.id
    command.run_copy(cfg, migration_id)
    catch_up.run_passes(cfg, migration_id)
    verify_migration(cfg, migration_id)

    def began(run: Any) -> None:
        window["start"] = run.record.t_freeze
        window["start_wall"] = time.time() - (time.monotonic() - run.record.t_freeze)
        window["run"] = run

    def ended(run: Any) -> None:
        window["end"] = time.monotonic()
        window["end_wall"] = time.time()

    refused = 0
    for attempt in range(attempts):
        try:
            res = cutover(cfg, migration_id, hooks=CutoverHooks(after_freeze=began, after_flip=ended))
            break
        except (FreezeBudgetExceeded, CutoverAborted, DrainTimeout) as exc:
            if attempt + 1 == attempts:
                raise
            if "start" not in window:  # refused before any freeze (the predicted freeze): one more pass
                refused += 1
                catch_up.run_passes(cfg, migration_id, 1)
                continue
            run = window.pop("run")
            rec = run.record
            end = rec.t_released if rec.t_released is not None else time.monotonic()  # unfrozen by the undo
            aborts.append({"freeze_ms": (end - window.pop("start")) * 1000,
                           "steps": dict(run.record.steps), "why": type(exc).__name__})
            catch_up.run_passes(cfg, migration_id, 1)
    run = window.pop("run", None)
    detail = {"drained": dict(run.record.drained), "refresh_rounds": list(run.record.refresh_rounds),
              "released": dict(run.record.released), "waiters_ended": run.record.waiters_ended,
              "released_at": run.record.t_released} if run is not None else {}
    with zk_mod.connect(cfg, config_mod.load_credentials(cfg)) as zk:
        predicted = MigrationStore(zk).state(migration_id)[0].predicted_freeze_ms
    cleanup(cfg, migration_id, now=True)
    return migration_id, {**res.to_dict(), "predicted_ms": predicted, "refused": refused, **detail}


def recheck_rates(rechecks: list[list[dict[str, Any]]]) -> tuple[float | None, float | None]:
    """The re-check's compared rows/s over ``rechecks`` (each the rounds of one re-check before a freeze,
    as :func:`migrator.engine.cutover.recheck.compared_record` keeps them), and the write rate on the
    moving tables over the same time (row changes/s): a round's window holds what was written while the
    round before it ran, so the row changes read by every round but a re-check's first, over the seconds
    of the rounds before them. Each is None when nothing measures it (no compare timed; single rounds)."""
    compared = compare_s = written = spanned = 0.0
    for rounds in rechecks:
        compared += sum(float(r.get("compared") or 0) for r in rounds)
        compare_s += sum(float(r.get("compare_s") or 0) for r in rounds)
        for before, r in zip(rounds, rounds[1:], strict=False):
            written += float(r.get("events") or 0)
            spanned += float(before.get("s") or 0)
    return (compared / compare_s if compare_s > 0 else None), (written / spanned if spanned > 0 else None)


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    if not xs:
        return 0.0
    k = min(len(xs) - 1, max(0, int(round(p / 100 * (len(xs) - 1)))))
    return xs[k]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--rate", type=float, default=50.0, help="routed probe writes per second")
    ap.add_argument("--queue-rate", type=float, default=300.0, help="queue jobs/s enqueued over HTTP (0: no queue)")
    ap.add_argument("--sysbench-rate", type=int, default=300, help="sysbench tps into a moving shard (0: none)")
    ap.add_argument("--fence", default="auto", choices=["auto", "rename", "gate"],
                    help="how the source master is fenced (the migration option)")
    ap.add_argument("--dir", default="/tmp/migrator-bench-cutover", help="sandbox directory (started if not running)")
    ap.add_argument("--down", action="store_true", help="stop the sandbox at the end")
    ap.add_argument("--report-s", type=float, default=0.0,
                    help="a report on the passive member holds a read transaction on a moving table this long "
                         "(s) out of every S + 1 (0: none; the passive probe reads there either way)")
    ap.add_argument("--attempts", type=int, default=10,
                    help="cutover attempts per round (a refused or aborted one is retried after a catch-up pass)")
    args = ap.parse_args(argv)
    console = Console(width=150)

    sb = Sandbox(args.dir)
    if not sb.running():
        sb.up(pairs=2, spare_pairs=1, shards=8, rows=200, base_port=find_base_port(100), log=lambda *_: None)
    cfg, zk, cfg_path = fresh_root(sb)
    creds = config_mod.load_credentials(cfg)
    router = ShardRouter(zk, creds).start()
    pair1 = sb.pairs(spare=False)[0][0]
    spare = sb.pairs(spare=True)[0][0]
    budget_ms = Options().freeze_budget_ms
    ledger = Path(sb.dir) / f"bench-ledger-{uuid.uuid4().hex[:8]}.sqlite"
    queue = QueueLoad(cfg_path, creds.queue_token, args.queue_rate, ledger,
                      partitions=sb.state.shards if sb.state else 8).start() if args.queue_rate > 0 else None
    bench_writer = FollowingSysbench(router, creds, SYSBENCH_SHARD, args.sysbench_rate).start() \
        if args.sysbench_rate > 0 else None
    load = LoadProcess(cfg_path, (*MOVING, STAYING), args.rate).start()
    member = MemberProbe(cfg_path, MOVING[0], args.report_s).start()
    time.sleep(2.0)

    rows: list[dict[str, Any]] = []
    table = Table(title=f"cutover freeze under load ({args.rounds} cutovers of shards {MOVING}, "
                        f"fence={args.fence}; queue {args.queue_rate:.0f} jobs/s over HTTP, "
                        f"sysbench {args.sysbench_rate} tps, probe {args.rate:.0f} writes/s)")
    for col in ("#", "to", "freeze ms", "pred.", "cas", "passive", "fence", "sent.", "drain", "compare", "flip",
                "release", "renames", "finish", "ended", "rows", "writes", "worst ms", "queue ms",
                "after: worst", "queue"):
        table.add_column(col, justify="right")
    failures: list[str] = []
    aborts: list[dict[str, Any]] = []
    queue_res: dict[str, Any] = {}
    sb_res = None
    try:
        for i in range(args.rounds):
            target = spare if i % 2 == 0 else pair1
            win: dict[str, float] = {}
            try:
                migration_id, res = move(cfg, target, win, aborts, attempts=args.attempts, fence=args.fence)
            except Exception as exc:  # a benchmark shows a failure and stops
                failures.append(f"round {i + 1}: {type(exc).__name__}: {exc}")
                console.print(f"[red]round {i + 1} failed: {exc}[/red]")
                console.print(traceback.format_exc(), markup=False, highlight=False)
                break
            rows.append({"freeze_ms": res["freeze_ms"], "win": win, "res": res, "target": target})
            rounds = " / ".join(f"{r['rows']} rows {r['s'] * 1000:.0f} ms" for r in res.get("refresh_rounds") or [])
            cmp_rate, write_rate = recheck_rates([res.get("refresh_rounds") or []])
            rounds += (f" (compared {cmp_rate:.0f} rows/s" if cmp_rate is not None else " (compared ? rows/s") \
                + (f" against {write_rate:.0f} row changes/s on the moving tables)" if write_rate is not None else ")")
            console.print(f"cutover {i + 1}/{args.rounds} to {target}: freeze {res['freeze_ms']:.0f} ms; "
                          f"drained {res.get('drained') or {}}; re-check rounds before it: {rounds or 'none'}"
                          + (f"; renames after the UNLOCK (ms, slowest first): {released}"
                             if (released := dict(list((res.get('released') or {}).items())[:4])) else ""),
                          highlight=False)
    finally:
        time.sleep(0.5)
        load.stop()
        member.stop()
        if bench_writer is not None:
            sb_res = bench_writer.stop()
        if queue is not None:
            try:
                queue_res = queue.stop()
            except RuntimeError as exc:
                failures.append(str(exc))

    enqueues = enqueue_calls(ledger) if queue is not None and ledger.exists() else []
    sysbench_rounds = bench_writer.results if bench_writer is not None else []
    for i, r in enumerate(rows):
        win, res = r["win"], r["res"]
        # writes whose call overlapped the freeze window
        hit = [c for c in load.calls if c[1] >= win["start"] and c[0] <= win["end"]]
        r["worst_ms"] = max(((c[1] - c[0]) * 1000 for c in hit), default=0.0)
        r["retries"] = sum(c[2] for c in hit)
        # the freeze proper: until the clients waiting on the fence were let go (the renames and the
        # passive member's finish come after it, until win["end"])
        released = res["released_at"]
        released_wall = win["start_wall"] + (released - win["start"])
        in_freeze = [c for c in hit if c[0] <= released]
        r["worst_ms"] = max(((c[1] - c[0]) * 1000 for c in in_freeze), default=0.0)
        r["after_ms"] = max(((c[1] - c[0]) * 1000 for c in hit if c[0] > released), default=0.0)
        # the queue's own client: its slowest acknowledged enqueue among the calls overlapping the freeze
        r["queue_ms"] = max(((ack - call) * 1000 for call, ack in enqueues
                             if ack >= win["start_wall"] and call <= released_wall), default=0.0)
        r["queue_after_ms"] = max(((ack - call) * 1000 for call, ack in enqueues
                                   if released_wall < call <= win["end_wall"]), default=0.0)
        st = res["steps_ms"]
        passive = st.get("passive_close", 0) + st.get("passive_sync", 0)
        table.add_row(str(i + 1), r["target"][-4:], f"{res['freeze_ms']:.0f}", f"{res.get('predicted_ms') or 0:.0f}",
                      f"{st.get('freeze_cas', 0):.0f}", f"{passive:.0f}", f"{st.get('fence', 0):.0f}",
                      f"{st.get('sentinel', 0):.0f}", f"{st.get('drain', 0):.0f}",
                      f"{st.get('compare', 0):.0f}", f"{st.get('flip_cas', 0):.0f}",
                      f"{st.get('release', 0):.0f}", f"{st.get('renames', 0):.0f}",
                      f"{st.get('active_finish', 0) + st.get('passive_finish', 0):.0f}",
                      str(res.get("waiters_ended", 0)), str(res["rows_checked"]), str(len(hit)),
                      f"{r['worst_ms']:.0f}", f"{r['queue_ms']:.0f}",
                      f"{r['after_ms']:.0f}", f"{r['queue_after_ms']:.0f}")
    console.print(table)
    console.print("freeze ms: from the commit of the freeze CAS until the clients waiting on the fence were let go "
                  "(ended, to re-route; the renames run behind, in 'renames'); pred.: the gate's prediction; "
                  "ended: client statements the fence ended; worst ms: the probe's slowest write overlapping "
                  "the freeze; queue ms: the queue client's slowest enqueue overlapping it; after: the probe's "
                  "and the queue client's slowest call started after the freeze, while the renames and the "
                  "passive member's finish ran", highlight=False)
    lost = probe_lost(zk, router, creds, load.acks)
    ledger_lost = check_ledger(cfg, ledger).lost if queue is not None and ledger.exists() else 0
    base = [(c[1] - c[0]) * 1000 for c in load.calls if c[2] == 0]
    console.print(f"probe: {len(load.calls)} writes, {len(load.acks)} rows acknowledged, "
                  f"{sum(c[2] for c in load.calls)} retries after 1146/1049/1317, {len(load.errors)} errors, "
                  f"baseline write latency p50 {statistics.median(base) if base else 0:.1f} ms, "
                  f"p99 {pct(base, 99):.1f} ms; {lost} acknowledged writes lost")
    if queue_res:
        console.print(f"queue: {queue_res.get('result')}; ledger: {ledger_lost} acknowledged jobs lost")
    if enqueues:
        lat = [(ack - call) * 1000 for call, ack in enqueues]
        console.print(f"queue enqueue latency, every call of the run: p50 {pct(lat, 50):.0f} ms, p99 "
                      f"{pct(lat, 99):.0f} ms, max {max(lat):.0f} ms (the baseline for its stall above)")
    if sb_res is not None:
        # sysbench writes to one host, not through the map: its writes held by a fence end in an error it
        # retries there until it is restarted on the new master, and it times completed events only, so
        # its latency says what the box does to a writer, not what the freeze does (the probe and the
        # queue client, which follow the map, say that)
        p99s = [ms for r in sysbench_rounds for _, ms in r.latency_ms]
        console.print(f"sysbench: {sb_res.tps:.0f} tps over {sb_res.seconds:.0f} s, restarted on the new master "
                      f"{bench_writer.restarts if bench_writer else 0} times, {sb_res.errors} errors "
                      f"(1317 or 1146 after a flip); per-second p99 latency: median {pct(p99s, 50):.0f} ms, "
                      f"worst {max(p99s, default=0):.0f} ms")
    for f in failures:
        console.print(f"[red]{f}[/red]")
    zk.close()
    if args.down:
        sb.down()
    for a in aborts:
        console.print(f"aborted before the flip ({a['why']}), writes waited {a['freeze_ms']:.0f} ms; "
                      f"steps so far: {a['steps']}; retried after one more catch-up pass")
    worst = [r["worst_ms"] for r in rows]
    console.print(f"probe write latency of calls overlapping a freeze: p50 {pct(worst, 50):.0f} ms, "
                  f"max {max(worst, default=0):.0f} ms")
    # every attempt's freeze counts: an aborted one held writers too
    freezes = [r["freeze_ms"] for r in rows] + [a["freeze_ms"] for a in aborts]
    steps = {k: [r["res"]["steps_ms"].get(k, 0.0) for r in rows] for k in STEPS}
    console.print("steps of the flipped cutovers, p50 / p99 ms: " +
                  ", ".join(f"{k} {pct(v, 50):.0f}/{pct(v, 99):.0f}" for k, v in steps.items()))
    over = sum(1 for f in freezes if f > budget_ms)
    pairs = [(r["res"]["freeze_ms"], r["res"].get("predicted_ms")) for r in rows if r["res"].get("predicted_ms")]
    # the target's measure: |predicted / measured - 1| <= 1
    within = sum(1 for m, p in pairs if abs(p / m - 1) <= 1)
    console.print(f"predicted vs measured freeze: {within}/{len(pairs)} with |predicted/measured - 1| <= 1; "
                  + ", ".join(f"{p:.0f}->{m:.0f}" for m, p in pairs[:20])
                  + f"; refused before a freeze (prediction over budget): {sum(r['res']['refused'] for r in rows)}")
    stalls = {k: [r[k] for r in rows] for k in ("worst_ms", "queue_ms", "after_ms", "queue_after_ms")}
    console.print("client-side stall per cutover, p50 / p99 / max ms: "
                  + ", ".join(f"{name} {pct(v, 50):.0f}/{pct(v, 99):.0f}/{max(v, default=0):.0f}"
                              for name, v in (("probe", stalls["worst_ms"]), ("queue enqueue", stalls["queue_ms"]),
                                              ("after the freeze: probe", stalls["after_ms"]),
                                              ("queue enqueue", stalls["queue_after_ms"]))))
    # the longest any client waited outside the freezes: the routed probe (writes, on the master) and the
    # passive probe (reads on the standby), each statement against every freeze window
    freezes_wall = [(r["win"]["start"], r["res"]["released_at"]) for r in rows if r["res"].get("released_at")]

    def outside(calls: list[tuple[float, float]]) -> float:
        return max(((e - s) * 1000 for s, e in calls if not any(s <= b and e >= a for a, b in freezes_wall)),
                   default=0.0)

    active_out = outside([(c[0], c[1]) for c in load.calls])
    passive_out = outside([(c[0], c[1]) for c in member.calls])
    passive_all = max(((c[1] - c[0]) * 1000 for c in member.calls), default=0.0)
    console.print(f"longest wait outside the freezes: probe on the master {active_out:.0f} ms, probe on the passive "
                  f"member {passive_out:.0f} ms ({len(member.calls)} reads, longest of all {passive_all:.0f} ms); "
                  f"reports held on the passive member: {member.held} ({args.report_s:g} s each), "
                  f"{member.ended_by_migrator} ended by the migrator", highlight=False)
    total_lost = lost + ledger_lost
    cmp_rate, write_rate = recheck_rates([r["res"].get("refresh_rounds") or [] for r in rows])
    console.print(f"re-check before the freezes: compared {cmp_rate or 0:.0f} rows/s; the writers changed "
                  f"{write_rate or 0:.0f} rows/s on the moving tables meanwhile (target: at least 5x)")
    # a flip that could not be undone and still went over the budget says so in its result (never a silent done)
    flipped_over = sum(1 for r in rows if r["res"].get("over_budget_ms"))
    print(f"cutovers={len(rows)} attempts={len(freezes)} aborted={len(aborts)} over_budget={over} "
          f"flipped_over_budget={flipped_over} "
          f"recheck_rows_per_s={cmp_rate or 0:.0f} write_rows_per_s={write_rate or 0:.0f} "
          f"recheck_vs_writes={cmp_rate / write_rate if cmp_rate and write_rate else 0:.1f} "
          f"freeze_p50_ms={pct(freezes, 50):.1f} freeze_p99_ms={pct(freezes, 99):.1f} "
          f"freeze_max_ms={max(freezes) if freezes else 0:.1f} predicted_ok={within}/{len(pairs)} "
          f"probe_stall_p50_ms={pct(stalls['worst_ms'], 50):.0f} queue_stall_p50_ms={pct(stalls['queue_ms'], 50):.0f} "
          f"longest_wait_outside_ms={max(active_out, passive_out):.0f} passive_longest_ms={passive_all:.0f} "
          f"lost={total_lost}")
    return 0 if not failures and total_lost == 0 else 1


def enqueue_calls(ledger: Path) -> list[tuple[float, float]]:
    """(call, acknowledgement) wall times of every enqueue the queue's load saw acknowledged."""
    import sqlite3

    with sqlite3.connect(ledger) as db:
        return [(float(a), float(b)) for a, b in db.execute("SELECT t_call, t_ack FROM enqueued")]


def probe_lost(zk: Any, router: ShardRouter, creds: Any, acks: dict[tuple[int, int], str]) -> int:
    """Acknowledged probe writes missing (or stale) on the master the map names for their shard."""
    smap = ShardMapStore(zk).read()
    lost = 0
    conns: dict[str, Any] = {}
    by_shard: dict[int, dict[int, str]] = {}
    for (shard, lid), data in acks.items():
        by_shard.setdefault(shard, {})[lid] = data
    for shard, want in by_shard.items():
        host = router.host(smap.master_of(shard))
        if host.name not in conns:
            conns[host.name] = mysql_connect(host, creds)
        c = conns[host.name]
        ids = sorted(want)
        for k in range(0, len(ids), 1000):
            part = ids[k:k + 1000]
            with c.cursor() as cur:
                cur.execute(f"SELECT local_id, data FROM db{shard:05d}.pins WHERE local_id IN "
                            f"({', '.join(['%s'] * len(part))})", part)
                have = dict(cur.fetchall())
            lost += sum(1 for lid in part if have.get(lid) != want[lid])
    for c in conns.values():
        c.close()
    return lost


if __name__ == "__main__":
    raise SystemExit(main())
