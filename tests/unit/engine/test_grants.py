"""Preflight's reading of SHOW GRANTS (no servers)."""

from __future__ import annotations

from migrator.engine.objects import OBJECT_GRANTS
from migrator.engine.preflight import FAST_APPLY_GRANT, REQUIRED_GRANTS, grant_findings, parse_global_grants
from migrator.sandbox import MIGRATOR_GRANTS


def test_sandbox_grants_are_exactly_what_preflight_requires():
    privs = {p.strip() for p in MIGRATOR_GRANTS.split(",")}
    # plus what carrying views and routines needs (SET USER only for another DEFINER), and the fast apply path's
    assert privs == set(REQUIRED_GRANTS) | (set(OBJECT_GRANTS) - {"SET USER"}) | {FAST_APPLY_GRANT}
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


def test_what_lets_the_migration_user_write_on_a_read_only_server():
    from migrator.engine.preflight import _bypasses_read_only

    admin = parse_global_grants(["GRANT SELECT, READ_ONLY ADMIN ON *.* TO `m`@`%`"])
    assert _bypasses_read_only(admin, "10.11.19-MariaDB-0+deb12u1-log") == "READ_ONLY ADMIN"
    assert _bypasses_read_only({"ALL PRIVILEGES"}, "10.11.19-MariaDB") == "ALL PRIVILEGES"
    # SUPER held READ_ONLY ADMIN before 10.11 only (seen on 10.11: a SUPER user's write gets 1290)
    assert _bypasses_read_only({"SUPER"}, "10.11.19-MariaDB") is None
    assert _bypasses_read_only({"SUPER"}, "10.6.18-MariaDB-log") == "SUPER"
    assert _bypasses_read_only(set(REQUIRED_GRANTS), "10.6.18-MariaDB") is None
    # granted for a read_only member, it is not "more than the migration needs"
    assert grant_findings(set(REQUIRED_GRANTS) | {"READ_ONLY ADMIN"}) == ([], [])


def test_the_gate_s_grants_are_among_the_required_ones():
    from migrator.engine.preflight import GATE_GRANTS

    assert set(GATE_GRANTS) <= set(REQUIRED_GRANTS) and {"TRIGGER", "BINLOG ADMIN"} <= set(GATE_GRANTS)
