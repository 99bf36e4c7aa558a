"""The chunk checksum SQL builders and row diffing (no servers).

The key-range predicates are checked for meaning, not only text: they are run
in SQLite (which accepts back-quoted names) against random composite keys and
compared with Python's tuple ordering.
"""

from __future__ import annotations

import random
import sqlite3

import pytest

from migrator.engine.verify.checksums import (
    RowDiff,
    TableInfo,
    boundary_sql,
    chunk_checksum_sql,
    diff_hashes,
    keys_where,
    range_where,
    row_image_sql,
)
from migrator.fleet.mysql import InvalidIdentifier


def test_row_image_separates_null_from_empty_and_binds_lengths():
    sql = row_image_sql(["a", "name"])
    assert sql.startswith("CRC32(CONCAT_WS('#', ")
    assert "LENGTH(CAST(`a` AS BINARY)), CAST(`a` AS BINARY)" in sql
    assert "LENGTH(CAST(`name` AS BINARY)), CAST(`name` AS BINARY)" in sql
    assert sql.endswith("CONCAT(ISNULL(`a`), ISNULL(`name`))))")


def test_row_image_and_keys_use_each_type_s_exact_form():
    t = TableInfo("d", "t", ("id", "f", "d", "e", "s", "b", "txt", "ts"), ("e", "txt", "f"),
                  types=("int", "float", "double", "enum", "set", "bit", "varchar", "timestamp"))
    img = row_image_sql(t.columns, t.types)
    # a FLOAT's text has 6 digits: hashed widened to DOUBLE, whose text keeps every bit
    assert "LENGTH(CAST(CAST(`f` AS DOUBLE) AS BINARY)), CAST(CAST(`f` AS DOUBLE) AS BINARY)" in img
    # ENUM/SET by number (a label cannot tell '' from the invalid value), the rest as bytes
    assert "CAST(`e` + 0 AS BINARY)" in img and "CAST(`s` + 0 AS BINARY)" in img
    for c in ("id", "d", "b", "txt", "ts"):
        assert f"LENGTH(CAST(`{c}` AS BINARY)), CAST(`{c}` AS BINARY)" in img
    # keys come back exact: an index, bytes, a double
    assert t.key_sql == "(`e` + 0), CAST(`txt` AS BINARY), CAST(`f` AS DOUBLE)"
    sql, _ = boundary_sql(t, None, 10)
    assert sql.startswith(f"/* migrator:verify */ SELECT {t.key_sql} FROM")
    assert "ORDER BY `e`, `txt`, `f` LIMIT 1" in sql
    assert t.on("tomb").types == t.types


def test_chunk_checksum_sql_open_and_closed_ranges():
    t = TableInfo("db00003", "board_has_pins", ("board_id", "pin_id", "sequence"), ("board_id", "pin_id"))
    sql, args = chunk_checksum_sql(t, None, None)
    assert "WHERE 1=1" in sql and args == []
    assert sql.startswith("/* migrator:verify */ SELECT COUNT(*), COALESCE(BIT_XOR(h), 0), COALESCE(SUM(h), 0)")
    assert "FROM `db00003`.`board_has_pins`" in sql
    sql, args = chunk_checksum_sql(t, (1, 5), (9, 2))
    # lo: (b > 1) OR (b = 1 AND p > 5); hi: (b < 9) OR (b = 9 AND p < 2) OR (b = 9 AND p = 2)
    assert args == [1, 1, 5, 9, 9, 2, 9, 2]
    assert sql.count("%s") == len(args)


def test_boundary_sql_offsets_to_the_chunk_end():
    t = TableInfo("db00001", "pins", ("local_id", "data"), ("local_id",))
    sql, args = boundary_sql(t, (100,), 50)
    assert sql.endswith("ORDER BY `local_id` LIMIT 1 OFFSET 49") and args == [100]


