"""The rebalance record in ZooKeeper and the step that advances it.

``<root>/rebalances/<id>`` holds the whole plan and where each move is::

    {"id": "rb-...", "phase": "running" | "done" | "aborted" | "stopped",
     "paused": false, "max_concurrent": 4, "objective": "bytes", ...,
     "moves": [{"index": 0, "source": "MySQL001A", "source_slave": "MySQL001B",
                "target": ..., "target_slave": ..., "runs": [[lo, hi], ...], "bytes": ...,
                "migration": "rb-...-m000", "state": "waiting" | "running" | "done" | "failed",
                "error": null}, ...]}

Each move is a normal migration (``plan_move`` + ``launch``: the RQ pipeline)
whose id is derived from the rebalance's id and the move's index, so
:func:`advance` can be run again after any crash and finds what it already
started. :func:`advance` reads every running move's migration, marks the
finished ones, and starts waiting moves while neither of their pairs is busy
(one active migration per pair, as source or target) and fewer than
``max_concurrent`` run. It is called by the RQ job ``jobs.rebalance.advance``
(every few seconds, through the worker's scheduler) and by the CLI while it
follows a rebalance; both are safe at once (every write is a compare-and-set).
"""

from __future__ import annotations

import json
import time
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError
from pydantic import Field

from migrator.engine import plan as plan_mod
from migrator.engine.migration import MigrationNotFound, MigrationStore, Node, Options, Phase, ShardsBusy
from migrator.engine.records import FlipNode, Number, Record, Stopped
from migrator.errors import ExitCode, MigratorError
from migrator.fleet.zk import ZK

REBALANCES = "rebalances"
#: migration phases that end a move well / badly
DONE_PHASES = (Phase.DONE, Phase.CLEANED)
FAILED_PHASES = (Phase.FAILED, Phase.ABORTED, Phase.ROLLED_BACK)


class Move(Record):
    """One move of a rebalance record (or one batch of a batched move: ``batch_of``)."""

    index: int = 0
    group: int | None = None
    batch_of: int | None = None
    source: str = ""
    target: str = ""
    migration: str = ""
    state: str = "waiting"
    error: str | None = None
    exit_code: int | None = None
    tables: int = 0
    bytes: Number = 0
    batched: bool = False
    queue: str | None = None
    partition: Any = None
    freeze_ms: Number | None = None
    steps_ms: dict[str, Any] = Field(default_factory=dict)
    started_at: Number | None = None
    finished_at: Number | None = None


class Batching(Record):
    """A rebalance's ``batching`` entry: the freeze budget and the tables of each shard."""

    shard_tables: dict[str, int] = Field(default_factory=dict)


class Rebalance(Record):
    """The rebalance record (see the module's docstring). The functions here change the record as
    JSON data; they read it through this model."""

    id: str = ""
    phase: str = "running"
    kind: str = "rebalance"
    paused: bool = False
    postpone_cutover: bool = False
    max_concurrent: int | None = None
    max_running: int = 0
    eta_s: Number | None = None
    created_at: Number | None = None
    objective: str | None = None
    queue: str | None = None
    chain: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)
    batching: Batching | None = None
    moves: list[Move] = Field(default_factory=list)


class RebalanceNotFound(MigratorError):
    component = "rebalance"
    exit_code = 2


class RecordStore:
    def __init__(self, zk: ZK):
        self.zk = zk
        self.base = zk.path(REBALANCES)

    def create(self, rec: dict[str, Any]) -> None:
        self.zk.ensure(self.base)
        try:
            self.zk.client.create(f"{self.base}/{rec['id']}", json.dumps(rec).encode(), acl=self.zk.protected_acl())
        except NodeExistsError:
            raise MigratorError(f"rebalance {rec['id']} already exists") from None

    def get(self, rid: str) -> tuple[dict[str, Any], int]:
        try:
            data, stat = self.zk.client.get(f"{self.base}/{rid}")
        except NoNodeError:
            raise RebalanceNotFound(f"no rebalance {rid!r} (see `migrator status`)") from None
        return json.loads(data), stat.version

    def put(self, rec: dict[str, Any], version: int) -> None:
        self.zk.client.set(f"{self.base}/{rec['id']}", json.dumps(rec).encode(), version=version)

    def list(self) -> list[str]:
        try:
            return sorted(self.zk.client.get_children(self.base))
        except NoNodeError:
            return []

    def update(self, rid: str, change: Any, attempts: int = 20) -> dict[str, Any]:
        for _ in range(attempts):
            rec, version = self.get(rid)
            change(rec)
            try:
                self.put(rec, version)
                return rec
            except BadVersionError:
                continue
        raise MigratorError(f"rebalance {rid}: the record kept changing under us; try again")


