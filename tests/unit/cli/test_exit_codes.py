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
