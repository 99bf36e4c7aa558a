"""Preflight's reading of SHOW GRANTS (no servers)."""

from __future__ import annotations

from migrator.engine.objects import OBJECT_GRANTS
from migrator.engine.preflight import REQUIRED_GRANTS, grant_findings, parse_global_grants
from migrator.sandbox import MIGRATOR_GRANTS


def test_sandbox_grants_are_exactly_what_preflight_requires():
    privs = {p.strip() for p in MIGRATOR_GRANTS.split(",")}
    # plus what carrying views and routines needs (SET USER only for another DEFINER)
    assert privs == set(REQUIRED_GRANTS) | (set(OBJECT_GRANTS) - {"SET USER"})
    assert grant_findings(privs) == ([], [])


def test_parse_global_grants_ignores_db_grants_and_password():
    rows = [
        "GRANT SELECT, INSERT, REPLICATION CLIENT, REPLICA MONITOR, SUPER ON *.* TO `m`@`%` "
        "IDENTIFIED BY PASSWORD '*AB'",
        "GRANT ALL PRIVILEGES ON `db00001`.* TO `m`@`%`",
        "GRANT USAGE ON *.* TO `x`@`%`",
    ]
    privs = parse_global_grants(rows)
    assert privs == {"SELECT", "INSERT", "BINLOG MONITOR", "SLAVE MONITOR", "SUPER"}
    missing, extra = grant_findings(privs)
    assert "UPDATE" in missing and "SELECT" not in missing and extra == ["SUPER"]


def test_all_privileges_is_enough_but_more_than_needed():
    grants = ["GRANT ALL PRIVILEGES ON *.* TO `root`@`localhost` WITH GRANT OPTION"]
    assert grant_findings(parse_global_grants(grants)) == ([], ["ALL PRIVILEGES"])
