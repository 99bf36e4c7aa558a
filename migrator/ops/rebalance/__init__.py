"""Fleet rebalancing: measure shard costs, plan moves, run them as migrations."""
