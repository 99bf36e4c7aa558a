"""The migration commands, one plain function each (alembic's ``command.py``).

The typer CLI (:mod:`migrator.cli.migrate`), the RQ jobs (:mod:`jobs`) and
playbooks all call these functions; none of them prints. Each takes the
:class:`~migrator.fleet.config.Config` first, opens what it needs (ZooKeeper,
MySQL, Redis) and closes it before returning. Errors are
:class:`~migrator.errors.MigratorError` with a message that says what to do.

Phase functions of later phases (catch-up, verify, cutover) are added here
next to these, in the same shape.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import pymysql

from migrator.engine import catch_up, copy_groups
from migrator.engine import cleanup as cleanup_mod
from migrator.engine import copy as copy_mod
from migrator.engine import cutover as cutover_mod
from migrator.engine import plan as plan_mod
from migrator.engine import preflight as preflight_mod
from migrator.engine import rollback as rollback_mod
from migrator.engine.cutover.reconcile import NO_GATES_LEFT
from migrator.engine.cutover.reconcile import settle as settle_cutover
from migrator.engine.mdl import LockBusy
from migrator.engine.migration import MigrationStore, Node, Options, Phase, ShardsBusy, Spec, State
from migrator.engine.records import AttemptsNode, CatchupNode, TableProgress, VerifyNode
from migrator.engine.verify.run import verify_migration
from migrator.errors import MigratorError, MySQLUnavailable, describe
from migrator.fleet import config as config_mod
from migrator.fleet import zk as zk_mod
from migrator.fleet.config import Config, Credentials
from migrator.fleet.zk import ZK
from migrator.ops import steps
from migrator.ops.batched import sizing as batches_mod
from migrator.ops.rebalance import record as rec_mod

#: phases after which abort no longer applies (the map flipped: roll back instead)
NOT_ABORTABLE = (Phase.CUTOVER, Phase.DONE, Phase.ROLLING_BACK, Phase.ROLLED_BACK, Phase.CLEANED)


class CommandError(MigratorError):
    component = "command"


def load_config(path: str | None = None) -> Config:
    return config_mod.load(path)


@contextmanager
def session(config: Config, zk: ZK | None = None) -> Iterator[tuple[ZK, Credentials]]:
    """A ZooKeeper connection and the credentials, closed on exit; with ``zk``, that session (one the caller
    holds, such as a follower's :class:`~migrator.fleet.zk.PatientSession`), left open."""
    if zk is not None:
        yield zk, zk.credentials or config_mod.load_credentials(config)
        return
    creds = config_mod.load_credentials(config)
    own = zk_mod.connect(config, creds)
    try:
        yield own, creds
    finally:
        own.close()


def update_quietly(config: Config, migration_id: str, change: Callable[[Any], Any]) -> None:
    """Change the migration's record, best effort: for a job that is already failing with its own error
    (which must not be hidden by a ZooKeeper problem here)."""
    try:
        with session(config) as (zk, _):
            MigrationStore(zk).update(migration_id, change)
    except Exception:  # noqa: BLE001 - never hide the original error
        pass


def spec_of(zk: ZK, migration_id: str) -> Spec:
    return MigrationStore(zk).spec(migration_id)


def _redis(config: Config) -> Any:
    from migrator.fleet import redis_client

    return redis_client.connect(config)


def _config_path(config: Config) -> str | None:
    return str(config.path) if config.path else None


# -- plan ------------------------------------------------------------------------------------------

@dataclass
class PlanResult:
    spec: Spec
    stored: bool
    estimate: plan_mod.Estimate | None = None
    #: when the move is too big for one fence: the batches its first size cuts (``runs``, ``tables``, ``bytes``);
    #: it runs as one batched migration that cuts over in batches (:mod:`migrator.ops.batched`), stored and
    #: followed by :func:`migrator.ops.rebalance.command.start_split` (not by this plan)
    batches: list[dict[str, Any]] | None = None
    #: the phase of the migration an earlier run of the same command stored (and maybe launched) before it was
    #: ended, which this plan takes up instead of refusing on its shard locks (:func:`_earlier_run`)
    adopted: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.spec.id, "stored": self.stored, "spec": self.spec.model_dump(mode="json")}
        if self.estimate is not None:
            out["estimate"] = self.estimate.as_dict()
        if self.batches is not None:
            out["batches"] = self.batches
        if self.adopted is not None:
            out["adopted"] = self.adopted
        return out


