"""The copy's SQL builders and checkpoint encoding (no servers)."""

from __future__ import annotations

import datetime as dt
import decimal

import pytest

from migrator.engine.chunks import after_key_clause, create_table_sql, decode_key, encode_key, replace_statements
from migrator.fleet.mysql import InvalidIdentifier


def test_keyset_clause_single_and_composite():
    assert after_key_clause(("id",), None) == ("1=1", [])
    sql, args = after_key_clause(("id",), (5,))
    assert sql == "`id` >= %s AND ((`id` > %s))" and args == [5, 5]
    sql, args = after_key_clause(("a", "b", "c"), (1, "x", 3))
    assert sql == ("`a` >= %s AND ((`a` > %s) OR (`a` = %s AND `b` > %s) OR "
                   "(`a` = %s AND `b` = %s AND `c` > %s))")
    assert args == [1, 1, 1, "x", 1, "x", 3]


def test_keyset_clause_is_exactly_the_rows_after_the_key():
    rows = [(a, b) for a in range(4) for b in range(4)]
    last = (1, 2)
    sql, args = after_key_clause(("a", "b"), last)
    # evaluate the generated predicate in Python over the composite key space
    expr = sql.replace("`", "").replace("AND", "and").replace("OR", "or").replace(" = ", " == ")
    for v in args:
        expr = expr.replace("%s", repr(v), 1)
    assert [r for r in rows if eval(expr, {}, {"a": r[0], "b": r[1]})] == [r for r in rows if r > last]


def test_keyset_clause_quotes_identifiers_and_checks_arity():
    assert "`a; DROP``x`" in after_key_clause(("a; DROP`x",), (1,))[0]
    with pytest.raises(InvalidIdentifier):
        after_key_clause(("a\x00",), (1,))
    with pytest.raises(Exception, match="key values"):
        after_key_clause(("a", "b"), (1,))


def test_key_encoding_round_trips_every_key_type():
    key = (7, "ü😀", b"\x00\xff'", dt.datetime(2024, 1, 2, 3, 4, 5, 678901), dt.date(2020, 2, 29),
           decimal.Decimal("-12.3400"), dt.timedelta(hours=-838, seconds=1), None, 1.5)
    enc = encode_key(key)
    import json

    assert decode_key(json.loads(json.dumps(enc))) == key
    assert encode_key(None) is None and decode_key(None) is None


def test_replace_statements_split_by_size_and_keep_every_row():
    tuples = [f"({i},'{'x' * 100}')" for i in range(10)]
    stmts = replace_statements("db00001", "t", ("id", "body"), tuples, max_bytes=350)
    assert len(stmts) == 4  # 3 + 3 + 3 + 1 tuples of ~106 bytes
    head = "/* migrator:copy */ REPLACE INTO `db00001`.`t` (`id`, `body`) VALUES "
    assert all(s.startswith(head) for s in stmts)
    assert ",".join(s[len(head):] for s in stmts) == ",".join(tuples)
    assert replace_statements("d", "t", ("a",), []) == []


def test_chunk_select_renders_rows_on_the_source():
    from migrator.engine.chunks import chunk_select
    from migrator.engine.inspector import TableInfo

    info = TableInfo(db="d", table="t", columns=("id", "b", "f", "s", "k"), key=("id",), key_kind="primary",
                     create_sql="", float_columns=("f",),
                     types={"id": "bigint", "b": "varbinary", "f": "float", "s": "varchar", "k": "bit"})
    sql, args = chunk_select(info, (3,), 100)
    assert sql == ("/* migrator:copy */ SELECT `id`, CONCAT('(', CONVERT(QUOTE(`id`) USING utf8mb4), ',', "
                   "IF(`b` IS NULL, 'NULL', CONCAT('X''', HEX(`b`), '''')), ',', QUOTE(CAST(`f` AS DOUBLE)), ',', "
                   "CONVERT(QUOTE(`s`) USING utf8mb4), ',', "
                   "IF(`k` IS NULL, 'NULL', CONCAT('b''', BIN(`k` + 0), '''')), "
                   "')') FROM `d`.`t` WHERE `id` >= %s AND ((`id` > %s)) ORDER BY `id` LIMIT %s")
    assert args == [3, 3, 100]


def test_create_table_is_made_idempotent():
    assert create_table_sql("CREATE TABLE `t` (\n  `a` int\n)") == \
        "/* migrator:copy */ CREATE TABLE IF NOT EXISTS `t` (\n  `a` int\n)"
    with pytest.raises(Exception):  # noqa: B017 - any refusal will do
        create_table_sql("CREATE VIEW v AS SELECT 1")
