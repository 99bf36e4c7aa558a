"""The copy phase end to end on the sandbox, with writes to the moving shards throughout."""

from __future__ import annotations

import pytest

from migrator.engine.copy import table_progress
from migrator.engine.migration import MigrationStore, Options, Phase
from migrator.engine.plan import maintenance_paused
from migrator.fleet.mysql import binlog_pos, qualified
from migrator.ops import command
from tests.conftest import SEED
from tests.integration.engine.support import Writer, gtid_seqs, missing_or_different, snapshot_dbs, strip_auto_increment


@pytest.mark.parametrize("fleet", [1500], indirect=True)
def test_split_copies_every_untouched_row_while_writes_go_on(fleet, conns):
    res = command.plan_split(fleet.config, "MySQL001A", options=Options(chunk_rows=20, chunk_target_ms=20))
    spec = res.spec
    assert spec.target_master == "MySQL003A" and spec.target_passive == "MySQL003B"
    assert spec.shards == (2, 3)
    for s in spec.shards:
        assert maintenance_paused(fleet.zk, s) == spec.id
    src = conns("MySQL001A")
    before = snapshot_dbs(src, spec.databases)
    gtid_before = binlog_pos(src)
    writer = Writer(fleet.hosts["MySQL001A"], fleet.credentials, list(spec.shards), SEED).start()
    try:
        out = command.run_copy(fleet.config, spec.id)
    finally:
        writer.stop()
    assert writer.ops > 0
    untouched = sum(1 for (db, t), rows in before.items() for k in rows if (db, t, k) not in writer.touched)
    assert untouched > 5000
    assert out["phase"] == Phase.CATCHING_UP.value and out["finished"]
    tgt = conns("MySQL003A")
    problems = missing_or_different(before, tgt, writer.touched)
    assert not problems, problems[:5]
    # schema: same DDL (AUTO_INCREMENT aside), and the counter carried over
    for db in spec.databases:
        for t in ("pins", "boards", "users", "board_has_pins", "user_has_boards"):
            with src.cursor() as c1, tgt.cursor() as c2:
                c1.execute(f"SHOW CREATE TABLE {qualified(db, t)}")
                c2.execute(f"SHOW CREATE TABLE {qualified(db, t)}")
                assert strip_auto_increment(c1.fetchone()[1]) == strip_auto_increment(c2.fetchone()[1])
    progress = table_progress(fleet.zk, spec.id)
    # five seed tables per moving db, plus the cutover's sentinel table created before the copy
    assert sorted((p["db"], p["table"]) for p in progress) == sorted(
        (db, t) for db in spec.databases
        for t in ("pins", "boards", "users", "board_has_pins", "user_has_boards", "_migrator_sentinel"))
    assert all(p["done"] for p in progress)
    assert all(p["start_gtid"] for p in progress)
    # every start position is at or after what the source had logged before the copy
    for p in progress:
        start = gtid_seqs(p["start_gtid"])
        assert all(start.get(dom, -1) >= seq for dom, seq in gtid_seqs(gtid_before).items()), p
    st, _ = MigrationStore(fleet.zk).state(spec.id)
    assert st.phase == Phase.CATCHING_UP


@pytest.mark.parametrize("fleet", [300], indirect=True)
def test_copy_waits_while_the_target_standby_does_not_replicate(fleet, conns):
    import threading
    import time

    spec = command.plan_split(fleet.config, "MySQL001A", options=Options(chunk_rows=50, chunk_max_rows=50)).spec
    assert command.preflight(fleet.config, spec.id).ok
    out = {}
    with fleet.sandbox.root_conn("MySQL003B") as root, root.cursor() as cur:
        cur.execute("STOP SLAVE SQL_THREAD")
        try:
            # preflight is part of the copy and would refuse a stopped standby: pass it first
            MigrationStore(fleet.zk).set_phase(spec.id, Phase.COPYING)
            t = threading.Thread(target=lambda: out.update(command.run_copy(fleet.config, spec.id)))
            t.start()
            time.sleep(2.0)
            held = sum(p.get("rows", 0) for p in table_progress(fleet.zk, spec.id))
        finally:
            cur.execute("START SLAVE SQL_THREAD")
    t.join(120)
    assert held == 0, "the copy wrote while the target standby was not replicating"
    assert out["finished"]
    progress = table_progress(fleet.zk, spec.id)
    assert max(p.get("throttled_s", 0) for p in progress) >= 1.0


@pytest.mark.parametrize("fleet", [300], indirect=True)
def test_a_second_worker_on_the_same_table_loses_the_compare_and_set_and_stops(fleet):
    from migrator.engine.copy import begin, copy_table, progress_key

    spec = command.plan_move(fleet.config, [2], "MySQL003A", options=Options(chunk_rows=50, chunk_max_rows=50)).spec
    begin(fleet.zk, spec, fleet.credentials)
    store = MigrationStore(fleet.zk)
    key = progress_key("db00002", "pins")

    def someone_else_advances(prog):
        if prog["chunks"] == 2:  # another worker records a chunk behind this one's back
            other, _ = store.get_progress(spec.id, key)
            store.put_progress(spec.id, key, other)

    res = copy_table(fleet.zk, spec, "db00002", "pins", fleet.credentials, after_chunk=someone_else_advances)
    assert res.status == "superseded" and res.rows == 100  # its third chunk was written, never recorded
    prog, _ = store.get_progress(spec.id, key)
    assert prog["chunks"] == 2 and not prog["done"]
    # the winner (here: a fresh call) goes on from the recorded checkpoint
    res = copy_table(fleet.zk, spec, "db00002", "pins", fleet.credentials)
    assert res.status == "done" and res.rows == 300 - 100
