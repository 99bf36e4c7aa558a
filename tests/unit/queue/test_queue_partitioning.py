"""Partition naming and maintenance planning (pure)."""

from __future__ import annotations

import datetime as dt

from migrator.queue.partitioning import (
    CATCHALL,
    LOG_POLICY,
    bucket_name,
    floor_time,
    initial_partitions,
    jobs_policy,
    parse_bucket,
    partition_clause,
    plan_maintenance,
    reorganize_sql,
)

NOW = dt.datetime(2026, 11, 22, 15, 37, 12)


def test_bucket_names_round_trip():
    pol = jobs_policy()
    ok = pol.series_by_label()["OK"]
    name = bucket_name(ok, dt.datetime(2026, 11, 22, 16, 0))
    assert name == "pOK_202611221600_60"
    assert parse_bucket(name) == ("OK", dt.datetime(2026, 11, 22, 16, 0), 60)
    assert parse_bucket("pOK_FUTURE") is None and parse_bucket(CATCHALL) is None


def test_floor_time():
    assert floor_time(NOW, 60) == dt.datetime(2026, 11, 22, 15, 0)
    assert floor_time(NOW, 24 * 60) == dt.datetime(2026, 11, 22)
    assert floor_time(NOW, 6 * 60) == dt.datetime(2026, 11, 22, 12, 0)


def test_initial_layout_is_ordered_and_covers_ahead():
    pol = jobs_policy()
    defs = initial_partitions(pol, NOW)
    names = [d.name for d in defs]
    assert names[-1] == CATCHALL
    for label in ("NEW", "IPR", "OK", "FAIL"):
        assert f"p{label}_FUTURE" in names
    # per state, bounds increase, the first is after now and the last reaches now + ahead
    for s in pol.series:
        bounds = [parse_bucket(n)[1] for n in names if n.startswith(f"p{s.label}_2")]
        assert bounds == sorted(bounds)
        assert bounds[0] > NOW
        assert bounds[-1] >= NOW + dt.timedelta(seconds=s.ahead_seconds)
    # states in order, FUTURE last within each state: RANGE COLUMNS needs strictly increasing bounds
    keys = [d.less_than for d in defs]
    assert keys[0].startswith("0, '") and keys[-1] == "MAXVALUE, MAXVALUE"
    clause = partition_clause(pol, NOW)
    assert clause.startswith("PARTITION BY RANGE COLUMNS(state, updated_at)")
    assert "PARTITION pOK_202611221600_60 VALUES LESS THAN (2, '2026-11-22 16:00:00')" in clause


def test_plan_drops_only_expired_and_splits_future():
    pol = jobs_policy(retention_ok=86400)
    names = [d.name for d in initial_partitions(pol, NOW)]
    assert plan_maintenance(pol, names, NOW).drops == []
    later = NOW + dt.timedelta(days=2)
    plan = plan_maintenance(pol, names, later)
    assert plan.drops and all(n.startswith("pOK_") for n in plan.drops)
    assert "pOK_FUTURE" not in plan.drops and CATCHALL not in plan.drops
    futures = {s.future for s in plan.splits}
    assert "pOK_FUTURE" in futures
    ok_split = next(s for s in plan.splits if s.future == "pOK_FUTURE")
    assert ok_split.into[-1].name == "pOK_FUTURE"
    new_bounds = [parse_bucket(d.name)[1] for d in ok_split.into[:-1]]
    assert new_bounds[0] == floor_time(later, 60) + dt.timedelta(hours=1)  # no buckets for the gap
    assert new_bounds[-1] >= later + dt.timedelta(hours=6)
    sql = reorganize_sql(ok_split)
    assert sql.startswith("REORGANIZE PARTITION pOK_FUTURE INTO (")
    # applying the plan, then planning again at the same time, is a no-op
    applied = [n for n in names if n not in plan.drops]
    for s in plan.splits:
        applied += [d.name for d in s.into[:-1]]
    assert plan_maintenance(pol, applied, later).empty


def test_plan_ignores_unknown_layouts():
    pol = jobs_policy()
    plan = plan_maintenance(pol, ["p0", "p1", "pmax"], NOW + dt.timedelta(days=100))
    assert plan.empty


def test_log_policy_daily():
    defs = initial_partitions(LOG_POLICY, NOW)
    assert [d.name for d in defs] == ["pLOG_202611230000_1440", "pLOG_202611240000_1440", "pLOG_FUTURE"]
    assert defs[0].less_than == "'2026-11-23 00:00:00'" and defs[-1].less_than == "MAXVALUE"
    plan = plan_maintenance(LOG_POLICY, [d.name for d in defs], NOW + dt.timedelta(days=15))
    assert plan.drops == ["pLOG_202611230000_1440"]  # 15 days later only the first day is past 14 days
