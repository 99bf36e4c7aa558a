"""Runbook playbooks: ordered steps with gates, timeouts, retries and failure handlers.

A playbook is YAML::

    name: split-host
    params:
      source: {type: host, required: true}
      target: {type: host}
    steps:
      - id: plan
        call: plan_split
        with: {source: "${source}", target: "${target}"}
      - id: cutover
        call: cutover
        gate: ["lag_s < 1 for 3 passes", "predicted_freeze_ms < 300", approval]
        wait_with: catchup_pass      # what to run while the gate does not hold
        timeout: 30m
        retries: 1
        on_failure: [rollback]
    handlers:
      - id: rollback
        call: abort

Steps call the same plain functions as the CLI (the table :data:`STEPS`). The
whole playbook is checked before anything runs: an unknown step, a missing or
mistyped parameter, an unknown ``${name}`` or a malformed gate is rejected with
its line number and the reason.

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
import operator
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kazoo.exceptions import NodeExistsError, NoNodeError

from migrator.errors import MigratorError
from migrator.fleet.shard_map import actor
from migrator.fleet.zk import ZK

PLAYBOOKS = "playbooks"


class PlaybookError(MigratorError):
    """A playbook is malformed; nothing ran."""

    component = "playbook"
    exit_code = 2


class PlaybookRunError(MigratorError):
    component = "playbook"


# -- parameter types ------------------------------------------------------------

def _as_int(v: Any) -> int:
    if isinstance(v, bool):
        raise ValueError("expected an integer")
    if isinstance(v, int):
        return v
    if isinstance(v, str) and re.fullmatch(r"-?\d+", v.strip()):
        return int(v)
    raise ValueError("expected an integer")


def _as_float(v: Any) -> float:
    if isinstance(v, bool):
        raise ValueError("expected a number")
    try:
        return float(v)
    except (TypeError, ValueError):
        raise ValueError("expected a number") from None


def _as_bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lower() in ("true", "yes", "1", "false", "no", "0"):
        return v.lower() in ("true", "yes", "1")
    raise ValueError("expected true or false")


def _as_host(v: Any) -> str:
    if not isinstance(v, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_.-]{0,62}", v):
        raise ValueError("expected a host name such as MySQL001A")
    return v


def _as_str(v: Any) -> str:
    if not isinstance(v, (str, int)):
        raise ValueError("expected a string")
    return str(v)


def _as_shards(v: Any) -> str:
    s = str(v)
    if not re.fullmatch(r"\d+(-\d+)?(,\d+(-\d+)?)*", s):
        raise ValueError("expected shards such as 4-7 or 1,3,5-6")
    return s


DURATION_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*(ms|s|m|h)?$")


def parse_duration(v: Any) -> float:
    """'500ms', '30s', '5m', '2h' or a number of seconds -> seconds."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    m = DURATION_RE.match(str(v).strip())
    if not m:
        raise ValueError("expected a duration such as 500ms, 30s, 5m or 2h")
    n = float(m.group(1))
    return n * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, None: 1}[m.group(2)]


TYPES: dict[str, Callable[[Any], Any]] = {
    "int": _as_int, "float": _as_float, "bool": _as_bool, "host": _as_host, "str": _as_str,
    "shards": _as_shards, "duration": parse_duration,
}


# -- the steps a playbook may call ----------------------------------------------------

@dataclass(frozen=True)
class StepDef:
    """A callable step: ``target`` is "module:function", called as fn(config, [migration id,] **params)."""

    target: str
    params: dict[str, tuple[str, bool]] = field(default_factory=dict)  # name -> (type, required)
    needs_migration: bool = True
    #: the step's result is stored as the run's migration id
    sets_migration: bool = False
    doc: str = ""
    #: while the migration is paused (``migrator pause ID``) the run waits before this step
    honours_pause: bool = False
    #: the migration phases in which this step's work is already done: a resumed run skips it
    done_in: frozenset[str] = frozenset()


