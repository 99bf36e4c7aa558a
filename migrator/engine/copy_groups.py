"""Many tables per copy job: small tables share a job, its connections and its checks.

A virtual-shard fleet holds thousands of small tables. Copied one job per
table, each pays a job, a session (ZooKeeper, four MySQL connections with
their handshakes) and a first throttle check before its first byte: about
0.7 s per near-empty table. Here the tables still to copy are packed into
groups (:func:`plan_groups`): a table larger than ``GROUP_BYTES`` is a group
of its own, smaller ones are packed by estimated size into at most enough
groups to keep every worker busy. A group's tables are copied one after
another over one set of connections (:func:`copy_tables`); each table keeps
its own progress node and checkpoint, so resume, pause and the
compare-and-set against a second worker work per table as before.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from migrator.engine.copy import TableResult, control_check, copy_table, endpoints, progress_key
from migrator.engine.copy_load import Links, open_links
from migrator.engine.migration import MigrationStore, Spec
from migrator.engine.records import TableProgress
from migrator.fleet.config import Credentials
from migrator.fleet.mysql import start_point
from migrator.fleet.zk import ZK

#: a table estimated above this many bytes gets a job of its own
GROUP_BYTES = 16 * 1024 * 1024
#: at most this many tables per group job (a job's arguments stay small in Redis)
GROUP_TABLES = 2000


def plan_groups(progress: list[Any], workers: int, *, group_bytes: int = GROUP_BYTES,
                group_tables: int = GROUP_TABLES) -> list[list[tuple[str, str]]]:
    """Pack the tables not done into groups: large tables alone, small ones together.

    Small tables go, largest first, to the lightest of ``n`` groups, where
    ``n`` is enough groups for every worker (when there are that many tables)
    and for the byte and table caps of a group.
    """
    todo = sorted((p for p in TableProgress.parse_list(progress) if not p.done), key=lambda p: -p.est_bytes)
    big = [[(p.db, p.table)] for p in todo if p.est_bytes > group_bytes]
    small = [p for p in todo if p.est_bytes <= group_bytes]
    if not small:
        return big
    small_bytes = sum(p.est_bytes for p in small)
    n = max(1, min(len(small), max(workers - len(big), 1)),
            math.ceil(small_bytes / group_bytes), math.ceil(len(small) / group_tables))
    groups: list[list[tuple[str, str]]] = [[] for _ in range(n)]
    load = [0] * n
    for p in small:
        i = min(range(n), key=lambda j: (load[j], len(groups[j])))
        groups[i].append((p.db, p.table))
        load[i] += p.est_bytes + 1
    return big + [g for g in groups if g]


def cached_control(control: Callable[[], str | None], interval_s: float = 0.25) -> Callable[[], str | None]:
    """``control`` asked at most every ``interval_s`` (a stop is remembered): one ZooKeeper read
    serves many small tables."""
    state: dict[str, Any] = {"at": float("-inf"), "value": None}

    def check() -> str | None:
        if state["value"] is None and time.monotonic() - state["at"] >= interval_s:
            state["value"], state["at"] = control(), time.monotonic()
        return state["value"]

    return check


def copy_tables(
    zk: ZK,
    spec: Spec,
    tables: list[tuple[str, str]],
    creds: Credentials,
    *,
    deadline: float | None = None,
    links: Links | None = None,
    on_progress: Callable[[dict[str, Any]], None] | None = None,
    after_chunk: Callable[[dict[str, Any]], None] | None = None,
    pipeline: bool = False,
) -> list[TableResult]:
    """Copy ``tables`` one after another on one set of connections until all are done, the
    ``deadline`` passes or the migration is paused or stopped. Results only for tables this
    call worked on; a table not reached has none (the caller copies it later)."""
    control = cached_control(control_check(zk, spec.id))
    own = links is None
    if links is None:
        links = open_links(endpoints(zk, spec), creds, spec.options)
    results: list[TableResult] = []
    try:
        stamp_start(zk, spec.id, tables, links)
        for db, table in tables:
            if results and deadline is not None and time.monotonic() >= deadline:
                break
            res = copy_table(zk, spec, db, table, creds, deadline=deadline, control=control,
                             on_progress=on_progress, after_chunk=after_chunk, links=links, pipeline=pipeline)
            results.append(res)
            if res.status in ("paused", "stopped", "sliced"):
                break
    finally:
        if own:
            links.close()
    return results


#: progress nodes written per ZooKeeper transaction (a request stays far below jute.maxbuffer)
STAMPS_PER_WRITE = 200


def stamp_start(zk: ZK, migration_id: str, tables: list[tuple[str, str]], links: Links) -> None:
    """Give every table of the group that has none a ``start_gtid``: one source position read
    now, before any of their chunks, written in a few transactions instead of one write per table.
    (Any position before a table's first read is a valid start; catch-up starts at the earliest.)
    A write that loses a race is left alone: :func:`copy_table` stamps those tables itself."""
    store = MigrationStore(zk)
    pos, state = start_point(links.source)
    now = time.time()
    pending: list[tuple[str, dict[str, Any], int]] = []
    for db, table in tables:
        key = progress_key(db, table)
        stored, version = store.get_progress(migration_id, key)
        prog = TableProgress.parse(stored)
        if stored is None or version is None or prog.done or prog.start_gtid is not None:
            continue
        stamped = prog.model_copy(update={"start_gtid": pos, "start_state": state, "started_at": now})
        pending.append((key, stamped.dump(), version))
        if len(pending) >= STAMPS_PER_WRITE:
            store.put_progress_many(migration_id, pending)
            pending = []
    store.put_progress_many(migration_id, pending)


def remaining(tables: list[tuple[str, str]], results: list[TableResult]) -> list[tuple[str, str]]:
    """The tables of a group still to copy after a call returned ``results``: the one it stopped
    in (sliced, paused) and those it did not reach; done and superseded ones are not."""
    finished = {(r.db, r.table) for r in results if r.status in ("done", "superseded")}
    return [t for t in tables if t not in finished]
