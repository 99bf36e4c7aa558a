"""Catch-up holds a source transaction of any size in bounded memory (issue: a backfill of millions of rows).

The bound is ``MIGRATOR_CATCHUP_PART_CHANGES`` row changes of one transaction (5,000 by default); these tests
set it to 100 so that a 3,000-row transaction is many parts. What must hold whatever the bound: the
transaction lands whole and equal; a tail killed in the middle of it replays it whole from a checkpoint that
never moved past it; an XA transaction over the bound that is rolled back leaves nothing. The bound also
counts bytes (``MIGRATOR_CATCHUP_PART_BYTES``): transactions of wide rows are applied equal with each
process of the tail under a peak resident set; ``python -m bench.bigtxn --row-bytes N`` measures more."""

from __future__ import annotations

import hashlib
import os
import time

import pytest

from migrator.engine import catch_up
from migrator.engine.catch_up.lanes import STAGGER_ENV
from migrator.engine.migration import MigrationStore
from migrator.fleet.gtid import GtidState

from . import catchup_helpers as h

ROWS = 3000
BOUND = "100"


def _big_table(fleet) -> None:
    """``big`` in both moving shards on the source, ``ROWS`` rows each (the pair replicates it)."""
    with h.conn(fleet, h.SOURCE) as c, c.cursor() as cur:
        for shard in h.MOVING:
            db = f"db{shard:05d}"
            cur.execute(f"CREATE TABLE `{db}`.big (id INT PRIMARY KEY, v INT NOT NULL, pad VARCHAR(60) NOT NULL) "
                        "ENGINE=InnoDB")
            cur.execute(f"INSERT INTO `{db}`.big SELECT seq, 0, 'x' FROM `{db}`.seq_1_to_{ROWS}")


def _migration(fleet):
    h.create_extra_tables(fleet, rows=5)
    _big_table(fleet)
    spec = h.create_migration(fleet, converge_events=50)
    h.copy_tables(fleet, spec)
    return spec


def test_a_transaction_over_the_bound_is_applied_whole_and_equal(fleet, monkeypatch):
    monkeypatch.setenv("MIGRATOR_CATCHUP_PART_CHANGES", BOUND)  # the reader process takes it
    spec = _migration(fleet)
    with h.conn(fleet, h.SOURCE) as c, c.cursor() as cur:
        cur.execute("BEGIN")  # one transaction of 2 x 3,000 updates, 300 deletes and 300 inserts
        for shard in h.MOVING:
            db = f"db{shard:05d}"
            cur.execute(f"UPDATE `{db}`.big SET v = v + 1, pad = 'backfilled'")
            cur.execute(f"DELETE FROM `{db}`.big WHERE id % 10 = 0")
            cur.execute(f"INSERT INTO `{db}`.big SELECT seq, 7, 'new' FROM `{db}`.seq_{ROWS + 1}_to_{ROWS + 300}")
        cur.execute("COMMIT")
        head = h.binlog_pos(c)
    stats = catch_up.drain_to(fleet.config, spec.id, head, timeout=300)
    assert stats["events"] >= 2 * (ROWS + 600) and stats["transactions"] >= 1
    assert h.compare(fleet, spec) == {}


def test_kill_9_in_the_middle_of_a_big_transaction_then_resume_ends_equal(fleet):
    spec = _migration(fleet)
    store = MigrationStore(fleet.zk)
    start = catch_up.copy_start(store, spec.id)[0]
    with h.conn(fleet, h.SOURCE) as c, c.cursor() as cur:
        cur.execute("BEGIN")
        for shard in h.MOVING:
            cur.execute(f"UPDATE `db{shard:05d}`.big SET v = 1, pad = 'one transaction'")
        cur.execute("COMMIT")
        head = h.binlog_pos(c)
    env = {"MIGRATOR_CATCHUP_PART_CHANGES": BOUND, "MIGRATOR_CATCHUP_LANES": "2", STAGGER_ENV: "300"}
    with h.catchup_process(fleet, spec.id, env) as proc:
        deadline = time.monotonic() + 120
        applied = 0
        while time.monotonic() < deadline and proc.poll() is None:
            with h.conn(fleet, h.TARGET) as t, t.cursor() as cur:
                cur.execute("SELECT COUNT(*) FROM db00002.big WHERE v = 1")
                applied = int(cur.fetchone()[0])
            if 0 < applied < ROWS:
                break  # some parts of the transaction committed on the target, not all
            time.sleep(0.05)
        assert 0 < applied < ROWS, f"never caught the transaction half applied ({applied}, exit {proc.poll()})"
        h.kill_9(proc)
    node, _ = store.get_progress(spec.id, "catchup")
    at = GtidState.of(node.get("state"), node.get("gtid") or str(start))
    assert not at.reaches(head), "the checkpoint moved past a transaction not wholly applied"
    catch_up.drain_to(fleet.config, spec.id, head, timeout=300)
    assert h.compare(fleet, spec) == {}


