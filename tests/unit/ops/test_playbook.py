"""Playbooks are checked whole before anything runs; bad ones name the line."""

from pathlib import Path

import pytest

from migrator.ops import playbook as pbm
from migrator.ops.playbook import Gate, PlaybookError

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("name", ["split-host", "move-shards", "move-queue-partition", "rollback"])
def test_shipped_playbooks_load(name):
    pb = pbm.load(ROOT / "playbooks" / f"{name}.yaml")
    assert pb.steps
    assert pb.name == name


def bad(text):
    with pytest.raises(PlaybookError) as e:
        pbm.load("bad.yaml", text)
    return str(e.value)


def test_unknown_step_names_line():
    msg = bad("name: x\nsteps:\n  - id: plan\n    call: plan_split\n    with: {source: A1}\n"
              "  - id: y\n    call: teleport\n")
    assert "bad.yaml:7" in msg and "unknown call 'teleport'" in msg


def test_missing_parameter():
    msg = bad("name: x\nsteps:\n  - id: plan\n    call: plan_move\n    with: {target: MySQL003A}\n")
    assert "bad.yaml:3" in msg and "needs parameter 'shards'" in msg


def test_mistyped_parameter():
    msg = bad("name: x\nsteps:\n  - id: plan\n    call: plan_move_partition\n"
              "    with: {queue: q, partition: seven, target: MySQL003A}\n")
    assert "bad.yaml:5" in msg and "partition" in msg and "integer" in msg


def test_unknown_parameter_and_variable():
    assert "takes no parameter 'speed'" in bad(
        "name: x\nsteps:\n  - id: p\n    call: plan_split\n    with: {source: A, speed: 3}\n")
    assert "${nope} is not a declared param" in bad(
        "name: x\nsteps:\n  - id: p\n    call: plan_split\n    with: {source: '${nope}'}\n")


def test_bad_gate_and_yaml():
    assert "unknown gate metric 'lagg_s'" in bad(
        "name: x\nsteps:\n  - id: p\n    call: plan_split\n    with: {source: A}\n"
        "  - id: c\n    call: cutover\n    gate: ['lagg_s < 1']\n")
    assert "not valid YAML" in bad("name: x\nsteps: [\n")
    assert "unknown key 'stepz'" in bad("name: x\nstepz: []\n")


def test_migration_step_needs_a_plan_first():
    assert "no earlier step plans one" in bad("name: x\nsteps:\n  - id: c\n    call: copy\n")


def test_on_failure_must_name_a_handler():
    assert "not a handler" in bad(
        "name: x\nsteps:\n  - id: p\n    call: plan_split\n    with: {source: A}\n    on_failure: [undo]\n")


def test_bind_params():
    pb = pbm.load(ROOT / "playbooks" / "split-host.yaml")
    assert pbm.bind_params(pb, {"source": "MySQL001A"})["freeze_budget_ms"] == 500
    with pytest.raises(PlaybookError, match="needs --set source"):
        pbm.bind_params(pb, {})
    with pytest.raises(PlaybookError, match="no param 'colour'"):
        pbm.bind_params(pb, {"source": "MySQL001A", "colour": "red"})
    with pytest.raises(PlaybookError, match="integer"):
        pbm.bind_params(pb, {"source": "MySQL001A", "freeze_budget_ms": "fast"})
    lines = pbm.dry_run(pb, pbm.bind_params(pb, {"source": "MySQL001A", "target": "MySQL003A"}))
    assert any("plan_split(source=MySQL001A, target=MySQL003A)" in ln for ln in lines)


def test_gates():
    g = Gate.parse("lag_s < 1 for 3 passes")
    hist = [{"lag_s": 0.5}, {"lag_s": 0.2}]
    assert not g.holds({}, hist, False)
    assert g.holds({}, hist + [{"lag_s": 0.1}], False)
    assert not g.holds({}, hist + [{"lag_s": 2}], False)
    ms = Gate.parse("predicted_freeze_ms < 0.3s")
    assert ms.value == 300 and ms.holds({"predicted_freeze_ms": 120}, [], False)
    assert not ms.holds({"predicted_freeze_ms": None}, [], False)
    assert Gate.parse("approval").holds({}, [], True) and not Gate.parse("approval").holds({}, [], False)
    assert pbm.parse_duration("500ms") == 0.5 and pbm.parse_duration("2h") == 7200


