"""``sandbox down --purge`` deletes only a directory holding a sandbox this tool made; a state file
it cannot read is one clear error, not a traceback; ``up`` never starts in a directory that holds
something else."""

from __future__ import annotations

import pytest

from migrator.errors import SandboxError
from migrator.sandbox import Sandbox
from migrator.sandbox.procs import SandboxState


def _made(directory) -> Sandbox:
    sb = Sandbox(directory)
    directory.mkdir(exist_ok=True)
    sb.state = SandboxState(dir=str(sb.dir), base_port=100, pairs=1, spare_pairs=0, shards=2, rows=0,
                            procs=sb._layout(1, 0, 100))
    sb._save()
    return Sandbox(directory)


def test_purge_refuses_a_directory_that_is_not_a_sandbox(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(SandboxError, match="not a sandbox this tool made.*no sandbox state file"):
        Sandbox(tmp_path).down(purge=True)
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_purge_refuses_an_empty_directory_it_did_not_make(tmp_path):
    with pytest.raises(SandboxError, match="not a sandbox this tool made"):
        Sandbox(tmp_path).down(purge=True)
    assert tmp_path.is_dir()


def test_purge_refuses_a_state_file_naming_another_directory(tmp_path):
    _made(tmp_path / "a")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "state.json").write_text((tmp_path / "a" / "state.json").read_text())
    (tmp_path / "b" / "keep").write_text("x")
    with pytest.raises(SandboxError, match="names another directory"):
        Sandbox(tmp_path / "b").down(purge=True)
    assert (tmp_path / "b" / "keep").exists()


def test_purge_removes_a_sandbox_it_made(tmp_path):
    sb = _made(tmp_path / "sb")
    assert sb.made_here()
    assert sb.down(purge=True) == []
    assert not (tmp_path / "sb").exists()


def test_purge_of_a_missing_directory_does_nothing(tmp_path):
    assert Sandbox(tmp_path / "nothing").down(purge=True) == []


@pytest.mark.parametrize("text", ["{not json", "[]", '{"dir": "/x"}', ""])
def test_an_unreadable_state_file_is_one_clear_error(tmp_path, text):
    (tmp_path / "state.json").write_text(text)
    with pytest.raises(SandboxError, match="not a sandbox state file this tool can read") as info:
        Sandbox(tmp_path)
    assert "\n" not in str(info.value)


def test_up_refuses_a_directory_holding_something_else(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(SandboxError, match="holds no sandbox"):
        Sandbox(tmp_path).up(log=lambda *_: None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
