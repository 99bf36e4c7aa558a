"""Catch-up on the real sandbox: passes under writes until converged, the final
drain, and source == target (CHECKSUM TABLE, row counts, partitions) for
every moving table; partition DDL carried over, binlog rotation, the
passive partner's GTID domain, and an unsafe ALTER stopping the migration."""

from __future__ import annotations

import time

import pytest

from migrator.engine import catch_up
from migrator.engine.migration import MigrationStore, Phase
from migrator.fleet.gtid import GtidPos, GtidState
from tests.conftest import SEED
from tests.integration.engine import catchup_helpers as h


def _state(fleet, mid):
    return MigrationStore(fleet.zk).state(mid)[0]


def test_passes_converge_under_writes_and_drain_matches_source(fleet):
    h.create_extra_tables(fleet)
    spec = h.create_migration(fleet, converge_events=2000)
    writer = h.Writer(fleet, seed=SEED).start()
    try:
        time.sleep(0.5)
        h.copy_tables(fleet, spec)
        time.sleep(1.0)  # a backlog for the first pass
        # first pass: applies everything since the earliest start_gtid
        first = catch_up.run_pass(fleet.config, spec.id)
        assert first.events > 0 and first.apply_rate > 0 and first.write_rate > 0
        assert _state(fleet, spec.id).phase in (Phase.CATCHING_UP, Phase.CONVERGED)
        # partition maintenance and binlog rotation while catch-up runs
        with writer.paused(), h.conn(fleet, h.SOURCE) as c, c.cursor() as cur:
            for shard in h.MOVING:
                cur.execute(f"USE db{shard:05d}")
                cur.execute(h.DROP_PARTITION)
                cur.execute("FLUSH BINARY LOGS")
                cur.execute(h.REORGANIZE_PARTITION)
        results = catch_up.run_passes(fleet.config, spec.id)
        with h.conn(fleet, h.SOURCE) as c, c.cursor() as cur:
            cur.execute("FLUSH BINARY LOGS")
        for r in [first, *results]:
            print(f"pass {r.number}: {r.events} events in {r.duration_s:.3f}s, apply {r.apply_rate:.0f}/s, "
                  f"write {r.write_rate:.0f}/s, lag {r.lag_s:.3f}s, freeze~{r.predicted_freeze_ms:.0f}ms, "
                  f"statements {r.statements}, converged {r.converged}")
        assert results[-1].converged
        assert any(r.statements >= 2 for r in [first, *results])
        state = _state(fleet, spec.id)
        assert state.phase == Phase.CONVERGED and state.predicted_freeze_ms is not None
        time.sleep(0.5)
    finally:
        writer.stop()
    assert writer.ops > 50 and writer.partner_ops > 5
    head = h.wait_source_has_partner_writes(fleet)
    partner_id = fleet.sandbox.state.procs[h.SOURCE_SLAVE].server_id
    assert any(s == partner_id for _, s in GtidState.parse(head)), f"expected the partner's writes in {head}"
    catch_up.drain_to(fleet.config, spec.id, head, timeout=60)
    node = catch_up.status(fleet.config, spec.id)
    assert GtidState.of(node["state"], node["gtid"]).reaches(head)
    assert node["converged"] and len(node["passes"]) >= 2
    for key in ("events", "bytes", "duration_s", "apply_rate", "write_rate", "lag_s", "predicted_freeze_ms"):
        assert key in node["passes"][0]
    assert h.compare(fleet, spec) == {}
    with h.conn(fleet, h.TARGET) as t, t.cursor() as cur:
        cur.execute("SHOW DATABASES LIKE 'db00000'")
        assert cur.fetchone() is None, "writes to a staying shard leaked to the target"
        cur.execute("SELECT partition_name FROM information_schema.partitions WHERE table_schema='db00002' "
                    "AND table_name='jobs'")
        parts = {r[0] for r in cur.fetchall()}
        assert "pOK_a" not in parts and "pNEW_b" in parts
    h.wait_target_slave(fleet)


