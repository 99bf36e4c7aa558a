"""``migrator rebalance`` and the control of a running rebalance, one plain function each.

:func:`plan_live` measures the fleet and plans; :func:`start` stores the
rebalance record and hands it to the RQ workers; :func:`advance` moves it on
(see :mod:`migrator.ops.rebalance.record`); :func:`pause`, :func:`resume`,
:func:`abort` and :func:`status` act on the whole rebalance. None of them prints.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from migrator.engine import eta
from migrator.engine import plan as plan_mod
from migrator.engine import preflight as preflight_mod
from migrator.engine.migration import MigrationStore, Options, Phase, Spec
from migrator.errors import MigratorError
from migrator.fleet.config import Config
from migrator.fleet.mysql import connect as mysql_connect
from migrator.fleet.shard_map import HostRegistry, ShardMapStore
from migrator.fleet.zk import ZK
from migrator.ops import command, steps
from migrator.ops.batched import sizing as batches
from migrator.ops.rebalance import record as rec_mod
from migrator.ops.rebalance.measure import measure_partitions
from migrator.ops.rebalance.planner import PartitionCost, Plan, RebalanceError, ShardCost, plan_with_partitions
from migrator.ops.rebalance.schedule import Rates, simulate
from migrator.queue.catalog import QueueCatalog

ADVANCE_EVERY_S = 3.0
#: a move claimed this long ago and still not launched was claimed by an advance that died
RELAUNCH_AFTER_S = 60.0
ID_PREFIX = "rb-"


def is_rebalance_id(text: str) -> bool:
    """``text`` names a rebalance (or a batched split's record), not one of its moves or batches, whose ids
    extend it (``rb-...-m000``, ``rb-...-m000-b001``: :func:`migrator.ops.rebalance.record.rebalance_of`)."""
    return text.startswith(ID_PREFIX) and rec_mod.rebalance_of(text) is None


@dataclass
class LivePlan:
    plan: Plan
    costs: list[ShardCost]
    passives: dict[str, str]
    rates: Rates
    rate_source: str
    eta_s: dict[int, float] = field(default_factory=dict)  # by move index
    freeze_ms: dict[int, float] = field(default_factory=dict)
    total_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        out = self.plan.as_dict()
        for i, m in enumerate(out["moves"]):
            m["eta_s"], m["freeze_ms"] = self.eta_s[i], self.freeze_ms[i]
        out["total_s"], out["rate_source"] = self.total_s, self.rate_source
        return out


def _rates(zk: Any) -> tuple[Rates, str]:
    stored = eta.stored_rate(zk)
    if stored and stored.bytes_per_s > 0:
        return Rates(copy_bytes_per_s=stored.bytes_per_s, copy_streams=1), "measured by the last copy"
    return Rates(), "defaults measured by bench.copy and bench.catchup"


def plan_live(config: Config, *, objective: str = "bytes", threshold: float = 0.10, add_pairs: list[str] = (),
              drain: list[str] = (), max_moves_per_pair: int = 1, max_concurrent: int | None = None,
              window_s: float = 5.0, costs: list[ShardCost] | None = None, zk: ZK | None = None) -> LivePlan:
    """Measure every shard on the live fleet (unless ``costs`` gives a recent measurement) and plan the moves."""
    with command.session(config, zk) as (zk, creds):
        smap = ShardMapStore(zk).read()
        hosts = HostRegistry(zk).all()
        if smap.frozen:
            raise RebalanceError(f"shards {smap.frozen} are frozen for a cutover: wait for it to finish")
        busy = [m for m in MigrationStore(zk).list() if _active(zk, m)]
        if busy:
            raise RebalanceError(f"migrations {', '.join(busy)} are under way: let them finish (or abort them) "
                                 "before planning a rebalance")
        spare = {a for a, _ in plan_mod.spare_pairs(hosts, smap)} | {b for _, b in plan_mod.spare_pairs(hosts, smap)}
        for p in add_pairs:
            if p not in hosts:
                raise RebalanceError(f"--add-pair {p}: no such host in the registry; register the pair first "
                                     "(`migrator sandbox add-pair` in a sandbox)")
            if p not in spare:
                raise RebalanceError(f"--add-pair {p}: it is not an empty registered pair (it holds shards, or "
                                     "its partner is missing)")
        passives = {r.master: r.passive for r in smap.ranges}
        passives.update({p: hosts[p].partner for p in add_pairs})
        passives.update({rt.master: rt.passive for rt in smap.routes})
        parts: list[PartitionCost] = []
        if costs is None or len(costs) != smap.num_shards:
            queues = [(q.name, p.index, p.shard, tuple(p.tables or [p.table]))
                      for q in QueueCatalog(zk).all() for p in q.partitions] if objective == "writes" else []
            costs, parts = measure_partitions(smap, hosts, creds, queues, window_s=window_s)
        rates, source = _rates(zk)
    p = plan_with_partitions([(r.lo, r.hi, r.master) for r in smap], costs, parts, objective=objective,
                             threshold=threshold, add_pairs=add_pairs, drain=drain,
                             max_moves_per_pair=max_moves_per_pair, max_concurrent=max_concurrent)
    live = LivePlan(p, costs, passives, rates, source)
    for i, m in enumerate(p.moves):
        live.eta_s[i] = rates.duration_s(m.bytes, m.writes)
        live.freeze_ms[i] = rates.freeze_ms(m.writes)
    live.total_s = simulate(p.moves, max_concurrent or len(p.moves) or 1, rates)
    return live


def _active(zk: Any, migration_id: str) -> bool:
    try:
        st, _ = MigrationStore(zk).state(migration_id)
    except MigratorError:
        return False
    return not st.phase.terminal and st.phase not in (Phase.DONE, Phase.FAILED)


def start(config: Config, live: LivePlan, *, max_concurrent: int | None = None,
          options: Options | None = None, queue: str | None = None, postpone_cutover: bool = False,
          zk: ZK | None = None, rid: str | None = None) -> str:
    """Store the rebalance record, start the first moves and hand it to the RQ workers. Each move
    runs on its source pair's queue and the advances on the general queue, unless ``queue`` names
    one queue for all of them. A move of more tables than one fence takes runs as batches
    (:mod:`migrator.ops.batched.sizing`)."""
    if not live.plan.moves:
        raise RebalanceError("nothing to move: every pair is within the threshold")
    planned = [{"source": m.source, "source_slave": live.passives[m.source], "target": m.target,
                "target_slave": live.passives[m.target], "runs": [list(r) for r in m.runs], "bytes": m.bytes,
                "rows": m.rows, "writes": m.writes, "wave": m.wave, "eta_s": live.eta_s[i],
                **({"queue": m.queue, "partition": m.partition, "partition_tables": list(m.tables)}
                   if m.queue else {})}
               for i, m in enumerate(live.plan.moves)]
    return create(config, planned, kind="rebalance", options=options, max_concurrent=max_concurrent, queue=queue,
                  eta_s=live.total_s, objective=live.plan.objective, threshold=live.plan.threshold,
                  postpone_cutover=postpone_cutover, zk=zk, rid=rid)


def create(config: Config, planned: list[dict[str, Any]], *, kind: str, options: Options | None = None,
           max_concurrent: int | None = None, queue: str | None = None, paused: bool = False,
           eta_s: float | None = None, postpone_cutover: bool = False, zk: ZK | None = None,
           rid: str | None = None, **extra: Any) -> str:
    """Store a record of ``planned`` moves (each cut into batches when it is too big for one
    fence) and, unless ``paused``, start it on the RQ workers. With ``postpone_cutover`` every move
    holds its cutover once caught up (:func:`postpone` releases them). ``zk``: a session the caller holds.
    ``rid``: the record's id (:func:`new_id`), given by a caller that may run this again after ZooKeeper went
    away: a record of that id already stored is this call's own, and it goes on from there."""
    opts = options or Options()
    rid = rid or new_id()
    with command.session(config, zk) as (zk, creds):
        store = rec_mod.RecordStore(zk)
        try:
            store.get(rid)
        except rec_mod.RebalanceNotFound:
            counts = count_move_tables(zk, creds, planned)
            moves, batching = batches.expand(rid, planned, counts, opts.freeze_budget_ms, opts.fence)
            rec = {"id": rid, "kind": kind, "phase": "running", "paused": paused, "created_at": time.time(),
                   "max_concurrent": max_concurrent, "options": opts.model_dump(), "moves": moves, "eta_s": eta_s,
                   "max_running": 0, "chain": None, "queue": queue, "batching": batching,
                   "postpone_cutover": postpone_cutover, **extra}
            store.create(rec)
        if not paused:
            _set_going(config, rid, zk)
    return rid


def _set_going(config: Config, rid: str, zk: ZK) -> None:
    """Start what a stored record may start now and hand it to the RQ chain of advances (again, for a record
    taken up after the run that stored it ended: both steps are safe to repeat)."""
    advance(config, rid, zk=zk)
    enqueue_advance(config, rid, zk=zk)


def new_id() -> str:
    """A new rebalance id (``rb-<date>-<time>-<hex>``)."""
    return f"{ID_PREFIX}{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"


def count_move_tables(zk: Any, creds: Any, planned: list[dict[str, Any]]) -> dict[int, tuple[int, int]]:
    """``{shard: (tables, bytes)}`` for every shard of ``planned``, read on each move's source master."""
    hosts = HostRegistry(zk).all()
    counts: dict[int, tuple[int, int]] = {}
    shard_moves = [p for p in planned if not rec_mod.Move.parse(p).queue]  # a partition move counts its own tables
    for src in sorted({p["source"] for p in shard_moves}):
        shards = [s for p in shard_moves if p["source"] == src for s in batches.shards_of(p["runs"])]
        with mysql_connect(hosts[src], creds) as conn:
            counts.update(batches.count_tables(conn, shards))
    return counts


def start_split(config: Config, spec: Spec, *, paused: bool = False, queue: str | None = None,
                postpone_cutover: bool = False, zk: ZK | None = None) -> str:
    """Run a planned (not stored) split or move of more tables than one fence takes as batches.

    The whole move is preflighted first, so a table a later batch could not move
    refuses the split before any batch starts (each batch checks again at its start). The record of the same
    move that an earlier run stored and may not have got going (ZooKeeper went away, the process was
    ended) is taken up instead of a second one: started and handed to the RQ chain again."""
    with command.session(config, zk) as (zk, creds):
        runs = [list(r) for r in spec.ranges()]
        earlier = rec_mod.find_split(zk, spec.source_master, spec.target_master, runs)
        if earlier is not None:
            if not paused and rec_mod.Rebalance.parse(earlier).paused:
                resume(config, earlier["id"])
            elif not paused:
                _set_going(config, earlier["id"], zk)
            return str(earlier["id"])
        checked = preflight_mod.run(zk, spec, creds)
        if not checked.ok:
            raise RebalanceError("preflight of the whole move failed, nothing was started:\n"
                                 + "\n".join(c.line() for c in checked.failures)
                                 + "\nfix what it names, then run the split again")
        planned = [{"source": spec.source_master, "source_slave": spec.source_passive,
                    "target": spec.target_master, "target_slave": spec.target_passive, "runs": runs, "bytes": 0,
                    "rows": 0, "writes": 0.0, "wave": 0, "eta_s": None}]
        return create(config, planned, kind="split", options=spec.options, max_concurrent=1, queue=queue,
                      paused=paused, postpone_cutover=postpone_cutover, zk=zk)


def advance(config: Config, rid: str, *, zk: ZK | None = None) -> dict[str, Any]:
    """One step: mark finished moves, start the moves that may start now. Safe to run twice at once, and
    again after it was ended anywhere (a move it claimed and did not launch is launched by a later one)."""
    with command.session(config, zk) as (zk, _):
        store = rec_mod.RecordStore(zk)
        claimed: list[dict[str, Any]] = []

        def change(rec: dict[str, Any]) -> None:
            claimed.clear()
            rec_mod.refresh(zk, rec)  # lists the batches a batched move handed its shards to
            for m in rec_mod.startable(rec):
                m["state"], m["started_at"] = "running", time.time()
                claimed.append(m)
            rec["max_running"] = max(rec_mod.Rebalance.parse(rec).max_running,
                                     sum(1 for m in rec["moves"] if m["state"] == "running"))
            rec_mod.finish_phase(rec)

        rec = store.update(rid, change)
        # launch what this step claimed, and what a step that crashed claimed but never launched (after
        # RELAUNCH_AFTER_S: an advance running at the same time as this one may be launching it right now)
        to_launch, refused = [], {}
        now = time.time()
        for m in rec["moves"]:
            stale = now - (rec_mod.Move.parse(m).started_at or 0) > RELAUNCH_AFTER_S
            if m["state"] == "running" and (m in claimed or stale and _unlaunched(zk, m["migration"])):
                try:
                    if rec_mod.start_move(zk, rec, m):
                        to_launch.append(m["migration"])
                except MigratorError as exc:  # shards busy, the map moved on, a pair gone: the move stops
                    refused[m["index"]] = str(exc)
        if refused:
            def fail(r: dict[str, Any]) -> None:
                for m in r["moves"]:
                    if m["index"] in refused:
                        m["state"], m["error"] = "failed", refused[m["index"]]
                rec_mod.finish_phase(r)

            rec = store.update(rid, fail)
        for migration_id in to_launch:
            command.launch(config, migration_id, queue=rec_mod.Rebalance.parse(rec).queue, zk=zk)
    return rec_mod.summary(rec)


def _unlaunched(zk: Any, migration_id: str) -> bool:
    try:
        st, _ = MigrationStore(zk).state(migration_id)
    except MigratorError:
        return True
    return st.phase == Phase.PLANNED and not st.autopilot


def enqueue_advance(config: Config, rid: str, *, delay: float = 0.0, zk: ZK | None = None) -> str:
    """Queue the next advance of ``rid`` (the job re-queues itself while the rebalance runs);
    the record names the one chain of advances that counts."""
    jid = steps.job_id("rebalance", rid)
    with command.session(config, zk) as (zk, _):
        rec = rec_mod.RecordStore(zk).update(rid, lambda r: r.__setitem__("chain", jid))
    steps.enqueue_rebalance_advance(command._redis(config), rid, jid, str(config.path) if config.path else None,
                                    delay=delay, queue=rec_mod.Rebalance.parse(rec).queue or steps.QUEUE)
    return jid


def chain_of(config: Config, rid: str, *, zk: ZK | None = None) -> str | None:
    with command.session(config, zk) as (zk, _):
        rec, _ = rec_mod.RecordStore(zk).get(rid)
    return rec_mod.Rebalance.parse(rec).chain


# -- control ------------------------------------------------------------------------------------

def _running_migrations(config: Config, rid: str, *, with_failed: bool = False) -> list[str]:
    states = ("running", "failed") if with_failed else ("running",)
    with command.session(config) as (zk, _):
        rec, _ = rec_mod.RecordStore(zk).get(rid)
    return [m["migration"] for m in rec["moves"] if m["state"] in states]


def pause(config: Config, rid: str) -> dict[str, Any]:
    """No new move starts; the running ones pause (copy workers stop between chunks)."""
    with command.session(config) as (zk, _):
        rec_mod.RecordStore(zk).update(rid, lambda r: r.__setitem__("paused", True))
    paused = []
    for migration_id in _running_migrations(config, rid):
        try:
            command.pause(config, migration_id)
            paused.append(migration_id)
        except MigratorError:
            pass  # not yet stored (started by the next advance) or already finished
    return {"rebalance": rid, "paused": True, "migrations": paused}


def resume(config: Config, rid: str) -> dict[str, Any]:
    """Resume the paused moves (from their records) and the schedule."""
    def change(r: dict[str, Any]) -> None:
        r["paused"] = False
        if r["phase"] == "stopped":
            r["phase"] = "running"

    with command.session(config) as (zk, _):
        rec = rec_mod.RecordStore(zk).update(rid, change)
    if rec["phase"] != "running":
        raise MigratorError(f"rebalance {rid} is {rec['phase']}: nothing to resume")
    resumed = []
    for migration_id in _running_migrations(config, rid, with_failed=True):
        try:
            command.resume(config, migration_id, queue=rec_mod.Rebalance.parse(rec).queue)
            resumed.append(migration_id)
        except MigratorError:
            pass  # launched by the advance below, or settled by hand (a cutover)
    out = advance(config, rid)
    enqueue_advance(config, rid, delay=ADVANCE_EVERY_S)
    return {"rebalance": rid, "resumed": resumed, **out}


def postpone(config: Config, rid: str, *, on: bool = True) -> dict[str, Any]:
    """Hold (or release) the cutover of every running move, and of every move started later."""
    with command.session(config) as (zk, _):
        rec_mod.RecordStore(zk).update(rid, lambda r: r.__setitem__("postpone_cutover", on))
    changed = []
    for migration_id in _running_migrations(config, rid, with_failed=True):
        try:
            command.postpone(config, migration_id, on=on)
            changed.append(migration_id)
        except MigratorError:
            pass  # not yet stored: start_move applies the record's setting
    return {"rebalance": rid, "postpone_cutover": on, "migrations": changed}


def set_options(config: Config, rid: str, **changes: Any) -> dict[str, Any]:
    """Change the limits of every running move and of the moves started later (their options come from
    the record)."""
    given = {k: v for k, v in changes.items() if v is not None}

    def change(r: dict[str, Any]) -> None:
        r["options"] = Options(**{**rec_mod.Rebalance.parse(r).options, **given}).model_dump()

    with command.session(config) as (zk, _):
        rec = rec_mod.RecordStore(zk).update(rid, change)
    changed = []
    for migration_id in _running_migrations(config, rid, with_failed=True):
        try:
            command.set_options(config, migration_id, **given)
            changed.append(migration_id)
        except MigratorError:
            pass  # not yet stored: it starts with the record's options
    return {"rebalance": rid, "options": rec["options"], "migrations": changed}


def abort(config: Config, rid: str) -> dict[str, Any]:
    """Stop the rebalance: waiting moves never start, running ones are aborted (those already
    past their flip finish as they are)."""
    with command.session(config) as (zk, _):
        rec = rec_mod.RecordStore(zk).update(rid, lambda r: r.update(phase="aborted"))
    aborted, kept = [], []
    for migration_id in [m["migration"] for m in rec["moves"] if m["state"] in ("running", "failed")]:
        try:
            out = command.abort(config, migration_id)
            if out["was"] != Phase.ABORTED.value:
                aborted.append(migration_id)
        except MigratorError:
            kept.append(migration_id)  # past its flip (it finishes), or never stored

    def mark(r: dict[str, Any]) -> None:
        for m in r["moves"]:
            if m["state"] == "waiting":
                m["state"] = "cancelled"
            elif m["migration"] in aborted:
                m["state"] = "failed"
                m["error"] = "aborted"

    with command.session(config) as (zk, _):
        rec_mod.RecordStore(zk).update(rid, mark)
    return {"rebalance": rid, "aborted": aborted, "left_running": kept}


def to_roll_back(config: Config, rid: str) -> list[str]:
    """The migrations a rollback of ``rid`` runs, last finished first: its finished moves (the batches
    of a split) whose migration is still done (not rolled back or cleaned up). Refused while a move
    runs: stop the rebalance first."""
    with command.session(config) as (zk, _):
        rec, _ = rec_mod.RecordStore(zk).get(rid)
        if any(m["state"] == "running" for m in rec["moves"]):
            raise RebalanceError(f"{rid} still has moves running: `migrator abort {rid}` first (moves past their "
                                 "flip finish), then roll it back")
        store = MigrationStore(zk)
        done = sorted((m for m in rec["moves"] if m["state"] == "done"),
                      key=lambda m: rec_mod.Move.parse(m).finished_at or 0, reverse=True)
        out = [m["migration"] for m in done if store.state(m["migration"])[0].phase == Phase.DONE]
    if not out:
        raise RebalanceError(f"{rid} has no finished move left to roll back (rolled back or cleaned up already)")
    return out


def status(config: Config, rid: str | None = None) -> dict[str, Any]:
    """Every rebalance's summary, or one rebalance with its moves."""
    with command.session(config) as (zk, _):
        store = rec_mod.RecordStore(zk)
        if rid is None:
            return {"rebalances": [rec_mod.summary(store.get(r)[0]) for r in store.list()]}
        rec, _ = store.get(rid)
        return {**rec_mod.summary(rec), "record": rec}