@dataclass(frozen=True)
class Earlier:
    """What an earlier run of the same ``split|move|move-partition --yes`` left holding a plan's shards
    (:func:`_earlier_run`): the migration it stored and its phase, or the batched split record ``rebalance``."""

    spec: Spec
    phase: str | None = None
    rebalance: str | None = None


def _earlier_run(zk: ZK, spec: Spec, holders: dict[int, str]) -> Earlier | None:
    """What an earlier run of the same command left holding ``spec``'s shards: the one migration holding them all,
    if it moves the same thing the same way; or the batched split record of the same move whose migrations hold
    them. None when something else holds them (reads only).

    A migration still ``planned`` was stored and not started (the run ended between the two, or ``--no-start``): it
    is taken up with the options given now, and started. One past it is taken up only if the pipeline drives it
    (``autopilot``) and it has not ended: it is followed, not started twice. A split record is taken up by
    :func:`migrator.ops.rebalance.command.start_split`."""
    if set(holders) != set(spec.shards):
        return None
    rids = {rec_mod.rebalance_of(m) for m in holders.values()}
    if len(rids) == 1 and None not in rids:
        rid = rids.pop()
        rec = rec_mod.find_split(zk, spec.source_master, spec.target_master, [list(r) for r in spec.ranges()])
        return Earlier(spec, rebalance=rid) if rec is not None and rec["id"] == rid else None
    if len(set(holders.values())) != 1:
        return None
    holder = next(iter(holders.values()))
    store = MigrationStore(zk)
    try:
        stored = store.spec(holder)
        st, _ = store.state(holder)
    except MigratorError:
        return None
    if not stored.same_move(spec):
        return None
    if st.phase == Phase.PLANNED or (st.autopilot and not st.phase.terminal
                                     and st.phase not in (Phase.FAILED, Phase.DONE)):
        return Earlier(stored, phase=st.phase.value)
    return None


def _finish_plan(zk: ZK, creds: Credentials, spec: Spec, dry_run: bool, batches_ok: bool = False) -> PlanResult:
    holders = MigrationStore(zk).holders(spec.shards)
    if holders:  # a clear message before trying (create() re-checks atomically); a dry run says it too
        earlier = _earlier_run(zk, spec, holders)
        if earlier is not None and not dry_run:
            return _take_up(zk, creds, spec, earlier)
        desc = ", ".join(f"shard {s} by {m}" for s, m in sorted(holders.items()))
        if earlier is not None:
            raise ShardsBusy(f"shards already moving: {desc}, the same move, stored by an earlier run; the same "
                             "command with --yes takes it up (or abort it with `migrator abort ID`)")
        raise ShardsBusy(f"shards already moving: {desc}; wait for it, or abort it with `migrator abort ID`")
    batches = batches_mod.plan_batches(zk, creds, spec)
    if dry_run:
        return PlanResult(spec, stored=False, estimate=plan_mod.estimate(zk, spec, creds), batches=batches)
    if batches is not None:
        if not batches_ok:
            tables = sum(b["tables"] for b in batches)
            raise CommandError(f"this move holds {tables} tables, more than one fence takes "
                               f"({batches_mod.MAX_TABLES}): it is copied once and cut over in about {len(batches)} "
                               "batches; run it with `migrator split|move ... --yes` (or plan fewer shards, or "
                               "give fence=gate for one gated migration)")
        return PlanResult(spec, stored=False, batches=batches)  # the caller stores the batched record
    plan_mod.store(zk, spec)
    return PlanResult(spec, stored=True)