def migration_id(rid: str, index: int) -> str:
    return f"{rid}-m{index:03d}"


def rebalance_of(migration_id: str) -> str | None:
    """The rebalance (or batched split) a migration is a move or a batch of (``rb-<date>-<time>-<hex>``, the
    first four parts of its id: :func:`migration_id`, :func:`migrator.ops.batched.handover.batch_id`); None for a
    migration of its own."""
    parts = migration_id.split("-")
    return "-".join(parts[:4]) if parts[0] == "rb" and len(parts) > 4 else None


def find_split(zk: ZK, source: str, target: str, runs: list[list[int]]) -> dict[str, Any] | None:
    """The batched split record (``kind`` split) still running or paused whose one planned move is this one (same
    source, target and shard runs): what an earlier ``split|move --yes`` of the same move stored before something
    (ZooKeeper going away) ended it. The newest if there are several."""
    store = RecordStore(zk)
    for rid in reversed(store.list()):
        try:
            rec, _ = store.get(rid)
        except RebalanceNotFound:
            continue
        lead = next((m for m in rec.get("moves", []) if m.get("index") == 0), None)
        if (rec.get("kind") == "split" and rec.get("phase") == "running" and lead is not None
                and (lead["source"], lead["target"], lead["runs"]) == (source, target, runs)):
            return rec
    return None


def busy_pairs(rec: dict[str, Any]) -> set[str]:
    """Pairs in a running move, or in a failed one (left for an operator to look at)."""
    return {p for m in rec["moves"] if m["state"] in ("running", "failed") for p in (m["source"], m["target"])}


def refresh(zk: ZK, rec: dict[str, Any]) -> None:
    """Mark running moves whose migration finished (done or failed), and failed moves that an
    operator resumed (``migrator resume MIGRATION``) as running again. A running move whose
    migration is not stored yet was claimed by an advance that has not stored it (or crashed
    first): :func:`start_move` stores it."""
    store = MigrationStore(zk)
    _list_batches(store, rec)
    for m in rec["moves"]:
        if m["state"] not in ("running", "failed"):
            continue
        try:
            st, _ = store.state(m["migration"])
        except MigrationNotFound:
            continue
        if st.phase in DONE_PHASES:
            m["state"], m["error"] = "done", None
            m["freeze_ms"] = st.freeze_ms
            # the batch sizes adapt to these
            m["steps_ms"] = FlipNode.parse(store.get_progress(m["migration"], Node.CUTOVER)[0]).steps_ms
            m["finished_at"] = time.time()
        elif st.phase in FAILED_PHASES or st.stopped:
            m["state"] = "failed"
            stopped = Stopped.parse(st.stopped)
            m["error"] = stopped.reason or st.error or f"migration ended {st.phase.value}"
            m["exit_code"] = stopped.exit_code  # the stop's cause, as the CLI exits with it
        elif m["state"] == "failed":
            m["state"], m["error"] = "running", None
    if rec["phase"] == "stopped" and any(m["state"] == "running" for m in rec["moves"]):
        rec["phase"] = "running"


def _list_batches(store: MigrationStore, rec: dict[str, Any]) -> None:
    """Add the batches a batched move's migration handed its shards to since the last look, as running
    moves of its group (``batch_of``: the batched move's index), in the order they were handed over, each
    with the tables the hand-over counted (the batched migration's ``batch_tables``)."""
    known = {m["migration"] for m in rec["moves"]}
    for lead in [m for m in rec["moves"] if Move.parse(m).batched and m["state"] in ("running", "failed")]:
        try:
            st, _ = store.state(lead["migration"])
        except MigrationNotFound:
            continue
        for bid in st.batches:
            if bid in known:
                continue
            spec = store.spec(bid)
            index = 1 + max(m["index"] for m in rec["moves"])
            rec["moves"].append({
                **{k: lead[k] for k in ("source", "source_slave", "target", "target_slave", "wave") if k in lead},
                "index": index, "group": _group(lead), "batch_of": lead["index"],
                "runs": [list(r) for r in spec.ranges()], "tables": st.batch_tables.get(bid, 0),
                "bytes": 0, "rows": 0, "writes": 0.0, "eta_s": None, "migration": bid, "state": "running",
                "started_at": spec.created_at, "error": None})
            known.add(bid)


