"""Foreign keys on real servers: the ones a move cannot carry are refused before any copy, the ones
it can (RESTRICT / NO ACTION inside the moving set) move under writes and end equal.

A cascade is done by the server without row events (MariaDB logs the parent's
Delete_rows only), so a split under a writer that deleted parents once left the
children alive on the target.
"""

from __future__ import annotations

import random
import threading
import time

import pytest

from migrator.engine import catch_up
from migrator.engine.cleanup import cleanup
from migrator.engine.cutover import cutover
from migrator.engine.cutover.hooks import CutoverHooks
from migrator.engine.migration import MigrationStore, Phase
from migrator.engine.names import tomb_db
from migrator.engine.preflight import PreflightFailed
from migrator.engine.verify.run import verify_migration
from migrator.fleet.mysql import connect, qualified
from migrator.ops import command
from tests.conftest import SEED
from tests.integration.engine import catchup_helpers as h
from tests.integration.engine.support import strip_auto_increment

PARENT = """CREATE TABLE `{db}`.fk_parent (
  id INT NOT NULL AUTO_INCREMENT PRIMARY KEY, name VARCHAR(40) NOT NULL) ENGINE=InnoDB"""
CHILD = """CREATE TABLE `{db}`.fk_child (
  id INT NOT NULL AUTO_INCREMENT PRIMARY KEY, pid INT NOT NULL, note VARCHAR(40) NOT NULL, KEY (pid),
  CONSTRAINT `{name}` FOREIGN KEY (pid) REFERENCES {parent} (id) {rules}) ENGINE=InnoDB"""


def _fails(result, name: str, *words: str) -> str:
    lines = [c.line() for c in result.failures if c.name == name]
    hit = [line for line in lines if all(w in line for w in words)]
    assert hit, (name, words, result.lines())
    return hit[0]


def _nothing_on_the_target(fleet) -> None:
    with connect(fleet.hosts["MySQL003A"], fleet.credentials) as c, c.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name LIKE 'db0000%'")
        assert cur.fetchone()[0] == 0


def test_a_cascading_foreign_key_is_refused_before_any_copy(fleet, conns):
    with conns("MySQL001A").cursor() as cur:
        cur.execute(PARENT.format(db="db00003"))
        cur.execute(CHILD.format(db="db00003", name="edge_child_parent", parent="fk_parent",
                                 rules="ON DELETE CASCADE"))
        cur.execute("INSERT INTO db00003.fk_parent (name) VALUES ('p')")
        cur.execute("INSERT INTO db00003.fk_child (pid, note) VALUES (1, 'c'), (1, 'd'), (1, 'e')")
    spec = command.plan_split(fleet.config, "MySQL001A").spec
    res = command.preflight(fleet.config, spec.id)
    line = _fails(res, "foreign keys", "`edge_child_parent`", "db00003.fk_child", "db00003.fk_parent",
                  "ON DELETE CASCADE", "DROP FOREIGN KEY `edge_child_parent`")
    assert "without row events" in line
    with pytest.raises(PreflightFailed, match="preflight check"):
        command.run_copy(fleet.config, spec.id)
    st, _ = MigrationStore(fleet.zk).state(spec.id)
    assert st.phase == Phase.PREFLIGHT and "edge_child_parent" in (st.error or "")
    _nothing_on_the_target(fleet)


@pytest.mark.parametrize("rules", ["ON DELETE SET NULL", "ON UPDATE CASCADE"])
def test_every_foreign_key_action_is_refused(fleet, conns, rules):
    with conns("MySQL001A").cursor() as cur:
        cur.execute(PARENT.format(db="db00002"))
        child = CHILD.format(db="db00002", name="fk_act", parent="fk_parent", rules=rules)
        cur.execute(child.replace("pid INT NOT NULL", "pid INT NULL"))
    spec = command.plan_split(fleet.config, "MySQL001A").spec
    _fails(command.preflight(fleet.config, spec.id), "foreign keys", "`fk_act`", rules)


