"""Verify against the sandbox: injected differences are found by chunk checksums and repaired."""

from __future__ import annotations

import pytest

from migrator.engine.verify.run import VERIFY_NODE, verify_migration
from migrator.fleet.mysql import connect as mysql_connect

from .cutover_setup import prepare_converged

EDGE_DDL = """CREATE TABLE IF NOT EXISTS `{db}`.edge_cases (
  a INT NOT NULL, b VARCHAR(20) NOT NULL, name VARCHAR(50) NULL, payload VARBINARY(64) NULL,
  PRIMARY KEY (a, b)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4"""


def _checksums(conn, db: str, tables: list[str]) -> dict[str, int]:
    with conn.cursor() as cur:
        cur.execute("CHECKSUM TABLE " + ", ".join(f"`{db}`.`{t}`" for t in tables))
        return {r[0].split(".", 1)[1]: r[1] for r in cur.fetchall()}


def _seed_edge_cases(fleet, shard: int) -> None:
    host = fleet.hosts[fleet.smap.master_of(shard)]
    db = f"db{shard:05d}"
    with mysql_connect(host, fleet.credentials) as c, c.cursor() as cur:
        cur.execute(EDGE_DDL.format(db=db))
        rows = [(i, f"k{i % 7}", None if i % 3 == 0 else f"n{i}", bytes([i % 256, 0, 255]) if i % 2 else None)
                for i in range(1, 60)]
        cur.executemany(f"INSERT INTO `{db}`.edge_cases VALUES (%s, %s, %s, %s)", rows)


def test_verify_finds_and_repairs_injected_differences(fleet):
    _seed_edge_cases(fleet, 2)
    prep = prepare_converged(fleet, (2, 3))
    tgt = mysql_connect(prep.target, fleet.credentials)
    with tgt.cursor() as cur:
        # a row changed on the target only
        cur.execute("UPDATE db00002.pins SET data = '{\"tampered\": 1}' WHERE local_id = 5")
        # a row missing on the target
        cur.execute("DELETE FROM db00003.pins WHERE local_id = 7")
        # NULL on the source, '' on the target (CONCAT_WS alone would not see it)
        cur.execute("UPDATE db00002.edge_cases SET name = '' WHERE a = 3 AND b = 'k3'")
        # binary column differing in one byte
        cur.execute("UPDATE db00002.edge_cases SET payload = X'010001' WHERE a = 1 AND b = 'k1'")
        # a row only on the target
        cur.execute("INSERT INTO db00003.board_has_pins VALUES (1, 2, 3)")

    report = verify_migration(fleet.config, prep.spec.id, repair=False, chunk_rows=8, drainer=prep.drainer)
    found = {(d.table, d.key, d.kind) for d in report.differing_rows}
    assert ("db00002.pins", (5,), "changed") in found
    assert ("db00003.pins", (7,), "missing_on_target") in found
    # text keys come back as their bytes (exact whatever the column's character set)
    assert ("db00002.edge_cases", (3, b"k3"), "changed") in found
    assert ("db00002.edge_cases", (1, b"k1"), "changed") in found
    assert ("db00003.board_has_pins", (1, 2), "extra_on_target") in found
    assert len(found) == 5, found
    assert len(report.mismatched_chunks) >= 4 and report.chunks > 10
    assert not report.ok and report.repaired_rows == 0

    report = verify_migration(fleet.config, prep.spec.id, repair=True, chunk_rows=8, drainer=prep.drainer)
    assert len(report.differing_rows) == 5 and report.repaired_rows == 5
    assert report.ok, report.to_dict()

    again = verify_migration(fleet.config, prep.spec.id, chunk_rows=8, drainer=prep.drainer)
    assert again.ok and not again.mismatched_chunks and not again.differing_rows
    node, _ = prep.store.get_progress(prep.spec.id, VERIFY_NODE)
    assert node["verified_gtid"] == again.verified_gtid and node["suspect_chunks"] == []

    src = mysql_connect(prep.source, fleet.credentials)
    for db, tables in (("db00002", ["pins", "edge_cases", "boards"]), ("db00003", ["pins", "board_has_pins"])):
        assert _checksums(src, db, tables) == _checksums(tgt, db, tables)
    with tgt.cursor() as cur:
        cur.execute("SELECT name IS NULL FROM db00002.edge_cases WHERE a = 3 AND b = 'k3'")
        assert cur.fetchone()[0] == 1
    src.close()
    tgt.close()


def test_verify_sees_live_writes_through_catch_up(fleet):
    """A write on the source after the copy is a difference only until catch-up applies it."""
    prep = prepare_converged(fleet, (4,))
    with mysql_connect(prep.source, fleet.credentials) as c, c.cursor() as cur:
        cur.execute("UPDATE db00004.pins SET data = '{\"new\": true}' WHERE local_id = 3")
        cur.execute("INSERT INTO db00004.boards (data) VALUES ('{}')")
    report = verify_migration(fleet.config, prep.spec.id, chunk_rows=5, drainer=prep.drainer)
    assert report.ok and not report.differing_rows and report.repaired_rows == 0