_AFTER_COPY = frozenset({"catching_up", "converged", "verifying", "cutover", "done", "cleaned"})
_AFTER_CUTOVER = frozenset({"done", "cleaned"})
#: options a playbook may set on its migration (``set_options``), by their names in the spec
OPTION_PARAMS = {"chunk_rows": ("int", False), "chunk_target_ms": ("int", False), "chunk_max_rows": ("int", False),
                 "copy_workers": ("int", False), "max_standby_lag_s": ("float", False),
                 "max_threads_running": ("int", False), "converge_lag_s": ("float", False),
                 "freeze_budget_ms": ("int", False)}

STEPS: dict[str, StepDef] = {
    "plan_split": StepDef("migrator.ops.command:plan_split",
                          {"source": ("host", True), "target": ("host", False)},
                          needs_migration=False, sets_migration=True, doc="plan a host split"),
    "plan_move": StepDef("migrator.ops.command:plan_move", {"shards": ("shards", True), "target": ("host", True)},
                         needs_migration=False, sets_migration=True, doc="plan moving shards"),
    "plan_move_partition": StepDef("migrator.ops.command:plan_move_partition",
                                   {"queue": ("str", True), "partition": ("int", True), "target": ("host", True)},
                                   needs_migration=False, sets_migration=True, doc="plan moving a queue partition"),
    "use_migration": StepDef("migrator.ops.playbook.runner:use_migration", {"id": ("str", True)},
                             needs_migration=False, sets_migration=True, doc="act on an existing migration"),
    "set_options": StepDef("migrator.ops.command:set_options", dict(OPTION_PARAMS),
                           doc="change the migration's throttle limits, chunk target or freeze budget"),
    "preflight": StepDef("migrator.ops.command:preflight", doc="check source, target and grants",
                         done_in=_AFTER_COPY | {"copying"}),
    "copy": StepDef("migrator.ops.command:run_copy", doc="copy schema and rows (resumable)", honours_pause=True,
                    done_in=_AFTER_COPY),
    "catchup": StepDef("migrator.ops.command:catchup", {"passes": ("int", False)}, doc="binlog catch-up passes",
                       honours_pause=True, done_in=frozenset({"verifying", "cutover"}) | _AFTER_CUTOVER),
    "catchup_pass": StepDef("migrator.ops.command:catchup", {"passes": ("int", False)}, doc="one catch-up pass",
                            honours_pause=True, done_in=frozenset({"verifying", "cutover"}) | _AFTER_CUTOVER),
    "verify": StepDef("migrator.ops.command:verify", doc="chunked checksums, repair", honours_pause=True,
                      done_in=_AFTER_CUTOVER),
    "cutover": StepDef("migrator.ops.command:cutover", {"freeze_budget_ms": ("int", False)}, doc="fenced flip",
                       honours_pause=True, done_in=_AFTER_CUTOVER),
    "rollback": StepDef("migrator.ops.command:rollback", doc="flip back to the source",
                        done_in=frozenset({"rolled_back"})),
    "cleanup": StepDef("migrator.ops.command:cleanup", {"now": ("bool", False)}, doc="drop tombstones",
                       done_in=frozenset({"cleaned"})),
    "abort": StepDef("migrator.ops.command:abort", doc="stop, source keeps serving", done_in=frozenset({"aborted"})),
    "approval": StepDef("migrator.ops.playbook.runner:noop", needs_migration=False, doc="wait for `migrator approve`"),
    "sleep": StepDef("migrator.ops.playbook.runner:sleep", {"seconds": ("float", True)}, needs_migration=False, doc="pause"),
}


def use_migration(config: Any, id: str) -> str:  # noqa: A002 - the playbook's parameter name
    return id


def noop(config: Any) -> None:
    return None


def sleep(config: Any, seconds: float) -> None:
    time.sleep(seconds)


# -- gates -----------------------------------------------------------------------

#: gate metrics, read from the migration record by :func:`gate_metrics`
GATE_METRICS = {"lag_s", "pass_events", "predicted_freeze_ms", "apply_rate", "write_rate",
                "verify_mismatches", "passes"}