def _take_up(zk: ZK, creds: Credentials, spec: Spec, earlier: Earlier) -> PlanResult:
    """The plan of an earlier run of the same command, as this run goes on with it (:func:`_earlier_run`)."""
    if earlier.rebalance is not None:  # unstored, with its batches: start_split finds the record and takes it up
        return PlanResult(spec, stored=False, batches=batches_mod.plan_batches(zk, creds, spec) or [])
    stored = earlier.spec
    if earlier.phase == Phase.PLANNED.value:
        if stored.options != spec.options:  # nothing ran yet: the options of this run apply
            stored = stored.model_copy(update={"options": spec.options})
            MigrationStore(zk).replace_spec(stored)
        plan_mod.hold_maintenance_pause(zk, stored)  # the earlier run may have ended before it took them all
    return PlanResult(stored, stored=True, adopted=earlier.phase)


def plan_split(config: Config, source: str, target: str | None = None, *, dry_run: bool = False,
               options: Options | None = None, batches_ok: bool = False, zk: ZK | None = None) -> PlanResult:
    """Move the upper half of every range on ``source`` to ``target`` (or a spare pair).

    A split of more tables than one fence takes comes back unstored with its
    ``batches`` when ``batches_ok`` (the caller runs them:
    :func:`migrator.ops.rebalance.command.start_split`), else it is refused. The same split stored by an
    earlier run that did not get to start it (or is running it) is taken up (``adopted``), not refused.
    ``zk``: a session the caller holds (else one is opened), as for every command function that takes it."""
    with session(config, zk) as (zk, creds):
        spec = plan_mod.plan_split(zk, source, target, options=options)
        return _finish_plan(zk, creds, spec, dry_run, batches_ok)


def plan_move(config: Config, shards: str | list[int], target: str, *, dry_run: bool = False,
              options: Options | None = None, batches_ok: bool = False, zk: ZK | None = None) -> PlanResult:
    """Move ``shards`` ("4-7" or a list) to the pair of ``target`` (batches and earlier runs as in
    :func:`plan_split`)."""
    shard_list = plan_mod.parse_shards(shards) if isinstance(shards, str) else sorted(shards)
    with session(config, zk) as (zk, creds):
        spec = plan_mod.plan_move(zk, shard_list, target, options=options)
        return _finish_plan(zk, creds, spec, dry_run, batches_ok)


def plan_move_partition(config: Config, queue: str, partition: int, target: str, *, dry_run: bool = False,
                        options: Options | None = None, zk: ZK | None = None) -> PlanResult:
    """Move one queue partition's jobs table to the pair of ``target`` (earlier runs as in :func:`plan_split`)."""
    with session(config, zk) as (zk, creds):
        spec = plan_mod.plan_move_partition(zk, queue, partition, target, options=options)
        return _finish_plan(zk, creds, spec, dry_run)


# -- preflight -----------------------------------------------------------------------------------------

def preflight(config: Config, migration_id: str) -> preflight_mod.PreflightResult:
    """Run every preflight check; the result lists failures and warnings."""
    with session(config) as (zk, creds):
        store = MigrationStore(zk)
        spec = store.spec(migration_id)
        st, _ = store.state(migration_id)
        return preflight_mod.run(zk, spec, creds, phase=st.phase)


# -- copy ------------------------------------------------------------------------------------------------

def start_copy(config: Config, migration_id: str, *, queue: str | None = None, slice_s: float | None = None,
               zk: ZK | None = None) -> str:
    """Enqueue the copy (preflight, schema, one job per table) on the migration's queue (its source
    pair's) unless ``queue`` names another; returns the RQ job id."""
    with session(config, zk) as (zk, _):
        st, _ = MigrationStore(zk).state(migration_id)
        if st.phase not in (Phase.PLANNED, Phase.PREFLIGHT, Phase.COPYING):
            raise CommandError(f"migration {migration_id} is in phase {st.phase.value}: nothing to copy")
        queue = queue or steps.migration_queue(spec_of(zk, migration_id))
    job = steps.enqueue_start(_redis(config), migration_id, _config_path(config), queue,
                              slice_s=slice_s if slice_s is not None else steps.SLICE_S)
    return job.id


