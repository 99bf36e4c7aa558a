"""What a destroying or switching command is about to do, in one sentence read from the record.

The CLI shows it before it asks for a confirmation (:func:`migrator.cli.options.confirm`):
``cutover``, ``rollback``, ``cleanup --now``, ``abort`` and ``restart-copy`` (a
rebalance id ``rb-...`` for ``abort`` and ``rollback``: every move it covers).
Each function reads ZooKeeper only and changes nothing; an unknown id is the
same one-line error the command itself would give.
"""

from __future__ import annotations

import time

from migrator.engine.migration import MigrationStore, Spec
from migrator.fleet.config import Config
from migrator.fleet.model import shard_runs
from migrator.ops import command
from migrator.ops.rebalance import command as rebalance_cmd
from migrator.ops.rebalance import record as rec_mod


def _what(spec: Spec) -> str:
    if spec.kind == "queue_partition":
        return f"queue {spec.queue} partition {spec.partition} (shard {spec.shards[0]})"
    return f"shards {shard_runs(spec.ranges())} ({len(spec.shards)})"


def _spec(config: Config, migration_id: str) -> tuple[Spec, str]:
    with command.session(config) as (zk, _):
        store = MigrationStore(zk)
        spec = store.spec(migration_id)
        st, _ = store.state(migration_id)
    return spec, st.phase.value


def cutover(config: Config, migration_id: str) -> str:
    spec, phase = _spec(config, migration_id)
    return (f"cut over {migration_id} ({phase}): freeze writes to {_what(spec)} for at most "
            f"{spec.options.freeze_budget_ms} ms, fence them on {spec.source_master}/{spec.source_passive} and "
            f"switch their traffic to {spec.target_master}/{spec.target_passive}")


def rollback(config: Config, migration_id: str) -> str:
    if rebalance_cmd.is_rebalance_id(migration_id):
        migration_ids = rebalance_cmd.to_roll_back(config, migration_id)
        return (
            f"roll back {len(migration_ids)} finished migrations of {migration_id} ({', '.join(migration_ids)}), "
            "last finished first: "
            "each switches its shards' traffic back to the pair it came from"
        )
    spec, phase = _spec(config, migration_id)
    return (f"roll back {migration_id} ({phase}): tail {spec.target_master} back into the tombstones on "
            f"{spec.source_master}, then freeze {_what(spec)} and switch their traffic back to "
            f"{spec.source_master}/{spec.source_passive}")


def cleanup_now(config: Config, migration_id: str) -> str:
    with command.session(config) as (zk, _):
        store = MigrationStore(zk)
        spec = store.spec(migration_id)
        st, _ = store.state(migration_id)
    host = spec.target_master if st.phase.value == "rolled_back" else spec.source_master
    until = (f" (kept for rollback until {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(st.cleanup_after))})"
             if st.cleanup_after else "")
    return (f"drop the tombstones of {migration_id} ({st.phase.value}) on {host} now: the old copies of {_what(spec)}"
            f"{until}; after this {migration_id} can no longer be rolled back")


def abort(config: Config, migration_id: str) -> str:
    if rebalance_cmd.is_rebalance_id(migration_id):
        with command.session(config) as (zk, _):
            rec, _ = rec_mod.RecordStore(zk).get(migration_id)
        running = [m["migration"] for m in rec["moves"] if m["state"] in ("running", "failed")]
        waiting = sum(1 for m in rec["moves"] if m["state"] == "waiting")
        return (
            f"abort {migration_id}: stop {len(running)} running moves ({', '.join(running) or 'none'}) and drop their "
            f"copies on their targets, cancel {waiting} waiting moves (moves past their flip finish)"
        )
    spec, phase = _spec(config, migration_id)
    return (f"abort {migration_id} ({phase}): drop its copies of {_what(spec)} on {spec.target_master}/"
            f"{spec.target_passive}, remove any cutover gate (triggers, gate table) left on {spec.source_master}/"
            f"{spec.source_passive} and release its shard locks")


def restart_copy(config: Config, migration_id: str) -> str:
    spec, phase = _spec(config, migration_id)
    return (f"restart the copy of {migration_id} ({phase}): drop its copies of {_what(spec)} on {spec.target_master}/"
            f"{spec.target_passive}, forget its copy and catch-up progress and copy again from the start")
