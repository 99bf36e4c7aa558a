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
