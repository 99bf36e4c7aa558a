"""The schema objects of a moving shard besides its tables: views, routines, triggers, events.

Runs where the copy and preflight run. Views and stored routines (procedures,
functions) hold no rows: the copy creates them on the target once the tables
are there (:func:`carry`), each from the source's ``SHOW CREATE`` text, under
its own ``DEFINER`` and ``sql_mode``, so they behave on the new owner as on the
old one. A view on a view is created after it (rounds until none is left).

Triggers and events are refused by preflight (:func:`findings`): catch-up
applies the source's row changes, trigger effects included, so a trigger on
the target would apply them a second time; the cutover cannot rename a table
that has triggers into its tombstone schema (MariaDB: 1435 "Trigger in wrong
schema"); an event on the target would write there during catch-up. The
message says what to do: drop them for the move and create them on the target
after the cutover.

Creating an object under another account's ``DEFINER`` needs ``SET USER``
(or ``SUPER``), and the account must exist on the target: preflight checks
both before any copy.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import pymysql

from migrator.errors import MigratorError
from migrator.fleet.mysql import ident, qualified, query, scalar, tag

T = tag("objects")

#: privileges needed only when the moving shards hold views or routines
OBJECT_GRANTS: dict[str, str] = {
    "SHOW VIEW": "read the definition of a moving view (SHOW CREATE VIEW)",
    "CREATE VIEW": "create the moving views on the target",
    "CREATE ROUTINE": "create the moving procedures and functions on the target",
    "ALTER ROUTINE": "replace a moving routine on the target when the copy resumes",
    "SET USER": "create views and routines under their own DEFINER when it is another account",
}

_CREATE = re.compile(r"^\s*CREATE\s+(?:OR\s+REPLACE\s+)?", re.I)
_DEFINER = re.compile(r"^(?P<user>.*)@(?P<host>[^@]*)$")


class ObjectError(MigratorError):
    component = "copy"


@dataclass(frozen=True)
class SchemaObject:
    kind: str  # VIEW | PROCEDURE | FUNCTION | TRIGGER | EVENT
    db: str
    name: str
    definer: str  # user@host, as information_schema spells it
    on_table: str = ""  # a trigger's table

    @property
    def label(self) -> str:
        return f"{self.kind.lower()} {self.db}.{self.name}"


def list_objects(conn: pymysql.connections.Connection, dbs: list[str]) -> list[SchemaObject]:
    """Views, routines, triggers and events of ``dbs`` (the cutover's own gate triggers excluded)."""
    if not dbs:
        return []
    marks = ",".join(["%s"] * len(dbs))
    out = [SchemaObject("VIEW", d, n, definer) for d, n, definer in query(
        conn, T + f"SELECT TABLE_SCHEMA, TABLE_NAME, DEFINER FROM information_schema.VIEWS "
        f"WHERE TABLE_SCHEMA IN ({marks}) ORDER BY TABLE_SCHEMA, TABLE_NAME", dbs)]
    out += [SchemaObject(kind, d, n, definer) for d, n, kind, definer in query(
        conn, T + f"SELECT ROUTINE_SCHEMA, ROUTINE_NAME, ROUTINE_TYPE, DEFINER FROM information_schema.ROUTINES "
        f"WHERE ROUTINE_SCHEMA IN ({marks}) AND ROUTINE_TYPE IN ('PROCEDURE', 'FUNCTION') "
        "ORDER BY ROUTINE_SCHEMA, ROUTINE_NAME", dbs)]
    out += [SchemaObject("TRIGGER", d, n, definer, t) for d, n, definer, t in query(
        conn, T + f"SELECT TRIGGER_SCHEMA, TRIGGER_NAME, DEFINER, EVENT_OBJECT_TABLE FROM information_schema.TRIGGERS "
        f"WHERE TRIGGER_SCHEMA IN ({marks}) AND TRIGGER_NAME NOT LIKE '\\_mgate\\_%%' "
        "ORDER BY TRIGGER_SCHEMA, TRIGGER_NAME", dbs)]
    # mysql.event, not information_schema.EVENTS: that shows events only to holders of EVENT
    out += [SchemaObject("EVENT", d, n, definer) for d, n, definer in query(
        conn, T + f"SELECT db, name, definer FROM mysql.event WHERE db IN ({marks}) ORDER BY db, name", dbs)]
    return out


def findings(src: pymysql.connections.Connection, tgt: pymysql.connections.Connection | None, dbs: list[str],
             tables: set[tuple[str, str]] | None, privileges: set[str]) -> list[str]:
    """Preflight: one line per object the migration cannot carry (or cannot create on the target).

    ``tables``: for a table-level move, only triggers on these tables matter (views and routines
    stay with their schema). ``privileges``: the migration user's global privileges on the target.
    """
    problems = []
    objs = list_objects(src, dbs)
    for o in objs:
        if o.kind == "TRIGGER" and (tables is None or (o.db, o.on_table) in tables):
            problems.append(
                f"{o.label} on {o.db}.{o.on_table}: triggers are not carried (catch-up already applies their "
                "effects, and the cutover cannot rename a table with triggers); drop it for the move (keep its "
                "SHOW CREATE TRIGGER text) and create it on the target after the cutover")
        elif o.kind == "EVENT" and tables is None:
            problems.append(
                f"{o.label}: events are not carried (one on the target would write there during catch-up); "
                "drop it for the move (keep its SHOW CREATE EVENT text) and create it on the target after the "
                "cutover")
    carried = [o for o in objs if o.kind in ("VIEW", "PROCEDURE", "FUNCTION")] if tables is None else []
    if not carried or tgt is None:
        return problems
    has = privileges | ({"SET USER"} if "SUPER" in privileges else set())
    need = {"CREATE VIEW", "SHOW VIEW"} if any(o.kind == "VIEW" for o in carried) else set()
    if any(o.kind != "VIEW" for o in carried):
        need |= {"CREATE ROUTINE", "ALTER ROUTINE"}
    me = str(scalar(tgt, T + "SELECT CURRENT_USER()"))
    others = sorted({o.definer for o in carried if o.definer != me})
    if others:
        need.add("SET USER")
    if "ALL PRIVILEGES" not in has:
        for p in sorted(need - has):
            problems.append(f"the moving shards hold views or routines and the migration user lacks {p} "
                            f"(needed to {OBJECT_GRANTS[p]}); GRANT {p} ON *.* to it")
    for definer in others:
        m = _DEFINER.match(definer)
        user, host = (m.group("user"), m.group("host")) if m else (definer, "%")
        if not scalar(tgt, T + "SELECT COUNT(*) FROM mysql.global_priv WHERE User = %s AND Host = %s", (user, host)):
            names = ", ".join(o.label for o in carried if o.definer == definer)
            problems.append(f"{names} run as DEFINER {definer}, an account the target does not have: create it "
                            "on the target pair (with the same grants), or redefine them with another DEFINER")
    return problems


def _create_sql(src: pymysql.connections.Connection, o: SchemaObject) -> tuple[str, str | None]:
    """(CREATE OR REPLACE statement, sql_mode to create it under) from the source's SHOW CREATE."""
    with src.cursor(pymysql.cursors.DictCursor) as cur:
        cur.execute(T + f"SHOW CREATE {o.kind} {qualified(o.db, o.name)}")
        row = cur.fetchone()
    text = row.get(f"Create {o.kind.capitalize()}") or row.get("Create View")
    if not text:
        raise ObjectError(f"cannot read the definition of {o.label} on the source (SHOW CREATE {o.kind} gave "
                          "nothing): grant the migration user SHOW VIEW, or SELECT on mysql.proc", phase="copy")
    return _CREATE.sub("CREATE OR REPLACE ", text, count=1), row.get("sql_mode")


def carry(src: pymysql.connections.Connection, tgt: pymysql.connections.Connection, dbs: list[str]) -> list[str]:
    """Create the views and routines of ``dbs`` on the target (idempotent); returns their labels."""
    todo = [o for o in list_objects(src, dbs) if o.kind in ("PROCEDURE", "FUNCTION", "VIEW")]
    done: list[str] = []
    last: dict[SchemaObject, str] = {}
    while todo:
        left = []
        for o in todo:
            sql, mode = _create_sql(src, o)
            try:
                with tgt.cursor() as cur:
                    cur.execute(T + f"USE {ident(o.db)}")
                    cur.execute("SET @migrator_mode = @@SESSION.sql_mode")
                    if mode is not None:
                        cur.execute("SET SESSION sql_mode = %s", (mode,))
                    try:
                        cur.execute(sql)
                    finally:
                        cur.execute("SET SESSION sql_mode = @migrator_mode")
                tgt.commit()
                done.append(o.label)
            except pymysql.err.MySQLError as exc:
                last[o] = f"{exc.args[0]}: {exc.args[-1]}"
                left.append(o)
        if len(left) == len(todo):
            o = left[0]
            raise ObjectError(f"creating {o.label} on the target failed ({last[o]}); fix what it names (a table "
                              "or view it reads that the target lacks, a privilege), then `migrator copy ID` "
                              "again", phase="copy")
        todo = left
    return done