def test_steps_match_the_command_signatures():
    """Every step's parameters are keyword parameters of the function it calls."""
    import importlib
    import inspect

    for name, sdef in pbm.STEPS.items():
        mod, fn = sdef.target.split(":")
        sig = inspect.signature(getattr(importlib.import_module(mod), fn))
        params = list(sig.parameters)
        assert params[0] == "config", name
        if sdef.needs_migration:
            assert params[1] in ("mid", "migration_id"), name
        takes_any = any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values())
        for p in sdef.params:
            assert takes_any or p in sig.parameters, (name, p)


def test_failed_results_fail_the_step():
    class Preflight:
        ok = False

        def lines(self):
            return ["ok   binlog", "FAIL target db00002 is not empty"]

    step = pbm.Step("pf", "preflight", {}, [], None, 60, 0, [], 1)
    with pytest.raises(pbm.PlaybookRunError, match="db00002 is not empty"):
        pbm.check_result(step, Preflight())
    copy = pbm.Step("c", "copy", {}, [], None, 60, 0, [], 1)
    with pytest.raises(pbm.PlaybookRunError, match="paused"):
        pbm.check_result(copy, {"finished": False, "phase": "copying", "statuses": ["paused"]})
    pbm.check_result(copy, {"finished": True, "phase": "catching_up"})
    pbm.check_result(step, {"ok": True})


# -- values a playbook gives are bounded as the command line bounds them -------------------------------

BOUNDED = [
    ("    call: sleep\n    with: {seconds: 1}\n    timeout: -30\n", "timeout: must be at least 0"),
    ("    call: sleep\n    with: {seconds: 1}\n    retries: -2\n", "retries: must be at least 0"),
    ("    call: sleep\n    with: {seconds: -5}\n", "parameter seconds: must be at least 0"),
    ("    call: use_migration\n    with: {id: ../../etc}\n", "not a migration id"),
    ("    call: plan_move\n    with: {shards: 5-2, target: MySQL003A}\n", "shard range 5-2 is empty"),
    ("    call: plan_move\n    with: {shards: 0-99999999999999999999, target: MySQL003A}\n", "65535"),
    ("    call: plan_move\n    with: {shards: '1', target: 'no such'}\n", "not a valid host name"),
    ("    call: plan_move\n    with: {shards: '1', target: X}\n  - id: c\n    call: cutover\n"
     "    with: {freeze_budget_ms: -5}\n", "freeze_budget_ms: Input should be greater than or equal to 1"),
    ("    call: plan_move\n    with: {shards: '1', target: X}\n  - id: c\n    call: catchup\n"
     "    with: {passes: 0}\n", "passes: must be at least 1"),
]


@pytest.mark.parametrize(("step", "needle"), BOUNDED)
def test_playbook_values_are_bounded_like_the_cli(tmp_path, step, needle):
    p = tmp_path / "p.yaml"
    p.write_text("name: t\nsteps:\n  - id: s\n" + step)
    with pytest.raises(pbm.PlaybookError, match=needle.replace("(", r"\(")):
        pbm.load(p)


def test_set_values_are_bounded_too(tmp_path):
    p = tmp_path / "p.yaml"
    p.write_text("name: t\nparams:\n  budget: {type: int}\n  shards: {type: shards}\nsteps:\n"
                 "  - id: p\n    call: plan_move\n    with: {shards: '${shards}', target: X}\n"
                 "  - id: c\n    call: cutover\n    with: {freeze_budget_ms: '${budget}'}\n")
    pb = pbm.load(p)
    with pytest.raises(pbm.PlaybookError, match="shard range 5-2 is empty"):
        pbm.bind_params(pb, {"shards": "5-2"})
    params = pbm.bind_params(pb, {"shards": "1", "budget": "-5"})
    with pytest.raises(pbm.PlaybookError, match="freeze_budget_ms"):
        pbm.dry_run(pb, params)
    params = pbm.bind_params(pb, {"shards": "1", "budget": "300"})
    assert pbm.host_args(pb, params) == {"X"}
    with pytest.raises(pbm.PlaybookError, match="host X is not in the host registry"):
        pbm.check_hosts(pb, params, {"MySQL001A"})
    pbm.check_hosts(pb, params, {"X"})
