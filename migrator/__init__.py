"""migrator: shard migration and rebalancing for sharded MySQL/MariaDB fleets."""

__version__ = "0.1.0"
