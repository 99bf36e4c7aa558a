"""Identifiers are validated before they reach SQL: ``migrator.fleet.mysql.ident``/``qualified``,
the host-name check, queue names and the tombstone schema names."""

from __future__ import annotations

import pytest

from migrator.errors import MigratorError
from migrator.fleet.model import check_host_name
from migrator.fleet.mysql import ident, qualified

#: names MariaDB refuses (checked on 10.11: trailing space 1103, outside the BMP 1300)
ILLEGAL = ["", "a" * 65, "pins\x00", "pins ", "emoji\U0001f600", None, 5, b"pins"]
#: legal names, however odd: quoted with backticks (doubled inside) they are one identifier
LEGAL = ["pins`", "`pins`", "pins; DROP TABLE x", "pins --x", "db0.pins", "p\u00e9ns", "pins\n", " pins",
         "x' OR '1'='1", "../etc", "a b", "t$1", "pins/*", "select", "\u65e5\u672c", "`; DROP DATABASE x; --"]


@pytest.mark.parametrize("name", ILLEGAL)
def test_ident_refuses_illegal_names(name):
    with pytest.raises(MigratorError, match="not a legal MariaDB name"):
        ident(name)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", LEGAL)
def test_ident_quotes_every_legal_name_as_one_identifier(name):
    q = ident(name)
    assert q.startswith("`") and q.endswith("`")
    inner = q[1:-1]
    # no lone backtick inside: the quoted name cannot end early
    assert inner.replace("``", "").count("`") == 0
    assert inner.replace("``", "`") == name


@pytest.mark.parametrize("name", ["pins", "db00003", "_migrator_sentinel", "jobs_q_p0_dedupe", "A1", "a" * 64, "0"])
def test_ident_quotes_plain_identifiers(name):
    assert ident(name) == f"`{name}`"


def test_qualified_quotes_both_parts():
    assert qualified("db00001", "pins") == "`db00001`.`pins`"
    assert qualified("db00001`; DROP DATABASE x; --", "pins") == "`db00001``; DROP DATABASE x; --`.`pins`"
    assert qualified("db00001", "pins` WHERE 1=1; --") == "`db00001`.`pins`` WHERE 1=1; --`"
    with pytest.raises(MigratorError):
        qualified("db00001", "pins\x00")


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
