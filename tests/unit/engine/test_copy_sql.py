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
                create_sql="",
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
    assert "MAX(_l0), MAX(_l1)" in sql and "LAST_VALUE(CAST(_k1 AS BINARY)) OVER _w" in sql
    # ordered by the columns as they are (the collation's order), read as bytes
    assert "SELECT `id` AS _k0, `s` AS _k1," in sql
    assert "WINDOW _w AS (ORDER BY _k0, _k1 ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)" in sql
    assert args == [10]


@pytest.mark.parametrize(("dtype", "last"), [
    ("float", "MAX(CAST(_k0 AS DOUBLE))"),       # 6 digits through the text protocol
    ("enum", "MAX((_k0 + 0))"),                  # ordered by index; a label max is another row
    ("set", "MAX((_k0 + 0))"),
    ("varchar", "CAST(MAX(_k0) AS BINARY)"),     # the collation's max, then its bytes
    ("bigint", "MAX(_k0)"),
])
def test_a_chunk_s_last_key_is_read_exactly_in_key_order(dtype, last):
    from migrator.engine.copy_load import chunk_read_sql

    sql, _ = chunk_read_sql(_info(columns=("k", "v"), key=("k",), types={"k": dtype, "v": "int"}), (1,), 10)
    assert f"SELECT COUNT(*), {last}, GROUP_CONCAT" in sql
    assert "SELECT `k` AS _k0," in sql and "ORDER BY `k` LIMIT %s" in sql


def test_enum_and_set_travel_and_load_as_their_number():
    from migrator.engine.copy_load import field_expr, load_sql

    assert field_expr("e", "enum") == "IFNULL(CAST(`e` + 0 AS BINARY), X'5C4E')"
    info = _info(columns=("id", "e", "s"), types={"id": "int", "e": "enum", "s": "set"})
    assert load_sql(info, "/f").endswith("(@v0, @v1, @v2) SET `id` = @v0, `e` = CAST(@v1 AS UNSIGNED), "
                                         "`s` = CAST(@v2 AS UNSIGNED)")


def test_only_an_enum_s_invalid_value_may_warn_during_a_load():
    from migrator.engine.copy_load import changed_values

    info = _info(columns=("id", "e", "t"), types={"id": "int", "e": "enum", "t": "varchar"})
    enum0 = ("Warning", 1265, "Data truncated for column 'e' at row 3")
    assert changed_values(info, [enum0, enum0], 2) == []
    text = ("Warning", 1265, "Data truncated for column 't' at row 1")
    assert changed_values(info, [enum0, text], 2) == [text[2]]
    assert changed_values(info, [("Warning", 1366, "Incorrect integer value")], 1) == ["Incorrect integer value"]
    assert changed_values(info, [enum0], 5) == ["4 more warnings than the server kept"]


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