def run_copy(config: Config, migration_id: str, *, workers: int | None = None,
             on_progress: Callable[[dict[str, Any]], None] | None = None,
             after_chunk: Callable[[dict[str, Any]], None] | None = None,
             pipeline: bool = False) -> dict[str, Any]:
    """Copy in this process (threads), from the checkpoints, to the end.
    ``pipeline=True`` reads each table's next chunk while the current one loads; off by default
    (``bench.copy --ablate``: docs/performance.md, "Constants measured by the benchmarks").

    Moves the migration to CATCHING_UP when every table is done; enqueues
    nothing (the caller runs the next phase).
    """
    with session(config) as (zk, creds):
        spec = spec_of(zk, migration_id)
        t0 = time.monotonic()
        pending = copy_mod.begin(zk, spec, creds)
        n = workers or spec.options.copy_workers
        want = set(pending)
        groups = copy_groups.plan_groups([p for p in copy_mod.table_progress(zk, migration_id)
                                          if (p["db"], p["table"]) in want], n)

        def one(group: list[tuple[str, str]]) -> list[copy_mod.TableResult]:
            return copy_groups.copy_tables(zk, spec, group, creds, on_progress=on_progress, after_chunk=after_chunk,
                                           pipeline=pipeline)

        with ThreadPoolExecutor(max_workers=max(1, n), thread_name_prefix="copy") as pool:
            results = [r for rs in pool.map(one, groups) for r in rs]
        finished = copy_mod.finish_if_complete(zk, migration_id)
        st, _ = MigrationStore(zk).state(migration_id)
        return {"migration": migration_id, "phase": st.phase.value, "tables": len(pending), "finished": finished,
                "rows": sum(r.rows for r in results), "bytes": sum(r.bytes for r in results),
                "seconds": round(time.monotonic() - t0, 3),
                "statuses": sorted({r.status for r in results})}


# -- control ----------------------------------------------------------------------------------------------

def pause(config: Config, migration_id: str) -> dict[str, Any]:
    """Copy workers stop between chunks; ``resume`` continues from the checkpoints."""
    with session(config) as (zk, _):
        st = MigrationStore(zk).update(migration_id, lambda s: _set(s, paused=True))
        return {"migration": migration_id, "paused": st.paused, "phase": st.phase.value}


def resume(config: Config, migration_id: str, *, queue: str | None = None) -> dict[str, Any]:
    """Clear the pause flag and re-enqueue the current step from the ZooKeeper record."""
    with session(config) as (zk, _):
        st = MigrationStore(zk).update(migration_id, lambda s: _set(s, paused=False, stopped=None))
    if st.phase == Phase.CUTOVER:
        # no job to re-enqueue: a cutover that died midway must be settled wholly before or after the flip
        raise CommandError(f"migration {migration_id} is in its cutover (interrupted, or still running): run "
                           f"`migrator cutover {migration_id}` to settle it (it finishes if the flip landed, undoes it "
                           "otherwise, then cuts over again)")
    if st.phase == Phase.ROLLING_BACK:
        raise CommandError(
            f"migration {migration_id} is in its rollback's flip back (interrupted, or still running): a "
            f"running `migrator worker` settles an interrupted one within seconds, or run "
            f"`migrator rollback {migration_id}` to settle it and roll back again"
        )
    job = steps.enqueue_current_step(_redis(config), config, migration_id, queue=queue)
    return {"migration": migration_id, "phase": st.phase.value, "job": job.id if job else None}


def _set(st: Any, **fields: Any) -> Any:
    for k, v in fields.items():
        setattr(st, k, v)
    return st


# -- status / abort ------------------------------------------------------------------------------------------

