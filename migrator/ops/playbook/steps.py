"""The steps a playbook may call, and the types of their parameters.

Each entry of :data:`STEPS` names one plain function of
:mod:`migrator.ops.command` (``"module:function"``): the same functions the CLI
and the RQ jobs call. :func:`~migrator.ops.playbook.model.load` checks a
playbook's ``call`` and ``with`` against this table before anything runs; the
runner calls the function and uses ``done_in`` and ``honours_pause`` to skip
work the migration record shows done and to wait while a migration is paused.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from migrator.fleet import bounds

# -- parameter types ------------------------------------------------------------

def as_int(v: Any) -> int:
    if isinstance(v, bool):
        raise ValueError("expected an integer")
    if isinstance(v, int):
        return v
    if isinstance(v, str) and re.fullmatch(r"-?\d+", v.strip()):
        return int(v)
    raise ValueError("expected an integer")


def as_float(v: Any) -> float:
    if isinstance(v, bool):
        raise ValueError("expected a number")
    try:
        return float(v)
    except (TypeError, ValueError):
        raise ValueError("expected a number") from None


def as_bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lower() in ("true", "yes", "1", "false", "no", "0"):
        return v.lower() in ("true", "yes", "1")
    raise ValueError("expected true or false")


def as_host(v: Any) -> str:
    return bounds.host_name(v)


def as_str(v: Any) -> str:
    if not isinstance(v, (str, int)):
        raise ValueError("expected a string")
    return str(v)


def as_shards(v: Any) -> str:
    """Shards as the command line takes them (``move --shards``), bounded the same way."""
    return bounds.shard_text(v)


#: '500ms', '30s', '5m', '2h' or a number of seconds -> seconds, never negative (as the command line's)
parse_duration = bounds.duration


TYPES: dict[str, Callable[[Any], Any]] = {
    "int": as_int, "float": as_float, "bool": as_bool, "host": as_host, "str": as_str,
    "shards": as_shards, "duration": parse_duration, "migration": bounds.migration_id,
}
#: what each parameter type accepts
TYPE_DOCS = {
    "int": "an integer",
    "float": "a number",
    "bool": "true or false (yes/no, 1/0)",
    "host": "a host name of the registry, such as MySQL001A",
    "str": "text",
    "shards": "shards, such as 4-7 or 1,3,5-6 (0..65535, each range low-high)",
    "duration": "a duration: 500ms, 30s, 5m, 2h, or a number of seconds (never negative)",
    "migration": "a migration id, such as m-20261122-155024-7e9460 (or rb-...)",
}
#: the smallest value of a numeric step parameter, by name (any other: 0; the migration's limits, in
#: :data:`OPTION_PARAMS`, are bounded by the same model as the command line's flags)
PARAM_MINIMUM = {"passes": 1, "partition": 0}


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
    #: what each parameter is (the reference prints it beside its type)
    param_docs: dict[str, str] = field(default_factory=dict)


_AFTER_COPY = frozenset({"catching_up", "converged", "verifying", "cutover", "done", "cleaned"})
_AFTER_CUTOVER = frozenset({"done", "cleaned"})
#: options a playbook may set on its migration (``set_options``), by their names in the spec
OPTION_PARAMS = {"chunk_rows": ("int", False), "chunk_target_ms": ("int", False), "chunk_max_rows": ("int", False),
                 "copy_workers": ("int", False), "max_standby_lag_s": ("float", False),
                 "max_threads_running": ("int", False), "converge_lag_s": ("float", False),
                 "freeze_budget_ms": ("int", False), "cutover_retry_s": ("float", False)}
OPTION_DOCS = {"chunk_rows": "first copy chunk, rows (adapts after)", "chunk_target_ms": "time target per chunk",
               "chunk_max_rows": "the largest chunk the copy adapts to", "copy_workers": "tables copied at once",
               "max_standby_lag_s": "throttle the copy above this target standby lag (--max-lag)",
               "max_threads_running": "throttle the copy while the source is this busy (--max-threads-running)",
               "converge_lag_s": "a catch-up pass that ends within this lag converges",
               "freeze_budget_ms": "the longest write freeze the cutover may take (--freeze-budget-ms)",
               "cutover_retry_s": "how long the pipeline retries a stopped cutover (--cutover-retry-s)"}
_MID = "the migration id"

STEPS: dict[str, StepDef] = {
    "plan_split": StepDef("migrator.ops.command:plan_split",
                          {"source": ("host", True), "target": ("host", False)},
                          needs_migration=False, sets_migration=True,
                          doc="plan a host split (`migrator split SOURCE --yes --no-start`): the upper half of "
                              "every range on source moves to target; stores the plan and locks the shards; "
                              "the run's migration from here on",
                          param_docs={"source": "the master whose ranges split",
                                      "target": "the target pair's master (default: a spare pair)"}),
    "plan_move": StepDef("migrator.ops.command:plan_move", {"shards": ("shards", True), "target": ("host", True)},
                         needs_migration=False, sets_migration=True,
                         doc="plan moving shards (`migrator move --yes --no-start`); the run's migration",
                         param_docs={"shards": "the shards, all on one source pair",
                                     "target": "the target pair's master"}),
    "plan_move_partition": StepDef("migrator.ops.command:plan_move_partition",
                                   {"queue": ("str", True), "partition": ("int", True), "target": ("host", True)},
                                   needs_migration=False, sets_migration=True,
                                   doc="plan moving one queue partition on its own route; the run's migration",
                                   param_docs={"queue": "the queue's name", "partition": "the partition's index",
                                               "target": "the target pair's master"}),
    "use_migration": StepDef("migrator.ops.playbook.steps:use_migration", {"id": ("migration", True)},
                             needs_migration=False, sets_migration=True,
                             doc="act on an existing migration (a rollback's playbook, a resumed one)",
                             param_docs={"id": _MID}),
    "set_options": StepDef("migrator.ops.command:set_options", dict(OPTION_PARAMS),
                           doc="change the migration's limits (`migrator set ID`); copy jobs take them at their "
                               "next slice, catch-up at its next pass",
                           param_docs=OPTION_DOCS),
    "preflight": StepDef("migrator.ops.command:preflight",
                         doc="check source, target and grants (`migrator preflight ID`); a failed check fails "
                             "the step", done_in=_AFTER_COPY | {"copying"}),
    "copy": StepDef("migrator.ops.command:run_copy", doc="copy schema and rows in this process, resumable from "
                                                         "its checkpoints (`migrator copy ID --sync`)",
                    honours_pause=True, done_in=_AFTER_COPY),
    "catchup": StepDef("migrator.ops.command:catchup", {"passes": ("int", False)},
                       doc="binlog catch-up passes until one converges (or `passes`); a migration that does not "
                           "converge fails the step", honours_pause=True,
                       done_in=frozenset({"verifying", "cutover"}) | _AFTER_CUTOVER,
                       param_docs={"passes": "run exactly this many passes"}),
    "catchup_pass": StepDef("migrator.ops.command:catchup", {"passes": ("int", False)},
                            doc="one catch-up pass (a gate's wait_with)", honours_pause=True,
                            done_in=frozenset({"verifying", "cutover"}) | _AFTER_CUTOVER,
                            param_docs={"passes": "passes to run (1 as a wait_with)"}),
    "verify": StepDef("migrator.ops.command:verify", {"repair": ("bool", False)},
                      doc="chunked checksums source vs target; differing chunks re-copied unless repair is false "
                          "(the cutover re-checks the rows changed since, under its fence)",
                      honours_pause=True, done_in=_AFTER_CUTOVER,
                      param_docs={"repair": "re-copy what differs (default true; false: report only, as "
                                            "`migrator verify ID` without --repair)"}),
    "cutover": StepDef("migrator.ops.command:cutover", {"freeze_budget_ms": ("int", False)},
                       doc="the fenced flip (`migrator cutover ID --yes`): freeze, fence, drain to the sentinel, "
                           "compare, flip, release; a refusal names its cause", honours_pause=True,
                       done_in=_AFTER_CUTOVER,
                       param_docs={"freeze_budget_ms": "set the migration's freeze budget first"}),
    "rollback": StepDef("migrator.ops.command:rollback", doc="tail the new master back into the tombstones and "
                                                             "flip back, in this process (`migrator rollback ID "
                                                             "--sync --yes`)",
                        done_in=frozenset({"rolled_back"})),
    "cleanup": StepDef("migrator.ops.command:cleanup", {"now": ("bool", False)},
                       doc="drop the tombstones once the retention is over (before it: schedules that and "
                           "returns)", done_in=frozenset({"cleaned"}),
                       param_docs={"now": "drop them now: ends any chance of a rollback"}),
    "abort": StepDef("migrator.ops.command:abort", doc="stop before the cutover: drop the target copies, release "
                                                       "the locks; the source keeps serving",
                     done_in=frozenset({"aborted"})),
    "approval": StepDef("migrator.ops.playbook.steps:noop", needs_migration=False,
                        doc="wait until `migrator approve RUN STEP` (an approval gate of its own)"),
    "sleep": StepDef("migrator.ops.playbook.steps:sleep", {"seconds": ("float", True)}, needs_migration=False,
                     doc="wait", param_docs={"seconds": "how long"}),
}


def use_migration(config: Any, id: str) -> str:  # noqa: A002 - the playbook's parameter name
    return id


def noop(config: Any) -> None:
    return None


def sleep(config: Any, seconds: float) -> None:
    time.sleep(seconds)


def check_arg(call: str, name: str, value: Any) -> Any:
    """A step parameter's value, converted by its type and bounded as the command line bounds it: the migration's
    limits by the model its flags go through (``freeze_budget_ms: -5`` is refused as ``--freeze-budget-ms -5``
    is), other numbers by :data:`PARAM_MINIMUM` (never negative). Raises :class:`ValueError` with the reason."""
    v = TYPES[STEPS[call].params[name][0]](value)
    if name in OPTION_PARAMS:
        from pydantic import ValidationError

        from migrator.engine.migration import Options

        try:
            Options(**{name: v})
        except ValidationError as exc:
            raise ValueError(str(exc.errors()[0].get("msg", "out of range")).removeprefix("Value error, ")) from None
    elif isinstance(v, int | float) and not isinstance(v, bool):
        bounds.number(v, minimum=PARAM_MINIMUM.get(name, 0))
    return v