GATE_RE = re.compile(
    r"^\s*(?P<metric>[a-z_]+)\s*(?P<op><=|>=|<|>|==|!=)\s*(?P<value>\d+(?:\.\d+)?)\s*(?P<unit>ms|s)?"
    r"(?:\s+for\s+(?P<n>\d+)\s+passes?)?\s*$"
)
OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq,
       "!=": operator.ne}


@dataclass(frozen=True)
class Gate:
    text: str
    approval: bool = False
    metric: str = ""
    op: str = ""
    value: float = 0.0
    passes: int = 1

    @classmethod
    def parse(cls, raw: Any) -> Gate:
        if raw == "approval" or raw == {"approval": True}:
            return cls(text="approval", approval=True)
        if not isinstance(raw, str):
            raise ValueError(f"a gate is a condition string or 'approval', got {raw!r}")
        m = GATE_RE.match(raw)
        if not m:
            raise ValueError(f"cannot read gate {raw!r}: write e.g. 'lag_s < 1 for 3 passes'")
        metric = m.group("metric")
        if metric not in GATE_METRICS:
            raise ValueError(f"unknown gate metric {metric!r}; known: {', '.join(sorted(GATE_METRICS))}")
        value = float(m.group("value"))
        unit = m.group("unit")
        if unit == "ms" and metric.endswith("_s"):
            value /= 1000
        if unit == "s" and metric.endswith("_ms"):
            value *= 1000
        return cls(text=raw, metric=metric, op=m.group("op"), value=value, passes=int(m.group("n") or 1))

    def holds(self, metrics: dict[str, Any], history: list[dict[str, Any]], approved: bool) -> bool:
        if self.approval:
            return approved
        if self.passes > 1:
            recent = history[-self.passes:]
            if len(recent) < self.passes:
                return False
            return all(r.get(self.metric) is not None and OPS[self.op](r[self.metric], self.value)
                       for r in recent)
        v = metrics.get(self.metric)
        return v is not None and OPS[self.op](v, self.value)


# -- parsed playbook -------------------------------------------------------------------

@dataclass
class Step:
    id: str
    call: str
    args: dict[str, Any]
    gates: list[Gate]
    wait_with: str | None
    timeout: float
    retries: int
    on_failure: list[str]
    line: int


@dataclass
class Playbook:
    name: str
    params: dict[str, dict[str, Any]]
    steps: list[Step]
    handlers: dict[str, Step]
    text: str

    def step(self, step_id: str) -> Step:
        for s in self.steps:
            if s.id == step_id:
                return s
        if step_id in self.handlers:
            return self.handlers[step_id]
        raise PlaybookRunError(f"playbook {self.name} has no step {step_id!r}")


STEP_KEYS = {"id", "call", "with", "gate", "wait_with", "timeout", "retries", "on_failure", "doc"}
VAR_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _line(node: yaml.Node | None) -> int:
    return node.start_mark.line + 1 if node is not None else 0


def _mapping_nodes(node: yaml.Node) -> dict[str, tuple[yaml.Node, yaml.Node]]:
    return {k.value: (k, v) for k, v in node.value} if isinstance(node, yaml.MappingNode) else {}