def status(config: Config, migration_id: str | None = None, *, zk: ZK | None = None) -> dict[str, Any]:
    """Every migration's phase, or one migration's spec, state and per-table copy progress."""
    with session(config, zk) as (zk, _):
        store = MigrationStore(zk)
        if migration_id is None:
            out = []
            for m in store.list():
                try:
                    spec = store.spec(m)
                    st, _ = store.state(m)
                except MigratorError:
                    continue
                out.append({"id": m, "phase": st.phase.value, "kind": spec.kind, "shards": list(spec.shards),
                            "source": spec.source_master, "target": spec.target_master, "paused": st.paused,
                            "error": st.error, "stopped": st.stopped,
                            "predicted_freeze_ms": st.predicted_freeze_ms, "freeze_ms": st.freeze_ms})
            return {"migrations": out}
        spec = store.spec(migration_id)
        st, _ = store.state(migration_id)
        tables = copy_mod.table_progress(zk, migration_id)
        copied = TableProgress.parse_list(tables)
        catchup = CatchupNode.parse(store.get_progress(migration_id, Node.CATCHUP)[0])
        verify_node, _ = store.get_progress(migration_id, Node.VERIFY)
        cut, _ = store.get_progress(migration_id, Node.CUTOVER)
        attempts = AttemptsNode.parse(store.get_progress(migration_id, Node.CUTOVER_ATTEMPTS)[0])
        return {
            "id": migration_id, "phase": st.phase.value, "paused": st.paused, "error": st.error, "stopped": st.stopped,
            "spec": spec.model_dump(mode="json"), "history": st.history,
            "passes": [p.dump() for p in catchup.passes], "catchup_gtid": catchup.gtid,
            "not_converging": catchup.not_converging,
            "predicted_freeze_ms": st.predicted_freeze_ms, "freeze_ms": st.freeze_ms,
            "verify": verify_node, "verify_mismatches": VerifyNode.parse(verify_node).mismatched,
            "cutover": cut, "cutover_attempts": [a.dump() for a in attempts.attempts],
            "cutover_next_try": _next_try(st, attempts),
            "cleanup_after": st.cleanup_after, "postpone_cutover": st.postpone_cutover,
            "copy": {"tables": len(tables), "done": sum(1 for t in copied if t.done),
                     "rows": sum(t.rows for t in copied), "est_rows": sum(t.est_rows for t in copied),
                     "bytes": sum(t.bytes for t in copied),
                     "start_gtids": copy_mod.earliest_start_gtids(zk, migration_id), "per_table": tables},
        }


def _next_try(st: State, attempts: AttemptsNode) -> dict[str, Any] | None:
    """When the pipeline tries the cutover again (``at``, ``attempt``, ``delay_s``, ``until``), while that
    still holds: not once the migration flipped, stopped or left the phases a retry runs in."""
    nxt = attempts.next_try
    if not nxt or st.stopped or st.phase not in (Phase.CONVERGED, Phase.CATCHING_UP, Phase.CUTOVER):
        return None
    return nxt.dump()


def abort(config: Config, migration_id: str, *, settle_s: float = 1.0) -> dict[str, Any]:
    """Stop the migration: phase ABORTED (workers stop between chunks), drop the
    target copies, release the shard locks and the maintenance pause."""
    with session(config) as (zk, creds):
        store = MigrationStore(zk)
        st, _ = store.state(migration_id)
        if st.phase in NOT_ABORTABLE:
            raise CommandError(
                f"migration {migration_id} is in phase {st.phase.value}: the map has flipped or is flipping; "
                "use rollback instead of abort"
            )
        was = st.phase
        # not over a cutover that froze meanwhile (its phase write and this one race otherwise)
        store.set_phase(migration_id, Phase.ABORTED, expect=tuple(p for p in Phase if p not in NOT_ABORTABLE))
        # the spec once the phase is set: a batched migration's hand-over moves shards out of its spec only
        # while its state is as the hand-over read it (MigrationStore.hand_over), so from the phase write on
        # none leaves it, and one handed over before is gone from the spec read here. Read before the write,
        # it could name a shard just handed to a batch, whose target copy this would drop
        spec = store.spec(migration_id)
        if was == Phase.COPYING and settle_s:
            time.sleep(settle_s)  # copy workers check the phase between chunks
        gates = _remove_gates(config, zk, migration_id)
        dropped = copy_mod.drop_target_copies(zk, spec, creds)
        store.release_locks(spec)
        plan_mod.release_maintenance_pause(zk, spec)
        return {"migration": migration_id, "phase": Phase.ABORTED.value, "was": was.value, "dropped": dropped,
                "gates": gates}