def test_drain_with_a_kept_tailer_applies_the_sentinel(fleet):
    h.create_extra_tables(fleet, rows=5)
    spec = h.create_migration(fleet)
    h.copy_tables(fleet, spec)
    tailer = catch_up.open_tailer(fleet.config, spec.id)
    try:
        res = catch_up.run_pass(fleet.config, spec.id, tailer=tailer)
        assert res.converged
        assert _state(fleet, spec.id).phase == Phase.CONVERGED
        tailer.warm()  # the cutover connects before its freeze
        with h.conn(fleet, h.SOURCE, "db00002") as c, c.cursor() as cur:
            # the cutover's sentinel: a row written under the fence, then the head
            cur.execute("LOCK TABLES pins WRITE")
            cur.execute("INSERT INTO pins (local_id, data) VALUES (999999, '{\"sentinel\": true}')")
            head = h.binlog_pos(c)
            t0 = time.monotonic()
            stats = catch_up.drain_to(fleet.config, spec.id, head, timeout=30, tailer=tailer)
            elapsed = time.monotonic() - t0
            cur.execute("UNLOCK TABLES")
        print(f"drain of 1 sentinel event with a kept tailer: {elapsed * 1000:.1f} ms ({stats})")
        # how fast is measured in bench/ (bench.cutover's drain step), not here: a busy box must pass
        assert stats["events"] == 1 and tailer.reached(head)
        with h.conn(fleet, h.TARGET, "db00002") as t, t.cursor() as cur:
            cur.execute("SELECT data FROM pins WHERE local_id = 999999")
            assert cur.fetchone() is not None
        with pytest.raises(catch_up.DrainTimeout):
            last = next(iter(GtidPos.parse(head).values()))  # a transaction the source has not written yet
            tailer.drain_to(GtidPos([last._replace(seq=last.seq + 10**6)]), 0.3)
    finally:
        tailer.close()
    assert h.compare(fleet, spec) == {}


def test_unsafe_alter_stops_the_migration_with_a_clear_message(fleet):
    h.create_extra_tables(fleet, rows=5)
    spec = h.create_migration(fleet)
    h.copy_tables(fleet, spec)
    with h.conn(fleet, h.SOURCE, "db00003") as c, c.cursor() as cur:
        cur.execute("INSERT INTO pins (data) VALUES ('{\"before\": 1}')")
        before = h.binlog_pos(c)
        cur.execute("ALTER TABLE pins ADD COLUMN extra INT NULL")
        cur.execute("INSERT INTO pins (data, extra) VALUES ('{\"after\": 1}', 5)")
    with pytest.raises(catch_up.CatchUpError) as err:
        catch_up.run_pass(fleet.config, spec.id)
    msg = str(err.value)
    assert "ALTER TABLE" in msg and "db00003.pins" in msg and "abort" in msg
    state = _state(fleet, spec.id)
    assert state.phase == Phase.FAILED and "db00003.pins" in (state.error or "")
    # everything before the ALTER was applied and checkpointed, nothing after it
    node = catch_up.status(fleet.config, spec.id)
    assert GtidPos.parse(node["gtid"]) == GtidPos.parse(before)
    with h.conn(fleet, h.TARGET, "db00003") as t, t.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM pins WHERE JSON_EXTRACT(data, '$.before') = 1")
        assert cur.fetchone()[0] == 1
        cur.execute("SELECT COUNT(*) FROM information_schema.columns WHERE table_schema='db00003' "
                    "AND table_name='pins' AND column_name='extra'")
        assert cur.fetchone()[0] == 0
    with pytest.raises(catch_up.CatchUpError, match="failed"):
        catch_up.run_pass(fleet.config, spec.id)


def test_a_moving_table_converted_into_another_table_s_partition_stops_catch_up(fleet):
    """``ALTER TABLE x CONVERT TABLE <moving> TO PARTITION p`` (MariaDB 10.7+) empties a moving table into a
    table that stays: the binlog holds the statement only, no row event, so a tail that let it pass
    would keep the rows on the target."""
    spec = h.create_migration(fleet)
    with h.conn(fleet, h.SOURCE) as c, c.cursor() as cur:
        cur.execute("CREATE TABLE db00003.staged (id INT PRIMARY KEY, v INT) ENGINE=InnoDB")
        cur.execute("INSERT INTO db00003.staged VALUES (150, 1), (160, 2)")
        cur.execute(f"CREATE TABLE db{h.STAYING:05d}.archive (id INT PRIMARY KEY, v INT) ENGINE=InnoDB "
                    "PARTITION BY RANGE (id) (PARTITION p0 VALUES LESS THAN (100))")
    h.copy_tables(fleet, spec)
    convert = (f"ALTER TABLE db{h.STAYING:05d}.archive CONVERT TABLE db00003.staged "
               "TO PARTITION p1 VALUES LESS THAN (200)")
    with h.conn(fleet, h.SOURCE, f"db{h.STAYING:05d}") as c, c.cursor() as cur:
        cur.execute("INSERT INTO db00003.staged VALUES (170, 3)")
        before = h.binlog_pos(c)
        cur.execute(convert)
        cur.execute("SHOW TABLES FROM db00003 LIKE 'staged'")
        assert cur.fetchone() is None  # its rows are partition p1 of the archive now
    with pytest.raises(catch_up.CatchUpError) as err:
        catch_up.run_pass(fleet.config, spec.id)
    msg = str(err.value)
    assert "CONVERT TABLE" in msg and "moving table db00003.staged" in msg and convert[:50] in msg, msg
    assert _state(fleet, spec.id).phase == Phase.FAILED
    node = catch_up.status(fleet.config, spec.id)
    assert GtidPos.parse(node["gtid"]) == GtidPos.parse(before)  # applied up to the statement, not past it