def load(path: str | Path, source: str | None = None) -> Playbook:
    """Parse and fully check a playbook; raises :class:`PlaybookError` with the line."""
    p = Path(path)
    if source is None:
        try:
            source = p.read_text()
        except OSError as exc:
            raise PlaybookError(f"cannot read playbook {p}: {exc.strerror}") from None
    name = p.name
    try:
        root = yaml.compose(source)
        data = yaml.safe_load(source)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{name}:{mark.line + 1}" if mark else name
        raise PlaybookError(f"{where}: not valid YAML: {getattr(exc, 'problem', exc)}") from None

    def err(node: yaml.Node | None, msg: str) -> PlaybookError:
        return PlaybookError(f"{name}:{_line(node)}: {msg}")

    if not isinstance(data, dict) or root is None:
        raise err(root, "a playbook is a mapping with name, params and steps")
    top = _mapping_nodes(root)
    unknown = set(data) - {"name", "description", "params", "steps", "handlers"}
    if unknown:
        k = sorted(unknown)[0]
        raise err(top[k][0], f"unknown key {k!r} (expected name, description, params, steps, handlers)")
    params: dict[str, dict[str, Any]] = {}
    for pname, spec in (data.get("params") or {}).items():
        pnode = _mapping_nodes(top["params"][1]).get(pname, (None, None))[0]
        if not isinstance(spec, dict):
            spec = {"type": "str", "default": spec}
        ptype = spec.get("type", "str")
        if ptype not in TYPES:
            raise err(pnode, f"param {pname}: unknown type {ptype!r} (known: {', '.join(TYPES)})")
        params[pname] = {"type": ptype, "required": bool(spec.get("required", False)),
                         "default": spec.get("default")}
    raw_steps = data.get("steps")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise err(top.get("steps", (root, root))[1], "a playbook needs a non-empty list of steps")

    def parse_steps(raw: list[Any], seq: yaml.Node) -> list[Step]:
        out = []
        for item, node in zip(raw, seq.value):
            if not isinstance(item, dict):
                raise err(node, "each step is a mapping with at least id and call")
            nodes = _mapping_nodes(node)
            bad = set(item) - STEP_KEYS
            if bad:
                k = sorted(bad)[0]
                raise err(nodes[k][0], f"unknown step key {k!r} (expected {', '.join(sorted(STEP_KEYS))})")
            sid, call = item.get("id"), item.get("call")
            if not isinstance(sid, str) or not re.fullmatch(r"[A-Za-z0-9_-]+", sid):
                raise err(node, "each step needs an id of letters, digits, '-' or '_'")
            if call not in STEPS:
                raise err(nodes.get("call", (node, node))[1],
                          f"step {sid}: unknown call {call!r}; known: {', '.join(sorted(STEPS))}")
            args = item.get("with") or {}
            if not isinstance(args, dict):
                raise err(nodes["with"][1], f"step {sid}: 'with' must be a mapping")
            sdef = STEPS[call]
            with_nodes = _mapping_nodes(nodes["with"][1]) if "with" in nodes else {}
            for a, v in args.items():
                anode = with_nodes.get(a, (node, node))[0]
                if a not in sdef.params:
                    raise err(anode, f"step {sid}: {call} takes no parameter {a!r}"
                                     f" (it takes: {', '.join(sdef.params) or 'none'})")
                for var in VAR_RE.findall(str(v)):
                    if var not in params:
                        raise err(anode, f"step {sid}: ${{{var}}} is not a declared param")
                if not VAR_RE.search(str(v)):
                    try:
                        TYPES[sdef.params[a][0]](v)
                    except ValueError as exc:
                        raise err(anode, f"step {sid}: parameter {a}: {exc}, got {v!r}") from None
                elif VAR_RE.fullmatch(str(v)):
                    var = VAR_RE.fullmatch(str(v)).group(1)  # type: ignore[union-attr]
                    ptype, want = params[var]["type"], sdef.params[a][0]
                    if ptype != want and not (want == "str" or ptype == "str"):
                        raise err(anode, f"step {sid}: parameter {a} wants {want} but ${{{var}}} is {ptype}")
            for a, (_, required) in sdef.params.items():
                if required and a not in args:
                    raise err(node, f"step {sid}: {call} needs parameter {a!r}")
            gates_raw = item.get("gate") or []
            if not isinstance(gates_raw, list):
                gates_raw = [gates_raw]
            gates = []
            for g in gates_raw:
                try:
                    gates.append(Gate.parse(g))
                except ValueError as exc:
                    raise err(nodes["gate"][1], f"step {sid}: {exc}") from None
            if call == "approval" and not any(g.approval for g in gates):
                gates.append(Gate(text="approval", approval=True))
            wait_with = item.get("wait_with")
            if wait_with is not None and wait_with not in STEPS:
                raise err(nodes["wait_with"][1], f"step {sid}: unknown wait_with call {wait_with!r}")
            try:
                timeout = parse_duration(item.get("timeout", "24h"))
                retries = _as_int(item.get("retries", 0))
            except ValueError as exc:
                raise err(node, f"step {sid}: {exc}") from None
            on_failure = item.get("on_failure") or []
            if isinstance(on_failure, str):
                on_failure = [on_failure]
            out.append(Step(sid, call, args, gates, wait_with, timeout, retries, list(on_failure), _line(node)))
        return out

    steps = parse_steps(raw_steps, top["steps"][1])
    handlers_list = parse_steps(data.get("handlers") or [], top["handlers"][1]) if data.get("handlers") else []
    handlers = {h.id: h for h in handlers_list}
    ids = [s.id for s in steps] + list(handlers)
    dupes = {i for i in ids if ids.count(i) > 1}
    if dupes:
        raise err(root, f"step ids must be unique; repeated: {', '.join(sorted(dupes))}")
    for s in steps + handlers_list:
        for h in s.on_failure:
            if h not in handlers:
                raise PlaybookError(f"{name}:{s.line}: step {s.id}: on_failure names {h!r}, which is not a handler")
    first_needing = next((s for s in steps if STEPS[s.call].needs_migration), None)
    if first_needing is not None:
        setters = [s for s in steps[: steps.index(first_needing)] if STEPS[s.call].sets_migration]
        if not setters:
            raise PlaybookError(f"{name}:{first_needing.line}: step {first_needing.id} acts on a migration, "
                                "but no earlier step plans one (plan_split, plan_move, plan_move_partition, use_migration)")
    return Playbook(str(data.get("name") or p.stem), params, steps, handlers, source)


