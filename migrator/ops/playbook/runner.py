"""The playbook runner: executes a run from its cursor until it finishes, fails, or must wait.

Runs in the ``jobs.playbook.advance`` RQ job (which enqueues itself again
while a run waits) or in the CLI (``migrator run --sync``).

Resume contract: a run's progress lives in ZooKeeper at
``<root>/playbooks/<run id>`` (the playbook text, the params, the context such
as the migration id, and each step's status and attempts). Whoever executes a
run holds the ephemeral node ``<run>/owner``; a run whose owner vanished (a
killed worker) is resumed by re-running its current step, which is safe because
every step function is itself resumable from the migration record; a step whose
work the record already shows done (``StepDef.done_in``: the copy of a
migration that is catching up, the cutover of one that is done) is skipped.
Approvals are nodes ``<run>/approvals/<step>``.

Operator control: while the migration is paused (``migrator pause ID``) the
steps that move data wait instead of failing; ``migrator resume ID`` lets them
go on. ``timeout`` bounds a step from the first time the run reached it: the
wait on its gates and approvals, then its own work. A step that runs past it
fails without a retry (its work may still be going on); a step that moves data
is paused first, so it stops between chunks or passes, then the handlers run. A step function that returns a failure
instead of raising one (a preflight with failed checks, a copy stopped early)
fails the step like an exception.
"""

from __future__ import annotations

import importlib
import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kazoo.exceptions import NodeExistsError, NoNodeError
from pydantic import Field

from migrator.engine.migration import MigrationNotFound, MigrationStore, Phase
from migrator.engine.records import Number, Record
from migrator.errors import MigratorError
from migrator.fleet import zk as zk_mod
from migrator.fleet.shard_map import actor
from migrator.fleet.zk import ZK
from migrator.ops import command
from migrator.ops.playbook.gates import gate_metrics
from migrator.ops.playbook.model import (
    Playbook,
    PlaybookRunError,
    Step,
    load,
    resolve_args,
)
from migrator.ops.playbook.steps import STEPS

PLAYBOOKS = "playbooks"


class RunContext(Record):
    """What a run learned as it went: the migration its plan step made (or adopted)."""

    migration: str | None = None


class StepRun(Record):
    """One step of a run as recorded: its status, attempts, when it was first seen and last started."""

    status: str | None = None
    attempts: int = 0
    first_seen: Number | None = None
    started: Number | None = None


class PlaybookRun(Record):
    """A playbook run's record (:meth:`RunStore.create` makes it). The runner changes it as JSON data and
    reads it through this model."""

    playbook: str = ""
    status: str = "pending"
    cursor: int = 0
    failed_step: str | None = None
    error: str = ""
    context: RunContext = Field(default_factory=RunContext)


class RunStore:
    """Playbook runs in ZooKeeper (see the module docstring)."""

    def __init__(self, zk: ZK):
        self.zk = zk
        self.base = zk.path(PLAYBOOKS)

    def node(self, run_id: str, *sub: str) -> str:
        return "/".join([self.base, run_id, *sub])

    def create(self, pb: Playbook, params: dict[str, Any]) -> str:
        run_id = f"run-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        self.zk.ensure(self.base)
        state = {"playbook": pb.name, "text": pb.text, "params": params, "context": {}, "cursor": 0,
                 "status": "pending", "steps": {}, "created_by": actor(), "created_at": time.time(),
                 "failed_step": None, "handlers_run": []}
        self.zk.client.create(self.node(run_id), json.dumps(state).encode(), acl=self.zk.protected_acl())
        return run_id

    def get(self, run_id: str) -> tuple[dict[str, Any], int]:
        try:
            data, stat = self.zk.client.get(self.node(run_id))
        except NoNodeError:
            raise PlaybookRunError(f"no playbook run {run_id!r} (see `migrator playbook list`)") from None
        return json.loads(data), stat.version

    def put(self, run_id: str, state: dict[str, Any], version: int) -> int:
        return self.zk.client.set(self.node(run_id), json.dumps(state, default=str).encode(), version=version).version

    def list(self) -> list[str]:
        try:
            return sorted(self.zk.client.get_children(self.base))
        except NoNodeError:
            return []

    def approve(self, run_id: str, step_id: str) -> None:
        state, _ = self.get(run_id)
        pb = load(f"{state['playbook']}.yaml", state["text"])
        pb.step(step_id)  # raises on an unknown step
        try:
            self.zk.client.create(self.node(run_id, "approvals", step_id),
                                  json.dumps({"who": actor(), "when": time.time()}).encode(),
                                  acl=self.zk.protected_acl(), makepath=True)
        except NodeExistsError:
            pass

    def approved(self, run_id: str, step_id: str) -> bool:
        return self.zk.client.exists(self.node(run_id, "approvals", step_id)) is not None

    def take_ownership(self, run_id: str) -> bool:
        """Hold the run's owner node; True when it is this session's (made now, or still there from an advance
        of this session whose release never reached ZooKeeper: it went away meanwhile)."""
        try:
            self.zk.client.create(self.node(run_id, "owner"), actor().encode(), ephemeral=True)
            return True
        except NodeExistsError:
            try:
                _, stat = self.zk.client.get(self.node(run_id, "owner"))
            except NoNodeError:  # its holder's session ended just now: the next advance takes it
                return False
            return bool(stat.ephemeralOwner) and stat.ephemeralOwner == self.zk.client.client_id[0]

    def release_ownership(self, run_id: str) -> None:
        try:
            self.zk.client.delete(self.node(run_id, "owner"))
        except NoNodeError:
            pass


