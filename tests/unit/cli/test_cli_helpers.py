"""The helpers every command module shares, how main.py loads the command modules, and their import graph."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest
import typer

from migrator.cli import helpers, main


def test_duration():
    assert helpers.duration(float("inf")) == "unknown"
    assert helpers.duration(0) == "0s"
    assert helpers.duration(59.4) == "59s"
    assert helpers.duration(125) == "2m05s"
    assert helpers.duration(3723) == "1h02m03s"


def test_human_bytes():
    assert helpers.human_bytes(512) == "512 B"
    assert helpers.human_bytes(1536) == "1.5 KiB"
    assert helpers.human_bytes(3 * 1024**3) == "3.0 GiB"
    assert helpers.human_bytes(5 * 1024**5) == "5120.0 TiB"


def test_shard_runs():
    assert helpers.shard_runs([(4, 7), (9, 9)]) == "4-7,9"
    assert helpers.shard_runs([]) == ""


def test_load_config_reads_the_path_the_root_options_chose(monkeypatch):
    seen = []
    monkeypatch.setattr(helpers.config_mod, "load", lambda path: seen.append(path) or "cfg")
    monkeypatch.setattr(helpers.state, "config_path", "/etc/migrator.toml")
    assert helpers.load_config() == "cfg" and seen == ["/etc/migrator.toml"]
    assert main.load_config is helpers.load_config and main.state is helpers.state


def test_the_root_option_sets_the_shared_state(monkeypatch):
    monkeypatch.setattr(helpers.state, "config_path", None)
    monkeypatch.setattr(main, "setup_logging", lambda verbose: None)
    main._root(config="/x/migrator.toml", verbose=False, _version=False)
    assert helpers.state.config_path == "/x/migrator.toml"


@pytest.fixture
def fresh_app(monkeypatch):
    """main's plugin loading against an empty app, so the real one is left as it is."""
    app = typer.Typer()
    monkeypatch.setattr(main, "app", app)
    monkeypatch.setattr(main, "_loaded", [])
    return app


def test_a_missing_command_module_is_an_error_naming_it(fresh_app, monkeypatch):
    monkeypatch.setattr(main, "PLUGINS", ("migrator.cli.console", "migrator.cli.no_such_module"))
    with pytest.raises(main.PluginMissing) as info:
        main._load_plugins()
    assert "migrator.cli.no_such_module" in info.value.message
    assert "reinstall" in info.value.message and "pip install -e ." in info.value.message


def test_a_missing_command_module_is_one_line_and_an_exit_code(fresh_app, monkeypatch):
    monkeypatch.setattr(main, "PLUGINS", ("migrator.cli.no_such_module",))
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    code = main.run(["--help"])
    assert code == main.PluginMissing.exit_code != 0
    lines = err.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "migrator.cli.no_such_module" in lines[0]


def test_a_missing_dependency_of_a_command_module_is_not_taken_for_the_module(fresh_app, monkeypatch):
    import importlib

    def import_module(name):
        raise ModuleNotFoundError("No module named 'somedep'", name="somedep")

    monkeypatch.setattr(importlib, "import_module", import_module)
    with pytest.raises(ModuleNotFoundError) as info:
        main._load_plugins()
    assert info.value.name == "somedep"


def test_every_command_module_registers_module_level_functions(fresh_app):
    main._load_plugins()
    import typer.main

    for cmd in fresh_app.registered_commands:
        fn = cmd.callback
        assert "<locals>" not in fn.__qualname__, (cmd.name, fn.__qualname__)
        assert getattr(sys.modules[fn.__module__], fn.__name__) is fn
    for group in fresh_app.registered_groups:
        for cmd in group.typer_instance.registered_commands:
            assert "<locals>" not in cmd.callback.__qualname__, (group.name, cmd.name)
    assert "rebalance" in typer.main.get_command(fresh_app).commands


def test_no_import_cycle_between_the_command_modules():
    """rebalance.py and helpers.py stand alone: importing either pulls in no other command module (report.py
    is where every command's output goes, as helpers.py what they share)."""
    code = ("import sys; import migrator.cli.rebalance, migrator.cli.helpers; "
            "import json; print(json.dumps(sorted(m for m in sys.modules if m.startswith('migrator.cli.'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert json.loads(out.stdout) == ["migrator.cli.failures", "migrator.cli.helpers", "migrator.cli.inputs",
                                      "migrator.cli.options", "migrator.cli.rebalance", "migrator.cli.report"]
