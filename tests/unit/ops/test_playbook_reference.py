"""docs/playbooks.md is the reference the code writes (`migrator playbook reference`): it names every key,
type, callable step with its parameters, and gate metric the loader accepts, and nothing else."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from migrator.ops.playbook import gates, model, steps
from migrator.ops.playbook.reference import render

DOC = Path(__file__).resolve().parents[3] / "docs" / "playbooks.md"


def test_the_doc_is_what_the_code_writes():
    assert DOC.read_text() == render(), "docs/playbooks.md is stale: `migrator playbook reference > docs/playbooks.md`"


def test_it_names_everything_the_loader_accepts():
    text = render()
    for key in [*model.TOP_KEYS, *model.PARAM_KEYS, *model.STEP_KEYS, *steps.TYPES, *gates.GATE_METRICS]:
        assert f"`{key}`" in text, key
    for name, sdef in steps.STEPS.items():
        row = next(ln for ln in text.splitlines() if ln.startswith(f"| `{name}` |"))
        for param, (ptype, _required) in sdef.params.items():
            assert f"`{param}` ({ptype}" in row, (name, param)
            assert sdef.param_docs.get(param), (name, param, "has no description")
    assert model.STEP_KEYS == set(model.STEP_KEY_DOCS) and gates.GATE_METRICS == set(gates.GATE_METRIC_DOCS)


@pytest.mark.parametrize("gate", ["passes > 3 for 2 passes", "verify_mismatches == 0 for 2 passes"])
def test_a_gate_over_a_metric_not_recorded_per_pass_cannot_ask_for_passes(gate):
    with pytest.raises(ValueError, match="not recorded per pass"):
        gates.Gate.parse(gate)


def test_playbook_steps_lists_every_step():
    res = subprocess.run([sys.executable, "-m", "migrator", "playbook", "steps"], capture_output=True, text=True,
                         timeout=60, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr
    for name in steps.STEPS:
        assert f" {name} " in res.stdout, name
