"""Catch-up holds a source transaction of any size in bounded memory (issue: a backfill of millions of rows).

The bound is ``MIGRATOR_CATCHUP_PART_CHANGES`` row changes of one transaction (5,000 by default); these tests
set it to 100 so that a 3,000-row transaction is many parts. What must hold whatever the bound: the
transaction lands whole and equal; a tail killed in the middle of it replays it whole from a checkpoint that
never moved past it; an XA transaction over the bound that is rolled back leaves nothing. Memory itself is
measured by ``python -m bench.bigtxn``, not here."""

from __future__ import annotations

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
