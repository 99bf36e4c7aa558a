"""README.md and docs/operations.md agree with ``--help``: every ``migrator ...`` command line they show names
a real command, and every option on it is one that command (or the root, for the global options) takes.

A documented line is a code span or a code-block line that starts with ``migrator``; alternatives are
separated by `` | `` (``migrator pause | resume | abort [--yes] ID``: each names a command of the same group,
or of the root). The tables of docs/operations.md that name flags for a list of commands are checked too.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from migrator.cli import main

ROOT = Path(__file__).resolve().parents[3]
DOCS = ("README.md", "docs/operations.md")
FLAG = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")


COMMANDS = set(main.command().commands)


def _tree():
    root = main.command()
    return root, {n for p in root.params for n in (*p.opts, *p.secondary_opts)}


def _opts(cmd) -> set[str]:
    return {n for p in cmd.params for n in (*p.opts, *p.secondary_opts)}


def _lines(text: str) -> list[tuple[int, str]]:
    """(line number, text) of every documented ``migrator ...`` command line."""
    out = []
    in_block = False
    for no, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_block = not in_block
            continue
        if in_block:
            body = line.strip()
            if body.startswith(".venv/bin/"):
                body = body[len(".venv/bin/"):]
            if body.startswith("migrator "):
                # a block line: the command, then (after a run of spaces or a #) what it does
                out.append((no, re.split(r"\s{3,}|\s#\s", body, maxsplit=1)[0]))
            continue
        out.extend((no, span) for span in re.findall(r"`(migrator [^`]+)`", line))
        # prose names a command's flag without the program's name: `verify --repair`, `sandbox down --purge`
        out.extend((no, f"migrator {span}") for span in re.findall(r"`([a-z][a-z-]*(?: [a-z][a-z-]*)* --[^`]+)`", line)
                   if span.split()[0] in COMMANDS)
    return out


def _resolve(group, words: list[str]):
    """The command the leading ``words`` name under ``group`` (None when the first word names none)."""
    cmd = group
    parent = group
    for w in words:
        sub = getattr(cmd, "commands", {}).get(w)
        if sub is None:
            break
        parent, cmd = cmd, sub
    return (None, None) if cmd is group else (cmd, parent)


def _problems() -> list[str]:
    root, global_opts = _tree()
    problems = []
    checked = 0
    for doc in DOCS:
        for no, line in _lines((ROOT / doc).read_text()):
            group = root
            for segment in line[len("migrator "):].split(" | "):
                words = [w for w in re.split(r"[\s\[\]()]+", segment) if w]
                cmd, parent = _resolve(group, words)
                if cmd is None:
                    cmd, parent = _resolve(root, words)
                if cmd is None:
                    if segment is not line[len("migrator "):].split(" | ")[0]:
                        continue  # an alternative value, not a command (`--objective bytes | rows`)
                    if words and not words[0].startswith("-"):
                        problems.append(f"{doc}:{no}: `migrator {words[0]}` is not a command: {line}")
                    cmd, parent = root, root
                group = parent
                known = _opts(cmd) | global_opts
                for flag in FLAG.findall(segment):
                    checked += 1
                    if flag not in known:
                        problems.append(f"{doc}:{no}: {flag} is not an option of `migrator {cmd.name}`: {line}")
    assert checked > 80, checked  # the docs were read
    return problems


def test_every_documented_command_line_matches_the_help():
    problems = _problems()
    assert not problems, "\n".join(problems)


def _section(start: str, end: str) -> str:
    text = (ROOT / "docs" / "operations.md").read_text()
    return text[text.index(start):text.index(end)]


def _command(*words: str):
    cmd = main.command()
    for w in words:
        cmd = cmd.commands[w]
    return cmd


@pytest.mark.parametrize("words", [("split",), ("move",), ("move-partition",), ("rebalance",), ("set",)])
def test_the_limits_table_is_taken_at_launch_and_by_set(words):
    """"The limits a migration runs under are set at launch ... with the same flags as ... migrator set"."""
    table = _section("| flag | what it limits | default |", "A rebalance id")
    flags = {f for row in table.splitlines()[2:] if row.count("|") > 2 for f in FLAG.findall(row.split("|")[1])}
    assert len(flags) >= 8, flags
    if words == ("set",):  # on a running migration, --postpone-cutover is `migrator postpone ID [--release]`
        flags.discard("--postpone-cutover")
        assert "--release" in _opts(_command("postpone"))
    opts = _opts(_command(*words))
    assert flags <= opts, sorted(flags - opts)


def test_the_flag_table_names_flags_the_commands_take():
    table = _section("| flag | meaning, on every command that takes it |", "A duration flag")
    root = main.command()
    problems = []
    for row in table.splitlines()[2:]:
        cells = row.split("|")
        if len(cells) < 3:
            continue
        flag_cell, meaning = cells[1], cells[2]
        flags = FLAG.findall(flag_cell)
        # the commands the row names in code spans, with the flag named last before them (else the row's)
        current = flags
        for span in re.findall(r"`([^`]+)`", meaning):
            if span.startswith("--"):
                current = FLAG.findall(span)
                continue
            words = span.split()
            cmd, _parent = _resolve(root, words)
            if cmd is None:
                continue
            own = FLAG.findall(span) or current
            for flag in own:
                if flag not in _opts(cmd) | _opts(root):
                    problems.append(f"{flag} is not an option of `migrator {span}` ({row.strip()[:60]})")
    assert not problems, "\n".join(problems)