def test_identifiers_are_quoted_and_validated():
    assert "`odd``name`" in row_image_sql(["ok", "odd`name"])
    t = TableInfo("db00001", "pins; DROP TABLE x", ("a",), ("a",))
    assert "`db00001`.`pins; DROP TABLE x`" in chunk_checksum_sql(t, None, None)[0]
    with pytest.raises(InvalidIdentifier):
        chunk_checksum_sql(TableInfo("db00001", "bad\x00", ("a",), ("a",)), None, None)


@pytest.mark.parametrize("width", [1, 2, 3])
def test_range_predicates_match_tuple_order(width):
    rng = random.Random(width)
    cols = [f"k{i}" for i in range(width)]
    db = sqlite3.connect(":memory:")
    db.execute(f"CREATE TABLE t ({', '.join(cols)}, PRIMARY KEY ({', '.join(cols)}))")
    keys = sorted({tuple(rng.randint(0, 4) for _ in cols) for _ in range(200)})
    db.executemany(f"INSERT INTO t VALUES ({', '.join('?' * width)})", keys)
    for _ in range(60):
        lo = rng.choice(keys + [None])
        hi = rng.choice(keys + [None])
        where, args = range_where(cols, lo, hi)
        got = sorted(db.execute(f"SELECT * FROM t WHERE {where.replace('%s', '?')}", args).fetchall())
        want = [k for k in keys if (lo is None or k > lo) and (hi is None or k <= hi)]
        assert got == want, (lo, hi, where)
    some = rng.sample(keys, 5)
    got = sorted(db.execute(f"SELECT * FROM t WHERE {keys_where(cols, 5).replace('%s', '?')}",
                            [v for k in some for v in k]).fetchall())
    assert got == sorted(some)


def test_diff_hashes_classifies_rows():
    src = {(1,): 10, (2,): 20, (3,): 30}
    dst = {(1,): 10, (2,): 21, (4,): 40}
    diffs = diff_hashes("db.t", src, dst)
    assert {(d.key, d.kind) for d in diffs} == {((2,), "changed"), ((3,), "missing_on_target"),
                                                ((4,), "extra_on_target")}
    assert RowDiff("db.t", (b"\x00\xff",), "changed").to_dict()["key"] == ["00ff"]


def test_group_sums_is_the_chunk_checksum_over_the_keys_of_each_group_in_one_statement():
    from migrator.engine.verify.checksums import LiteralKey, group_sums_sql

    a = TableInfo("db00002", "pins", ("id", "v"), ("id",))
    b = TableInfo("db00002", "pairs", ("a", "b"), ("a", "b"))
    sql, args = group_sums_sql([(a, [LiteralKey(("1",)), LiteralKey(("2",))]),
                                (b, [LiteralKey(("3", "X'41'"))])])
    assert args is None and sql.count(" UNION ALL ") == 1
    assert "SELECT 0, COUNT(*), COALESCE(BIT_XOR(h), 0), COALESCE(SUM(h), 0)" in sql
    assert "`id` IN (1,2)" in sql and "(`a`,`b`) IN ((3,X'41'))" in sql
    sql, args = group_sums_sql([(a, [(1,), (2,)])])
    assert args == [1, 2]
    with pytest.raises(ValueError):
        group_sums_sql([(a, [(1,)]), (a, [LiteralKey(("2",))])])


def test_grouped_compare_packs_groups_into_few_statements_within_their_limits():
    from migrator.engine.verify import repair
    from migrator.engine.verify.checksums import LiteralKey

    t = TableInfo("db00002", "pins", ("id", "v"), ("id",))
    lit = [repair._Group(0, t, [LiteralKey((str(i),)) for i in range(k, k + 2000)]) for k in range(0, 10_000, 2000)]
    val = [repair._Group(1, t, [(i,) for i in range(5)])]
    tiny = [repair._Group(2 + i, t, [LiteralKey(("1",))]) for i in range(450)]
    st = repair._statements(lit + val + tiny)
    # 8,000 keys a statement, literal and value groups apart, 200 groups a statement
    assert [len(s) for s in st] == [4, 1, 1, 200, 200, 50]