def bind_params(pb: Playbook, given: dict[str, str]) -> dict[str, Any]:
    """Check --set values against the declared params (types, required, unknown)."""
    unknown = set(given) - set(pb.params)
    if unknown:
        raise PlaybookError(f"playbook {pb.name} has no param {sorted(unknown)[0]!r} "
                            f"(it takes: {', '.join(pb.params) or 'none'})")
    out: dict[str, Any] = {}
    for name, spec in pb.params.items():
        if name in given:
            try:
                out[name] = TYPES[spec["type"]](given[name])
            except ValueError as exc:
                raise PlaybookError(f"param {name}: {exc}, got {given[name]!r}") from None
        elif spec["required"]:
            raise PlaybookError(f"playbook {pb.name} needs --set {name}=...")
        else:
            out[name] = spec["default"]
    return out


def resolve_args(step: Step, params: dict[str, Any]) -> dict[str, Any]:
    sdef = STEPS[step.call]
    out = {}
    for k, v in step.args.items():
        if isinstance(v, str):
            full = VAR_RE.fullmatch(v)
            if full:
                v = params.get(full.group(1))
            else:
                v = VAR_RE.sub(lambda m: str(params.get(m.group(1), "")), v)
        if v is None:
            continue  # an optional param left unset
        out[k] = TYPES[sdef.params[k][0]](v)
    return out


def parse_sets(items: list[str]) -> dict[str, str]:
    out = {}
    for it in items:
        if "=" not in it:
            raise PlaybookError(f"--set takes name=value, got {it!r}")
        k, v = it.split("=", 1)
        out[k.strip()] = v.strip()
    return out


# -- runs ---------------------------------------------------------------------------------

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
        try:
            self.zk.client.create(self.node(run_id, "owner"), actor().encode(), ephemeral=True)
            return True
        except NodeExistsError:
            return False

    def release_ownership(self, run_id: str) -> None:
        try:
            self.zk.client.delete(self.node(run_id, "owner"))
        except NoNodeError:
            pass