def test_queue_partition_moves_only_its_table(fleet):
    h.create_extra_tables(fleet, shards=(2,), rows=10)
    spec = h.create_migration(fleet, kind="queue_partition", tables=("jobs",), shards=(2,))
    h.copy_tables(fleet, spec)
    with h.conn(fleet, h.SOURCE, "db00002") as c, c.cursor() as cur:
        cur.execute("INSERT INTO pins (data) VALUES ('{}')")
        cur.execute("ALTER TABLE pins ADD COLUMN not_ours INT NULL")  # not a moving table: ignored
        for _ in range(20):
            cur.execute("INSERT INTO jobs (state, updated_at) VALUES (0, '2020-01-05')")
        cur.execute("UPDATE jobs SET state = 2, updated_at = '2020-01-06' ORDER BY local_id LIMIT 10")
        cur.execute("ALTER TABLE jobs DROP PARTITION pOK_a")  # drops the 10 moved rows
        cur.execute("UPDATE jobs SET state = 1, updated_at = '2020-01-07' ORDER BY local_id LIMIT 3")
    res = catch_up.run_passes(fleet.config, spec.id)
    assert res[-1].converged
    assert h.compare(fleet, spec) == {}
    with h.conn(fleet, h.TARGET, "db00002") as t, t.cursor() as cur:
        cur.execute("SHOW TABLES")
        assert [r[0] for r in cur.fetchall()] == ["jobs"]


def test_a_second_tail_waits_for_the_first(fleet):
    """Two tails of one migration never apply at once: the second waits for the first's lock,
    then starts from the checkpoint the first left (after the rows it applied)."""
    import threading

    from migrator.engine.catch_up.checkpoint import CatchUpConflict, applier_lock
    from migrator.fleet import zk as zk_mod

    spec = h.create_migration(fleet)
    h.copy_tables(fleet, spec)
    first = catch_up.open_tailer(fleet.config, spec.id)
    got: dict = {}

    def second() -> None:
        got["tailer"] = catch_up.open_tailer(fleet.config, spec.id)

    waiter = threading.Thread(target=second, daemon=True)
    try:
        catch_up.run_pass(fleet.config, spec.id, tailer=first)
        waiter.start()
        waiter.join(2.0)
        assert waiter.is_alive() and "tailer" not in got  # waiting for the lock, nothing applied
        with zk_mod.connect(fleet.config, fleet.credentials) as other:  # a third one gives up after its wait
            with pytest.raises(CatchUpConflict, match="another tail"):
                applier_lock(other, spec.id, "test", timeout=0.5)
        applied = first.applied
    finally:
        first.close()
    waiter.join(30)
    assert "tailer" in got
    try:
        assert got["tailer"].applied == applied  # from where the first one stopped
    finally:
        got["tailer"].close()


# -- fencing tokens: a tail that lost its applier lock lands nothing -------------------------------

def _pins_row(fleet, db: str = "db00002") -> int:
    with h.conn(fleet, h.SOURCE, db) as c, c.cursor() as cur:
        cur.execute("SELECT local_id FROM pins ORDER BY local_id LIMIT 1")
        return int(cur.fetchone()[0])


def _source_write(fleet, sql: str, args: tuple = ()) -> str:
    """Run one statement on the source (autocommit); returns the source position after it."""
    with h.conn(fleet, h.SOURCE, "db00002") as c, c.cursor() as cur:
        cur.execute(sql, args)
        return h.binlog_pos(c)


def _lose_applier_lock(tailer) -> None:
    """Expire the ZooKeeper session a tailer from ``open_tailer`` holds its applier lock with."""
    from tests.faults.fault_jobs import expire_session

    expire_session(tailer.checkpoint_node.store.zk.client)


