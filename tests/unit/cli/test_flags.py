"""The flags of the command line: root options anywhere, ``-h``, completion."""

from __future__ import annotations

import typer
import typer.main

from migrator.cli import main


def _hoist(*argv: str) -> list[str]:
    main._load_plugins()
    return main.hoist_root_options(list(argv))


def test_root_options_after_the_subcommand_move_to_the_front():
    assert _hoist("status", "m-1", "-c", "prod.toml") == ["-c", "prod.toml", "status", "m-1"]
    assert _hoist("status", "--config=p.toml", "-v", "--json") == ["--config=p.toml", "-v", "status", "--json"]
    assert _hoist("queue", "pause", "q", "--config", "p") == ["--config", "p", "queue", "pause", "q"]
    assert _hoist("-c", "a", "status") == ["-c", "a", "status"]


def test_values_and_double_dash_are_left_alone():
    # "-c" here is the value of --to (refused later as a host name), not the root option
    assert _hoist("move", "--to", "-c", "--shards", "1") == ["move", "--to", "-c", "--shards", "1"]
    assert _hoist("status", "--", "-c", "x") == ["status", "--", "-c", "x"]
    assert _hoist("no-such-command", "-c", "p") == ["no-such-command", "-c", "p"]


def test_a_subcommands_own_option_of_the_same_name_stays_its_own():
    app = typer.Typer()

    @app.callback()
    def root(config: str = typer.Option("", "--config", "-c", help="root")) -> None: ...

    @app.command()
    def build(config: str = typer.Option("", "-c", help="its own"), other: str = "") -> None: ...

    @app.command()
    def show(name: str = "") -> None: ...

    cmd = typer.main.get_command(app)
    assert main.hoist_root_options(["build", "-c", "x"], cmd) == ["build", "-c", "x"]
    assert main.hoist_root_options(["build", "--config", "x"], cmd) == ["--config", "x", "build"]
    assert main.hoist_root_options(["show", "-c", "x"], cmd) == ["-c", "x", "show"]


def test_completion_is_offered():
    main._load_plugins()
    names = {n for p in typer.main.get_command(main.app).params for n in p.opts}
    assert {"--install-completion", "--show-completion", "-c", "--config"} <= names



def test_a_duration_is_a_bare_number_in_the_flags_unit_or_carries_its_own():
    import pytest

    from migrator.cli.inputs import parse_duration

    assert parse_duration("1.5s") == parse_duration("1500ms") == parse_duration("1.5") == 1.5
    assert parse_duration("2m") == 120 and parse_duration("1h") == 3600 and parse_duration(" 2 S ") == 2
    assert parse_duration("250", "ms") == 250 and parse_duration("1.5s", "ms") == 1500
    assert parse_duration(5.0) == 5.0 and parse_duration("-1") == -1  # the flag's bounds refuse it, naming them
    for bad in ("", "s", "1.5x", "1..2", "nan", "inf", "1e999", "2 days"):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_a_duration_flag_refuses_garbage_in_one_line(capsys):
    assert main.run(["status", "--interval", "soon"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--interval soon" in err and "1500ms" in err
    assert main.run(["partitions", "maintain", "--lock-wait", "1500ms"]) == 2
    assert "whole seconds" in capsys.readouterr().err


def test_every_duration_flag_without_a_unit_in_its_name_takes_a_unit():
    from migrator.cli.inputs import DURATION_METAVAR

    main._load_plugins()
    seen = []

    def walk(cmd, path):
        for p in cmd.params:
            if p.param_type_name == "option" and p.metavar == DURATION_METAVAR:
                seen.append((path, p.opts[0]))
            elif p.param_type_name == "option" and p.metavar == "S":
                assert p.opts[0].endswith("-s"), (path, p.opts)  # seconds in its name, or it takes 1.5s too
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, f"{path} {name}")

    walk(typer.main.get_command(main.app), "migrator")
    flags = {f for _, f in seen}
    assert {"--max-lag", "--timeout", "--interval", "--lease", "--window", "--duration", "--delay"} <= flags


def test_counts_have_their_own_names_and_the_old_spelling_still_works(capsys):
    assert main.run(["id", "mod-shard", "k", "--shard-count", "16"]) == 0
    new = capsys.readouterr().out
    assert main.run(["id", "mod-shard", "k", "--shards", "16"]) == 0  # deprecated, hidden, still the count
    assert capsys.readouterr().out == new
    assert main.run(["sandbox", "up", "-h"]) == 0
    shown = capsys.readouterr().out
    assert "--shard-count" in shown and "--pair-count" in shown and "--shards" not in shown
    assert "--pairs" not in shown.replace("--spare-pairs", "")
