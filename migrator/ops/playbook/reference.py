"""The playbook reference, written from the tables the loader checks playbooks against.

``migrator playbook reference`` prints it and ``docs/playbooks.md`` is its output
(``tests/unit/ops/test_playbook_reference.py`` keeps the two equal), so the
reference says what the code accepts: the keys (:data:`model.TOP_KEYS`,
:data:`model.STEP_KEY_DOCS`), the parameter types (:data:`steps.TYPE_DOCS`),
every callable step with its parameters (:data:`steps.STEPS`), the gate grammar
(:data:`gates.GATE_RE`, :data:`gates.GATE_METRIC_DOCS`). ``migrator playbook
steps`` prints :func:`step_rows`, the short list.
"""

from __future__ import annotations

from migrator.ops.playbook import gates, model, steps

HEADER = """# Playbook reference

<!-- Written by `migrator playbook reference` from the code (migrator/ops/playbook/): do not edit by hand;
     tests/unit/ops/test_playbook_reference.py fails when this file and the code disagree. -->

A playbook is a YAML runbook: ordered steps that call the same functions as the
command line, gates that hold a step until a condition or an approval, handlers
that run when a step fails. `migrator run PLAYBOOK.yaml --set name=value ...`
checks the whole file (every key, step, parameter, type, `${param}` and gate,
with its line) and prints the steps it would run; with `--yes` it starts the
run (as `split` and every command that changes the fleet: a dry run without
it). The bundled playbooks wait for `migrator approve RUN approve-cutover`
before each cutover.
The run's progress lives in ZooKeeper and resumes from its last step
(`migrator playbook status|list|resume RUN`); a step whose work the migration
record already shows done is skipped. Examples: `playbooks/*.yaml`.

```yaml
name: split-host
params:
  source: {type: host, required: true}
steps:
  - id: plan
    call: plan_split
    with: {source: "${source}"}
  - id: copy
    call: copy
    on_failure: [abort]
  - id: cutover
    call: cutover
    gate: ["lag_s < 1 for 2 passes", "predicted_freeze_ms < 300", approval]
    wait_with: catchup_pass
    timeout: 2h
    retries: 2
    on_failure: [abort]
handlers:
  - id: abort
    call: abort
```
"""


def _table(head: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
    return out


def _params(sdef: steps.StepDef) -> str:
    if not sdef.params:
        return "-"
    return "<br>".join(f"`{n}` ({t}{', required' if req else ''}): {sdef.param_docs.get(n, '')}".rstrip(": ")
                       for n, (t, req) in sdef.params.items())


def step_rows() -> list[tuple[str, str, str]]:
    """(call, parameters, what it does) of every callable step, in the table's order."""
    out = []
    for name, sdef in steps.STEPS.items():
        params = ", ".join(f"{n}: {t}{'' if req else '?'}" for n, (t, req) in sdef.params.items()) or "-"
        out.append((name, params, sdef.doc))
    return out


def render() -> str:
    """The whole reference, as Markdown."""
    lines = [HEADER, "## Keys", ""]
    lines += _table(("key", "what it holds"), [(f"`{k}`", v) for k, v in model.TOP_KEYS.items()])
    lines += ["", "A param:", ""]
    lines += _table(("key", "meaning"), [(f"`{k}`", v) for k, v in model.PARAM_KEYS.items()])
    lines += ["", "### Parameter types", ""]
    lines += _table(("type", "accepts"), [(f"`{k}`", v) for k, v in steps.TYPE_DOCS.items()])
    lines += ["", "### Step keys", "", "A step, and a handler, is a mapping of these keys:", ""]
    lines += _table(("key", "meaning"), [(f"`{k}`", v) for k, v in model.STEP_KEY_DOCS.items()])
    lines += ["", "## Callable steps", "",
              "Each calls one plain function (the same the command line calls) with the config, the run's "
              "migration (for the steps that act on one; a plan step or `use_migration` must come first), and "
              "the step's `with`. *Skipped when* lists the migration phases in which the step's work is "
              "already done (a resumed run skips it); *waits while paused*: the step waits instead of failing "
              "while `migrator pause ID` holds the migration.", ""]
    rows = []
    for name, sdef in steps.STEPS.items():
        flags = []
        if sdef.sets_migration:
            flags.append("sets the run's migration")
        if not sdef.needs_migration and not sdef.sets_migration:
            flags.append("needs no migration")
        if sdef.honours_pause:
            flags.append("waits while paused")
        if sdef.done_in:
            flags.append("skipped when " + ", ".join(sorted(sdef.done_in)))
        rows.append((f"`{name}`", _params(sdef), sdef.doc, "; ".join(flags) or "-", f"`{sdef.target}`"))
    lines += _table(("call", "parameters", "what it does", "notes", "function"), rows)
    lines += ["", "## Gates", "",
              "A gate holds a step until it is true. `approval` holds it until `migrator approve RUN STEP`; a "
              "condition reads a metric of the migration's catch-up:", "",
              "```", "METRIC OP NUMBER [ms|s] [for N passes]", "```", "",
              f"`OP` is one of {', '.join(f'`{o}`' for o in gates.OPS)}. A unit converts the number to the "
              "metric's (`lag_s < 500ms` is `lag_s < 0.5`). `for N passes` demands it of each of the last N "
              f"passes, and takes only the metrics each pass records ({', '.join(sorted(gates.PASS_METRICS))}). "
              "While a gate does not hold the step's `wait_with` runs between looks; past the step's `timeout` "
              "the step fails.", ""]
    lines += _table(("metric", "what it is", "per pass"),
                    [(f"`{k}`", v, "yes" if k in gates.PASS_METRICS else "-")
                     for k, v in gates.GATE_METRIC_DOCS.items()])
    lines += ["", "## Failures, retries and handlers", "",
              "A step fails when its function raises, or returns a failure (a preflight with failed checks, a copy "
              "stopped early). It runs again while its `retries` last; then it has failed for good: the handlers "
              "its `on_failure` names run, each once, in order (a handler is a step: `call`, `with`), and the "
              "run is failed (`migrator playbook status RUN` shows the step and its error). A step stopped by "
              "`migrator pause ID` is not a failure: it runs again after `migrator resume ID`. A step past its "
              "`timeout` fails without a retry, after a step that moves data is paused.", "",
              "## Approval", "",
              "`call: approval`, or `approval` among a step's gates, holds the run until `migrator approve RUN "
              "STEP`; `migrator playbook status RUN` shows what a waiting step waits on.", ""]
    return "\n".join(lines)
