"""The copy's SQL builders and checkpoint encoding (no servers)."""

from __future__ import annotations

import datetime as dt
import decimal

import pytest

from migrator.engine.chunks import after_key_clause, create_table_sql, decode_key, encode_key
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


def _info(**kw):
    from migrator.engine.inspector import TableInfo

    base = dict(db="d", table="t", columns=("id", "b", "f", "s", "k"), key=("id",), key_kind="primary",
                create_sql="", float_columns=("f",),
                types={"id": "bigint", "b": "varbinary", "f": "float", "s": "varchar", "k": "bit"})
    base.update(kw)
    return TableInfo(**base)


def test_a_chunk_is_read_as_one_blob_of_escaped_binary_fields():
    from migrator.engine.copy_load import chunk_read_sql

    sql, args = chunk_read_sql(_info(), (3,), 100)
    esc = "REPLACE(REPLACE(REPLACE(CAST(`{0}` AS BINARY), X'5C', X'5C5C'), X'09', X'5C74'), X'0A', X'5C6E')"
    two = ("IFNULL(IF(LENGTH(CAST(`{0}` AS BINARY)) > 4096, NULL, " + esc + "), X'5C4E'), "
           "IFNULL(IF(LENGTH(CAST(`{0}` AS BINARY)) > 4096, HEX(CAST(`{0}` AS BINARY)), NULL), X'5C4E')")
    line = ("CONCAT_WS(X'09', IFNULL(CAST(`id` AS BINARY), X'5C4E'), " + two.format("b") + ", "
            "IFNULL(CAST(CAST(`f` AS DOUBLE) AS BINARY), X'5C4E'), " + two.format("s") + ", " + two.format("k") + ")")
    assert sql == ("/* migrator:copy */ SELECT COUNT(*), MAX(_k0), GROUP_CONCAT(_line SEPARATOR X'0A') FROM ("
                   f"SELECT `id` AS _k0, {line} AS _line FROM `d`.`t` "
                   "WHERE `id` >= %s AND ((`id` > %s)) ORDER BY `id` LIMIT %s) AS _chunk")
    assert args == [3, 3, 100]


def test_a_composite_key_takes_the_last_tuple_not_a_max_per_column():
    from migrator.engine.copy_load import chunk_read_sql

    sql, args = chunk_read_sql(_info(key=("id", "s")), None, 10)
    assert "MAX(_l0), MAX(_l1)" in sql and "LAST_VALUE(_k1) OVER _w" in sql
    assert "WINDOW _w AS (ORDER BY _k0, _k1 ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)" in sql
    assert args == [10]


def test_the_load_sets_every_column_when_any_travels_as_two_fields():
    from migrator.engine.copy_load import load_sql

    head = ("/* migrator:copy */ LOAD DATA LOCAL INFILE '/proc/1/fd/3' REPLACE INTO TABLE `d`.`t` "
            "CHARACTER SET binary FIELDS TERMINATED BY '\\t' ENCLOSED BY '' ESCAPED BY '\\\\' "
            "LINES TERMINATED BY '\\n' ")
    assert load_sql(_info(), "/proc/1/fd/3") == head + (
        "(@v0, @r1, @h1, @v2, @r3, @h3, @r4, @h4) SET `id` = @v0, `b` = IF(@h1 IS NULL, @r1, UNHEX(@h1)), "
        "`f` = @v2, `s` = IF(@h3 IS NULL, @r3, UNHEX(@h3)), `k` = IF(@h4 IS NULL, @r4, UNHEX(@h4))")
    # numbers only: the fields go straight to their columns
    plain = _info(columns=("id", "n"), types={"id": "int", "n": "decimal"})
    assert load_sql(plain, "/proc/1/fd/3") == head + "(`id`, `n`)"


def test_create_table_is_made_idempotent():
    assert create_table_sql("CREATE TABLE `t` (\n  `a` int\n)") == \
        "/* migrator:copy */ CREATE TABLE IF NOT EXISTS `t` (\n  `a` int\n)"
    with pytest.raises(Exception):  # noqa: B017 - any refusal will do
        create_table_sql("CREATE VIEW v AS SELECT 1")