def gate_metrics(config: Any, migration_id: str | None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Current metrics and the catch-up pass table of a migration, for gates."""
    if not migration_id:
        return {}, []
    status = _call("migrator.ops.command:status", config, migration_id)
    passes = list(status.get("passes") or [])
    last = passes[-1] if passes else {}
    metrics = {
        "lag_s": last.get("lag_s"),
        "pass_events": last.get("events"),
        "apply_rate": last.get("apply_rate"),
        "write_rate": last.get("write_rate"),
        "predicted_freeze_ms": status.get("predicted_freeze_ms"),
        "verify_mismatches": status.get("verify_mismatches"),
        "passes": len(passes),
    }
    hist = [{"lag_s": p.get("lag_s"), "pass_events": p.get("events"), "apply_rate": p.get("apply_rate"),
             "write_rate": p.get("write_rate"), "predicted_freeze_ms": p.get("predicted_freeze_ms")}
            for p in passes]
    return metrics, hist


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
    from migrator.ops import command
    from migrator.engine.migration import MigrationNotFound, MigrationStore

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
    from migrator.ops import command
    from migrator.engine.migration import MigrationStore, Phase

    me = actor()
    found = []
    with command.session(config) as (zk, _):
        store = MigrationStore(zk)
        for mid in store.list():
            try:
                spec = store.spec(mid)
                st, _ = store.state(mid)
            except MigratorError:
                continue
            if st.phase == Phase.PLANNED and spec.created_by == me and spec.created_at >= since - 1.0:
                found.append(mid)
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
        return Outcome(state["status"], state.get("failed_step"))
    started_wait = time.monotonic()
    while state["cursor"] < len(pb.steps):
        step = pb.steps[state["cursor"]]
        sdef = STEPS[step.call]
        rec = state["steps"].setdefault(step.id, {"status": "pending", "attempts": 0})
        if rec.get("first_seen") is None:
            rec["first_seen"] = time.time()
        mid = state["context"].get("migration")
        if sdef.needs_migration and (sdef.honours_pause or sdef.done_in):
            phase, paused = migration_state(config, mid)
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
            metrics, hist = gate_metrics(config, mid) if any(not g.approval for g in step.gates) else ({}, [])
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
            if step.wait_with and mid:
                if migration_state(config, mid)[1]:
                    return Outcome("waiting", step.id, "migration paused")
                try:
                    call(STEPS[step.wait_with].target, config, mid, passes=1)
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
        interrupted_at = rec.get("started") if rec.get("status") == "running" else None
        rec.update(status="running", started=time.time(), waiting_on=None)
        rec["attempts"] += 1
        state["status"] = "running"
        version = store.put(run_id, state, version)
        kwargs = resolve_args(step, state["params"])
        args = (mid,) if sdef.needs_migration else ()
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
            if sdef.honours_pause and mid:
                try:
                    call("migrator.ops.command:pause", config, mid)
                except Exception:  # noqa: BLE001 - the failure below is what the operator must see
                    pass
            return _fail(config, store, run_id, pb, step, str(exc), call)
        except Exception as exc:  # a step failure is data for the run, not a crash of the engine
            state, version = store.get(run_id)
            rec = state["steps"][step.id]
            rec.update(status="error", error=str(exc).splitlines()[0][:500], finished=time.time())
            if sdef.honours_pause and migration_state(config, mid)[1]:
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
    mid = state["context"].get("migration")
    for hid in step.on_failure:
        if hid in state["handlers_run"]:
            continue
        h = pb.handlers[hid]
        kwargs = resolve_args(h, state["params"])
        args = (mid,) if STEPS[h.call].needs_migration else ()
        try:
            call(STEPS[h.call].target, config, *args, **kwargs)
            outcome = "done"
        except Exception as exc:
            outcome = f"error: {str(exc).splitlines()[0][:300]}"
        state, version = store.get(run_id)
        state["handlers_run"].append(hid)
        state["steps"][hid] = {"status": outcome, "finished": time.time()}
        version = store.put(run_id, state, version)
    return Outcome("failed", step.id, state.get("error", ""))


def dry_run(pb: Playbook, params: dict[str, Any]) -> list[str]:
    lines = [f"playbook {pb.name}: {len(pb.steps)} steps, params {json.dumps(params, default=str)}"]
    for i, s in enumerate(pb.steps, 1):
        args = resolve_args(s, params)
        extra = []
        if s.gates:
            extra.append("gate: " + ", ".join(g.text for g in s.gates))
        if s.retries:
            extra.append(f"retries {s.retries}")
        if s.on_failure:
            extra.append("on failure: " + ", ".join(s.on_failure))
        lines.append(f"{i:2d}. {s.id}: {s.call}({', '.join(f'{k}={v}' for k, v in args.items())})"
                     + (f"  [{'; '.join(extra)}]" if extra else ""))
    return lines
