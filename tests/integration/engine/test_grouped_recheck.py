"""The re-check's set-wise compare on real servers: changed keys summed in large groups, one statement per
group (or several groups) on each side, row by row only where a group differs."""

from __future__ import annotations

from migrator.engine.verify.checksums import LiteralKey, Side, table_info
from migrator.engine.verify.repair import CompareStats, check_rows_many

from .catchup_helpers import SOURCE, TARGET, conn

DB = "db00002"
TABLES = ("grouped_a", "grouped_b")
ROWS = 6000


def _questions(c) -> int:
    """Statements this session has run so far (the SHOW itself included)."""
    with c.cursor() as cur:
        cur.execute("SHOW SESSION STATUS LIKE 'Questions'")
        return int(cur.fetchone()[1])


def _seed(fleet) -> None:
    for host in (SOURCE, TARGET):
        with conn(fleet, host) as c, c.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS `{DB}`")
            for name in TABLES:
                cur.execute(f"DROP TABLE IF EXISTS `{DB}`.`{name}`")
                cur.execute(f"CREATE TABLE `{DB}`.`{name}` (id BIGINT PRIMARY KEY, k VARCHAR(20) NOT NULL, "
                            "v DOUBLE NULL, b VARBINARY(16) NULL) ENGINE=InnoDB")
                rows = [(i, f"k{i}", i / 7 if i % 5 else None, bytes([i % 256, 7])) for i in range(1, ROWS + 1)]
                cur.executemany(f"INSERT INTO `{DB}`.`{name}` VALUES (%s, %s, %s, %s)", rows)
            c.commit()


def _checksum(fleet, host: str, name: str) -> int:
    with conn(fleet, host) as c, c.cursor() as cur:
        cur.execute(f"CHECKSUM TABLE `{DB}`.`{name}`")
        return int(cur.fetchone()[1])


def test_a_planted_difference_among_many_changed_keys_is_found_and_repaired_in_few_queries(fleet):
    _seed(fleet)
    with conn(fleet, TARGET) as c, c.cursor() as cur:
        # one row changed (NULL against a value), one missing, one only on the target; each among thousands
        # of changed keys that are equal
        cur.execute(f"UPDATE `{DB}`.grouped_a SET v = 0 WHERE id = 4321")
        cur.execute(f"DELETE FROM `{DB}`.grouped_b WHERE id = 17")
        c.commit()
    with conn(fleet, SOURCE) as c, c.cursor() as cur:
        cur.execute(f"DELETE FROM `{DB}`.grouped_b WHERE id = 5999")
        c.commit()
    with conn(fleet, SOURCE) as src, conn(fleet, TARGET) as dst:
        tables = [table_info(src, DB, name) for name in TABLES]
        # the keys as the binlog decoder renders them (the re-check's), every row of both tables
        work = [(t, [LiteralKey((str(i),)) for i in range(1, ROWS + 1)]) for t in tables]
        before = _questions(src), _questions(dst)
        stats = CompareStats()
        got = check_rows_many(Side(src), Side(dst), work, repair=True, stats=stats)
        ran = _questions(src) - before[0] - 1, _questions(dst) - before[1] - 1
    print("statements a side:", ran, stats)
    found = {(t.table, d.key, d.kind) for t, diffs, _ in got for d in diffs}
    assert found == {("grouped_a", (4321,), "changed"), ("grouped_b", (17,), "missing_on_target"),
                     ("grouped_b", (5999,), "extra_on_target")}, found
    assert sum(fixed for _, _, fixed in got) == 3
    for name in TABLES:
        assert _checksum(fleet, SOURCE, name) == _checksum(fleet, TARGET, name), name
    # the three planted rows fall in three groups of 2,000 keys: only those are compared row by row
    assert stats.rows == 2 * ROWS and stats.groups == 6 and stats.groups_differ == 3, stats
    # one per 200 keys would be 60 statements a side for the 12,000 keys: the sums take 2 a side, the
    # three groups that differ one each to name their rows, the repair 2 more (the source reads the rows
    # it re-copies, the target writes and deletes)
    assert ran[0] <= 8 and ran[1] <= 8, ran
    for host in (SOURCE, TARGET):
        with conn(fleet, host) as c, c.cursor() as cur:
            for name in TABLES:
                cur.execute(f"DROP TABLE `{DB}`.`{name}`")


def test_a_grouped_compare_of_equal_rows_sums_many_tables_in_one_statement(fleet):
    """Changed keys of many tables with few rows each (a batch's re-check spans hundreds): one statement a
    side, not one per table."""
    _seed(fleet)
    with conn(fleet, SOURCE) as src, conn(fleet, TARGET) as dst:
        tables = [table_info(src, DB, name) for name in TABLES]
        # value keys (as verify hands them over) and literal keys, a few of each table
        work = [(tables[0], [(i,) for i in range(1, 50)]), (tables[1], [LiteralKey((str(i),)) for i in range(1, 50)])]
        before = _questions(src), _questions(dst)
        stats = CompareStats()
        got = check_rows_many(Side(src), Side(dst), work, repair=True, stats=stats)
        ran = _questions(src) - before[0] - 1, _questions(dst) - before[1] - 1
    assert all(not diffs for _, diffs, _ in got)
    # literal and value keys never share a statement: two a side, whatever the number of tables
    assert ran == (2, 2) and stats.groups_differ == 0, (ran, stats)
    for host in (SOURCE, TARGET):
        with conn(fleet, host) as c, c.cursor() as cur:
            for name in TABLES:
                cur.execute(f"DROP TABLE `{DB}`.`{name}`")