def _call(target: str, config: Any, /, *args: Any, **kwargs: Any) -> Any:
    # positional-only: step parameters such as ``target`` arrive in kwargs
    mod, fn = target.split(":")
    return getattr(importlib.import_module(mod), fn)(config, *args, **kwargs)


@dataclass
class Outcome:
    status: str  # done | waiting | failed | busy
    step: str | None = None
    message: str = ""


def advance(config: Any, zk: ZK, run_id: str, *, poll_s: float = 1.0, wait_budget_s: float = 30.0,
            call: Callable[..., Any] = _call) -> Outcome:
    """Run a playbook from its cursor until it finishes, fails, or must wait.

    Waiting (a gate that does not hold yet, an approval) returns after
    ``wait_budget_s`` with status "waiting"; the caller (an RQ job or the CLI
    loop) calls again. Safe to call from several processes: only the holder of
    the run's ephemeral owner node executes.
    """
    store = RunStore(zk)
    if not store.take_ownership(run_id):
        return Outcome("busy", message="another process is executing this run")
    try:
        return _advance(config, store, run_id, poll_s, wait_budget_s, call)
    finally:
        store.release_ownership(run_id)


def migration_state(config: Any, migration_id: str | None) -> tuple[str | None, bool]:
    """(phase, paused) of the run's migration, read from its record; (None, False) without one."""
    if not migration_id:
        return None, False
    with command.session(config) as (zk, _):
        try:
            st, _ = MigrationStore(zk).state(migration_id)
        except MigrationNotFound:
            return None, False
    return st.phase.value, st.paused


class StepTimeout(PlaybookRunError):
    """A step ran past its ``timeout``."""