def test_verify_during_catch_up_waits_for_the_workers_checkpoint(fleet):
    """While catch-up passes run elsewhere, verify waits for their checkpoint instead of tailing itself."""
    import threading
    import time

    from migrator.engine import catch_up
    from migrator.engine.migration import Phase

    prep = prepare_converged(fleet, (4,))
    prep.store.set_phase(prep.spec.id, Phase.CATCHING_UP)
    with mysql_connect(prep.source, fleet.credentials) as c, c.cursor() as cur:
        cur.execute("UPDATE db00004.pins SET data = '{\"during\": 1}' WHERE local_id = 5")
    worker = threading.Thread(target=lambda: (time.sleep(1.0), catch_up.run_passes(fleet.config, prep.spec.id, 1)))
    worker.start()
    t0 = time.monotonic()
    report = verify_migration(fleet.config, prep.spec.id, chunk_rows=5)
    worker.join(30)
    assert time.monotonic() - t0 >= 0.9  # it waited for the worker
    assert report.ok and not report.differing_rows and not report.mismatched_chunks


def test_a_repair_that_meets_a_row_lock_on_the_target_retries(fleet):
    """The cutover's tail applies beside the re-check's repair: a deadlock or lock wait timeout on
    the target repeats the repair instead of failing the cutover."""
    import threading

    from migrator.engine.verify.checksums import Side, table_info
    from migrator.engine.verify.repair import check_rows

    from .catchup_helpers import SOURCE, TARGET, conn

    db = "db00002"
    for host in (SOURCE, TARGET):
        with conn(fleet, host) as c, c.cursor() as cur:
            cur.execute(f"CREATE DATABASE IF NOT EXISTS `{db}`")
            cur.execute(f"DROP TABLE IF EXISTS `{db}`.repair_lock_t")
            cur.execute(f"CREATE TABLE `{db}`.repair_lock_t (id INT PRIMARY KEY, v INT) ENGINE=InnoDB")
            cur.execute(f"INSERT INTO `{db}`.repair_lock_t VALUES (1, {1 if host == SOURCE else 0}), (2, 2)")
    with conn(fleet, SOURCE) as src, conn(fleet, TARGET) as dst, conn(fleet, TARGET, autocommit=False) as blocker:
        with dst.cursor() as cur:
            cur.execute("SET SESSION innodb_lock_wait_timeout = 1")
        with blocker.cursor() as cur:
            cur.execute(f"SELECT * FROM `{db}`.repair_lock_t WHERE id = 1 FOR UPDATE")
        timer = threading.Timer(1.5, blocker.rollback)  # the lock outlives the first attempt only
        timer.start()
        try:
            t = table_info(src, db, "repair_lock_t")
            diffs, fixed = check_rows(Side(src), Side(dst), t, [(1,), (2,)], repair=True)
        finally:
            timer.join()
        assert [d.key for d in diffs] == [(1,)] and fixed == 1
        with dst.cursor() as cur:
            cur.execute(f"SELECT v FROM `{db}`.repair_lock_t WHERE id = 1")
            assert cur.fetchone()[0] == 1
            cur.execute(f"DROP TABLE `{db}`.repair_lock_t")
        with src.cursor() as cur:
            cur.execute(f"DROP TABLE `{db}`.repair_lock_t")


