"""Benchmark: the write freeze of a cutover under a background write load.

    python -m bench.cutover [--rounds 24] [--dir /tmp/migrator-bench-cutover] [--rate 300]

Not a test. Starts (or reuses) a sandbox fleet in ``--dir``, makes a fresh
ZooKeeper root, and moves the same shards back and forth between pair 1 and
the spare pair ``--rounds`` times through the whole pipeline of the library
(plan -> copy -> catch-up -> verify -> cutover -> cleanup --now), while a
background writer inserts and updates rows of the moving shards (and one
shard that stays) through a :class:`~migrator.fleet.router.ShardRouter`, retrying
on the new master after 1146/1049 as a client would.

Per cutover it prints the freeze (ms, from the commit of the freeze CAS to the
end of the release), its steps, and the load around it: writes whose call
overlapped the freeze window, their worst latency and the retries they needed,
against the load's baseline latency. The load runs in its own process, as
clients would. At the end every acknowledged write is looked up on
the master the map names for its shard; ``lost`` counts those missing or
stale. The last line is::

    cutovers=… aborted=… errors=… freeze_p50_ms=… freeze_p99_ms=… freeze_max_ms=… lost=…

``aborted`` counts cutovers the watchdog (or a conflict) stopped before the flip;
they are retried after one more catch-up pass and listed with how long writes
waited in them (not in the freeze percentiles, which are of completed cutovers).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymysql
from rich.console import Console
from rich.table import Table

from migrator.fleet import config as config_mod
from migrator.fleet import zk as zk_mod
from migrator.fleet.model import even_layout
from migrator.fleet.mysql import ER_BAD_DB_ERROR, ER_NO_SUCH_TABLE
from migrator.fleet.mysql import connect as mysql_connect
from migrator.fleet.router import ShardRouter
from migrator.fleet.shard_map import HostRegistry, ShardMapStore
from migrator.sandbox import Sandbox, find_base_port, reset_fleet

MOVING = (2, 3)
STAYING = 1


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
                if code in (ER_NO_SUCH_TABLE, ER_BAD_DB_ERROR):
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


class LoadProcess:
    """Start/stop :func:`_load_process`; after :meth:`stop` it has the Load's fields."""

    def __init__(self, config_path: str, shards: tuple[int, ...], rate: float):
        import multiprocessing as mp

        ctx = mp.get_context("spawn")
        self._stop = ctx.Event()
        self._out = ctx.Queue()
        self._proc = ctx.Process(target=_load_process, args=(config_path, shards, rate, self._stop, self._out),
                                 daemon=True)
        self.acks: dict[tuple[int, int], str] = {}
        self.calls: list[tuple[float, float, int, bool]] = []
        self.errors: list[str] = []

    def start(self) -> LoadProcess:
        self._proc.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        res = self._out.get(timeout=120)
        self._proc.join(30)
        self.acks, self.calls, self.errors = res["acks"], res["calls"], res["errors"]

    def calls_so_far(self) -> list[tuple[float, float, int, bool]]:
        return self.calls


def fresh_root(sb: Sandbox) -> tuple[config_mod.Config, Any, str]:
    base = sb.config()
    root = f"/bench{uuid.uuid4().hex[:10]}"
    cfg = base.with_root(root)
    cfg.credentials.file = str(sb.secrets_file)
    path = Path(sb.dir) / f"bench-{root[1:]}.toml"
    path.write_text(config_mod.dump(cfg))
    cfg = config_mod.load(path)
    creds = config_mod.load_credentials(cfg)
    assert sb.state is not None
    smap = even_layout(sb.state.shards, sb.pairs(spare=False))
    reset_fleet(sb, smap, rows=200)
    zk = zk_mod.connect(cfg, creds)
    reg = HostRegistry(zk)
    hosts = sb.hosts()
    for h in hosts.values():
        reg.register(h)
    ShardMapStore(zk).init(smap, hosts, reason="bench")
    return cfg, zk, str(path)


