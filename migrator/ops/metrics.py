"""Prometheus metrics of migrations, read from their ZooKeeper records on scrape.

Any number of RQ workers on any number of machines do the work; the record in
ZooKeeper is the one place that knows the whole migration. So instead of
counters scattered over worker processes, each scrape of ``/metrics`` (served
by ``migrator worker --metrics-listen HOST:PORT`` or ``migrator metrics
--listen HOST:PORT``) reads the records and reports copy progress, catch-up
apply rate, lag, pass deltas and freeze durations.

A migration's series come from one place, its record: every exporter reports
the same values, and Prometheus tells the copies apart by their ``instance``
label. So a query takes one copy, never their sum:
``max by (migration) (rate(migrator_copy_rows_total[1m]))`` for rows/s, as
``dashboards/grafana/migrator.json`` does (``tests/integration/ops/
test_operator_metrics.py`` scrapes two exporters and checks its sums).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from migrator.engine.migration import MigrationStore, Node, Phase
from migrator.engine.records import CatchupNode, TableProgress
from migrator.fleet.shard_map import ShardMapStore
from migrator.fleet.zk import ZK


def families() -> tuple[Any, ...]:
    """The metric families the collector reports, empty (filled per scrape), in the order ``collect`` unpacks."""
    phase = GaugeMetricFamily("migrator_migration_phase", "1 for the phase each migration is in",
                              labels=["migration", "phase"])
    rows = CounterMetricFamily("migrator_copy_rows", "Rows copied so far", labels=["migration"])
    nbytes = CounterMetricFamily("migrator_copy_bytes", "Bytes copied so far", labels=["migration"])
    tables_left = GaugeMetricFamily("migrator_copy_tables_pending", "Tables not fully copied",
                                    labels=["migration"])
    apply_rate = GaugeMetricFamily("migrator_catchup_apply_events_per_second",
                                   "Apply rate of the last catch-up pass that applied events",
                                   labels=["migration"])
    write_rate = GaugeMetricFamily("migrator_catchup_source_write_events_per_second",
                                   "Source write rate seen by the last catch-up pass", labels=["migration"])
    lag = GaugeMetricFamily("migrator_catchup_lag_seconds", "Lag of the last catch-up pass",
                            labels=["migration"])
    delta = GaugeMetricFamily("migrator_catchup_pass_events", "Events applied by the last catch-up pass",
                              labels=["migration"])
    passes = CounterMetricFamily("migrator_catchup_passes", "Catch-up passes run", labels=["migration"])
    events = CounterMetricFamily("migrator_catchup_events", "Binlog row events applied by the recorded passes",
                                 labels=["migration"])
    pass_seconds = GaugeMetricFamily("migrator_catchup_pass_duration_seconds", "Duration of the last pass",
                                     labels=["migration"])
    predicted = GaugeMetricFamily("migrator_predicted_freeze_seconds", "Predicted write freeze",
                                  labels=["migration"])
    freeze = GaugeMetricFamily("migrator_freeze_seconds", "Measured write freeze of the cutover",
                               labels=["migration"])
    epoch = GaugeMetricFamily("migrator_shard_map_epoch", "Epoch (znode version) of the shard map")
    return (phase, rows, nbytes, tables_left, apply_rate, write_rate, lag, delta, pass_seconds, passes, events,
            predicted, freeze, epoch)


class MigrationCollector(Collector):
    """A prometheus-client collector over every migration record under one root."""

    def __init__(self, zk: ZK):
        self.zk = zk

    def describe(self) -> Iterator[Any]:
        yield from families()

    def collect(self) -> Iterator[Any]:
        store = MigrationStore(self.zk)
        (phase, rows, nbytes, tables_left, apply_rate, write_rate, lag, delta, pass_seconds, passes, events,
         predicted, freeze, epoch) = families()
        for migration_id in store.list():
            try:
                st, _ = store.state(migration_id)
            except Exception:  # a record deleted between list and read
                continue
            for p in Phase:
                phase.add_metric([migration_id, p.value], 1.0 if st.phase == p else 0.0)
            total_rows = total_bytes = pending = 0
            for key in store.progress_keys(migration_id, "copy"):
                stored, _ = store.get_progress(migration_id, f"copy/{key}")
                if stored:
                    prog = TableProgress.parse(stored)
                    total_rows += prog.rows
                    total_bytes += prog.bytes
                    pending += 0 if prog.done else 1
            rows.add_metric([migration_id], total_rows)
            nbytes.add_metric([migration_id], total_bytes)
            tables_left.add_metric([migration_id], pending)
            plist = CatchupNode.parse(store.get_progress(migration_id, Node.CATCHUP)[0]).passes
            passes.add_metric([migration_id], max(len(plist), max((p.number or 0 for p in plist), default=0)))
            events.add_metric([migration_id], sum(p.events for p in plist))
            if plist:
                last = plist[-1]
                # an empty pass has no rate: report the last pass that applied something
                busy = next((p for p in reversed(plist) if p.events), last)
                apply_rate.add_metric([migration_id], busy.apply_rate)
                write_rate.add_metric([migration_id], last.write_rate)
                lag.add_metric([migration_id], last.lag_s)
                delta.add_metric([migration_id], float(last.events))
                pass_seconds.add_metric([migration_id], last.duration_s)
            if st.predicted_freeze_ms is not None:
                predicted.add_metric([migration_id], st.predicted_freeze_ms / 1000)
            if st.freeze_ms is not None:
                freeze.add_metric([migration_id], st.freeze_ms / 1000)
        yield from (phase, rows, nbytes, tables_left, apply_rate, write_rate, lag, delta, pass_seconds, passes, events,
                    predicted, freeze)
        try:
            epoch.add_metric([], float(ShardMapStore(self.zk).read().epoch or 0))
            yield epoch
        except Exception:  # no map yet: report nothing rather than fail the scrape
            pass


def serve(zk: ZK, port: int, addr: str = "127.0.0.1") -> Any:
    """Start a /metrics HTTP server in a daemon thread; returns the server."""
    from prometheus_client import CollectorRegistry, start_http_server

    registry = CollectorRegistry()
    registry.register(MigrationCollector(zk))
    server, _thread = start_http_server(port, addr=addr, registry=registry)
    return server