def within(seconds: float, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` in a daemon thread; :class:`StepTimeout` if it is not done in ``seconds``.

    The thread cannot be stopped from outside: the caller makes its work stop (pause, abort)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["result"] = fn(*args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    t = threading.Thread(target=run, name="playbook-step", daemon=True)
    t.start()
    t.join(max(seconds, 0.0))
    if t.is_alive():
        raise StepTimeout(f"step did not finish within its timeout ({max(seconds, 0):.0f}s left of it)")
    if "error" in box:
        raise box["error"]
    return box.get("result")


def planned_since(config: Any, since: float) -> str | None:
    """The migration an interrupted plan step stored before its executor died, if any.

    A plan step whose executor was killed after the plan was stored but before
    the run recorded it would, run again, fail on its own shard locks. The run
    adopts the one migration still in ``planned`` that was created by the same
    actor since the interrupted attempt started."""
    me = actor()
    found = []
    with command.session(config) as (zk, _):
        store = MigrationStore(zk)
        for migration_id in store.list():
            try:
                spec = store.spec(migration_id)
                st, _ = store.state(migration_id)
            except MigratorError:
                continue
            if st.phase == Phase.PLANNED and spec.created_by == me and spec.created_at >= since - 1.0:
                found.append(migration_id)
    return found[0] if len(found) == 1 else None


def check_result(step: Step, result: Any) -> None:
    """Raise when a step function returned a failure instead of raising one."""
    if getattr(result, "ok", True) is False:  # a preflight with failed checks
        lines = result.lines() if hasattr(result, "lines") else []
        bad = [ln for ln in lines if "FAIL" in ln][:3]
        raise PlaybookRunError(f"step {step.id}: {step.call} failed" + (": " + "; ".join(bad) if bad else ""))
    if step.call == "copy" and isinstance(result, dict) and not result.get("finished"):
        if result.get("phase") == "copying":  # stopped early (paused, sliced): not copied yet
            why = ", ".join(result.get("statuses") or [])
            raise PlaybookRunError(f"step {step.id}: copy stopped before the end ({why})")


def _advance(config: Any, store: RunStore, run_id: str, poll_s: float, wait_budget_s: float,
             call: Callable[..., Any]) -> Outcome:
    state, version = store.get(run_id)
    pb = load(f"{state['playbook']}.yaml", state["text"])
    if state["status"] in ("done", "failed"):
        return Outcome(state["status"], PlaybookRun.parse(state).failed_step)
    started_wait = time.monotonic()
    while state["cursor"] < len(pb.steps):
        step = pb.steps[state["cursor"]]
        sdef = STEPS[step.call]
        rec = state["steps"].setdefault(step.id, {"status": "pending", "attempts": 0})
        if StepRun.parse(rec).first_seen is None:
            rec["first_seen"] = time.time()
        migration_id = PlaybookRun.parse(state).context.migration
        if sdef.needs_migration and (sdef.honours_pause or sdef.done_in):
            phase, paused = migration_state(config, migration_id)
            if phase in sdef.done_in:
                # the work is already in the record (a resumed run whose executor died after the
                # step finished but before it was marked done): do not redo it
                rec.update(status="done", finished=time.time(), result={"skipped": f"migration is {phase}"})
                state["cursor"] += 1
                version = store.put(run_id, state, version)
                continue
            if paused and sdef.honours_pause:
                rec.update(status="waiting", waiting_on=["migration paused (`migrator resume ID`)"])
                state["status"] = "waiting"
                version = store.put(run_id, state, version)
                if time.monotonic() - started_wait > wait_budget_s:
                    return Outcome("waiting", step.id, "migration paused")
                time.sleep(poll_s)
                continue
        # gates: hold before the step runs
        while step.gates:
            metrics, hist = gate_metrics(config, migration_id) if any(not g.approval for g in step.gates) else ({}, [])
            approved = store.approved(run_id, step.id)
            pending = [g.text for g in step.gates if not g.holds(metrics, hist, approved)]
            if not pending:
                break
            rec["status"] = "waiting"
            rec["waiting_on"] = pending
            state["status"] = "waiting"
            version = store.put(run_id, state, version)
            if time.time() - rec["first_seen"] > step.timeout:
                return _fail(config, store, run_id, pb, step, f"gate did not hold within {step.timeout:.0f}s: "
                             + "; ".join(pending), call)
            if step.wait_with and migration_id:
                if migration_state(config, migration_id)[1]:
                    return Outcome("waiting", step.id, "migration paused")
                try:
                    call(STEPS[step.wait_with].target, config, migration_id, passes=1)
                except Exception as exc:  # the work done while waiting failed: the step fails
                    return _fail(config, store, run_id, pb, step, f"{step.wait_with} while waiting: {exc}", call)
                state, version = store.get(run_id)
                rec = state["steps"][step.id]
            elif time.monotonic() - started_wait > wait_budget_s:
                return Outcome("waiting", step.id, "; ".join(pending))
            else:
                time.sleep(poll_s)
            if step.wait_with and time.monotonic() - started_wait > wait_budget_s:
                return Outcome("waiting", step.id, "; ".join(pending))
        # run the step
        ran = StepRun.parse(rec)
        interrupted_at = ran.started if ran.status == "running" else None
        rec.update(status="running", started=time.time(), waiting_on=None)
        rec["attempts"] += 1
        state["status"] = "running"
        version = store.put(run_id, state, version)
        kwargs = resolve_args(step, state["params"])
        args = (migration_id,) if sdef.needs_migration else ()
        try:
            adopted = (planned_since(config, interrupted_at)
                       if sdef.sets_migration and step.call != "use_migration" and interrupted_at else None)
            left = step.timeout - (time.time() - rec["first_seen"])
            result = adopted if adopted is not None else within(left, call, sdef.target, config, *args, **kwargs)
            check_result(step, result)
        except StepTimeout as exc:
            # the step's work may still be running in its thread: no retry on top of it; a step that
            # moves data is paused so it stops between chunks or passes, then the handlers run
            state, version = store.get(run_id)
            state["steps"][step.id].update(status="error", error=str(exc), finished=time.time())
            version = store.put(run_id, state, version)
            if sdef.honours_pause and migration_id:
                try:
                    call("migrator.ops.command:pause", config, migration_id)
                except Exception:  # noqa: BLE001 - the failure below is what the operator must see
                    pass
            return _fail(config, store, run_id, pb, step, str(exc), call)
        except Exception as exc:  # a step failure is data for the run, not a crash of the engine
            if zk_mod.went_away(exc):
                # ZooKeeper went away under the step, not the step failed: whoever drives the run (the CLI's
                # patient session, the RQ job's) advances it again once it is back, and the step runs again
                # (every step is resumable from the migration record)
                raise
            state, version = store.get(run_id)
            rec = state["steps"][step.id]
            rec.update(status="error", error=str(exc).splitlines()[0][:500], finished=time.time())
            if sdef.honours_pause and migration_state(config, migration_id)[1]:
                rec["attempts"] -= 1  # stopped by a pause, not failed: run it again after the resume
                version = store.put(run_id, state, version)
                continue
            if rec["attempts"] <= step.retries:
                version = store.put(run_id, state, version)
                continue
            store.put(run_id, state, version)
            return _fail(config, store, run_id, pb, step, str(exc), call)
        state, version = store.get(run_id)
        rec = state["steps"][step.id]
        if sdef.sets_migration and result:
            state["context"]["migration"] = migration_id_of(result)
        rec.update(status="done", finished=time.time(), result=_small(result))
        state["cursor"] += 1
        version = store.put(run_id, state, version)
    state["status"] = "done"
    store.put(run_id, state, version)
    return Outcome("done")


def migration_id_of(result: Any) -> str:
    """Plan commands return a plan (with its spec); use_migration returns the id."""
    spec = getattr(result, "spec", None)
    return str(spec.id) if spec is not None else str(result)


def _small(result: Any) -> Any:
    if hasattr(result, "as_dict"):
        result = result.as_dict()
    elif hasattr(result, "to_dict"):
        result = result.to_dict()
    try:
        text = json.dumps(result, default=str)
    except (TypeError, ValueError):
        text = str(result)
    return json.loads(text) if len(text) < 2000 else text[:2000]


def _fail(config: Any, store: RunStore, run_id: str, pb: Playbook, step: Step, error: str,
          call: Callable[..., Any]) -> Outcome:
    state, version = store.get(run_id)
    state["steps"].setdefault(step.id, {})["status"] = "failed"
    state["failed_step"] = step.id
    state["status"] = "failed"
    state["error"] = error.splitlines()[0][:500] if error else ""
    version = store.put(run_id, state, version)
    migration_id = PlaybookRun.parse(state).context.migration
    for hid in step.on_failure:
        if hid in state["handlers_run"]:
            continue
        h = pb.handlers[hid]
        kwargs = resolve_args(h, state["params"])
        args = (migration_id,) if STEPS[h.call].needs_migration else ()
        try:
            call(STEPS[h.call].target, config, *args, **kwargs)
            outcome = "done"
        except Exception as exc:
            outcome = f"error: {str(exc).splitlines()[0][:300]}"
        state, version = store.get(run_id)
        state["handlers_run"].append(hid)
        state["steps"][hid] = {"status": outcome, "finished": time.time()}
        version = store.put(run_id, state, version)
    return Outcome("failed", step.id, PlaybookRun.parse(state).error)
