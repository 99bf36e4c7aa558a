"""The fleet: the foundation every other layer stands on.

The model of a sharded fleet (virtual shards, master-master pairs, 64-bit ids,
the shard map and host registry in ZooKeeper) and access to its servers
(ZooKeeper, MySQL, GTID positions). Nothing here knows about migrations: the
migration engine (:mod:`migrator.engine`), the queue service
(:mod:`migrator.queue`) and the sandbox build on it.
"""
