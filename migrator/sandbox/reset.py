"""A fresh fleet for every test on one shared sandbox.

Runs in the test session between tests (``tests/conftest.py``): instead of a
new sandbox per test (minutes), every user database is dropped and the shards
are seeded again (seconds).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pymysql

from migrator.fleet.model import ShardMap

ER_LOCK_WAIT_TIMEOUT = 1205

if TYPE_CHECKING:  # the sandbox package imports this module
    from migrator.sandbox import Sandbox

SYSTEM_SCHEMAS = frozenset({"mysql", "information_schema", "performance_schema", "sys"})
#: how long a DROP DATABASE waits for a connection left holding a lock in it (a previous test's client
#: left in a transaction) before that connection is ended
DROP_LOCK_WAIT_S = 10


def _drop(cur: Any, db: str) -> None:
    """DROP DATABASE ``db``; a connection that holds a lock in it past :data:`DROP_LOCK_WAIT_S` is killed
    (named by ``METADATA_LOCK_INFO``, else every connection using the schema), then the drop runs again."""
    try:
        cur.execute(f"DROP DATABASE `{db}`")
        return
    except pymysql.err.OperationalError as exc:
        if exc.args[0] != ER_LOCK_WAIT_TIMEOUT:
            raise
    try:
        cur.execute("SELECT DISTINCT THREAD_ID FROM information_schema.METADATA_LOCK_INFO "
                    "WHERE TABLE_SCHEMA = %s AND THREAD_ID <> CONNECTION_ID() AND THREAD_ID IN "
                    "(SELECT ID FROM information_schema.PROCESSLIST WHERE USER <> 'system user')", (db,))
        holders = [r[0] for r in cur.fetchall()]
    except pymysql.err.MySQLError:
        holders = []
    if not holders:
        cur.execute("SELECT ID FROM information_schema.PROCESSLIST WHERE DB = %s AND ID <> CONNECTION_ID() "
                    "AND USER <> 'system user'", (db,))
        holders = [r[0] for r in cur.fetchall()]
    for tid in holders:
        try:
            cur.execute(f"KILL CONNECTION {int(tid)}")
        except pymysql.err.MySQLError:
            pass  # ended by itself meanwhile
    cur.execute(f"DROP DATABASE `{db}`")


def reset_fleet(sandbox: Sandbox, smap: ShardMap, *, rows: int) -> None:
    """Drop every user database on every host (unlogged, each host itself), then
    recreate and seed the shards of ``smap`` on their masters. Tests use this for
    per-test isolation on the shared sandbox."""
    for p in sandbox.mariadb_procs():
        with sandbox.root_conn(p.name) as c, c.cursor() as cur:
            cur.execute("SET sql_log_bin=0")
            cur.execute(f"SET SESSION lock_wait_timeout = {DROP_LOCK_WAIT_S}")
            cur.execute("SHOW DATABASES")
            for (db,) in cur.fetchall():
                if db not in SYSTEM_SCHEMAS:
                    _drop(cur, db)
    sandbox.seed_shards(smap, sandbox.hosts(), sandbox.credentials(), rows=rows)
    sandbox.wait_pairs_converged()