#: how long ``abort`` waits for a cutover attempt's lease to end (a dead holder's session to expire, a live
#: one to stop on the aborted phase) before it leaves the attempt's gates to it, or to a worker's settler
ABORT_SETTLE_S = 30.0


def _remove_gates(config: Config, zk: ZK, migration_id: str) -> str:
    """The gate objects (triggers, gate tables) any cutover attempt left on the source pair, removed under
    the settle lock once no attempt holds the lease (:func:`migrator.engine.cutover.reconcile.settle`).
    Returns what happened, for the answer: a member that does not answer (for :data:`ABORT_SETTLE_S`, tried
    again every half second) does not stop the abort."""
    deadline = time.monotonic() + ABORT_SETTLE_S
    done: list[str] = []
    while True:
        try:
            # reconcile's settle (the cutover package re-exports no `settle`: that name is its settle module)
            what = settle_cutover(config, migration_id, zk=zk)[1]
            if what == NO_GATES_LEFT or time.monotonic() > deadline:
                return "; then ".join([*done, what]) if done else what
            # some were removed: look once more a moment later, for a statement of the dead holder that the
            # server was still running (a CREATE TRIGGER waiting on a table's lock) and that landed after them
            done.append(what)
            time.sleep(1.0)
        except cutover_mod.CutoverRunning as exc:
            if time.monotonic() > deadline:
                return (f"left to the cutover attempt still running ({exc.message}): it removes its own gates when "
                        "it stops on the aborted phase; if it dies, a worker's settler removes them")
            time.sleep(0.5)
        except Exception as exc:  # noqa: BLE001 - the rest of the abort goes on; the answer says what to do
            if isinstance(exc, (pymysql.err.MySQLError, MySQLUnavailable, LockBusy)) and time.monotonic() <= deadline:
                # a member slow to answer, a DROP TRIGGER that waited on a lock: tried again
                time.sleep(0.5)
                continue
            return (
                f"not checked ({describe(exc)}): run `migrator abort {migration_id}` again once the source pair "
                "answers, "
                "to remove any cutover triggers and gate table left there"
            )


#: phases from which the copy can be redone (the map has not flipped; nothing is fenced)
RESTARTABLE = (Phase.PLANNED, Phase.PREFLIGHT, Phase.COPYING, Phase.CATCHING_UP, Phase.CONVERGED, Phase.FAILED)
#: progress nodes that belong to one attempt of the copy and what follows it
ATTEMPT_NODES = ("copy", Node.CATCHUP, Node.VERIFY, Node.CUTOVER)


def restart_copy(config: Config, migration_id: str, *, queue: str | None = None,
                 settle_s: float = 1.0) -> dict[str, Any]:
    """Redo the copy from scratch, keeping the migration (same id, shard locks, spec).

    For when catch-up can no longer continue from its checkpoint: the binlog it
    needs was purged on the source, or the target copy is known to be bad.
    Stops the workers (phase FAILED: copy jobs stop between chunks, catch-up
    refuses to run), drops the target copies, deletes the copy, catch-up and
    verify progress, and puts the migration back to PLANNED, so preflight and the
    copy run again and record fresh binlog positions. A migration driven by the
    pipeline (``split --yes``) is re-enqueued at once; otherwise run
    ``migrator copy ID``. Refused once the cutover has started.
    """
    with session(config) as (zk, creds):
        store = MigrationStore(zk)
        spec = store.spec(migration_id)
        st, _ = store.state(migration_id)
        if st.phase not in RESTARTABLE:
            raise CommandError(f"migration {migration_id} is in phase {st.phase.value}: the copy can only be restarted "
                               "before the cutover (after a flip, use rollback)")
        was = st.phase
        if st.phase != Phase.FAILED:
            store.set_phase(migration_id, Phase.FAILED, error="restarting the copy")
            if settle_s:
                # copy jobs check the phase between chunks and catch-up before each pass; a pass in
                # flight fails on the dropped tables or the deleted checkpoint, and is not retried
                time.sleep(settle_s)
        dropped = copy_mod.drop_target_copies(zk, spec, creds)
        for key in ATTEMPT_NODES:
            node = f"{store.base}/{migration_id}/{key}"
            if zk.client.exists(node):
                zk.client.delete(node, recursive=True)

        def reset(s: Any) -> Any:
            s.history.append({"who": "restart-copy", "when": time.time(), "from": s.phase.value,
                              "to": Phase.PLANNED.value})
            s.phase = Phase.PLANNED
            s.error = None
            s.paused = False
            s.predicted_freeze_ms = None
            return s

        new = store.update(migration_id, reset)
    job = start_copy(config, migration_id, queue=queue) if new.autopilot else None
    return {"migration": migration_id, "was": was.value, "phase": Phase.PLANNED.value, "dropped": dropped, "job": job}


