"""Playbooks as data: the YAML format, parsed and checked whole before anything runs.

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
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from migrator.errors import MigratorError
from migrator.fleet import bounds
from migrator.ops.playbook.gates import Gate
from migrator.ops.playbook.steps import STEPS, TYPES, check_arg, parse_duration


class PlaybookError(MigratorError):
    """A playbook is malformed; nothing ran."""

    component = "playbook"
    exit_code = 2


class PlaybookRunError(MigratorError):
    component = "playbook"


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


#: the keys of a playbook, and what each holds
TOP_KEYS = {
    "name": "the playbook's name (default: the file name without .yaml)",
    "description": "what it does, for people",
    "params": "the values `migrator run PLAYBOOK --set name=value` gives it: name -> {type, required, default}, "
              "or name -> a default value (a str); a step's `with` uses them as ${name}",
    "steps": "the steps, run in order, each once it is reached and its gates hold",
    "handlers": "steps that run only when a step that names them in `on_failure` fails for good",
}
#: the keys of a param
PARAM_KEYS = {"type": "one of the parameter types below (default str)",
              "required": "true: `--set name=...` must give it (default false)",
              "default": "the value when --set does not give it (default: none, and an optional step parameter "
                         "left unset is not passed)"}
#: the keys of a step (and of a handler), and what each does
STEP_KEY_DOCS = {
    "id": "the step's name: letters, digits, '-' and '_', unique in the playbook (`migrator approve RUN ID` "
          "names it)",
    "call": "the step to run: one of the callable steps below",
    "with": "its parameters: name -> value, or \"${param}\" (the whole value: keeps its type) or text with "
            "${param} in it; checked against the step's parameter types before anything runs",
    "gate": "conditions that must hold before the step runs (a string or a list): the gate grammar below, "
            "or `approval`",
    "wait_with": "a callable step run (with passes=1) between two looks at the gates, e.g. catchup_pass: "
                 "keeps the target current while the gate waits",
    "timeout": "bounds the step from the first time the run reached it: its gates and approvals, then its "
               "own work (a duration: 500ms, 30s, 5m, 2h; default 24h); a step past it fails without a retry, "
               "a step that moves data is paused first",
    "retries": "how many times a failed step runs again before it fails for good (default 0); a step stopped "
               "by `migrator pause` is not counted, it runs again after `migrator resume`",
    "on_failure": "handler ids (a string or a list) run, each once, when the step fails for good; the run "
                  "then fails",
    "doc": "a note for people; ignored",
}
STEP_KEYS = set(STEP_KEY_DOCS)
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
                        check_arg(call, a, v)
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
            except ValueError as exc:
                raise err(nodes.get("timeout", (node, node))[1], f"step {sid}: timeout: {exc}") from None
            try:
                retries = bounds.count(item.get("retries", 0))
            except ValueError as exc:
                raise err(nodes.get("retries", (node, node))[1], f"step {sid}: retries: {exc}") from None
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
                                "but no earlier step plans one (plan_split, plan_move, plan_move_partition, "
                                "use_migration)")
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
    """The step's parameters with ``${param}`` filled in, each converted and bounded (:func:`check_arg`)."""
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
        try:
            out[k] = check_arg(step.call, k, v)
        except ValueError as exc:
            raise PlaybookError(f"step {step.id}: parameter {k}: {exc}, got {v!r}") from None
    return out


def parse_sets(items: list[str]) -> dict[str, str]:
    out = {}
    for it in items:
        if "=" not in it:
            raise PlaybookError(f"--set takes name=value, got {it!r}")
        k, v = it.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def host_args(pb: Playbook, params: dict[str, Any]) -> set[str]:
    """The host names the run's steps name (each must be in the registry: :func:`check_hosts`)."""
    return {str(v) for s in pb.steps + list(pb.handlers.values()) for k, v in resolve_args(s, params).items()
            if STEPS[s.call].params[k][0] == "host"}


def check_hosts(pb: Playbook, params: dict[str, Any], registered: set[str]) -> None:
    """Refuse a run whose steps name a host the registry does not hold (``target=NoSuchHost``)."""
    unknown = sorted(host_args(pb, params) - registered)
    if unknown:
        raise PlaybookError(f"playbook {pb.name}: host {unknown[0]} is not in the host registry (registered: "
                            f"{', '.join(sorted(registered)) or 'none'}); `migrator topology show` lists them")


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
