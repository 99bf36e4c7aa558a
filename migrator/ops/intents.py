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


def _spec(config: Config, mid: str) -> tuple[Spec, str]:
    with command.session(config) as (zk, _):
        store = MigrationStore(zk)
        spec = store.spec(mid)
        st, _ = store.state(mid)
    return spec, st.phase.value


def cutover(config: Config, mid: str) -> str:
    spec, phase = _spec(config, mid)
    return (f"cut over {mid} ({phase}): freeze writes to {_what(spec)} for at most "
            f"{spec.options.freeze_budget_ms} ms, fence them on {spec.source_master}/{spec.source_slave} and "
            f"switch their traffic to {spec.target_master}/{spec.target_slave}")


def rollback(config: Config, mid: str) -> str:
    if rebalance_cmd.is_rebalance_id(mid):
        mids = rebalance_cmd.to_roll_back(config, mid)
        return (f"roll back {len(mids)} finished migrations of {mid} ({', '.join(mids)}), last finished first: "
                "each switches its shards' traffic back to the pair it came from")
    spec, phase = _spec(config, mid)
    return (f"roll back {mid} ({phase}): tail {spec.target_master} back into the tombstones on "
            f"{spec.source_master}, then freeze {_what(spec)} and switch their traffic back to "
            f"{spec.source_master}/{spec.source_slave}")


def cleanup_now(config: Config, mid: str) -> str:
    with command.session(config) as (zk, _):
        store = MigrationStore(zk)
        spec = store.spec(mid)
        st, _ = store.state(mid)
    host = spec.target_master if st.phase.value == "rolled_back" else spec.source_master
    until = (f" (kept for rollback until {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(st.cleanup_after))})"
             if st.cleanup_after else "")
    return (f"drop the tombstones of {mid} ({st.phase.value}) on {host} now: the old copies of {_what(spec)}"
            f"{until}; after this {mid} can no longer be rolled back")


def abort(config: Config, mid: str) -> str:
    if rebalance_cmd.is_rebalance_id(mid):
        with command.session(config) as (zk, _):
            rec, _ = rec_mod.RecordStore(zk).get(mid)
        running = [m["migration"] for m in rec["moves"] if m["state"] in ("running", "failed")]
        waiting = sum(1 for m in rec["moves"] if m["state"] == "waiting")
        return (f"abort {mid}: stop {len(running)} running moves ({', '.join(running) or 'none'}) and drop their "
                f"copies on their targets, cancel {waiting} waiting moves (moves past their flip finish)")
    spec, phase = _spec(config, mid)
    return (f"abort {mid} ({phase}): drop its copies of {_what(spec)} on {spec.target_master}/"
            f"{spec.target_slave}, remove any cutover gate (triggers, gate table) left on {spec.source_master}/"
            f"{spec.source_slave} and release its shard locks")


def restart_copy(config: Config, mid: str) -> str:
    spec, phase = _spec(config, mid)
    return (f"restart the copy of {mid} ({phase}): drop its copies of {_what(spec)} on {spec.target_master}/"
            f"{spec.target_slave}, forget its copy and catch-up progress and copy again from the start")
