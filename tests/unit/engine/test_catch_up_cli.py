"""`register_catchup` adds the catchup command to a typer app."""

from __future__ import annotations

import typer
from typer.testing import CliRunner

from migrator.cli.phases import register_catchup


def test_register_cli_adds_catchup_with_passes_option():
    app = typer.Typer()
    register_catchup(app)

    @app.command("other")
    def other() -> None:  # a second command so typer keeps subcommand names
        pass

    res = CliRunner().invoke(app, ["catchup", "--help"])
    assert res.exit_code == 0, res.output
    assert "--passes" in res.output and "migration_id" in res.output.lower()
