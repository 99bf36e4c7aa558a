"""Runbook playbooks: ordered steps with gates, timeouts, retries and failure handlers.

``migrator run PLAYBOOK`` executes one, resumably, on RQ workers or in the CLI.

- :mod:`.model` reads the YAML and checks it whole before anything runs;
- :mod:`.steps` is the table of what a step may call (the command functions)
  and the types of their parameters;
- :mod:`.gates` are the conditions a step waits on (metrics of the catch-up
  passes, manual approval);
- :mod:`.runner` executes a run from its ZooKeeper record (the resume
  contract is in its docstring).
"""

from migrator.ops.playbook.gates import Gate, gate_metrics
from migrator.ops.playbook.model import (
    Playbook,
    PlaybookError,
    PlaybookRunError,
    Step,
    bind_params,
    check_hosts,
    dry_run,
    host_args,
    load,
    parse_sets,
    resolve_args,
)
from migrator.ops.playbook.runner import Outcome, PlaybookRun, RunStore, StepTimeout, advance, check_result
from migrator.ops.playbook.steps import STEPS, StepDef, parse_duration

__all__ = [
    "STEPS", "Gate", "Outcome", "Playbook", "PlaybookError", "PlaybookRun", "PlaybookRunError", "RunStore", "Step",
    "StepDef",
    "StepTimeout", "advance", "bind_params", "check_hosts", "check_result", "dry_run", "gate_metrics", "host_args",
    "load", "parse_duration",
    "parse_sets",
    "resolve_args",
]