def test_a_foreign_key_across_the_moving_set_is_refused(fleet, conns):
    with conns("MySQL001A").cursor() as cur:
        # a moving child whose parent stays (another schema), and a moving parent whose child stays
        cur.execute("CREATE DATABASE fk_stays")
        try:
            cur.execute(PARENT.format(db="fk_stays"))
            cur.execute(CHILD.format(db="db00002", name="out_of_the_set", parent="`fk_stays`.`fk_parent`",
                                     rules="ON DELETE RESTRICT"))
            cur.execute(PARENT.format(db="db00003"))
            cur.execute(CHILD.format(db="fk_stays", name="into_the_set", parent="`db00003`.`fk_parent`",
                                     rules="ON DELETE NO ACTION"))
            spec = command.plan_split(fleet.config, "MySQL001A").spec
            res = command.preflight(fleet.config, spec.id)
            _fails(res, "foreign keys", "`out_of_the_set`", "db00002.fk_child", "fk_stays.fk_parent does not move")
            _fails(res, "foreign keys", "`into_the_set`", "fk_stays.fk_child does not move", "db00003.fk_parent")
            with pytest.raises(PreflightFailed):
                command.run_copy(fleet.config, spec.id)
            _nothing_on_the_target(fleet)
        finally:  # the keys first: a schema whose table another schema's key references cannot be dropped
            cur.execute("DROP TABLE IF EXISTS db00002.fk_child, fk_stays.fk_child")
            cur.execute("DROP DATABASE fk_stays")


def test_a_queue_partition_move_that_leaves_a_referenced_table_behind_is_refused(fleet, conns):
    with conns("MySQL001A").cursor() as cur:
        cur.execute(PARENT.format(db="db00002"))
        cur.execute(CHILD.format(db="db00002", name="jobs_owner", parent="fk_parent", rules=""))
    spec = h.create_migration(fleet, kind="queue_partition", tables=("fk_child",), shards=(2,))
    res = command.preflight(fleet.config, spec.id)
    _fails(res, "foreign keys", "`jobs_owner`", "db00002.fk_parent does not move", "crosses the moving set")
    # the pair moved together is fine
    command.abort(fleet.config, spec.id)
    both = h.create_migration(fleet, kind="queue_partition", tables=("fk_child", "fk_parent"), shards=(2,))
    res = command.preflight(fleet.config, both.id)
    assert not [c for c in res.failures if c.name == "foreign keys"], res.lines()


