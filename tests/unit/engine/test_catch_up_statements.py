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


@pytest.mark.parametrize("query", [
    "CREATE VIEW v AS SELECT * FROM pins",
    "CREATE DEFINER=`root`@`localhost` TRIGGER t BEFORE INSERT ON pins FOR EACH ROW SET NEW.a = 1",
    "CREATE PROCEDURE p() SELECT 1",
    "DROP VIEW v",
    "CREATE EVENT e ON SCHEDULE EVERY 1 HOUR DO DELETE FROM pins",
    "INSERT INTO pins VALUES (1)",  # statement-logged DML: its rows would be lost
    "SOMETHING NEW pins",
])
def test_an_unrecognised_statement_run_in_a_moving_schema_stops(query):
    d = decide(query, schema="db00002")
    assert d.action == "unsafe" and "unrecognised" in d.reason and "abort" in d.reason


@pytest.mark.parametrize("query", [
    "SAVEPOINT `sp1`",
    "ROLLBACK TO SAVEPOINT sp1",
    "RELEASE SAVEPOINT sp1",
    "DROP TEMPORARY TABLE IF EXISTS `pins`",
    "GRANT SELECT ON db00001.* TO x",
    "CREATE ROLE r",
])
def test_known_harmless_statements_in_a_moving_schema_are_ignored(query):
    assert decide(query, schema="db00001").action == "ignore"


def test_an_unrecognised_statement_elsewhere_is_ignored_unless_it_names_a_moving_schema():
    assert decide("CREATE VIEW v AS SELECT 1", schema="db00009").action == "ignore"
    assert decide("CREATE VIEW v AS SELECT * FROM db00002.pins", schema="db00009").action == "unsafe"
    # a prefix of another schema's name is not a mention
    assert decide("CREATE VIEW v AS SELECT * FROM db000011.pins", schema="db00009").action == "ignore"


def test_the_whole_table_key_is_no_literal_the_decoder_renders():
    from migrator.engine.catch_up.statements import WHOLE_TABLE

    assert WHOLE_TABLE[0].startswith("/*")


@pytest.mark.parametrize("query,schema,named", [
    # another table's partition swapped with a moving table: its rows change without row events
    ("ALTER TABLE other.t EXCHANGE PARTITION p0 WITH TABLE db00001.pins", "db00009", "db00001.pins"),
    ("ALTER TABLE `other`.`t` EXCHANGE PARTITION `p 0` WITH TABLE `boards` WITHOUT VALIDATION", "db00002",
     "db00002.boards"),
    ("/* x */ ALTER TABLE other.t EXCHANGE PARTITION p0 WITH TABLE db00001.pins", "", "db00001.pins"),
    # a moving table first: an ALTER that is no partition maintenance
    ("ALTER TABLE db00001.pins EXCHANGE PARTITION p0 WITH TABLE other.t", "db00009", "db00001.pins"),
    # a table renamed into a moving shard, a foreign key onto a moving table
    ("ALTER TABLE other.t RENAME TO db00001.t2", "db00009", "db00001.t2"),
    ("ALTER TABLE other.t ADD CONSTRAINT fk FOREIGN KEY (p) REFERENCES db00001.pins (local_id)", "x", "db00001.pins"),
    ("CREATE TABLE other.c (id INT PRIMARY KEY, p BIGINT, FOREIGN KEY (p) REFERENCES db00002.pins (local_id))",
     "x", "db00002.pins"),
])
def test_a_moving_table_anywhere_in_another_table_s_ddl_stops(query, schema, named):
    d = decide(query, schema=schema)
    assert d.action == "unsafe" and f"moving table {named}" in d.reason and "abort" in d.reason, d
    assert f"`{query.split('*/')[-1].strip()[:40]}" in d.reason  # the statement is named


@pytest.mark.parametrize("query", [
    "ALTER TABLE other.t EXCHANGE PARTITION p0 WITH TABLE other.u",
    "ALTER TABLE other.t RENAME COLUMN a TO b",
    "ALTER TABLE other.t RENAME TO other.t2",
    "CREATE TABLE other.c (id INT PRIMARY KEY, p INT, FOREIGN KEY (p) REFERENCES other.p (id))",
])
def test_other_tables_ddl_that_names_no_moving_table_is_ignored(query):
    assert decide(query, schema="db00009").action == "ignore"


def test_a_table_level_move_minds_only_its_tables_in_an_exchange():
    q = "ALTER TABLE other.t EXCHANGE PARTITION p0 WITH TABLE db00001.{}"
    assert decide(q.format("jobs_q1"), schema="x", tables={"jobs_q1"}).action == "unsafe"
    assert decide(q.format("pins"), schema="x", tables={"jobs_q1"}).action == "ignore"


