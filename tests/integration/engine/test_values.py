"""Which column types a round trip through the text protocol changes, and that the exact reads of
:mod:`migrator.engine.values` change none (the table in its docstring, checked on the real server).

Each column of the ``exact_types`` case is copied into a table of its own
(``CREATE TABLE .. AS SELECT``: same type and character set), read back with
PyMySQL and written with ``REPLACE`` into a twin; ``CHECKSUM TABLE`` of the two
says whether a bit changed.
"""

from __future__ import annotations

from pathlib import Path

from migrator.engine.values import read_expr
from migrator.fleet.mysql import qualified
from tests.integration.engine.test_cases import statements

CASE = Path(__file__).with_name("cases") / "exact_types"
DB = "db00002"
#: what the text protocol changes in that case's columns (a FLOAT's 6 digits, an ENUM's index 0 read as
#: the label '' and written back as the member '', cp1251 0x98 read as '?')
TEXT_CHANGES = {"f", "en", "cy"}


def test_exact_reads_keep_every_type_the_text_protocol_changes(fleet, conns):
    conn = conns("MySQL001A")
    with conn.cursor() as cur:
        cur.execute(f"USE `{DB}`")
        for name in ("create.sql", "rows.sql"):
            for st in statements(CASE / name):
                cur.execute(st)
        cur.execute("SET SESSION sql_mode = 'NO_AUTO_VALUE_ON_ZERO,NO_ENGINE_SUBSTITUTION', time_zone = '+00:00'")
        cur.execute("SELECT COLUMN_NAME, DATA_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = %s "
                    "AND TABLE_NAME = 'exact_types' AND COLUMN_NAME <> 'id' ORDER BY ORDINAL_POSITION", (DB,))
        columns = cur.fetchall()
        changed: dict[str, set[str]] = {"text": set(), "exact": set()}
        src, dst = qualified(DB, "rt_src"), qualified(DB, "rt_dst")
        for column, dtype in columns:
            cur.execute(f"CREATE OR REPLACE TABLE {src} (PRIMARY KEY (id)) AS SELECT id, `{column}` AS v "
                        f"FROM `{DB}`.exact_types")
            for way, sel in (("text", "v"), ("exact", read_expr("v", dtype))):
                cur.execute(f"CREATE OR REPLACE TABLE {dst} LIKE {src}")
                cur.execute(f"SELECT id, {sel} FROM {src}")
                cur.executemany(f"REPLACE INTO {dst} VALUES (%s, %s)", cur.fetchall())
                cur.execute(f"CHECKSUM TABLE {src}, {dst} EXTENDED")
                a, b = (r[1] for r in cur.fetchall())
                if a != b:
                    changed[way].add(column)
        cur.execute(f"DROP TABLE {src}, {dst}")
    assert len(columns) == 19
    assert changed == {"text": TEXT_CHANGES, "exact": set()}, changed
