"""Every command's help: help text on every option and argument, a metavar (never a Python type such as
``<str>`` or ``<list[str]>``) on every option and argument, defaults said, ``-h``."""

from __future__ import annotations

import re

from migrator.cli import main

#: what typer prints for a parameter's Python type: ``<str>``, ``<int range>``, ``<list[str]>``, ``<path>``
PYTHON_TYPE = re.compile(r"<(str|int|float|bool|path|text|integer|uuid|datetime|choice|file|tuple|list|dict)\b"
                         r"[^>]*>|<[a-z]+\[[^\]>]*\]>")


def _commands():
    """(path, command, its context) of every command and group of the app, as ``migrator`` runs it."""
    out = []

    import typer._click as click

    def walk(cmd, path, parent):
        ctx = click.Context(cmd, info_name=path[-1] if path else "migrator", parent=parent, **cmd.context_settings)
        out.append((" ".join(path) or "migrator", cmd, ctx))
        for name, sub in sorted(getattr(cmd, "commands", {}).items()):
            walk(sub, [*path, name], ctx)

    walk(main.command(), [], None)
    return out


def _problems() -> list[str]:
    problems = []
    for path, cmd, ctx in _commands():
        if "-h" not in ctx.help_option_names:
            problems.append(f"{path}: no -h")
        for p in cmd.params:
            if getattr(p, "hidden", False):
                continue
            shown, help_text = p.get_help_record(ctx) or ("", "")
            label = f"{path} {'/'.join(p.opts)}"
            if not (p.help or "").strip():
                problems.append(f"{label}: no help text")
            if PYTHON_TYPE.search(" ".join(p.get_usage_pieces(ctx))) or PYTHON_TYPE.search(shown):
                problems.append(f"{label}: a Python type in its help row: {shown}")
            flag = p.param_type_name == "option" and (p.is_flag or p.count)
            if not p.metavar and not flag:
                problems.append(f"{label}: no metavar (typer makes one of the Python name)")
            if (p.param_type_name == "option" and p.default is None and not p.required and not flag
                    and "default" not in (p.help or "").lower() and "none:" not in (p.help or "").lower()):
                problems.append(f"{label}: default None not explained in its help")
    return problems


def test_every_option_has_help_a_metavar_and_a_shown_default():
    problems = _problems()
    assert not problems, "\n".join(problems)


def test_no_python_type_anywhere_in_help(capsys):
    """The rendered help of every command and group, Arguments section included."""
    shown = []
    for path, _cmd, ctx in _commands():
        text = ctx.get_help()
        shown.extend(f"{path}: {m.group(0)}" for m in PYTHON_TYPE.finditer(text))
    assert not shown, "\n".join(shown)
    assert main.run(["queue", "enqueue", "-h"]) == 0  # through the entry point too
    out = capsys.readouterr().out
    assert "QUEUE  The queue" in out and not PYTHON_TYPE.search(out), out


def test_h_is_help_everywhere(capsys):
    for argv in (["-h"], ["status", "-h"], ["partitions", "maintain", "-h"], ["queue", "pause", "-h"],
                 ["sandbox", "up", "-h"]):
        assert main.run(argv) == 0
        assert "Usage: migrator" in capsys.readouterr().out
