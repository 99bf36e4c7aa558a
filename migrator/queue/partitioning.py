"""Partition naming and planning for time-bucketed tables (pure, no I/O).

A *policy* declares how one kind of table is partitioned: its ``RANGE
COLUMNS`` key and one or more *series* of time buckets. The jobs table has a
series per state (``RANGE COLUMNS(state, updated_at)``, as in Pinlater's
partitioned jobs table); the daily log table of the seed has one series on
``ts``. From a policy, this module computes

* the partitions of a new table (:func:`initial_partitions`), and
* a maintenance plan for an existing one (:func:`plan_maintenance`): which
  expired buckets to ``DROP PARTITION`` and how to split each ``*_FUTURE``
  partition into empty buckets ahead of time with ``REORGANIZE PARTITION``.

Naming: ``p<LABEL>_<YYYYMMDDHHMM>_<width minutes>`` for a bucket whose upper
bound (``VALUES LESS THAN``) is that time, e.g. ``pOK_202611221600_60``;
``p<LABEL>_FUTURE`` is the series' catch-all (``LESS THAN (state, MAXVALUE)``)
and ``p_CATCHALL`` (``LESS THAN (MAXVALUE, MAXVALUE)``) ends a multi-series
table. All times are database times (naive ``DATETIME(6)`` from ``NOW(6)``).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field

NAME_RE = re.compile(r"^p([A-Z]+)_(\d{12})_(\d+)$")
FUTURE_RE = re.compile(r"^p([A-Z]+)_FUTURE$")
CATCHALL = "p_CATCHALL"
EPOCH = dt.datetime(1970, 1, 1)


@dataclass(frozen=True)
class Series:
    """One run of time buckets, e.g. the OK jobs in hourly buckets kept a day."""

    label: str
    width_minutes: int
    #: drop a bucket once its upper bound is older than this; None keeps forever
    retention_seconds: int | None
    #: keep empty buckets ready until at least now + ahead
    ahead_seconds: int
    #: the value of the leading partition column (the job state), or None
    key: int | None = None

    @property
    def width(self) -> dt.timedelta:
        return dt.timedelta(minutes=self.width_minutes)


@dataclass(frozen=True)
class TablePolicy:
    """How one kind of table is partitioned and maintained."""

    kind: str
    columns: tuple[str, ...]
    series: tuple[Series, ...]
    time_column: str

    @property
    def keyed(self) -> bool:
        return len(self.columns) == 2

    def series_by_label(self) -> dict[str, Series]:
        return {s.label: s for s in self.series}


@dataclass(frozen=True)
class PartitionDef:
    name: str
    #: the text inside ``VALUES LESS THAN (...)``
    less_than: str


@dataclass
class Split:
    future: str
    into: list[PartitionDef]


@dataclass
class MaintenancePlan:
    drops: list[str] = field(default_factory=list)
    splits: list[Split] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.drops and not self.splits


# -- policies ---------------------------------------------------------------------

STATE_LABELS = ("NEW", "IPR", "OK", "FAIL")


def jobs_policy(retention_new: int = 14 * 86400, retention_ipr: int = 7 * 86400,
                retention_ok: int = 86400, retention_fail: int = 7 * 86400) -> TablePolicy:
    """The jobs table: a series per state, keyed on ``state``, bucketed on ``updated_at``."""
    return TablePolicy(
        kind="jobs",
        columns=("state", "updated_at"),
        time_column="updated_at",
        series=(
            Series("NEW", 24 * 60, retention_new, 2 * 86400, key=0),
            Series("IPR", 24 * 60, retention_ipr, 2 * 86400, key=1),
            Series("OK", 60, retention_ok, 6 * 3600, key=2),
            Series("FAIL", 6 * 60, retention_fail, 86400, key=3),
        ),
    )


#: the seed's log table: one partition per day, created a day ahead, kept 14 days
LOG_POLICY = TablePolicy(
    kind="log",
    columns=("ts",),
    time_column="ts",
    series=(Series("LOG", 24 * 60, 14 * 86400, 86400),),
)


# -- naming ---------------------------------------------------------------------------

def floor_time(t: dt.datetime, width_minutes: int) -> dt.datetime:
    minutes = int((t - EPOCH).total_seconds() // 60)
    return EPOCH + dt.timedelta(minutes=minutes - minutes % width_minutes)


def bucket_name(series: Series, bound: dt.datetime) -> str:
    return f"p{series.label}_{bound:%Y%m%d%H%M}_{series.width_minutes}"


def future_name(series: Series) -> str:
    return f"p{series.label}_FUTURE"


def parse_bucket(name: str) -> tuple[str, dt.datetime, int] | None:
    """(label, upper bound, width minutes) of a bucket name, else None."""
    m = NAME_RE.match(name)
    if not m:
        return None
    return m.group(1), dt.datetime.strptime(m.group(2), "%Y%m%d%H%M"), int(m.group(3))


def _literal(t: dt.datetime) -> str:
    return f"'{t:%Y-%m-%d %H:%M:%S}'"


def bucket_def(policy: TablePolicy, series: Series, bound: dt.datetime) -> PartitionDef:
    if policy.keyed:
        return PartitionDef(bucket_name(series, bound), f"{series.key}, {_literal(bound)}")
    return PartitionDef(bucket_name(series, bound), _literal(bound))


def future_def(policy: TablePolicy, series: Series) -> PartitionDef:
    if policy.keyed:
        return PartitionDef(future_name(series), f"{series.key}, MAXVALUE")
    return PartitionDef(future_name(series), "MAXVALUE")


def _bounds_ahead(series: Series, last: dt.datetime | None, now: dt.datetime) -> list[dt.datetime]:
    """New bucket bounds after ``last`` (or from now) until now + ahead is covered."""
    start = floor_time(now, series.width_minutes)
    cur = start if last is None or last < start else last
    horizon = now + dt.timedelta(seconds=series.ahead_seconds)
    out = []
    while cur < horizon:
        cur = cur + series.width
        out.append(cur)
    return out


# -- DDL text -------------------------------------------------------------------------

def initial_partitions(policy: TablePolicy, now: dt.datetime) -> list[PartitionDef]:
    defs: list[PartitionDef] = []
    for s in policy.series:
        defs.extend(bucket_def(policy, s, b) for b in _bounds_ahead(s, None, now))
        defs.append(future_def(policy, s))
    if policy.keyed:
        defs.append(PartitionDef(CATCHALL, "MAXVALUE, MAXVALUE"))
    return defs


def render_defs(defs: list[PartitionDef]) -> str:
    return ",\n  ".join(f"PARTITION {d.name} VALUES LESS THAN ({d.less_than})" for d in defs)


def partition_clause(policy: TablePolicy, now: dt.datetime) -> str:
    cols = ", ".join(policy.columns)
    return f"PARTITION BY RANGE COLUMNS({cols}) (\n  {render_defs(initial_partitions(policy, now))}\n)"


# -- maintenance plan ---------------------------------------------------------------

def plan_maintenance(policy: TablePolicy, existing: list[str], now: dt.datetime) -> MaintenancePlan:
    """What to drop and split, given the table's partition names and the DB's now.

    A bucket is dropped once its upper bound is at least ``retention`` in the
    past (so every row in it is older than that). ``*_FUTURE`` and the
    catch-all are never dropped. Names the policy does not know are left alone.
    """
    plan = MaintenancePlan()
    by_label = policy.series_by_label()
    last: dict[str, dt.datetime] = {}
    futures: set[str] = set()
    for name in existing:
        parsed = parse_bucket(name)
        if parsed is None:
            f = FUTURE_RE.match(name)
            if f and f.group(1) in by_label:
                futures.add(f.group(1))
            continue
        label, bound, _width = parsed
        series = by_label.get(label)
        if series is None:
            continue
        if series.retention_seconds is not None and bound <= now - dt.timedelta(seconds=series.retention_seconds):
            plan.drops.append(name)
        else:
            last[label] = max(bound, last.get(label, bound))
    for s in policy.series:
        if s.label not in futures:
            continue  # not this policy's layout; never invent a FUTURE partition
        bounds = _bounds_ahead(s, last.get(s.label), now)
        if bounds:
            plan.splits.append(Split(future_name(s), [*(bucket_def(policy, s, b) for b in bounds),
                                                     future_def(policy, s)]))
    return plan


def reorganize_sql(split: Split) -> str:
    return f"REORGANIZE PARTITION {split.future} INTO (\n  {render_defs(split.into)}\n)"
