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