def test_verify_sees_and_repairs_what_the_text_protocol_rounds(fleet):
    """A target FLOAT differing from the source beyond its 6th digit is a difference, and the repair
    writes the source's exact value: CHECKSUM TABLE equal after it. So are an ENUM's invalid value
    (index 0, whose label '' is also a member's) and a cp1251 byte without a Unicode mapping."""
    db = "db00002"
    with mysql_connect(fleet.hosts["MySQL001A"], fleet.credentials) as c, c.cursor() as cur:
        cur.execute(f"CREATE TABLE `{db}`.exact_values (id INT NOT NULL PRIMARY KEY, f FLOAT NULL, "
                    "en ENUM('', 'x') NULL, cy VARCHAR(10) CHARACTER SET cp1251 NULL) ENGINE=InnoDB")
        cur.execute(f"CREATE TABLE `{db}`.exact_float_keys (f FLOAT NOT NULL PRIMARY KEY, v INT NOT NULL)")
        cur.execute("SET SESSION sql_mode = ''")  # the ENUM's invalid value is stored with a warning
        cur.executemany(f"INSERT INTO `{db}`.exact_values VALUES (%s, 1e0 / (%s + 6), %s, IF(%s, X'98C0', 'ok'))",
                        [(i, i, 0 if i % 3 == 0 else 1, i % 5 == 0) for i in range(1, 31)])
        cur.execute(f"UPDATE `{db}`.exact_values SET f = 0.14344295859336853 WHERE id = 1")
        cur.executemany(f"INSERT INTO `{db}`.exact_float_keys VALUES (1e0 / (%s + 2), %s)",
                        [(i, i) for i in range(1, 21)])
        # two keys with the same 6 significant digits: two rows
        cur.execute(f"INSERT INTO `{db}`.exact_float_keys VALUES (0.14344295859336853, 100), (0.1434430032968521, 101)")
    prep = prepare_converged(fleet, (2,))
    src = mysql_connect(prep.source, fleet.credentials)
    tgt = mysql_connect(prep.target, fleet.credentials)
    tables = ["exact_values", "exact_float_keys"]
    with src.cursor() as s_cur, tgt.cursor() as cur:
        # whatever the test's copy did, make the target what the text protocol makes of the source:
        # each FLOAT the float nearest its 6-digit text, the ENUM by label, cp1251 through utf8mb4
        cur.execute(f"DELETE FROM `{db}`.exact_values")
        cur.execute(f"DELETE FROM `{db}`.exact_float_keys")
        s_cur.execute(f"SELECT id, f, en, cy FROM `{db}`.exact_values")
        cur.executemany(f"INSERT INTO `{db}`.exact_values VALUES (%s, %s, %s, %s)", s_cur.fetchall())
        s_cur.execute(f"SELECT f, v FROM `{db}`.exact_float_keys")
        cur.executemany(f"REPLACE INTO `{db}`.exact_float_keys VALUES (%s, %s)", s_cur.fetchall())
        cur.execute(f"SELECT f FROM `{db}`.exact_values WHERE id = 1")
        assert cur.fetchone()[0] == 0.143443  # the same 6 digits as the source's 0.14344295859336853
        cur.execute(f"SELECT COUNT(*), SUM(CAST(f AS DOUBLE) = 0.1434430032968521) FROM `{db}`.exact_float_keys")
        assert cur.fetchone() == (21, 1)  # the twins of 6 digits made one row
        # the rows whose FLOAT is another float once printed with 6 digits (not 1/8 = 0.125, say)
        s_cur.execute(f"SELECT id FROM `{db}`.exact_values WHERE f <> CAST(CAST(f AS CHAR) AS FLOAT)")
        rounded = {r[0] for r in s_cur.fetchall()}
    other = {i for i in range(1, 31) if i % 3 == 0 or i % 5 == 0}  # the ENUM's and cp1251's rows
    assert 2 not in rounded and len(rounded - other) >= 10
    assert _checksums(src, db, tables) != _checksums(tgt, db, tables)

    report = verify_migration(fleet.config, prep.spec.id, repair=False, chunk_rows=8, drainer=prep.drainer)
    found = {(d.table, d.key, d.kind) for d in report.differing_rows}
    changed = {k[0] for t, k, kind in found if t == f"{db}.exact_values" and kind == "changed"}
    assert changed == rounded | other, found  # FLOATs differing beyond the 6th digit only, and the others
    assert (f"{db}.exact_float_keys", (0.14344295859336853,), "missing_on_target") in found, found
    assert not report.ok

    report = verify_migration(fleet.config, prep.spec.id, repair=True, chunk_rows=8, drainer=prep.drainer)
    assert report.ok and report.repaired_rows >= 31, report.to_dict()
    assert _checksums(src, db, tables) == _checksums(tgt, db, tables)
    exact = f"SELECT CAST(f AS DOUBLE), en + 0, HEX(cy) FROM `{db}`.exact_values WHERE id IN (1, 15) ORDER BY id"
    with src.cursor() as s_cur, tgt.cursor() as cur:
        s_cur.execute(exact)
        cur.execute(exact)
        mine = cur.fetchall()
        assert mine == s_cur.fetchall()
        assert mine[0] == (0.14344295859336853, 1, "6F6B") and mine[1][1:] == (0, "98C0")
    again = verify_migration(fleet.config, prep.spec.id, chunk_rows=8, drainer=prep.drainer)
    assert again.ok and not again.mismatched_chunks
    src.close()
    tgt.close()


def test_a_drain_or_key_read_that_stops_advancing_is_refused_naming_where_it_got(fleet, monkeypatch):
    """Outside the freeze, a drain and a binlog read of changed keys wait as long as they advance
    (:mod:`migrator.engine.verify.waits`); one that cannot advance (here: a position the source never
    reaches) is refused after the stall timeout, naming how far it got, instead of waiting forever."""
    from migrator.engine.verify import waits
    from migrator.engine.verify.changes import changed_keys
    from migrator.engine.verify.checksums import load_tables
    from migrator.fleet.mysql import binlog_pos

    monkeypatch.setattr(waits, "STALL_S", 1.0)
    prep = prepare_converged(fleet, (2,))
    with mysql_connect(prep.source, fleet.credentials) as src:
        head = binlog_pos(src)
        tables = load_tables(src, prep.spec.databases, prep.spec.tables)
    domain, server, _ = head.split(",")[0].split("-")
    never = f"{domain}-{server}-999999999"
    prep.drainer.drain_to(head, 30)
    applied = prep.drainer.position
    with pytest.raises(waits.Stalled, match=rf"made no progress for 1s .*applied up to {applied}"):
        waits.drain_progressing(prep.drainer, never, what=f"verify of {prep.spec.id}")
    with pytest.raises(waits.Stalled, match=r"made no progress for 1s: .*it had read up to"):
        changed_keys(prep.source, fleet.credentials, tables, head, never, stall_s=waits.STALL_S)
    prep.drainer.close()
