"""RQ entry points only: thin functions with plain arguments (ids, paths) that call the command
functions of :mod:`migrator.ops.command` (or an engine phase) and record progress in ``job.meta``.

Nothing in :mod:`migrator` imports this package: steps are enqueued by the dotted path of their
entry point (:mod:`migrator.ops.steps`).
"""