# -- later phases (their modules hold the logic; these are the shared entry points) ---------------------

def catchup(config: Config, migration_id: str, *, passes: int | None = None) -> dict[str, Any]:
    """Run catch-up passes in this process (until converged, or ``passes``)."""
    results = catch_up.run_passes(config, migration_id, passes)
    last = results[-1] if results else None
    return {"migration": migration_id, "passes": len(results),
            "converged": bool(last and last.converged),
            "last": None if last is None else {"events": last.events, "lag_s": last.lag_s,
                                               "apply_rate": last.apply_rate,
                                               "predicted_freeze_ms": last.predicted_freeze_ms}}


def verify(config: Config, migration_id: str, *, repair: bool = True) -> dict[str, Any]:
    """Chunked checksums source vs target; mismatched chunks re-checked and re-copied."""
    rep = verify_migration(config, migration_id, repair=repair)
    # Rows that still differ while writes go on are rows in flight: the cutover re-checks every row
    # changed since this check (and the suspect chunks) under its write fence, where nothing moves.
    return {"migration": migration_id, "chunks": rep.chunks, "mismatched": len(rep.mismatched_chunks),
            "repaired": rep.repaired_rows, "still_differing": len(rep.differing_rows), "ok": rep.ok}


def cutover(config: Config, migration_id: str, *, freeze_budget_ms: int | None = None) -> dict[str, Any]:
    """The fenced cutover (freeze, fence, drain to the sentinel, verify, flip, unfreeze)."""
    if freeze_budget_ms is not None:
        _set_budget(config, migration_id, freeze_budget_ms)
    return cutover_mod.cutover(config, migration_id).to_dict()


def _set_budget(config: Config, migration_id: str, budget_ms: int) -> None:
    """The budget is part of the spec's options; an operator may lower or raise it before the cutover."""
    with session(config) as (zk, _):
        store = MigrationStore(zk)
        spec = store.spec(migration_id)
        if spec.options.freeze_budget_ms == budget_ms:
            return
        new = spec.model_copy(update={"options": spec.options.model_copy(update={"freeze_budget_ms": budget_ms})})
        store.replace_spec(new)


def rollback(config: Config, migration_id: str) -> dict[str, Any]:
    """Tail the new master back into the tombstones and flip back, in this process."""
    return rollback_mod.rollback(config, migration_id).to_dict()


def start_rollback(config: Config, migration_id: str, *, queue: str | None = None) -> dict[str, Any]:
    """Hand a rollback to the RQ workers (on the migration's queue unless ``queue`` names another):
    a chain of jobs runs the reverse passes, then the fenced flip back (``jobs.rollback.run``).
    Returns the first job's id and the time of the request: the passes, attempts and a
    ``stopped`` recorded after it are this rollback's (:func:`migrator.ops.watch.rollback_events`)."""
    with session(config) as (zk, _):
        store = MigrationStore(zk)
        spec = store.spec(migration_id)
        st, _ = store.state(migration_id)
        if spec.batched:
            raise CommandError(
                f"migration {migration_id} cut over in batches ({', '.join(st.batches) or 'none yet'}), each "
                "with its own tombstones: roll those back, last first (`migrator rollback rb-...` of "
                "the split does it)"
            )
        if st.phase not in (Phase.DONE, Phase.ROLLING_BACK):
            raise CommandError(
                f"migration {migration_id} is {st.phase.value}: only a finished (done) migration with its "
                "tombstones can be rolled back"
            )
        at = time.time()
        store.update(migration_id, lambda s: _set(s, rollback_requested=at, stopped=None))
        queue = queue or steps.migration_queue(spec)
    job = steps.enqueue_rollback(_redis(config), migration_id, _config_path(config), queue, chain=at)
    return {"migration": migration_id, "job": job.id, "queue": queue, "requested_at": at}


