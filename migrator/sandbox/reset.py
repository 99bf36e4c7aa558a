"""A fresh fleet for every test on one shared sandbox.

Runs in the test session between tests (``tests/conftest.py``): instead of a
new sandbox per test (minutes), every user database is dropped and the shards
are seeded again (seconds).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from migrator.fleet.model import ShardMap

if TYPE_CHECKING:  # the sandbox package imports this module
    from migrator.sandbox import Sandbox

SYSTEM_SCHEMAS = frozenset({"mysql", "information_schema", "performance_schema", "sys"})


def reset_fleet(sandbox: Sandbox, smap: ShardMap, *, rows: int) -> None:
    """Drop every user database on every host (unlogged, each host itself), then
    recreate and seed the shards of ``smap`` on their masters. Tests use this for
    per-test isolation on the shared sandbox."""
    for p in sandbox.mariadb_procs():
        with sandbox.root_conn(p.name) as c, c.cursor() as cur:
            cur.execute("SET sql_log_bin=0")
            cur.execute("SHOW DATABASES")
            for (db,) in cur.fetchall():
                if db not in SYSTEM_SCHEMAS:
                    cur.execute(f"DROP DATABASE `{db}`")
    sandbox.seed_shards(smap, sandbox.hosts(), sandbox.credentials(), rows=rows)
    sandbox.wait_pairs_converged()
