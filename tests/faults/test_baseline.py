"""The matrix's baseline: a split under load with no fault passes the three end checks, and the
checks themselves catch damage (a write on a tombstone, a target row that differs)."""

from __future__ import annotations

import pytest

from migrator.engine.migration import Phase
from migrator.engine.names import tomb_db
from migrator.ops import command
from migrator.ops.command import CommandError

from .harness import FaultRun, compare_moved, tombstone_writes


def test_split_under_load_and_the_checks_can_fail(fleet, tmp_path):
    run = FaultRun(fleet, tmp_path).start()
    try:
        spec = run.plan_split()
        run.launch()
        run.wait_phase(Phase.DONE)
        out = run.end_checks()
        source, target = fleet.hosts[spec.source_master], fleet.hosts[spec.target_master]
        node, _ = run.store.get_progress(run.mid, "cutover")
        db = spec.databases[0]
        with fleet.sandbox.root_conn(spec.source_master) as c, c.cursor() as cur:
            cur.execute(f"UPDATE `{tomb_db(run.mid, db)}`.`pins` SET data = '{{\"damaged\": 1}}' LIMIT 1")
            c.commit()
        assert tombstone_writes(source, fleet.credentials, spec, out["fence_gtid"])
        with pytest.raises(AssertionError, match="CHECKSUM TABLE"):
            compare_moved(source, target, fleet.credentials, spec, node["target_gtid"])
        with pytest.raises(CommandError, match="only be restarted before the cutover"):
            command.restart_copy(run.cfg, run.mid)  # after the flip the copy is the new master: never dropped
    finally:
        run.close()
