"""Prometheus /metrics of migrations, scraped over HTTP from `migrator metrics --listen`
while a real migration copies, catches up and cuts over; the dashboard's queries over two
exporters and two queue servers at once."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from migrator.ops import command
from tests.promql import scrape_text

from .operator_support import insert_pins, planned, stop_process, wait_for


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> dict[tuple[str, str], float]:
    """{(sample name, migration label): value}, from a real HTTP scrape."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            key = s.labels.get("migration", "")
            if "phase" in s.labels:
                key = f"{key}:{s.labels['phase']}"
            out[(s.name, key)] = s.value
    return out


def test_metrics_scraped_during_and_after_a_migration(fleet):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "migrator", "--config", str(fleet.config_path), "metrics",
                             "--listen", f"127.0.0.1:{port}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=os.environ.copy())
    try:
        wait_for(lambda: proc.stdout.readline().startswith("serving"), timeout=20)
        mid = planned(fleet)
        m = scrape(port)
        assert m[("migrator_migration_phase", f"{mid}:planned")] == 1.0
        epoch0 = m[("migrator_shard_map_epoch", "")]

        command.run_copy(fleet.config, mid)
        m = scrape(port)
        st = command.status(fleet.config, mid)
        assert m[("migrator_copy_rows_total", mid)] == st["copy"]["rows"] >= 2 * 20  # 20 pins per shard at least
        assert m[("migrator_copy_bytes_total", mid)] > 0
        assert m[("migrator_copy_tables_pending", mid)] == 0
        assert m[("migrator_migration_phase", f"{mid}:catching_up")] == 1.0

        insert_pins(fleet, "MySQL001A", "db00002", 40)  # after the copy's start position: catch-up applies these
        command.catchup(fleet.config, mid)
        m = scrape(port)
        assert m[("migrator_catchup_passes_total", mid)] >= 1
        assert m[("migrator_catchup_events_total", mid)] >= 40
        assert m[("migrator_catchup_apply_events_per_second", mid)] > 0
        assert ("migrator_catchup_lag_seconds", mid) in m
        assert ("migrator_catchup_pass_events", mid) in m
        assert ("migrator_catchup_pass_duration_seconds", mid) in m
        assert ("migrator_predicted_freeze_seconds", mid) in m
        assert ("migrator_freeze_seconds", mid) not in m  # no cutover yet

        command.cutover(fleet.config, mid)
        m = scrape(port)
        assert m[("migrator_migration_phase", f"{mid}:done")] == 1.0
        assert 0 < m[("migrator_freeze_seconds", mid)] < 5
        assert m[("migrator_shard_map_epoch", "")] > epoch0
    finally:
        proc.kill()
        proc.wait()


def _start(fleet, *args: str) -> tuple[subprocess.Popen, int]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "migrator", "--config", str(fleet.config_path), *args,
                             "--listen", f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=os.environ.copy(), start_new_session=True)
    return proc, port


def _ready(port: int) -> bool:
    try:
        scrape_text(port)
        return True
    except OSError:
        return False


def test_the_dashboard_adds_up_over_two_processes(fleet):
    """Two `migrator metrics` exporters report every migration from its record, and two `queue serve`
    processes each count their own enqueues: Prometheus scrapes all four (an `instance` label each), and the
    dashboard's queries give the migration's own rates once (not twice) and the queue's enqueues added up."""
    import json as json_mod
    import time

    import httpx

    from tests.promql import Scrapes, evaluate, single

    dash = json_mod.loads((Path(__file__).resolve().parents[3] / "dashboards/grafana/migrator.json").read_text())
    exprs = {t["expr"] for p in dash["panels"] for t in p.get("targets", [])}
    rows_expr = next(e for e in exprs if "migrator_copy_rows_total" in e)
    events_expr = next(e for e in exprs if "migrator_catchup_events_total" in e)
    enq_expr = next(e for e in exprs if "queue_enqueued_jobs_total" in e)
    depth_expr = next(e for e in exprs if e.startswith("max by (queue, state) (queue_depth"))
    procs = [_start(fleet, "metrics"), _start(fleet, "metrics"), _start(fleet, "queue", "serve"),
             _start(fleet, "queue", "serve")]
    try:
        for _proc, port in procs:
            wait_for(lambda p=port: _ready(p), timeout=30)
        exporters, servers = [p for _, p in procs[:2]], [p for _, p in procs[2:]]
        token = {"Authorization": f"Bearer {fleet.credentials.queue_token}"}
        base = [f"http://127.0.0.1:{p}" for p in servers]
        assert httpx.post(f"{base[0]}/v1/queues", json={"name": "dash", "config": {"partitions": 1}}, headers=token,
                          timeout=30).status_code == 201
        mid = planned(fleet)
        scrapes, alone = Scrapes(), Scrapes()

        def take() -> None:
            texts = {f"m{i}": scrape_text(p) for i, p in enumerate(exporters)}
            texts.update({f"q{i}": scrape_text(p) for i, p in enumerate(servers)})
            t = time.monotonic()
            scrapes.add(t, texts)
            alone.add(t, {k: v for k, v in texts.items() if k in ("m0", "q0")})

        for b in base:  # a counter's series starts at its first increment: one job each before the first scrape
            assert httpx.post(f"{b}/v1/queues/dash/jobs", json={"jobs": [{"body": "first"}]}, headers=token,
                              timeout=30).status_code == 200
        take()
        command.run_copy(fleet.config, mid)
        insert_pins(fleet, "MySQL001A", "db00002", 30)
        command.catchup(fleet.config, mid)
        for i, n in ((0, 3), (1, 5)):  # 3 jobs through one server, 5 through the other
            r = httpx.post(f"{base[i]}/v1/queues/dash/jobs", json={"jobs": [{"body": str(j)} for j in range(n)]},
                           headers=token, timeout=30)
            assert r.status_code == 200, r.text
        take()
        span = scrapes.rounds[-1][0] - scrapes.rounds[0][0]
        st = command.status(fleet.config, mid)
        # the migration's rates, once: what its record says, as one exporter alone gives it
        rows = single(evaluate(rows_expr, scrapes), migration=mid) * span
        assert rows == pytest.approx(st["copy"]["rows"]) and st["copy"]["rows"] > 0
        assert evaluate(rows_expr, scrapes) == evaluate(rows_expr, alone)
        events = single(evaluate(events_expr, scrapes), migration=mid) * span / 60
        assert events == pytest.approx(sum(p["events"] for p in st["passes"])) and round(events) >= 30
        # the queue's enqueues, added up over both servers; its depth, once
        assert single(evaluate(enq_expr, scrapes), queue="dash") * span == pytest.approx(8)
        assert single(evaluate(depth_expr, scrapes), queue="dash", state="NEW") == 10
    finally:
        for proc, _port in procs:
            stop_process(proc)