def _group(m: dict[str, Any]) -> Any:
    """A move's group: its own index unless it names one."""
    return m["group"] if "group" in m else m["index"]


def startable(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """Waiting moves that may start now, in plan order."""
    r = Rebalance.parse(rec)
    if r.phase != "running" or r.paused:
        return []
    busy = busy_pairs(rec)
    running = sum(1 for m in rec["moves"] if m["state"] == "running")
    cap = r.max_concurrent or len(rec["moves"])
    out = []
    for m in rec["moves"]:
        if running + len(out) >= cap:
            break
        if m["state"] != "waiting" or m["source"] in busy or m["target"] in busy:
            continue
        out.append(m)
        busy.update((m["source"], m["target"]))
    return out


def start_move(zk: ZK, rec: dict[str, Any], m: dict[str, Any]) -> bool:
    """Store the move's migration (idempotent: a crash after this finds it); True when it is new or
    still has to be launched."""
    move_id = migration_id(rec["id"], m["index"])
    store = MigrationStore(zk)
    try:
        st, _ = store.state(move_id)
        return st.phase == Phase.PLANNED and not st.autopilot
    except MigrationNotFound:
        pass
    shards = [s for lo, hi in m["runs"] for s in range(lo, hi + 1)]
    r, move = Rebalance.parse(rec), Move.parse(m)
    opts = Options(**r.options)
    if move.queue:  # one queue partition, on its own route
        spec = plan_mod.plan_move_partition(zk, move.queue, int(m["partition"]), move.target,
                                            options=opts, migration_id=move_id)
    else:
        spec = plan_mod.plan_move(zk, shards, move.target, options=opts, migration_id=move_id)
        if move.batched:  # copied and tailed once, cut over in batches (migrator.ops.batched)
            spec = spec.model_copy(update={"batched": True})
    try:
        plan_mod.store(zk, spec)
    except ShardsBusy:
        if set(store.holders(shards).values()) == {move_id}:
            return False  # another advance stored it a moment ago: that one launches it
        raise
    if r.postpone_cutover:
        store.update(move_id, lambda st: setattr(st, "postpone_cutover", True) or st)
    return True


def finish_phase(rec: dict[str, Any]) -> None:
    """``done`` once every move is; ``stopped`` once nothing runs or can start and a move failed. A batch of a
    batched move that failed (its pipeline stopped: it drives its batches) does not run by itself: it waits
    for that move's ``migrator resume``, so it does not keep the rebalance (and the split's follower) going."""
    states = [m["state"] for m in rec["moves"]]
    if rec["phase"] != "running":
        return
    stopped_leads = {m["index"] for m in rec["moves"] if m.get("batched") and m["state"] == "failed"}
    live = [m["state"] for m in rec["moves"] if m.get("batch_of") not in stopped_leads or m["state"] != "running"]
    if all(s == "done" for s in states):
        rec["phase"] = "done"
        rec["finished_at"] = time.time()
    elif "running" not in live and not startable(rec) and "failed" in states:
        rec["phase"] = "stopped"


def summary(rec: dict[str, Any]) -> dict[str, Any]:
    r = Rebalance.parse(rec)
    moves = r.moves
    count = {s: sum(1 for m in moves if m.state == s) for s in ("done", "running", "waiting", "failed")}
    return {"id": r.id, "phase": r.phase, "paused": r.paused, **count,
            "moves": len(moves), "bytes": sum(m.bytes for m in moves),
            "bytes_done": sum(m.bytes for m in moves if m.state == "done"),
            "max_running": r.max_running, "eta_s": r.eta_s,
            "created_at": r.created_at, "kind": r.kind,
            "tables": sum(m.tables for m in moves if m.batch_of is None),
            "batches": sum(1 for m in moves if m.batch_of is not None),
            "max_freeze_ms": max((m.freeze_ms or 0 for m in moves if m.state == "done"), default=None),
            # a command that follows it exits with the code of the first stopped move's cause (else REFUSED)
            "exit_code": next((m.exit_code for m in moves if m.state == "failed" and m.exit_code),
                              int(ExitCode.REFUSED))}
