"""Identifiers are validated before they reach SQL: ``migrator.fleet.mysql.ident``/``qualified``,
the host-name check, queue names and the tombstone schema names."""

from __future__ import annotations

import pytest

from migrator.errors import MigratorError
from migrator.fleet.model import check_host_name
from migrator.fleet.mysql import ident, qualified

HOSTILE = [
    "", "a" * 65, "pins`", "`pins`", "pins; DROP TABLE x", "pins -- ", "db0.pins", "pins\x00", "p\u00e9ns",
    "pins\n", " pins", "x' OR '1'='1", "../etc", "a b", "t$1", "pins/*", None, 5, b"pins",
]


@pytest.mark.parametrize("name", HOSTILE)
def test_ident_refuses_anything_but_plain_identifiers(name):
    with pytest.raises(MigratorError, match="not allowed"):
        ident(name)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["pins", "db00003", "_migrator_sentinel", "jobs_q_p0_dedupe", "A1", "a" * 64, "0"])
def test_ident_quotes_plain_identifiers(name):
    assert ident(name) == f"`{name}`"


def test_qualified_checks_both_parts():
    assert qualified("db00001", "pins") == "`db00001`.`pins`"
    with pytest.raises(MigratorError):
        qualified("db00001`; DROP DATABASE x; --", "pins")
    with pytest.raises(MigratorError):
        qualified("db00001", "pins` WHERE 1=1; --")


@pytest.mark.parametrize("name", ["", "1MySQL", "MySQL001A; rm -rf /", "My SQL", "MySQL001A'", "a" * 64,
                                  "MySQL001A\n", "../MySQL001A", "MySQL`001A", None])
def test_host_names_are_checked(name):
    with pytest.raises(MigratorError, match="not valid"):
        check_host_name(name)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["MySQL001A", "db-7.example.com", "h_1", "a" * 63])
def test_good_host_names_pass(name):
    assert check_host_name(name) == name


@pytest.mark.parametrize("name", ["", "q`x", "q; DROP TABLE t", "q-1", "q.x", "q" * 41, "../q", "q\n"])
def test_queue_names_are_checked(name):
    from migrator.queue.model import check_queue_name

    with pytest.raises(MigratorError, match="not valid"):
        check_queue_name(name)


def test_tombstone_schema_names_are_identifiers():
    from migrator.engine.names import tomb_db

    assert ident(tomb_db("m-20261122-155024-7e9460", "db00003"))
