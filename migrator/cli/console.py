"""CLI: `migrator console`, the read-only web page over the fleet, its migrations and rebalances."""

from __future__ import annotations

import typer

from migrator.cli.helpers import load_config
from migrator.cli.inputs import DURATION_METAVAR, at_least, checked, duration_parser


def console_cmd(
    listen: str = typer.Option("127.0.0.1:8080", "--listen", help="HOST:PORT to serve the console on.",
                               metavar="HOST:PORT"),
    measure_every: float = typer.Option(30.0, "--measure-every", callback=checked(at_least(1), "--measure-every"),
                                        help="Seconds between measurements of bytes and writes/s per shard.",
                                        metavar=DURATION_METAVAR, parser=duration_parser("--measure-every")),
    window: float = typer.Option(2.0, "--window", callback=checked(at_least(0.1), "--window"),
                                 help="Seconds of binlog each measurement samples write rates from.",
                                     metavar=DURATION_METAVAR, parser=duration_parser("--window")),
) -> None:
    """Serve the operator console: pairs, ranges, bytes and write rates, migrations with their copy and
    catch-up progress, rebalances and their plans, live in a browser (token: [queue] token of the secrets
    file)."""
    from migrator.cli.options import listen_address
    from migrator.ops.console.app import serve

    host, port = listen_address(listen)
    serve(load_config(), port=port, bind=host, measure_every_s=measure_every, window_s=window)


def register(app: typer.Typer) -> None:
    """Add ``console`` to the ``migrator`` app."""
    app.command("console")(console_cmd)