@pytest.mark.parametrize("query,schema,named,verb", [
    # MariaDB 10.7+: a moving table's rows become a partition of another table (one Query event, no rows)
    ("ALTER TABLE other.x CONVERT TABLE db00001.pins TO PARTITION p1 VALUES LESS THAN (200)", "db00009",
     "db00001.pins", "CONVERT TABLE"),
    ("ALTER TABLE `other`.`x` CONVERT TABLE `pins` TO PARTITION `p 1` VALUES LESS THAN (MAXVALUE)", "db00002",
     "db00002.pins", "CONVERT TABLE"),
    ("alter table other.x convert table db00001.pins to partition p1 values in (1, 2)", "", "db00001.pins",
     "CONVERT TABLE"),
    # another table's partition becomes a new table in a moving shard
    ("ALTER TABLE other.x CONVERT PARTITION p1 TO TABLE db00001.from_archive", "db00009", "db00001.from_archive",
     "CONVERT PARTITION"),
    ("ALTER TABLE other.x CONVERT PARTITION p1 TO TABLE from_archive", "db00002", "db00002.from_archive",
     "CONVERT PARTITION"),
])
def test_a_moving_table_converted_into_or_out_of_another_table_stops(query, schema, named, verb):
    d = decide(query, schema=schema)
    assert d.action == "unsafe", d
    assert f"{verb} (in another table's ALTER TABLE) on moving table {named}" in d.reason, d.reason
    assert query[:40] in d.reason and "abort" in d.reason


@pytest.mark.parametrize("query,named,verb", [
    # the moving table's own ALTER moves rows in or out of it: named by what it does, not only "ALTER TABLE"
    ("ALTER TABLE db00001.jobs CONVERT PARTITION pOK_a TO TABLE other.jobs_old", "db00001.jobs", "CONVERT PARTITION"),
    ("ALTER TABLE jobs CONVERT TABLE other.staged TO PARTITION p9 VALUES LESS THAN (9, MAXVALUE)", "db00001.jobs",
     "CONVERT TABLE"),
    ("ALTER TABLE jobs EXCHANGE PARTITION pOK_a WITH TABLE other.t", "db00001.jobs", "EXCHANGE PARTITION"),
])
def test_a_moving_table_s_own_row_moving_alter_stops_naming_it(query, named, verb):
    d = decide(query)
    assert d.action == "unsafe"
    assert f"ALTER TABLE ... {verb} (it moves rows without row events) on moving table {named}" in d.reason, d.reason
    assert query[:40] in d.reason


def test_a_table_level_move_minds_only_its_tables_in_a_conversion():
    tables = {"jobs_q1"}
    q = "ALTER TABLE db00001.x CONVERT TABLE db00001.{} TO PARTITION p1 VALUES LESS THAN (5)"
    assert decide(q.format("jobs_q1"), tables=tables).action == "unsafe"
    assert decide(q.format("pins"), tables=tables).action == "ignore"
    out = "ALTER TABLE db00001.x CONVERT PARTITION p1 TO TABLE db00001.{}"
    assert decide(out.format("jobs_q1"), tables=tables).action == "unsafe"
    assert decide(out.format("new_one"), tables=tables).action == "ignore"  # a new table, not a moving one
    # a table-level move's table replaced whole (its rows dropped without row events)
    d = decide("CREATE OR REPLACE TABLE db00001.jobs_q1 (id INT PRIMARY KEY)", tables=tables)
    assert d.action == "unsafe" and "CREATE OR REPLACE TABLE" in d.reason and "db00001.jobs_q1" in d.reason
    assert decide("CREATE OR REPLACE TABLE db00001.other (id INT PRIMARY KEY)", tables=tables).action == "ignore"
    assert decide("CREATE TABLE IF NOT EXISTS db00001.jobs_q1 (id INT PRIMARY KEY)", tables=tables).action == "ignore"


@pytest.mark.parametrize("query", [
    "ALTER TABLE other.x CONVERT TABLE other.y TO PARTITION p1 VALUES LESS THAN (200)",
    "ALTER TABLE other.x CONVERT PARTITION p1 TO TABLE other.y",
    "ALTER TABLE other.x CONVERT TO CHARACTER SET utf8mb4",
])
def test_conversions_between_other_tables_are_ignored(query):
    assert decide(query, schema="db00009").action == "ignore"
