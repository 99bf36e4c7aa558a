"""``migrator demo``: a live split of a sandbox fleet under queue load, with a report.

1. start a fresh sandbox (two pairs holding shards, one spare pair);
2. start two RQ workers (``migrator worker``) as child processes;
3. run the queue load generator (enqueue, dequeue, ack) in a background thread,
   recording every acknowledged enqueue and completion in a ledger;
4. ``split MySQL001A`` onto the spare pair through the whole pipeline (plan ->
   preflight -> copy -> catch-up passes -> verify -> fenced cutover), following it live;
5. keep the load running a little after the flip, stop it, check the ledger;
6. print the report: shards and rows moved, each catch-up pass, the write
   freeze, and the ledger verdict (lost acknowledged jobs must be 0).

This module joins the migration engine and the queue service; the engine
itself never imports the queue service.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from migrator.errors import MigratorError
from migrator.ops import command, watch
from migrator.queue.ledger import check_ledger
from migrator.queue.load import run_load
from migrator.sandbox import Sandbox, stop_pid


class DemoError(MigratorError):
    component = "demo"


@dataclass
class DemoReport:
    migration: str = ""
    phase: str = ""
    source: str = ""
    target: str = ""
    shards: list[int] = field(default_factory=list)
    tables: int = 0
    rows_copied: int = 0
    bytes_copied: int = 0
    passes: list[dict[str, Any]] = field(default_factory=list)
    freeze_ms: float | None = None
    predicted_freeze_ms: float | None = None
    seconds: float = 0.0
    load: dict[str, Any] = field(default_factory=dict)
    ledger: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.phase == "done" and bool(self.ledger) and self.ledger.get("lost") == 0 \
            and self.ledger.get("double_bug") == 0


def start_workers(config_path: Path, n: int, log_dir: Path) -> list[subprocess.Popen]:
    procs = []
    for i in range(n):
        log = open(log_dir / f"worker-{i}.log", "ab")
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "migrator", "--config", str(config_path), "worker", "--name",
             f"demo-{os.getpid()}-{i}"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True))
    return procs


def run_demo(*, directory: str | Path = ".sandbox-demo", base_port: int = 33300, shards: int = 16,
             rows: int = 500, rate: float = 200.0, workers: int = 2, source: str = "MySQL001A",
             after_s: float = 3.0, fresh: bool = True, down: bool = False, tls: bool = True,
             console: Console | None = None) -> DemoReport:
    console = console or Console()
    t0 = time.monotonic()
    sb = Sandbox(directory)
    if fresh and sb.state is not None:
        console.print(f"removing the previous demo sandbox in {sb.dir}")
        sb.down(purge=True)
        sb = Sandbox(directory)
    sb.up(pairs=2, spare_pairs=1, shards=shards, rows=rows, base_port=base_port, tls=tls, log=console.print)
    cfg = sb.config()
    report = DemoReport(source=source)
    procs = start_workers(sb.config_file, workers, sb.dir)
    stop = threading.Event()
    load_out: dict[str, Any] = {}
    ledger_path = sb.dir / "ledger.sqlite"
    if ledger_path.exists():
        ledger_path.unlink()

    def load() -> None:
        try:
            res = run_load(cfg, "demo", rate, 24 * 3600, ledger_path, stop, partitions=4, consumers=2)
            load_out["result"] = res
        except BaseException as exc:  # reported below; the demo must still stop its workers
            load_out["error"] = exc

    loader = threading.Thread(target=load, name="demo-load", daemon=True)
    try:
        loader.start()
        time.sleep(2.0)
        if "error" in load_out:
            raise DemoError(f"the queue load did not start: {load_out['error']}")
        plan = command.plan_split(cfg, source)
        spec = plan.spec
        report.migration, report.target, report.shards = spec.id, spec.target_master, list(spec.shards)
        console.print(f"splitting {source}: shards {spec.shards[0]}..{spec.shards[-1]} -> {spec.target_master} "
                      f"({spec.id}) while the queue load runs at {rate:.0f} jobs/s")
        command.launch(cfg, spec.id)
        st = watch.follow(cfg, spec.id, console=console, timeout=900)
        report.phase = st["phase"]
        status = watch.MigrationStatus.parse(st)
        c = status.copy_
        report.tables, report.rows_copied, report.bytes_copied = c.tables, c.rows, c.bytes
        report.passes = [p.dump() for p in status.passes]
        report.freeze_ms, report.predicted_freeze_ms = status.freeze_ms, status.predicted_freeze_ms
        time.sleep(after_s)  # the load keeps going on the new topology
    finally:
        stop.set()
        loader.join(120)
        for p in procs:
            stop_pid(p.pid, timeout=10)
    if "error" in load_out:
        raise DemoError(f"the queue load failed: {load_out['error']}")
    res = load_out.get("result")
    if res is not None:
        report.load = {"enqueued": res.enqueued, "executed": res.executed, "acked_ok": res.acked_ok,
                       "stale_acks": res.stale_acks, "errors": dict(res.errors), "seconds": round(res.duration, 1)}
    report.ledger = check_ledger(cfg, ledger_path).to_dict()
    report.seconds = round(time.monotonic() - t0, 1)
    (sb.dir / "demo-report.json").write_text(json.dumps(report.__dict__, indent=2, default=str))
    print_report(report, console)
    if down:
        sb.down()
    else:
        # one line that points every command at the demo's fleet (its config is not the default .sandbox's)
        console.print(f"the fleet keeps running; point every command at it: export MIGRATOR_CONFIG={sb.config_file}"
                      f"   (stop it: migrator sandbox down --dir {sb.dir})", markup=False, highlight=False,
                      soft_wrap=True)
    return report


def print_report(r: DemoReport, console: Console) -> None:
    console.rule("demo report")
    console.print(f"migration {r.migration}: {r.phase}; moved shards {r.shards[0] if r.shards else '-'}.."
                  f"{r.shards[-1] if r.shards else '-'} ({len(r.shards)}) from {r.source} to {r.target}")
    console.print(f"copied {r.rows_copied:,} rows ({r.bytes_copied:,} bytes) in {r.tables} tables")
    if r.passes:
        console.print(watch.pass_table(r.passes, last=len(r.passes)))
    predicted = r.predicted_freeze_ms if r.predicted_freeze_ms is None else round(r.predicted_freeze_ms)
    console.print(f"write freeze: {r.freeze_ms if r.freeze_ms is None else round(r.freeze_ms, 1)} ms "
                  f"(predicted {predicted} ms)")
    if r.load:
        console.print(f"queue load: {r.load['enqueued']:,} enqueued, {r.load['acked_ok']:,} acked OK, "
                      f"errors {r.load['errors'] or 'none'}")
    lg = r.ledger
    t = Table(title="ledger check")
    for col in ("acknowledged enqueues", "done", "pending", "LOST", "double (allowed)", "double (bug)"):
        t.add_column(col, justify="right")
    t.add_row(*(str(lg.get(k, "?")) for k in ("enqueued", "completed", "pending", "lost", "double_allowed",
                                              "double_bug")))
    console.print(t)
    console.print(f"[bold]{'OK' if r.ok else 'FAILED'}[/] in {r.seconds:.0f}s")
