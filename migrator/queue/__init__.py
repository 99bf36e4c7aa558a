"""The queue service: a Pinlater/Pacer-style MySQL-backed job queue on the sharded fleet.

It is the live workload that shard migrations must not disturb. It uses the
fleet model and :class:`migrator.fleet.router.ShardRouter`; the migration engine
never imports it (the two meet only at the ZooKeeper contract documented in
:mod:`migrator.queue.storage` and the maintenance pause node documented in
:mod:`migrator.queue.maintenance`).

Modules: ``model`` (API models), ``errors`` (stable error codes),
``partitioning`` (bucket naming and maintenance planning, pure), ``storage``
(SQL on one partition), ``catalog`` (queue records in ZooKeeper), ``executor``
(shard-aware statement execution), ``service`` (the API as Python),
``api``/``client`` (HTTP), ``broker`` (dequeue brokers), ``worker``,
``maintenance``, ``load``/``ledger`` (load generator and its checker),
``metrics``.
"""
