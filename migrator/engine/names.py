"""The names the engine gives to what it creates on the servers.

Every phase that touches them agrees on these: the copy carries the sentinel
table over, verify and catch-up let its rows through, the cutover writes its
sentinel row and renames the source tables into the tombstone schemas, a
rollback renames them back, and cleanup drops them.
"""

from __future__ import annotations

import hashlib

from migrator.fleet.mysql import ident

#: one per moving db, on both sides: the cutover's sentinel row proves the drain (see :mod:`migrator.engine.cutover`)
SENTINEL_TABLE = "_migrator_sentinel"


def tomb_suffix(migration_id: str) -> str:
    return hashlib.sha1(migration_id.encode()).hexdigest()[:8]


def tomb_db(migration_id: str, db: str) -> str:
    """The tombstone schema of ``db`` for this migration: ``_tomb_<8 hex>_db00005``."""
    name = f"_tomb_{tomb_suffix(migration_id)}_{db}"
    ident(name)
    return name
