"""`python -m migrator` is the `migrator` command."""

from migrator.cli.main import main

main()
