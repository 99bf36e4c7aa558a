"""The migration engine: the phases of moving shards from one pair to another.

plan -> preflight -> copy -> catch-up passes -> verify -> cutover -> cleanup
(and rollback after a cutover). Each phase reads and writes the migration
record (:mod:`migrator.engine.migration`) in ZooKeeper, so any worker can
resume it. Built on :mod:`migrator.fleet`; the operator tools
(:mod:`migrator.ops`) sit on top.
"""
