"""Which binlog statements catch-up carries over, and which stop a migration."""

from __future__ import annotations

import pytest

from migrator.engine.binlog.reader import Statement
from migrator.engine.catch_up.statements import classify

MOVING = {"db00001", "db00002"}


def decide(query, schema="db00001", tables=None):
    return classify(Statement(schema, query), MOVING, tables)


@pytest.mark.parametrize("query", [
    "ALTER TABLE jobs DROP PARTITION pOK_2020010100",
    "ALTER TABLE `db00001`.`jobs` REORGANIZE PARTITION pNEW_FUTURE INTO (PARTITION a VALUES LESS THAN "
    "(0, '2020-02-01'), PARTITION pNEW_FUTURE VALUES LESS THAN (0, MAXVALUE))",
    "/* maint */ ALTER TABLE db00001.jobs ADD PARTITION (PARTITION p9 VALUES LESS THAN (9, MAXVALUE))",
    "ALTER TABLE jobs TRUNCATE PARTITION p1",
    "ALTER TABLE pins ADD INDEX ts_idx (ts, local_id), DROP KEY other",
    "CREATE INDEX i ON db00001.pins (ts)",
    "TRUNCATE TABLE pins",
])
def test_safe_statements_are_applied(query):
    d = decide(query)
    assert d.action == "apply", d.reason


def test_rendering_rewrites_the_schema():
    d = decide("ALTER TABLE `db00001`.jobs DROP PARTITION p1, p2")
    assert d.render(lambda s: {"db00001": "db00001_tomb"}[s]) == \
        "ALTER TABLE `db00001_tomb`.`jobs` DROP PARTITION p1, p2"
    d = decide("ALTER TABLE jobs DROP PARTITION p1", schema="db00002")
    assert d.render(lambda s: s) == "ALTER TABLE `db00002`.`jobs` DROP PARTITION p1"
    d = decide("CREATE INDEX i ON pins (ts)")
    assert d.render(lambda s: s) == "CREATE INDEX i ON `db00001`.`pins` (ts)"


@pytest.mark.parametrize("query,what", [
    ("ALTER TABLE pins ADD COLUMN x INT", "ALTER TABLE"),
    ("ALTER TABLE db00002.pins MODIFY data TEXT", "ALTER TABLE"),
    ("ALTER TABLE pins ADD UNIQUE INDEX u (ts)", "ALTER TABLE"),
    ("DROP TABLE IF EXISTS `pins`", "DROP TABLE"),
    ("DROP TABLE db00009.x, db00002.boards", "DROP TABLE"),
    ("RENAME TABLE db00001.pins TO db00001.pins_old", "RENAME TABLE"),
    ("CREATE TABLE newt (id INT PRIMARY KEY)", "CREATE TABLE"),
    ("DROP DATABASE db00002", "DROP/ALTER DATABASE"),
])
def test_unsafe_statements_stop_with_a_clear_message(query, what):
    d = decide(query)
    assert d.action == "unsafe"
    assert what in d.reason and "abort" in d.reason


@pytest.mark.parametrize("query,schema", [
    ("ALTER TABLE pins ADD COLUMN x INT", "db00009"),
    ("ALTER TABLE db00009.pins ADD COLUMN x INT", "db00001x"),
    ("DROP TABLE other.t", "db00001"),
    ("FLUSH TABLES", "db00001"),
    ("ANALYZE TABLE pins", "db00001"),
    ("CREATE DATABASE db00007", ""),
])
def test_statements_on_other_tables_are_ignored(query, schema):
    assert decide(query, schema=schema).action == "ignore"


def test_table_level_migration_only_cares_about_its_tables():
    tables = {"jobs_q1"}
    assert decide("ALTER TABLE pins ADD COLUMN x INT", tables=tables).action == "ignore"
    assert decide("DROP TABLE pins", tables=tables).action == "ignore"
    assert decide("ALTER TABLE jobs_q1 ADD COLUMN x INT", tables=tables).action == "unsafe"
    assert decide("ALTER TABLE jobs_q1 DROP PARTITION p1", tables=tables).action == "apply"
    assert decide("CREATE TABLE other (id INT PRIMARY KEY)", tables=tables).action == "ignore"