@pytest.mark.parametrize("outcome", ["rollback", "commit"])
def test_an_xa_transaction_over_the_bound(fleet, monkeypatch, outcome):
    """Prepared (held on disk past the bound), then rolled back: nothing of it on the target; committed: all."""
    monkeypatch.setenv("MIGRATOR_CATCHUP_PART_CHANGES", BOUND)
    spec = _migration(fleet)
    with h.conn(fleet, h.SOURCE) as c, c.cursor() as cur:
        cur.execute("XA START 'big'")
        cur.execute("UPDATE db00002.big SET v = 9, pad = 'prepared'")
        cur.execute("XA END 'big'")
        cur.execute("XA PREPARE 'big'")
        cur.execute(f"XA {outcome.upper()} 'big'")
        head = h.binlog_pos(c)
    catch_up.drain_to(fleet.config, spec.id, head, timeout=300)
    assert h.compare(fleet, spec) == {}
    with h.conn(fleet, h.TARGET) as t, t.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM db00002.big WHERE v = 9")
        assert int(cur.fetchone()[0]) == (ROWS if outcome == "commit" else 0)


# -- wide rows: the bound counts bytes --------------------------------------------------------------

WIDE_ROWS = 64
WIDE_BYTES = 1 << 20  # a 1 MiB BLOB in each row
#: the byte bound set here: a part, a message of the reader process, a round hold about 4 rows
PART_BYTES = 4 << 20
#: peak resident set allowed to each process of the tail: the rows it moves come to 64 MiB (128 MiB of
#: binlog for the update that carries them twice, 256 MiB as hex literals); holding one transaction whole
#: took several times that
PEAK_MB = 200