class FamilyWriter:
    """Inserts parents with 3 children, deletes families (children first: RESTRICT), changes children
    and parents, in the moving shards, until stopped."""

    def __init__(self, fleet, dbs: list[str], seed: int):
        self.conn = connect(fleet.hosts["MySQL001A"], fleet.credentials)
        self.dbs, self.rng = dbs, random.Random(seed)
        self.ops = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> FamilyWriter:
        self._thread.start()
        return self

    def _run(self) -> None:
        try:
            with self.conn.cursor() as cur:
                while not self._stop.is_set():
                    db = self.rng.choice(self.dbs)
                    p, c = qualified(db, "fk_parent"), qualified(db, "fk_child")
                    op = self.rng.random()
                    cur.execute("BEGIN")
                    if op < 0.4:
                        cur.execute(f"INSERT INTO {p} (name) VALUES (%s)", (f"p{self.ops}",))
                        pid = cur.lastrowid
                        cur.executemany(f"INSERT INTO {c} (pid, note) VALUES (%s, %s)",
                                        [(pid, f"c{k}") for k in range(3)])
                    else:
                        cur.execute(f"SELECT id FROM {p} ORDER BY RAND({self.ops}) LIMIT 1")
                        row = cur.fetchone()
                        if row and op < 0.7:
                            cur.execute(f"DELETE FROM {c} WHERE pid = %s", row)
                            cur.execute(f"DELETE FROM {p} WHERE id = %s", row)
                        elif row:
                            cur.execute(f"UPDATE {c} SET note = %s WHERE pid = %s", (f"u{self.ops}", row[0]))
                            cur.execute(f"UPDATE {p} SET name = %s WHERE id = %s", (f"u{self.ops}", row[0]))
                    cur.execute("COMMIT")
                    self.ops += 1
                    time.sleep(0.003)
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.error = exc

    def stop(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join(30)
        self.conn.close()
        assert self.error is None, self.error


def test_restrict_foreign_keys_inside_the_moving_set_move_under_writes_and_end_equal(fleet, conns):
    """Copy (children may land before parents), the catch-up lanes (a family's rows on several lanes),
    verify's repair (a parent re-copied by REPLACE while its children stay, a child restored, one
    the source never had deleted), the cutover's rename fence and the cleanup, with a writer of
    families throughout."""
    src = conns("MySQL001A")
    dbs = ["db00002", "db00003"]
    with src.cursor() as cur:
        for db in dbs:
            cur.execute(PARENT.format(db=db))
            cur.execute(CHILD.format(db=db, name="child_parent", parent="fk_parent",
                                     rules="ON DELETE RESTRICT ON UPDATE NO ACTION"))
            for i in range(1, 41):
                cur.execute(f"INSERT INTO `{db}`.fk_parent (name) VALUES (%s)", (f"seed{i}",))
                cur.executemany(f"INSERT INTO `{db}`.fk_child (pid, note) VALUES (%s, %s)",
                                [(cur.lastrowid, f"seed{k}") for k in range(3)])
    spec = command.plan_split(fleet.config, "MySQL001A").spec
    assert list(spec.databases) == dbs
    res = command.preflight(fleet.config, spec.id)
    assert res.ok, res.lines()
    assert any(c.name == "foreign keys" and c.ok and "2 foreign key(s)" in c.message for c in res.checks)
    writer = FamilyWriter(fleet, dbs, SEED).start()
    try:
        assert command.run_copy(fleet.config, spec.id)["finished"]
        catch_up.run_passes(fleet.config, spec.id, passes=2)
    finally:
        writer.stop()
    assert writer.ops > 20
    catch_up.run_passes(fleet.config, spec.id)
    tgt = conns("MySQL003A")
    with tgt.cursor() as cur:
        # differences only a repair that ignores foreign keys can mend: a parent with children that
        # must be re-copied (REPLACE deletes it first), a missing child, a child the source lacks
        cur.execute("SET SESSION foreign_key_checks = 0")
        cur.execute("SELECT pid FROM db00002.fk_child GROUP BY pid HAVING COUNT(*) = 3 LIMIT 1")
        pid = cur.fetchone()[0]
        cur.execute("UPDATE db00002.fk_parent SET name = 'tampered' WHERE id = %s", (pid,))
        cur.execute("DELETE FROM db00003.fk_child ORDER BY id LIMIT 1")
        cur.execute("INSERT INTO db00002.fk_child (pid, note) VALUES (%s, 'only on the target')", (pid,))
    rep = verify_migration(fleet.config, spec.id)
    assert rep.ok and rep.repaired_rows >= 3, rep.to_dict()

    writer = FamilyWriter(fleet, dbs, SEED + 1).start()  # on through the cutover's re-checks
    try:
        cutover(fleet.config, spec.id, hooks=CutoverHooks(after_freeze=lambda run: writer.stop()))
    finally:
        writer.stop()
    for db in dbs:
        tomb = tomb_db(spec.id, db)
        with src.cursor() as c1, tgt.cursor() as c2:
            for t in ("fk_parent", "fk_child"):
                c1.execute(f"CHECKSUM TABLE {qualified(tomb, t)} EXTENDED")
                c2.execute(f"CHECKSUM TABLE {qualified(db, t)} EXTENDED")
                assert c1.fetchone()[1] == c2.fetchone()[1], (db, t)
                c1.execute(f"SHOW CREATE TABLE {qualified(tomb, t)}")
                c2.execute(f"SHOW CREATE TABLE {qualified(db, t)}")
                assert strip_auto_increment(c1.fetchone()[1]) == strip_auto_increment(c2.fetchone()[1])
            # every child has its parent on the new master
            c2.execute(f"SELECT COUNT(*) FROM `{db}`.fk_child c LEFT JOIN `{db}`.fk_parent p ON p.id = c.pid "
                       "WHERE p.id IS NULL")
            assert c2.fetchone()[0] == 0
    out = cleanup(fleet.config, spec.id, now=True)
    assert all(f"MySQL001A:{tomb_db(spec.id, db)}" in out.dropped for db in dbs), out.dropped