def test_a_stale_tail_cannot_write_an_older_row_image_over_a_newer_one(fleet):
    """A tail loses its applier lock (its ZooKeeper session expires) while a row changes twice; a
    second tail takes the lock and applies both changes. The first one's next round holds the older
    image: it fails on the target's fencing token instead of landing, and the target keeps the newer
    image (equal to the source). Its checkpoint write is refused too."""
    spec = h.create_migration(fleet)
    h.copy_tables(fleet, spec)
    lid = _pins_row(fleet)
    first = catch_up.open_tailer(fleet.config, spec.id)
    try:
        catch_up.run_pass(fleet.config, spec.id, tailer=first)
        older = _source_write(fleet, "UPDATE pins SET data = '{\"v\": 1}' WHERE local_id = %s", (lid,))
        time.sleep(1.0)  # the first tail's reader has read the older change (a message of its own)
        _lose_applier_lock(first)
        newer = _source_write(fleet, "UPDATE pins SET data = '{\"v\": 2}' WHERE local_id = %s", (lid,))
        second = catch_up.open_tailer(fleet.config, spec.id)
        try:
            second.drain_to(newer, 30)
        finally:
            second.close()
        with pytest.raises(catch_up.CatchUpConflict, match="lost its right to apply"):
            first.drain_to(older, 30)  # its next round: the older image
    finally:
        first.close()
    assert h.compare(fleet, spec) == {}
    with h.conn(fleet, h.TARGET, "db00002") as t, t.cursor() as cur:
        cur.execute("SELECT data FROM pins WHERE local_id = %s", (lid,))
        assert cur.fetchone()[0] == '{"v": 2}'
    assert GtidPos.parse(catch_up.status(fleet.config, spec.id)["gtid"]).contains(newer)


def test_a_stale_tail_cannot_replay_a_statement(fleet):
    """The same with a statement: the source truncates a table and writes it again; the second tail
    applies both. The first tail, which lost its lock, would replay the TRUNCATE over the rows the
    second one wrote since; the fencing token refuses it and the target keeps the rows."""
    spec = h.create_migration(fleet)
    h.copy_tables(fleet, spec)
    first = catch_up.open_tailer(fleet.config, spec.id)
    try:
        catch_up.run_pass(fleet.config, spec.id, tailer=first)
        truncated = _source_write(fleet, "TRUNCATE TABLE board_has_pins")
        time.sleep(1.0)
        _lose_applier_lock(first)
        refilled = _source_write(fleet, "INSERT INTO board_has_pins VALUES (1, 2, 3), (4, 5, 6)")
        second = catch_up.open_tailer(fleet.config, spec.id)
        try:
            second.drain_to(refilled, 30)
        finally:
            second.close()
        with pytest.raises(catch_up.CatchUpConflict, match="lost its right to apply"):
            first.drain_to(truncated, 30)
    finally:
        first.close()
    assert h.compare(fleet, spec) == {}
    with h.conn(fleet, h.TARGET, "db00002") as t, t.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM board_has_pins")
        assert cur.fetchone()[0] == 2


def test_two_tails_after_a_lost_applier_lock(fleet):
    """Fault cell: a tail applies under writes and its ZooKeeper session expires; a second tail takes
    the applier lock and applies. The first one's next round fails on the fencing token instead of
    landing (it stops with a clear error), and the target ends equal to the source."""
    import threading

    h.create_extra_tables(fleet)
    spec = h.create_migration(fleet)
    writer = h.Writer(fleet, seed=SEED, partner=False).start()
    failed: list[BaseException] = []
    try:
        time.sleep(0.5)
        h.copy_tables(fleet, spec)
        first = catch_up.open_tailer(fleet.config, spec.id)

        def tail() -> None:
            try:
                while True:
                    first.apply_until(None, timeout_s=1.0)
            except BaseException as exc:  # noqa: BLE001 - the stale tail's end, looked at below
                failed.append(exc)

        t = threading.Thread(target=tail, daemon=True)
        t.start()
        time.sleep(2.0)  # applying under writes
        _lose_applier_lock(first)
        second = catch_up.open_tailer(fleet.config, spec.id)
        try:
            catch_up.run_pass(fleet.config, spec.id, tailer=second)
            t.join(30)
            assert not t.is_alive(), "the stale tail is still applying"
            time.sleep(1.0)
        finally:
            writer.stop()
            try:
                head = h.wait_source_has_partner_writes(fleet)
                second.drain_to(head, 60)
            finally:
                second.close()
    finally:
        first.close()
    assert failed and isinstance(failed[0], catch_up.CatchUpConflict), failed
    assert "lost its right to apply" in str(failed[0]), failed[0]
    print(f"the stale tail stopped with: {failed[0]}")
    assert h.compare(fleet, spec) == {}
