"""Prometheus /metrics of migrations, scraped over HTTP from `migrator metrics --port`
while a real migration copies, catches up and cuts over."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from migrator.ops import command

from .operator_support import insert_pins, planned, wait_for


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
