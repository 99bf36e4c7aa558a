"""The binlog reader against a real MariaDB binlog: what ends a transaction and what does not.

A transaction that writes a non-transactional table after a savepoint and then
rolls back to it is logged whole: its rows, ``SAVEPOINT``, the rows undone,
``ROLLBACK TO``, the rest, ``XID`` (checked with ``mariadb-binlog -v`` on
MariaDB 10.11.19). It committed: the reader must yield it, without the rows
that ``ROLLBACK TO`` undid.
"""

from __future__ import annotations

from migrator.engine.binlog.reader import LocalReader
from migrator.fleet.mysql import binlog_pos, connect, tls_of

DB = "db00002"
OTHER = "nontx_other"  # a schema that does not move, holding an Aria table


def _reader(fleet, host, start: str) -> LocalReader:
    return LocalReader(host.address, host.port, fleet.credentials.mysql_user, fleet.credentials.mysql_password,
                       start, [DB], tls=tls_of(host, fleet.credentials))


def test_a_rollback_to_a_savepoint_ends_nothing_and_drops_only_what_it_undid(fleet):
    host = fleet.hosts["MySQL001A"]
    with connect(host, fleet.credentials) as c, c.cursor() as cur:
        cur.execute(f"CREATE TABLE `{DB}`.sp_rows (id INT PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB")
        cur.execute(f"INSERT INTO `{DB}`.sp_rows VALUES (1, 0), (2, 0), (3, 0), (4, 0), (5, 0), (6, 0)")
        cur.execute(f"CREATE DATABASE IF NOT EXISTS `{OTHER}`")
        cur.execute(f"CREATE TABLE IF NOT EXISTS `{OTHER}`.log_aria (id INT PRIMARY KEY) ENGINE=Aria")
        start = binlog_pos(c)
        try:
            # committed, with a savepoint rolled back past a non-transactional write
            cur.execute("BEGIN")
            cur.execute(f"UPDATE `{DB}`.sp_rows SET v = 1 WHERE id = 1")
            cur.execute("SAVEPOINT s1")
            cur.execute(f"UPDATE `{DB}`.sp_rows SET v = 99 WHERE id = 2")  # undone by ROLLBACK TO
            cur.execute(f"INSERT INTO `{OTHER}`.log_aria VALUES (1)")  # stays: Aria has no rollback
            cur.execute("ROLLBACK TO SAVEPOINT s1")
            cur.execute(f"UPDATE `{DB}`.sp_rows SET v = 1 WHERE id = 3")
            cur.execute("COMMIT")
            # committed, no savepoint
            cur.execute(f"UPDATE `{DB}`.sp_rows SET v = 2 WHERE id = 4")
            # a savepoint set before any change: MariaDB logs what it undid as a group ending in ROLLBACK
            cur.execute("BEGIN")
            cur.execute("SAVEPOINT s0")
            cur.execute(f"UPDATE `{DB}`.sp_rows SET v = 98 WHERE id = 5")
            cur.execute(f"INSERT INTO `{OTHER}`.log_aria VALUES (2)")
            cur.execute("ROLLBACK TO s0")
            cur.execute(f"UPDATE `{DB}`.sp_rows SET v = 3 WHERE id = 6")
            cur.execute("COMMIT")
            end = binlog_pos(c)
            cur.execute(f"SELECT id, v FROM `{DB}`.sp_rows ORDER BY id")
            assert cur.fetchall() == ((1, 1), (2, 0), (3, 1), (4, 2), (5, 0), (6, 3))
        finally:
            cur.execute(f"DROP DATABASE `{OTHER}`")
    with _reader(fleet, host, start) as rd:
        txns = [t for t in rd.transactions(end) if t is not None]
        assert rd.position == end
    # each transaction as (key, v) of its row changes, in binlog order
    got = [[(ch[2][0], ch[4][1]) for ch in t.changes] for t in txns]
    assert got == [[("1", "1"), ("3", "1")], [("4", "2")], [("6", "3")]], got
    assert all(not t.statements for t in txns)  # SAVEPOINT / ROLLBACK TO are no statements to carry


