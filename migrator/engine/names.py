"""The names the engine gives to what it creates on the servers.

Every phase that touches them agrees on these: the copy carries the sentinel
table over, verify and catch-up let its rows through, the cutover writes its
sentinel row and renames the source tables into the tombstone schemas, a
rollback renames them back, and cleanup drops them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from migrator.fleet.mysql import ident, qualified

#: one per moving db, on both sides: the cutover's sentinel row proves the drain (see :mod:`migrator.engine.cutover`)
SENTINEL_TABLE = "_migrator_sentinel"


def tomb_suffix(migration_id: str) -> str:
    return hashlib.sha1(migration_id.encode()).hexdigest()[:8]


def tomb_db(migration_id: str, db: str) -> str:
    """The tombstone schema of ``db`` for this migration: ``_tomb_<8 hex>_db00005``."""
    name = f"_tomb_{tomb_suffix(migration_id)}_{db}"
    ident(name)
    return name


def rename_tomb_tables(conn: Any, migration_id: str, tables: Iterable[tuple[str, str]], *, to_live: bool,
                       tag: str = "", server: str = "") -> None:
    """Rename the (db, table) pairs from their tombstone schema to ``db`` (``to_live``) or back, in
    one RENAME TABLE statement on ``conn`` (``tag``: the statement's leading comment; ``server``: the
    host's name, for a refusal). Nothing to do for no pairs. Used where the old master's tables change
    sides of a flip back: the rollback's own flip, and the settle of one that died. No client writes
    them then (the map routes their shards elsewhere), but a stale reader may hold one: the RENAME
    waits in short tries (:func:`migrator.engine.mdl.run_locking`), so nothing queues behind it for long."""
    from migrator.engine.mdl import run_locking

    parts, locked = [], []
    for db, t in tables:
        tomb = tomb_db(migration_id, db)
        a, b = (qualified(tomb, t), qualified(db, t)) if to_live else (qualified(db, t), qualified(tomb, t))
        parts.append(f"{a} TO {b}")
        locked += [(tomb, t), (db, t)]
    if not parts:
        return
    run_locking(conn, f"{tag}RENAME TABLE " + ", ".join(parts), tables=locked, server=server or "the old master",
                what="the tombstone RENAME")
