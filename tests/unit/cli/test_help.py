"""Every command's help: help text on every option, no Python type for a metavar, defaults said, ``-h``."""

from __future__ import annotations

import typer
import typer.main

from migrator.cli import main


def _commands():
    """(path, command, its context) of every command and group of the app."""
    main._load_plugins()
    out = []

    import typer._click as click

    def walk(cmd, path, parent):
        ctx = click.Context(cmd, info_name=path[-1] if path else "migrator", parent=parent, **cmd.context_settings)
        out.append((" ".join(path) or "migrator", cmd, ctx))
        for name, sub in sorted(getattr(cmd, "commands", {}).items()):
            walk(sub, [*path, name], ctx)

    walk(typer.main.get_command(main.app), [], None)
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
            # an argument's row in the help always adds its type after the metavar (typer): its usage must not
            if "<" in " ".join(p.get_usage_pieces(ctx)) or (p.param_type_name == "option" and "<" in shown):
                problems.append(f"{label}: a Python type as metavar: {shown}")
            flag = p.param_type_name == "option" and (p.is_flag or p.count)
            if (p.param_type_name == "option" and p.default is None and not p.required and not flag
                    and "default" not in (p.help or "").lower() and "none:" not in (p.help or "").lower()):
                problems.append(f"{label}: default None not explained in its help")
    return problems


def test_every_option_has_help_a_metavar_and_a_shown_default():
    problems = _problems()
    assert not problems, "\n".join(problems)


def test_h_is_help_everywhere(capsys):
    for argv in (["-h"], ["status", "-h"], ["partitions", "maintain", "-h"], ["queue", "pause", "-h"],
                 ["sandbox", "up", "-h"]):
        assert main.run(argv) == 0
        assert "Usage: migrator" in capsys.readouterr().out
