"""The exit-code table of docs/operations.md is migrator.errors.ExitCode, code for code and name for name."""

from __future__ import annotations

import re
from pathlib import Path

from migrator.errors import ExitCode

DOC = Path(__file__).resolve().parents[3] / "docs" / "operations.md"


def test_the_documented_table_is_the_code():
    text = DOC.read_text()
    section = text[text.index("### Exit codes"):text.index("## When a cutover is refused")]
    rows = re.findall(r"^\| (\d+) \| ([A-Z_]+) \|", section, re.M)
    assert {int(c): n for c, n in rows} == {int(e): e.name for e in ExitCode}


def test_codes_a_script_acts_on_differently_are_distinct():
    assert len({int(e) for e in ExitCode}) == len(ExitCode)
    assert ExitCode.USAGE != ExitCode.CONFIG  # a usage error and a config error are fixed in different places


def test_every_code_is_driven_through_the_cli_by_a_test():
    """Each code of the table is asserted by a test of tests/integration/cli that runs one of its causes
    through the real CLI (``exit_code=ExitCode.X`` or ``returncode == ExitCode.X``)."""
    tests = DOC.parents[1] / "tests" / "integration" / "cli"
    text = "\n".join(p.read_text() for p in tests.glob("test_*.py"))
    asserted = set(re.findall(r"(?:exit_code=|returncode == |code == )ExitCode\.([A-Z_]+)", text))
    assert {e.name for e in ExitCode} <= asserted, sorted({e.name for e in ExitCode} - asserted)