def cleanup(config: Config, migration_id: str, *, now: bool = False) -> dict[str, Any]:
    """Drop the tombstones after the retention; before it, schedule that and return."""
    try:
        return cleanup_mod.cleanup(config, migration_id, now=now).to_dict()
    except cleanup_mod.RollbackUnderWay as exc:  # again later: the rollback ends (done or verdict) meanwhile
        job = schedule_cleanup(config, migration_id, at=time.time() + ROLLBACK_RECHECK_S)
        return {"migration": migration_id, "scheduled": job, "waiting_for": exc.message}
    except cleanup_mod.RetentionNotOver:
        job = schedule_cleanup(config, migration_id)
        return {"migration": migration_id, "scheduled": job}


#: a cleanup that found a rollback under way looks again this much later
ROLLBACK_RECHECK_S = 300.0


def schedule_cleanup(config: Config, migration_id: str, *, queue: str | None = None, at: float | None = None,
                     zk: ZK | None = None) -> str | None:
    """Enqueue the cleanup job for the end of the retention, or for ``at`` (needs a worker with the scheduler).
    ``zk``: a session the caller holds (else one is opened)."""
    if zk is None:
        with session(config) as (own, _):
            return schedule_cleanup(config, migration_id, queue=queue, at=at, zk=own)
    st, _ = MigrationStore(zk).state(migration_id)
    queue = queue or steps.migration_queue(spec_of(zk, migration_id))
    when = at if at is not None else st.cleanup_after
    if when is None:
        return None
    return steps.enqueue_cleanup_at(_redis(config), migration_id, when, _config_path(config), queue).id


# -- the whole pipeline ---------------------------------------------------------------------------------------

def launch(config: Config, migration_id: str, *, queue: str | None = None, zk: ZK | None = None) -> str:
    """Hand a planned migration to the RQ pipeline: copy -> catch-up passes ->
    verify -> cutover -> cleanup scheduled, each step enqueuing the next. Safe to run again: a first job that
    an earlier launch enqueued and no worker has run yet is not enqueued twice (and a copy started twice copies
    once)."""
    with session(config, zk) as (zk, _):
        store = MigrationStore(zk)
        again = store.state(migration_id)[0].autopilot  # an earlier launch got this far
        store.update(migration_id, lambda s: _set(s, autopilot=True))
        if again:  # and may have enqueued the first job, which no worker has run yet: one is enough
            waiting = steps.waiting_job(_redis(config), queue or steps.migration_queue(spec_of(zk, migration_id)),
                                        "copy-start", migration_id)
            if waiting is not None:
                return waiting
        return start_copy(config, migration_id, queue=queue, zk=zk)


def postpone(config: Config, migration_id: str, *, on: bool = True, zk: ZK | None = None) -> dict[str, Any]:
    """Hold (or release) the pipeline before the cutover; catch-up keeps the target current."""
    with session(config, zk) as (zk, _):
        st = MigrationStore(zk).update(migration_id, lambda s: _set(s, postpone_cutover=on))
        return {"migration": migration_id, "postpone_cutover": st.postpone_cutover, "phase": st.phase.value}


def set_options(config: Config, migration_id: str, **changes: Any) -> dict[str, Any]:
    """Change a running migration's tunables (throttle limits, chunk target, budget).

    Copy and catch-up jobs read the spec's options at each slice/pass, so the
    change takes effect within a slice."""
    with session(config) as (zk, _):
        store = MigrationStore(zk)
        spec = store.spec(migration_id)
        opts = Options(**{**spec.options.model_dump(), **{k: v for k, v in changes.items() if v is not None}})
        store.replace_spec(spec.model_copy(update={"options": opts}))
        return {"migration": migration_id, "options": opts.model_dump()}
