"""RQ job entry points: thin functions that load state from ZooKeeper and call migrator."""
