"""The status view's arithmetic: per-shard sums, copy rate and ETA; rendering without servers."""

from __future__ import annotations

from rich.console import Console

from migrator.ops import watch


def table(db, name, rows, est, done, started=100.0, finished=None):
    return {"db": db, "table": name, "rows": rows, "est_rows": est, "done": done, "started_at": started,
            "finished_at": finished, "bytes": rows * 10}


def test_per_shard_sums_tables():
    shards = watch.per_shard([table("db00003", "pins", 5, 10, False), table("db00002", "pins", 10, 10, True),
                              table("db00002", "users", 4, 8, False)])
    assert shards == [
        {"db": "db00002", "tables": 2, "done": 1, "rows": 14, "est_rows": 18, "bytes": 140},
        {"db": "db00003", "tables": 1, "done": 0, "rows": 5, "est_rows": 10, "bytes": 50},
    ]


def test_copy_rate_and_eta():
    tables = [table("db00002", "pins", 100, 100, True, 100.0, 105.0), table("db00002", "users", 100, 300, False)]
    rate, eta = watch.copy_rate(tables, now=110.0)
    assert rate == 20.0 and eta == 10.0  # 200 rows in 10 s; 200 left of users
    done = [table("db00002", "pins", 100, 100, True, 100.0, 104.0)]
    assert watch.copy_rate(done, now=500.0) == (25.0, 0.0)
    assert watch.copy_rate([table("db00002", "pins", 0, 100, False, None)], now=1.0) == (0.0, None)


def test_render_shows_the_parts():
    st = {"id": "m-1", "phase": "catching_up", "paused": True, "postpone_cutover": False, "error": None,
          "spec": {"source_master": "MySQL001A", "target_master": "MySQL003A", "shards": [2, 3]},
          "copy": {"rows": 40, "est_rows": 40, "done": 2, "tables": 2, "rows_per_s": 20.0, "eta_s": 0.0,
                   "per_shard": watch.per_shard([table("db00002", "pins", 40, 40, True)])},
          "passes": [{"number": 1, "events": 12, "duration_s": 0.2, "apply_rate": 60, "write_rate": 5, "lag_s": 0.2,
                      "predicted_freeze_ms": 17, "converged": True}],
          "predicted_freeze_ms": 17.0, "freeze_ms": 42.0,
          "workers": [{"name": "w1", "state": "busy", "queues": ["migrator"], "job": "j",
                       "job_description": "copy db00002.pins of migration m-1"}]}
    console = Console(record=True, width=160)
    progress, task = watch.new_progress(console)
    console.print(watch.render(st, progress, task))
    text = console.export_text()
    for needle in ("m-1", "(paused)", "copy per shard", "db00002", "catch-up passes", "predicted freeze 17 ms",
                   "last write freeze 42 ms", "copy rate 20 rows/s, ETA done", "w1", "copy db00002.pins"):
        assert needle in text, needle
