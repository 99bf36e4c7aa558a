"""The audit trail: every shard-map change and every migration state change.

Shard-map changes are written in the same ZooKeeper transaction as the change
itself (``<root>/audit``, see :mod:`migrator.fleet.shard_map`); migration phase
changes are kept in each record's ``history`` (see :mod:`migrator.engine.migration`),
each naming the actor (operator or worker, user@host) and, when a phase module
made the change, that ``component``.
This module merges both into one time-ordered list for ``migrator history``.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from migrator.engine.migration import MigrationNotFound, MigrationStore
from migrator.engine.records import AuditEntry, PhaseChange
from migrator.fleet.shard_map import ShardMapStore
from migrator.fleet.zk import ZK


def history(zk: ZK, *, migration_id: str | None = None, limit: int = 200) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if migration_id is None:
        for rec in ShardMapStore(zk).history(limit=limit):
            out.append({
                "when": rec["when"], "who": rec["who"], "what": "shard_map",
                "migration": AuditEntry.parse(rec).details.migration,
                "old_epoch": rec["old_epoch"], "new_epoch": rec["new_epoch"],
                "detail": f"epoch {rec['old_epoch']} -> {rec['new_epoch']}: {rec['reason']}",
            })
    store = MigrationStore(zk)
    ids = [migration_id] if migration_id else store.list()
    for each_id in ids:
        try:
            state, _ = store.state(each_id)
        except MigrationNotFound:
            if migration_id:
                raise
            continue
        for h in PhaseChange.parse_list(state.history):
            detail = f"phase {h.from_ or '-'} -> {h.to}"
            if h.error:
                detail += f" ({h.error})"
            if h.component:
                detail += f" by {h.component}"
            out.append({"when": h.when, "who": h.who, "what": "migration", "migration": each_id,
                        "component": h.component, "from": h.from_, "to": h.to, "detail": detail})
    if migration_id:
        for rec in ShardMapStore(zk).history(limit=limit):
            if AuditEntry.parse(rec).details.migration == migration_id:
                out.append({"when": rec["when"], "who": rec["who"], "what": "shard_map", "migration": migration_id,
                            "old_epoch": rec["old_epoch"], "new_epoch": rec["new_epoch"],
                            "detail": f"epoch {rec['old_epoch']} -> {rec['new_epoch']}: {rec['reason']}"})
    out.sort(key=lambda r: r["when"])
    for r in out:
        r["when_iso"] = dt.datetime.fromtimestamp(r["when"], dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    return out[-limit:]
