"""The phase commands register on a typer app: catchup, verify, cutover, rollback, cleanup."""

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
    assert "--passes" in res.output and "{ID}" in res.output


def test_cli_helpers_register_their_commands():
    import typer
    from typer.testing import CliRunner

    from migrator.cli import phases

    app = typer.Typer()
    for register in (phases.register_verify, phases.register_cutover, phases.register_rollback,
                     phases.register_cleanup):
        register(app)
    runner = CliRunner()
    for cmd, needle in (("verify", "--repair"), ("cutover", "--json"), ("rollback", "back"),
                        ("cleanup", "--now")):
        res = runner.invoke(app, [cmd, "--help"])
        assert res.exit_code == 0, res.output
        assert needle in res.output