def test_a_savepoint_transaction_after_the_last_verify_reaches_the_target(fleet, conns):
    """End to end: the row a savepoint transaction changed after the last full check (here in the
    cutover, once the ranges are frozen and before the fence) is drained to the target, and the
    compare under the fence looks at its key: the moved table equals its tombstone."""
    from migrator.engine import catch_up
    from migrator.engine.cutover import cutover
    from migrator.engine.cutover.hooks import CutoverHooks
    from migrator.engine.names import tomb_db
    from migrator.engine.verify.run import verify_migration
    from migrator.ops import command

    src = conns("MySQL001A")
    with src.cursor() as cur:
        cur.execute(f"CREATE TABLE `{DB}`.sp_moving (id INT PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB")
        cur.executemany(f"INSERT INTO `{DB}`.sp_moving VALUES (%s, 0)", [(i,) for i in range(1, 201)])
        cur.execute(f"CREATE DATABASE IF NOT EXISTS `{OTHER}`")
        cur.execute(f"CREATE TABLE IF NOT EXISTS `{OTHER}`.log_aria (id INT PRIMARY KEY) ENGINE=Aria")
    spec = command.plan_split(fleet.config, "MySQL001A").spec
    assert DB in spec.databases
    assert command.run_copy(fleet.config, spec.id)["finished"]
    catch_up.run_passes(fleet.config, spec.id)
    assert verify_migration(fleet.config, spec.id).ok

    def savepoint_write(run) -> None:  # noqa: ARG001 - the hook's argument
        with src.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute(f"UPDATE `{DB}`.sp_moving SET v = 7 WHERE id = 17")
            cur.execute("SAVEPOINT s1")
            cur.execute(f"UPDATE `{DB}`.sp_moving SET v = 99 WHERE id = 18")
            cur.execute(f"INSERT INTO `{OTHER}`.log_aria VALUES (1)")
            cur.execute("ROLLBACK TO SAVEPOINT s1")
            cur.execute("COMMIT")

    try:
        result = cutover(fleet.config, spec.id, hooks=CutoverHooks(after_freeze=savepoint_write))
    finally:
        with src.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS `{OTHER}`")
    tomb = tomb_db(spec.id, DB)
    tgt = conns("MySQL003A")
    with src.cursor() as c1, tgt.cursor() as c2:
        c1.execute(f"SELECT id, v FROM `{tomb}`.sp_moving WHERE id IN (17, 18) ORDER BY id")
        c2.execute(f"SELECT id, v FROM `{DB}`.sp_moving WHERE id IN (17, 18) ORDER BY id")
        assert c1.fetchall() == ((17, 7), (18, 0))
        assert c2.fetchall() == ((17, 7), (18, 0))
        c1.execute(f"CHECKSUM TABLE `{tomb}`.sp_moving EXTENDED")
        c2.execute(f"CHECKSUM TABLE `{DB}`.sp_moving EXTENDED")
        assert c1.fetchone()[1] == c2.fetchone()[1]
    assert result.rows_checked >= 1  # the compare under the fence looked at its key


def _parts(fleet, host, start: str, end: str, bound: int) -> list[tuple[bool, list[str]]]:
    """(partial, keys of its row changes) of every transaction or part read with a memory bound of ``bound``."""
    out = []
    with LocalReader(host.address, host.port, fleet.credentials.mysql_user, fleet.credentials.mysql_password,
                     start, [DB], tls=tls_of(host, fleet.credentials), part_changes=bound) as rd:
        for t in rd.transactions(end):
            if t is not None:
                out.append((t.partial, [ch[2][0] for ch in t.changes]))
                assert len(t.changes) <= bound
        assert rd.position == end
    return out