def _peak_kb(pid: int) -> int:
    """``VmHWM`` of a live process (KiB): the peak of its resident set so far."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def test_wide_rows_are_applied_within_the_byte_bound(fleet):
    """Transactions of 64 rows of 1 MiB BLOBs (filled, updated with both images wide, some deleted) go
    through the tail (``migrator catchup``: its process applies, its reader process decodes) with
    ``MIGRATOR_CATCHUP_PART_BYTES`` at 4 MiB: the target ends equal (CHECKSUM TABLE) and neither process's
    peak resident set grew to the size of the transactions."""
    h.create_extra_tables(fleet, rows=5)
    with h.conn(fleet, h.SOURCE) as c, c.cursor() as cur:
        cur.execute("CREATE TABLE db00002.wide (id INT PRIMARY KEY, v INT NOT NULL, data LONGBLOB NOT NULL) "
                    "ENGINE=InnoDB")
        cur.execute(f"INSERT INTO db00002.wide SELECT seq, 0, 'x' FROM db00002.seq_1_to_{WIDE_ROWS}")
    spec = h.create_migration(fleet, converge_events=50)
    h.copy_tables(fleet, spec)
    with h.conn(fleet, h.SOURCE) as c, c.cursor() as cur:
        # wide after images; then wide before and after images; then wide deleted images
        cur.execute(f"UPDATE db00002.wide SET data = REPEAT(CHAR(65 + id % 26), {WIDE_BYTES})")
        cur.execute("UPDATE db00002.wide SET v = v + 1")
        cur.execute("DELETE FROM db00002.wide WHERE id % 8 = 0")
    want = _wide_facts(fleet, h.SOURCE)
    peaks: dict[str, int] = {}
    env = {"MIGRATOR_CATCHUP_PART_BYTES": str(PART_BYTES)}
    with h.catchup_process(fleet, spec.id, env) as proc:
        deadline = time.monotonic() + 300
        looked = 0.0
        while time.monotonic() < deadline and proc.poll() is None:
            _sample(proc.pid, peaks)  # VmHWM is the peak so far: sampled often, it is not missed at the exit
            if time.monotonic() - looked >= 0.5:
                if _wide_facts(fleet, h.TARGET) == want:
                    break
                looked = time.monotonic()
            time.sleep(0.02)
        _sample(proc.pid, peaks)
    assert h.compare(fleet, spec) == {}, f"the target differs from the source (catch-up exit {proc.poll()})"
    mb = {role: round(kb / 1024) for role, kb in peaks.items()}
    print(f"peak resident set (MB): {mb}")
    assert set(mb) == {"tail", "reader"}, mb
    assert max(mb.values()) < PEAK_MB, f"a process of the tail held more than {PEAK_MB} MB: {mb}"


def _wide_facts(fleet, host: str) -> tuple:
    with h.conn(fleet, host) as c, c.cursor() as cur:
        cur.execute("SELECT COUNT(*), SUM(v), SUM(LENGTH(data)) FROM db00002.wide")
        return tuple(cur.fetchone())


def _sample(pid: int, peaks: dict[str, int]) -> None:
    """The peak resident set so far of the catch-up process (``tail``) and its reader process."""
    import psutil

    try:
        procs = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return
    for p in procs:
        role = "tail" if p.pid == pid else "reader"
        try:
            peaks[role] = max(peaks.get(role, 0), _peak_kb(p.pid))
        except OSError:
            pass


def test_a_row_wider_than_a_packet_is_applied_equal(fleet):
    """A 9 MiB BLOB is an 18 MiB hex literal: its REPLACE is longer than one MySQL packet (16 MiB), so the
    lane sends it as bytes cut into packets through a memoryview (``WIDE_ROW``, the connection's
    ``_execute_command``). Inserted, then updated with both images wide: the target ends equal."""
    wide = os.urandom(9 << 20)
    was = {}
    for host in (h.SOURCE, h.TARGET):  # sessions opened after this take it (the lanes' too)
        with fleet.sandbox.root_conn(host) as root, root.cursor() as rc:
            rc.execute("SELECT @@GLOBAL.max_allowed_packet")
            was[host] = rc.fetchone()[0]
            rc.execute("SET GLOBAL max_allowed_packet = 64 * 1024 * 1024")
    try:
        h.create_extra_tables(fleet, rows=5)
        with h.conn(fleet, h.SOURCE) as c, c.cursor() as cur:
            cur.execute("CREATE TABLE db00002.widest (id INT PRIMARY KEY, v INT NOT NULL, data LONGBLOB) "
                        "ENGINE=InnoDB")
            cur.execute("INSERT INTO db00002.widest VALUES (1, 0, 'x'), (2, 0, 'y')")
        spec = h.create_migration(fleet, converge_events=50)
        h.copy_tables(fleet, spec)
        with h.conn(fleet, h.SOURCE) as c, c.cursor() as cur:
            cur.execute("INSERT INTO db00002.widest VALUES (3, 0, %s)", (wide,))
            cur.execute("UPDATE db00002.widest SET data = %s, v = v + 1 WHERE id = 1", (wide[::-1],))
            cur.execute("UPDATE db00002.widest SET v = v + 1")  # both images wide for ids 1 and 3
            head = h.binlog_pos(c)
        catch_up.drain_to(fleet.config, spec.id, head, timeout=300)
        assert h.compare(fleet, spec) == {}
        with h.conn(fleet, h.TARGET) as c, c.cursor() as cur:
            cur.execute("SELECT id, v, MD5(data) FROM db00002.widest ORDER BY id")
            got = cur.fetchall()
        assert [(r[0], r[1], r[2]) for r in got] == [
            (1, 2, hashlib.md5(wide[::-1]).hexdigest()), (2, 1, hashlib.md5(b"y").hexdigest()),
            (3, 1, hashlib.md5(wide).hexdigest())]
    finally:
        for host, value in was.items():
            with fleet.sandbox.root_conn(host) as root, root.cursor() as rc:
                rc.execute("SET GLOBAL max_allowed_packet = %s", (value,))