def move(cfg: config_mod.Config, target: str, window: dict[str, float],
         aborts: list[dict[str, Any]], attempts: int = 5) -> tuple[str, dict[str, Any]]:
    """One migration of MOVING to ``target``'s pair through the library's phases.

    A cutover that stops before the flip (the watchdog, a conflict) is retried
    after one more catch-up pass, as the pipeline does; each such abort is
    recorded with how long writes waited in it.
    """
    from migrator.engine import catch_up
    from migrator.engine.cleanup import cleanup
    from migrator.engine.cutover import cutover
    from migrator.engine.cutover.errors import CutoverAborted, FreezeBudgetExceeded
    from migrator.engine.cutover.hooks import CutoverHooks
    from migrator.engine.verify.run import verify_migration
    from migrator.ops import command

    plan = command.plan_move(cfg, list(MOVING), target)
    mid = plan.spec.id
    command.run_copy(cfg, mid)
    catch_up.run_passes(cfg, mid)
    verify_migration(cfg, mid)

    def began(run: Any) -> None:
        window["start"] = run.t_freeze
        window["run"] = run

    def ended(run: Any) -> None:
        window["end"] = time.monotonic()

    for attempt in range(attempts):
        try:
            res = cutover(cfg, mid, hooks=CutoverHooks(after_freeze=began, after_flip=ended))
            break
        except (FreezeBudgetExceeded, CutoverAborted) as exc:
            if attempt + 1 == attempts or "start" not in window:
                raise
            run = window.pop("run")
            aborts.append({"freeze_ms": (time.monotonic() - window.pop("start")) * 1000,
                           "steps": dict(run.steps), "why": type(exc).__name__})
            catch_up.run_passes(cfg, mid, 1)
    window.pop("run", None)
    cleanup(cfg, mid, now=True)
    return mid, res.to_dict()


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    if not xs:
        return 0.0
    k = min(len(xs) - 1, max(0, int(round(p / 100 * (len(xs) - 1)))))
    return xs[k]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=24)
    ap.add_argument("--rate", type=float, default=300.0, help="background writes per second (target)")
    ap.add_argument("--dir", default="/tmp/migrator-bench-cutover", help="sandbox directory (started if not running)")
    ap.add_argument("--down", action="store_true", help="stop the sandbox at the end")
    args = ap.parse_args(argv)
    console = Console(width=140)

    sb = Sandbox(args.dir)
    if not sb.running():
        sb.up(pairs=2, spare_pairs=1, shards=8, rows=200, base_port=find_base_port(100), log=lambda *_: None)
    cfg, zk, cfg_path = fresh_root(sb)
    creds = config_mod.load_credentials(cfg)
    router = ShardRouter(zk, creds).start()
    pair1 = sb.pairs(spare=False)[0][0]
    spare = sb.pairs(spare=True)[0][0]
    load = LoadProcess(cfg_path, (*MOVING, STAYING), args.rate).start()
    time.sleep(1.0)

    rows: list[dict[str, Any]] = []
    table = Table(title=f"cutover freeze under load ({args.rounds} cutovers of shards {MOVING}, "
                        f"~{args.rate:.0f} writes/s)")
    for col in ("#", "to", "freeze ms", "cas", "fence", "sent.", "drain", "keys", "compare", "flip", "release",
                "rows", "writes", "worst ms", "retries"):
        table.add_column(col, justify="right")
    failures: list[str] = []
    aborts: list[dict[str, Any]] = []
    try:
        for i in range(args.rounds):
            target = spare if i % 2 == 0 else pair1
            win: dict[str, float] = {}
            try:
                mid, res = move(cfg, target, win, aborts)
            except Exception as exc:  # a benchmark shows a failure and stops
                failures.append(f"round {i + 1}: {type(exc).__name__}: {exc}")
                console.print(f"[red]round {i + 1} failed: {exc}[/red]")
                break
            rows.append({"freeze_ms": res["freeze_ms"], "win": win, "res": res, "target": target})
            console.print(f"cutover {i + 1}/{args.rounds} to {target}: freeze {res['freeze_ms']:.0f} ms")
    finally:
        time.sleep(0.5)
        load.stop()

    for i, r in enumerate(rows):
        win, res = r["win"], r["res"]
        # writes whose call overlapped the freeze window
        hit = [c for c in load.calls if c[1] >= win["start"] and c[0] <= win["end"]]
        r["worst_ms"] = max(((c[1] - c[0]) * 1000 for c in hit), default=0.0)
        r["retries"] = sum(c[2] for c in hit)
        s = res["steps_ms"]
        table.add_row(str(i + 1), r["target"][-4:], f"{res['freeze_ms']:.0f}", f"{s.get('freeze_cas', 0):.0f}",
                      f"{s.get('fence', 0):.0f}", f"{s.get('sentinel', 0):.0f}",
                      f"{s.get('drain', 0):.0f}", f"{s.get('compare_keys', 0):.0f}",
                      f"{s.get('compare', 0):.0f}", f"{s.get('flip_cas', 0):.0f}",
                      f"{s.get('release', 0):.0f}", str(res["rows_checked"]), str(len(hit)), f"{r['worst_ms']:.0f}",
                      str(r["retries"]))
    console.print(table)
    # every acknowledged write, on the master the map names now
    smap = ShardMapStore(zk).read()
    lost = 0
    conns: dict[str, Any] = {}
    by_shard: dict[int, dict[int, str]] = {}
    for (shard, lid), data in load.acks.items():
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
    base = [(c[1] - c[0]) * 1000 for c in load.calls if c[2] == 0]
    freezes = [r["freeze_ms"] for r in rows]
    console.print(f"load: {len(load.calls)} writes, {len(load.acks)} rows acknowledged, "
                  f"{sum(c[2] for c in load.calls)} retries after 1146/1049, {len(load.errors)} errors, "
                  f"baseline write latency p50 {statistics.median(base) if base else 0:.1f} ms, "
                  f"p99 {pct(base, 99):.1f} ms")
    for f in failures:
        console.print(f"[red]{f}[/red]")
    zk.close()
    if args.down:
        sb.down()
    for a in aborts:
        console.print(f"aborted before the flip ({a['why']}), writes waited {a['freeze_ms']:.0f} ms; "
                      f"steps so far: {a['steps']}; retried after one more catch-up pass")
    worst = [r["worst_ms"] for r in rows]
    console.print(f"write latency of calls overlapping a freeze: p50 {pct(worst, 50):.0f} ms, "
                  f"max {max(worst, default=0):.0f} ms")
    print(f"cutovers={len(freezes)} aborted={len(aborts)} errors={len(load.errors)} "
          f"freeze_p50_ms={pct(freezes, 50):.1f} freeze_p99_ms={pct(freezes, 99):.1f} "
          f"freeze_max_ms={max(freezes) if freezes else 0:.1f} lost={lost}")
    return 0 if not failures and lost == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