def test_transactions_over_the_memory_bound_come_in_parts_and_in_order(fleet):
    """A transaction of 300 row changes read with a bound of 40: in parts of at most 40, in order, whole; one
    with a savepoint rolled back to past a non-transactional write spills to disk and comes back without the
    undone rows; an XA transaction is held (spilled) until its commit, and one rolled back yields nothing."""
    host = fleet.hosts["MySQL001A"]
    with connect(host, fleet.credentials) as c, c.cursor() as cur:
        cur.execute(f"CREATE TABLE `{DB}`.big_t (id INT PRIMARY KEY, v INT NOT NULL) ENGINE=InnoDB")
        cur.execute(f"INSERT INTO `{DB}`.big_t SELECT seq, 0 FROM `{DB}`.seq_1_to_300")
        cur.execute(f"CREATE DATABASE IF NOT EXISTS `{OTHER}`")
        cur.execute(f"CREATE TABLE IF NOT EXISTS `{OTHER}`.log_aria (id INT PRIMARY KEY) ENGINE=Aria")
        try:
            start = binlog_pos(c)
            cur.execute(f"UPDATE `{DB}`.big_t SET v = 1")  # one transaction, 300 changes
            end = binlog_pos(c)
            got = _parts(fleet, host, start, end, 40)
            assert len(got) >= 8 and all(partial for partial, _ in got[:-1])  # (its end may hold no change)
            assert [k for _, ks in got for k in ks] == [str(i) for i in range(1, 301)]
            # a savepoint, 100 changes after it, a non-transactional write, ROLLBACK TO: the 100 are undone
            start = binlog_pos(c)
            cur.execute("BEGIN")
            cur.execute(f"UPDATE `{DB}`.big_t SET v = 2 WHERE id <= 50")
            cur.execute("SAVEPOINT s1")
            cur.execute(f"UPDATE `{DB}`.big_t SET v = 3 WHERE id > 200")
            cur.execute(f"INSERT INTO `{OTHER}`.log_aria VALUES (7)")
            cur.execute("ROLLBACK TO SAVEPOINT s1")
            cur.execute(f"UPDATE `{DB}`.big_t SET v = 4 WHERE id > 50 AND id <= 120")
            cur.execute("COMMIT")
            end = binlog_pos(c)
            got = _parts(fleet, host, start, end, 40)
            assert [k for _, ks in got for k in ks] == [str(i) for i in range(1, 121)]
            # XA: prepared (held, spilled), then committed; another prepared, then rolled back
            start = binlog_pos(c)
            cur.execute("XA START 'big1'")
            cur.execute(f"UPDATE `{DB}`.big_t SET v = 5 WHERE id <= 150")
            cur.execute("XA END 'big1'")
            cur.execute("XA PREPARE 'big1'")
            cur.execute("XA COMMIT 'big1'")
            cur.execute("XA START 'big2'")
            cur.execute(f"UPDATE `{DB}`.big_t SET v = 6")
            cur.execute("XA END 'big2'")
            cur.execute("XA PREPARE 'big2'")
            cur.execute("XA ROLLBACK 'big2'")
            end = binlog_pos(c)
            got = _parts(fleet, host, start, end, 40)
            assert [k for _, ks in got for k in ks] == [str(i) for i in range(1, 151)]
        finally:
            cur.execute(f"DROP DATABASE `{OTHER}`")
            cur.execute(f"DROP TABLE `{DB}`.big_t")


def test_an_event_over_16_mib_arrives_whole(fleet):
    """A row of 17 MiB makes one rows event longer than a MySQL packet: the master splits it over two
    packets and the client joins them; the events after it follow in order."""
    import os

    from migrator.engine.binlog.client import MAX_PACKET, ROWS_EVENTS, XID, BinlogClient

    host = fleet.hosts["MySQL001A"]
    blob = os.urandom(17 << 20)
    with fleet.sandbox.root_conn("MySQL001A") as root, root.cursor() as rc:
        rc.execute("SELECT @@GLOBAL.max_allowed_packet")
        was = rc.fetchone()[0]
        rc.execute("SET GLOBAL max_allowed_packet = 64 * 1024 * 1024")  # read by sessions opened after it
        try:
            with connect(host, fleet.credentials) as c, c.cursor() as cur:
                cur.execute(f"CREATE TABLE `{DB}`.wide_one (id INT PRIMARY KEY, b LONGBLOB) ENGINE=InnoDB")
                start = binlog_pos(c)
                cur.execute(f"INSERT INTO `{DB}`.wide_one VALUES (1, %s)", (blob,))
                cur.execute(f"INSERT INTO `{DB}`.wide_one VALUES (2, 'after')")
                cur.execute(f"DROP TABLE `{DB}`.wide_one")
        finally:
            rc.execute("SET GLOBAL max_allowed_packet = %s", (was,))
    client = BinlogClient(host.address, host.port, fleet.credentials.mysql_user, fleet.credentials.mysql_password,
                          start, tls=tls_of(host, fleet.credentials))
    try:
        rows, xids = [], 0
        for ev in client.events():
            if ev.type in ROWS_EVENTS:
                rows.append(ev.body)
            elif ev.type == XID:
                xids += 1
                if xids == 2:
                    break
    finally:
        client.close()
    assert len(rows) == 2 and len(rows[0]) > MAX_PACKET and blob in rows[0], [len(r) for r in rows]
    assert b"after" in rows[1]
