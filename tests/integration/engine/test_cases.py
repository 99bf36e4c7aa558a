"""Data-driven edge cases: one directory per case under ``cases/``, moved end to end.

Each case's ``create.sql`` (and optional ``rows.sql``) is loaded into a moving
shard database on the source. One migration then moves them all: copy (tiny
chunks, so every table spans several), catch-up passes while every case's
optional ``writes.sql`` runs again and again on the source (``@i`` holds the
round number) beside a writer on the shard's seed tables, a full verify once
they stopped, then the writes again through the cutover's re-checks (rows
changed after the full check reach the target by its refresh rounds and its
compare under the fence, both of which re-copy rows) until the freeze, and the
fenced cutover. Every case table must then be identical on the target and in
the source's tombstone: rows by key, ``CHECKSUM TABLE`` (the server's oracle,
which the migrator did not write: a snapshot read through the text protocol
would see a FLOAT's 6 digits only), DDL apart from AUTO_INCREMENT; every case
view must exist on the target and read the same rows, and the shard's stored
routines must be there too.
"""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pymysql

from migrator.engine import catch_up
from migrator.engine.cleanup import cleanup
from migrator.engine.copy import table_progress
from migrator.engine.cutover import cutover
from migrator.engine.cutover.hooks import CutoverHooks
from migrator.engine.migration import Options
from migrator.engine.names import tomb_db
from migrator.engine.verify.run import verify_migration
from migrator.fleet.mysql import connect, qualified
from migrator.fleet.shard_map import ShardMapStore
from migrator.ops import command
from tests.conftest import SEED
from tests.integration.engine.support import Writer, snapshot, strip_auto_increment

CASES = Path(__file__).with_name("cases")
SHARD = 2


def statements(path: Path) -> list[str]:
    """Split a case file on ';' at line ends; '--' comment lines are dropped."""
    text = "\n".join(line for line in path.read_text().splitlines() if not line.lstrip().startswith("--"))
    return [s.strip() for s in re.split(r";\s*\n", text + "\n") if s.strip()]


def _objects(cur, kind: str) -> set[str]:
    cur.execute("SHOW FULL TABLES WHERE Table_type = %s", (kind,))
    return {r[0] for r in cur.fetchall()}


def load_cases(conn, db: str) -> tuple[dict[str, list[str]], list[str]]:
    """Run every case's SQL in ``db``; returns (case -> the tables it created, the views created)."""
    made: dict[str, list[str]] = {}
    views: list[str] = []
    with conn.cursor() as cur:
        cur.execute(f"USE `{db}`")
        for case in sorted(p for p in CASES.iterdir() if p.is_dir()):
            existing, existing_views = _objects(cur, "BASE TABLE"), _objects(cur, "VIEW")
            for name in ("create.sql", "rows.sql"):
                if (case / name).exists():
                    for st in statements(case / name):
                        cur.execute(st)
            cur.execute("SET SESSION sql_mode = DEFAULT")
            made[case.name] = sorted(_objects(cur, "BASE TABLE") - existing)
            views += sorted(_objects(cur, "VIEW") - existing_views)
            assert made[case.name], f"case {case.name} created no table"
    return made, views


class CaseWriter:
    """Runs every case's ``writes.sql`` in rounds on the source until stopped (one connection);
    round numbers go on from ``after`` (a script may insert keys made of ``@i``)."""

    def __init__(self, fleet, db: str, after: int = 0):
        self.conn = connect(fleet.hosts["MySQL001A"], fleet.credentials, db)
        self.scripts = {p.name: statements(p / "writes.sql") for p in sorted(CASES.iterdir())
                        if (p / "writes.sql").exists()}
        self.rounds = after
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> CaseWriter:
        self.round()  # at least once, before the copy starts
        self._thread.start()
        return self

    def round(self) -> None:
        self.rounds += 1
        with self.conn.cursor() as cur:
            cur.execute("SET @i = %s", (self.rounds,))
            for case, script in self.scripts.items():
                for st in script:
                    try:
                        cur.execute(st)
                    except pymysql.err.MySQLError as exc:
                        raise AssertionError(f"case {case}: writes.sql failed on `{st}`: {exc}") from None

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.round()
                time.sleep(0.05)
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc

    def stop(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=60)
        self.conn.close()
        assert self.error is None, self.error


def table_checksum(cur, db: str, table: str) -> int:
    """``CHECKSUM TABLE ... EXTENDED`` of the table's rows.

    A table with generated columns (VIRTUAL or STORED) is checksummed through a server-made copy
    (``CREATE TEMPORARY TABLE .. AS SELECT *``): MariaDB 10.11.19 leaves generated columns out of
    the columns CHECKSUM TABLE reads (the read set of MDEV-22943) yet hashes their bytes, so it
    hashes whatever the row buffer held; two tables filled by the same INSERT .. SELECT on one
    server differ, and differ again after FLUSH TABLES. The copy's columns are plain ones.
    """
    cur.execute("SELECT COUNT(*) FROM information_schema.columns WHERE table_schema = %s AND table_name = %s "
                "AND is_generated <> 'NEVER'", (db, table))
    if not cur.fetchone()[0]:
        cur.execute(f"CHECKSUM TABLE {qualified(db, table)} EXTENDED")
        return cur.fetchone()[1]
    copy = qualified(db, "_case_rows")
    cur.execute(f"DROP TEMPORARY TABLE IF EXISTS {copy}")
    cur.execute(f"CREATE TEMPORARY TABLE {copy} AS SELECT * FROM {qualified(db, table)}")
    cur.execute(f"CHECKSUM TABLE {copy} EXTENDED")
    out = cur.fetchone()[1]
    cur.execute(f"DROP TEMPORARY TABLE {copy}")
    return out


