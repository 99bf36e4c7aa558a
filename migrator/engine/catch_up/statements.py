"""What catch-up does with a statement (DDL) that reaches the binlog of a moving schema.

Runs in the catch-up worker, for every statement the binlog reader hands over
(the reader already dropped statements that cannot concern the moving
schemas), between rounds of row changes: everything before the statement is
committed on the target first (:mod:`.tailer`). :func:`classify` parses just enough of the statement to decide:

* **apply**: the queue's partition maintenance (``DROP/REORGANIZE/ADD/TRUNCATE
  PARTITION`` and the other partition operations), ``TRUNCATE TABLE`` and
  non-unique index changes on a moving table. They reach the binlog as
  statements, not row events, so a tailer that read only rows would leave
  purged rows on the target. They are replayed on the target, rewritten onto
  the target schema (:meth:`Decision.render`).
* **unsafe**: anything else that changes a moving table's shape, a unique
  index (it could reject rows), ``DROP`` or ``RENAME`` of a moving table, a
  new table in a moving shard, ``DROP/ALTER DATABASE`` of a moving schema, a
  moving table named anywhere in an ``ALTER TABLE`` of another table
  (``EXCHANGE PARTITION p WITH TABLE <moving>`` swaps its rows without row
  events, ``CONVERT TABLE <moving> TO PARTITION p`` (MariaDB 10.7+) moves them
  into the other table, ``RENAME TO <moving db>.x`` and ``CONVERT PARTITION p
  TO TABLE <moving db>.x`` make a new table there, ``REFERENCES <moving>`` a
  foreign key onto it) or in a ``CREATE TABLE``'s ``REFERENCES``, a ``CREATE OR
  REPLACE TABLE`` of a moving table (it drops the rows without row events), and
  any statement it does not recognise that names one or runs with one as its
  default schema (a view, trigger or routine created during the migration
  would not be carried, a statement-logged DML would be lost). The migration
  stops with the statement named; nothing guesses.
* **ignore**: statements about other schemas and tables, and known harmless
  ones (ANALYZE, GRANT, CREATE DATABASE, SAVEPOINT, DROP TEMPORARY TABLE, ...).

A statement the target refuses with an "already applied" error (a replay after
a crash) counts as applied only when the target table's definition then equals
the source's; otherwise catch-up stops and names both.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pymysql

from migrator.engine.binlog.reader import Statement
from migrator.errors import MigratorError
from migrator.fleet.mysql import qualified, tag

_NAME = r"(?:`(?:[^`]|``)+`|[A-Za-z0-9_$]+)"
_REF = rf"(?P<ref>{_NAME}(?:\s*\.\s*{_NAME})?)"
_COMMENT = re.compile(r"^\s*(?:/\*.*?\*/\s*|--[^\n]*\n\s*|#[^\n]*\n\s*)*", re.S)
_ALTER = re.compile(rf"^ALTER\s+(?:ONLINE\s+)?(?:IGNORE\s+)?TABLE\s+(?:IF\s+EXISTS\s+)?{_REF}\s*(?P<rest>.*)$",
                    re.S | re.I)
_PARTITION_OPS = re.compile(
    r"^(?:(?:ALGORITHM|LOCK)\s*=?\s*\w+\s*,\s*)*"
    r"(?:DROP|REORGANIZE|ADD|TRUNCATE|COALESCE|REBUILD|OPTIMIZE|ANALYZE|CHECK|REPAIR)\s+PARTITION\b",
    re.I,
)
_INDEX_CLAUSE = re.compile(r"^(?:ADD|DROP)\s+(?:INDEX|KEY)\b", re.I)
_DROP_TEMPORARY = re.compile(r"^DROP\s+TEMPORARY\s+TABLE\b", re.I)
_DROP_TABLE = re.compile(r"^DROP\s+(?:TEMPORARY\s+)?TABLE\s+(?:IF\s+EXISTS\s+)?(?P<refs>.*?)"
                         r"(?:\s+(?:RESTRICT|CASCADE))?\s*$", re.S | re.I)
_TRUNCATE = re.compile(rf"^TRUNCATE\s+(?:TABLE\s+)?{_REF}\s*$", re.S | re.I)
_RENAME = re.compile(r"^RENAME\s+TABLES?\s+(?P<refs>.*)$", re.S | re.I)
_CREATE_TABLE = re.compile(rf"^CREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMPORARY\s+)?TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?{_REF}",
                           re.S | re.I)
_INDEX_STMT = re.compile(
    rf"^(?:CREATE\s+(?:OR\s+REPLACE\s+)?(?:UNIQUE\s+|FULLTEXT\s+|SPATIAL\s+)?INDEX|DROP\s+INDEX)\s+(?:IF\s+(?:NOT\s+)?EXISTS\s+)?{_NAME}\s+ON\s+{_REF}\s*(?P<rest>.*)$",
    re.S | re.I,
)
#: a table named in the rest of an ALTER TABLE (or a CREATE TABLE): the ways another table's DDL reaches one.
#: EXCHANGE PARTITION and CONVERT TABLE move its rows without row events (the binlog holds the statement only)
_OTHER_TABLE = {
    "EXCHANGE PARTITION": re.compile(rf"\bEXCHANGE\s+PARTITION\s+{_NAME}\s+WITH\s+TABLE\s+{_REF}", re.S | re.I),
    "CONVERT TABLE": re.compile(rf"\bCONVERT\s+TABLE\s+{_REF}", re.S | re.I),
    "CONVERT PARTITION": re.compile(rf"\bCONVERT\s+PARTITION\s+{_NAME}\s+TO\s+TABLE\s+{_REF}", re.S | re.I),
    "RENAME TO": re.compile(rf"(?:^|,)\s*RENAME\s+(?:TO\s+|AS\s+)?(?!(?:COLUMN|INDEX|KEY)\b){_REF}", re.S | re.I),
    "REFERENCES": re.compile(rf"\bREFERENCES\s+{_REF}", re.S | re.I),
}
#: the verbs of :data:`_OTHER_TABLE` that make a new table (unsafe in a moving shard, whatever its name)
_NEW_TABLE = frozenset({"RENAME TO", "CONVERT PARTITION"})
#: an ALTER TABLE clause that moves rows between tables without row events (named in the refusal)
_ROW_MOVING = re.compile(r"\b(?P<verb>EXCHANGE\s+PARTITION|CONVERT\s+PARTITION|CONVERT\s+TABLE)\b", re.I)
_DB_STMT = re.compile(rf"^(?:DROP|ALTER)\s+(?:DATABASE|SCHEMA)\s+(?:IF\s+EXISTS\s+)?(?P<db>{_NAME})", re.S | re.I)
_HARMLESS = re.compile(r"^(?:ANALYZE|OPTIMIZE|CHECK|REPAIR|FLUSH|GRANT|REVOKE|CREATE\s+USER|DROP\s+USER|ALTER\s+USER"
                       r"|SET\s+PASSWORD|CREATE\s+DATABASE|CREATE\s+SCHEMA|CREATE\s+ROLE|DROP\s+ROLE|SAVEPOINT"
                       r"|ROLLBACK\s+(?:WORK\s+)?TO|RELEASE\s+SAVEPOINT)\b", re.I)


#: the key that stands for "every row of the table": a statement removed rows without row events
#: (never a real key: the binlog decoder renders no comment as a literal)
WHOLE_TABLE: tuple[str, ...] = ("/* whole table */",)


def _unquote(name: str) -> str:
    name = name.strip()
    if name.startswith("`") and name.endswith("`"):
        return name[1:-1].replace("``", "`")
    return name


def _split_ref(ref: str, default_schema: str) -> tuple[str, str]:
    parts = re.findall(_NAME, ref)
    if len(parts) == 2:
        return _unquote(parts[0]), _unquote(parts[1])
    return default_schema, _unquote(parts[0])


def short(q: str, n: int = 160) -> str:
    q = " ".join(q.split())
    return q if len(q) <= n else q[: n - 3] + "..."


@dataclass
class Decision:
    action: str  # "ignore" | "apply" | "unsafe"
    reason: str = ""
    schema: str = ""
    table: str = ""
    #: the statement with its table reference cut out: rendered as f"{head} `db`.`t` {rest}"
    head: str = ""
    rest: str = ""

    def render(self, target_schema: Any) -> str:
        return f"{self.head} {qualified(target_schema(self.schema), self.table)} {self.rest}".strip()


def classify(st: Statement, moving_schemas: set[str], tables: set[str] | None = None) -> Decision:
    """Decide what catch-up does with one binlog statement (see the module docstring)."""
    q = _COMMENT.sub("", st.query, count=1).strip().rstrip(";")

    def moving(schema: str, table: str | None) -> bool:
        return schema in moving_schemas and (tables is None or table is None or table in tables)

    def unsafe(what: str, schema: str, table: str) -> Decision:
        return Decision(
            "unsafe", schema=schema, table=table,
            reason=(f"{what} on moving table {schema}.{table} during catch-up cannot be carried over safely: "
                    f"`{short(q)}`. The migration is stopped; abort it (`migrator abort ID`), and plan it again "
                    "once the schema change is done"),
        )

    def named_elsewhere(rest: str, default_schema: str, where: str, verbs: tuple[str, ...]) -> Decision | None:
        """Unsafe when a moving table is named in ``rest`` by one of ``verbs`` (:data:`_OTHER_TABLE`)."""
        for verb in verbs:
            for found in _OTHER_TABLE[verb].finditer(rest):
                schema, table = _split_ref(found.group("ref"), default_schema)
                if moving(schema, table) or (verb in _NEW_TABLE and schema in moving_schemas and tables is None):
                    return unsafe(f"{verb} (in another table's {where})", schema, table)
        return None

    m = _ALTER.match(q)
    if m:
        schema, table = _split_ref(m.group("ref"), st.schema)
        rest = m.group("rest").strip()
        if not moving(schema, table):
            # another table's ALTER may name a moving one: EXCHANGE PARTITION swaps rows with it
            return named_elsewhere(rest, st.schema, "ALTER TABLE", tuple(_OTHER_TABLE)) or Decision("ignore")
        if _PARTITION_OPS.match(rest) or _index_only(rest):
            return Decision("apply", schema=schema, table=table, head="ALTER TABLE", rest=rest)
        row_moving = _ROW_MOVING.search(rest)
        if row_moving:
            verb = " ".join(row_moving.group("verb").upper().split())
            return unsafe(f"ALTER TABLE ... {verb} (it moves rows without row events)", schema, table)
        return unsafe("ALTER TABLE", schema, table)
    m = _INDEX_STMT.match(q)
    if m:
        schema, table = _split_ref(m.group("ref"), st.schema)
        if not moving(schema, table):
            return Decision("ignore")
        if q.upper().startswith("CREATE") and re.match(r"^CREATE\s+(?:OR\s+REPLACE\s+)?UNIQUE", q, re.I):
            return unsafe("CREATE UNIQUE INDEX", schema, table)
        head = q[: m.start("ref")].strip()
        return Decision("apply", schema=schema, table=table, head=head, rest=m.group("rest").strip())
    m = _TRUNCATE.match(q)
    if m:
        schema, table = _split_ref(m.group("ref"), st.schema)
        if not moving(schema, table):
            return Decision("ignore")
        return Decision("apply", schema=schema, table=table, head="TRUNCATE TABLE", rest="")
    if _DROP_TEMPORARY.match(q):
        return Decision("ignore")  # a session's temporary table: never a moving table
    m = _DROP_TABLE.match(q)
    if m:
        for ref in _split_list(m.group("refs")):
            schema, table = _split_ref(ref, st.schema)
            if moving(schema, table):
                return unsafe("DROP TABLE", schema, table)
        return Decision("ignore")
    m = _RENAME.match(q)
    if m:
        for ref in re.split(r"\s*,\s*|\s+TO\s+", m.group("refs"), flags=re.I):
            if not ref.strip():
                continue
            schema, table = _split_ref(ref, st.schema)
            if moving(schema, table):
                return unsafe("RENAME TABLE", schema, table)
        return Decision("ignore")
    m = _CREATE_TABLE.match(q)
    if m:
        schema, table = _split_ref(m.group("ref"), st.schema)
        if schema in moving_schemas and tables is None:
            return unsafe("CREATE TABLE (a new table in a moving shard)", schema, table)
        if moving(schema, table) and re.match(r"^CREATE\s+OR\s+REPLACE\b", q, re.I):
            return unsafe("CREATE OR REPLACE TABLE (it drops the table's rows without row events)", schema, table)
        return named_elsewhere(q[m.end():], st.schema, "CREATE TABLE", ("REFERENCES",)) or Decision("ignore")
    m = _DB_STMT.match(q)
    if m:
        db = _unquote(m.group("db"))
        if db in moving_schemas:
            return unsafe("DROP/ALTER DATABASE", db, "*")
        return Decision("ignore")
    if _HARMLESS.match(q):
        return Decision("ignore")
    # an unknown statement: unsafe when it names a moving schema or runs in one
    # (or, for a table-level migration, names a moving table inside one)
    low = q.lower()
    for schema in sorted(moving_schemas):
        named = re.search(rf"(?<!\w){re.escape(schema.lower())}(?!\w)", low) is not None
        if tables is None:
            if named or st.schema == schema:
                return unsafe("an unrecognised statement", schema, "*")
        elif (named or st.schema == schema) and any(re.search(rf"(?<!\w){re.escape(t.lower())}(?!\w)", low)
                                                    for t in tables):
            return unsafe("an unrecognised statement", schema, "*")
    return Decision("ignore")


def _index_only(rest: str) -> bool:
    """``ADD INDEX ... , DROP KEY ...`` and nothing else (no UNIQUE: it could reject rows)."""
    clauses, depth, cur = [], 0, []
    for ch in rest:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            clauses.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    clauses.append("".join(cur).strip())
    return bool(rest) and all(_INDEX_CLAUSE.match(c) for c in clauses) and "UNIQUE" not in rest.upper()


def _split_list(refs: str) -> list[str]:
    return [r for r in (x.strip() for x in refs.split(",")) if r]


# -- carrying a statement over -------------------------------------------------------------------

log = logging.getLogger(__name__)
TAG = tag("catchup")

#: target errors that mean "this DDL was applied already" (a replay after a crash)
ALREADY_APPLIED = {
    1507,  # ER_DROP_PARTITION_NON_EXISTENT: partition listed does not exist
    1517,  # ER_SAME_NAME_PARTITION: duplicate partition name
    1061,  # ER_DUP_KEYNAME
    1091,  # ER_CANT_DROP_FIELD_OR_KEY
}


class ApplierError(MigratorError):
    component = "applier"


class UnsafeStatement(ApplierError):
    """A statement on a moving table cannot be carried over to the target safely."""


def apply_statement(conn: pymysql.connections.Connection, st: Statement, moving_schemas: set[str],
                    tables: set[str] | None, target_schema: Any,
                    source_definition: Callable[[str, str], str | None] | None = None) -> str:
    """Carry one statement over on ``conn`` (autocommit off: committed here).

    Returns "applied", "skipped" (already applied: a replay) or "ignored" (not
    about a moving table). Raises :class:`UnsafeStatement`, or :class:`ApplierError`
    when the target refuses it. ``source_definition(schema, table)`` gives the
    source's ``SHOW CREATE TABLE``: an "already applied" error counts as such
    only when the target's definition equals it (without it, never).
    """
    decision = classify(st, moving_schemas, tables)
    if decision.action == "ignore":
        return "ignored"
    if decision.action == "unsafe":
        raise UnsafeStatement(decision.reason)
    sql = decision.render(target_schema)
    try:
        with conn.cursor() as cur:
            cur.execute(TAG + sql)
        conn.commit()
    except pymysql.err.MySQLError as exc:
        code = exc.args[0] if exc.args else None
        if code in ALREADY_APPLIED:
            conn.rollback()
            mine = _definition(conn, target_schema(decision.schema), decision.table)
            theirs = source_definition(decision.schema, decision.table) if source_definition else None
            if mine is not None and theirs is not None and same_definition(mine, theirs):
                log.info("statement already applied on the target (%s): %s", exc.args[-1], sql)
                return "skipped"
            raise ApplierError(
                f"carrying over `{short(st.query)}` to the target failed with {code} ({exc.args[-1]}), and the "
                f"target's definition of {decision.schema}.{decision.table} differs from the source's, so it "
                "was not simply applied before: compare SHOW CREATE TABLE on both, fix the target table by "
                "hand and resume, or abort the migration"
            ) from None
        raise ApplierError(
            f"carrying over `{short(st.query)}` to the target failed: {exc.args[-1] if exc.args else exc}; "
            "fix the target table by hand and resume, or abort the migration"
        ) from None
    return "applied"


_AUTO_INC = re.compile(r"\s+AUTO_INCREMENT=\d+")


def same_definition(a: str, b: str) -> bool:
    """Two ``SHOW CREATE TABLE`` texts define the same table (the AUTO_INCREMENT counter aside)."""
    return _AUTO_INC.sub("", a) == _AUTO_INC.sub("", b)


def _definition(conn: pymysql.connections.Connection, schema: str, table: str) -> str | None:
    try:
        with conn.cursor() as cur:
            cur.execute(TAG + f"SHOW CREATE TABLE {qualified(schema, table)}")
            row = cur.fetchone()
        conn.commit()
    except pymysql.err.MySQLError:
        return None
    return row[1] if row else None


def source_definitions(conn_of: Callable[[], pymysql.connections.Connection]) -> Callable[[str, str], str | None]:
    """``source_definition`` for :func:`apply_statement`, reading through ``conn_of()``."""
    def get(schema: str, table: str) -> str | None:
        return _definition(conn_of(), schema, table)
    return get