def test_every_case_moves_identically(fleet, conns):
    db = f"db{SHARD:05d}"
    src = conns("MySQL001A")
    cases, views = load_cases(src, db)
    spec = command.plan_move(fleet.config, [SHARD], "MySQL003A",
                             options=Options(chunk_rows=7, chunk_max_rows=13, chunk_target_ms=10,
                                             freeze_budget_ms=5000)).spec
    writer = Writer(fleet.hosts["MySQL001A"], fleet.credentials, [SHARD], SEED).start()
    cw = CaseWriter(fleet, db).start()
    try:
        out = command.run_copy(fleet.config, spec.id)
        assert out["finished"], out
        catch_up.run_passes(fleet.config, spec.id, passes=2)
    finally:
        writer.stop()
        cw.stop()
    assert cw.rounds >= 2
    catch_up.run_passes(fleet.config, spec.id)
    routines = "SELECT ROUTINE_TYPE, ROUTINE_NAME, ROUTINE_DEFINITION, DEFINER FROM information_schema.ROUTINES " \
               "WHERE ROUTINE_SCHEMA = %s ORDER BY 1, 2"
    with src.cursor() as cur:
        cur.execute(routines, (db,))
        src_routines = cur.fetchall()
    rep = verify_migration(fleet.config, spec.id)  # nothing writes: the full check must be clean
    assert rep.ok, rep.to_dict()

    # the writes go on after the full check, up to the freeze: the cutover's refresh rounds and its
    # compare under the fence re-check (and re-copy) the rows they change
    writer = Writer(fleet.hosts["MySQL001A"], fleet.credentials, [SHARD], SEED + 1).start()
    cw = CaseWriter(fleet, db, after=cw.rounds).start()
    view_rows = {}

    def quiesce(run) -> None:  # noqa: ARG001 - the hook's argument
        writer.stop()
        cw.stop()
        with src.cursor() as cur:
            for v in views:  # the writers are stopped: what the views read now is final
                cur.execute(f"SELECT * FROM {qualified(db, v)} ORDER BY 1")
                view_rows[v] = cur.fetchall()

    try:
        cutover(fleet.config, spec.id, hooks=CutoverHooks(after_freeze=quiesce))
    finally:
        writer.stop()
        cw.stop()
    assert ShardMapStore(fleet.zk).read().master_of(SHARD) == "MySQL003A"

    tomb = tomb_db(spec.id, db)
    tgt = conns("MySQL003A")
    chunks = {p["table"]: p["chunks"] for p in table_progress(fleet.zk, spec.id)}
    problems = []
    for case, tables in cases.items():
        for t in tables:
            a, b = snapshot(src, tomb, t), snapshot(tgt, db, t)
            if a != b:
                diff = [k for k in set(a) | set(b) if a.get(k) != b.get(k)]
                problems.append(f"{case}: {t}: {len(diff)} rows differ, e.g. key {diff[0]!r}: "
                                f"source {a.get(diff[0])!r} target {b.get(diff[0])!r}")
                continue
            with src.cursor() as c1, tgt.cursor() as c2:
                # the oracle the migrator did not write: the server's checksum of the stored rows
                # (a snapshot read through the text protocol sees a FLOAT's 6 digits only)
                if table_checksum(c1, tomb, t) != table_checksum(c2, db, t):
                    problems.append(f"{case}: {t}: CHECKSUM TABLE differs")
                c1.execute(f"SHOW CREATE TABLE {qualified(tomb, t)}")
                c2.execute(f"SHOW CREATE TABLE {qualified(db, t)}")
                if strip_auto_increment(c1.fetchone()[1]) != strip_auto_increment(c2.fetchone()[1]):
                    problems.append(f"{case}: {t}: DDL differs")
            if len(a) > 13 and chunks.get(t, 0) < 2:
                problems.append(f"{case}: {t}: copied in {chunks.get(t)} chunk(s); the case should span several")
    with tgt.cursor() as cur:
        for v in views:
            cur.execute("SELECT COUNT(*) FROM information_schema.views WHERE table_schema = %s AND table_name = %s",
                        (db, v))
            if not cur.fetchone()[0]:
                problems.append(f"view {v} is not on the target")
                continue
            cur.execute(f"SELECT * FROM {qualified(db, v)} ORDER BY 1")
            if cur.fetchall() != view_rows[v]:
                problems.append(f"view {v} reads other rows on the target")
    with tgt.cursor() as cur:
        cur.execute(routines, (db,))
        if cur.fetchall() != src_routines:
            problems.append(f"the routines on the target differ from the source's {src_routines}")
        cur.execute(f"SELECT {qualified(db, 'view_double')}(21)")
        assert cur.fetchone()[0] == 42
    assert views and src_routines, "no case made a view or a routine"
    assert not problems, "\n".join(problems)
    # the old master's shard db held only the sentinel and the carried views by now: cleanup drops it
    out = cleanup(fleet.config, spec.id, now=True)
    assert f"MySQL001A:{db}" in out.dropped and f"MySQL001A:{tomb}" in out.dropped, out.dropped
