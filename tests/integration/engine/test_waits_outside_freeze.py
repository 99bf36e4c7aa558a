"""The waits outside the freeze in the cutover's gate scale with the work (:mod:`migrator.engine.verify.waits`).

The gate's catch-up drain before it times the drain (:func:`migrator.engine.cutover.budget.predict_freeze_ms`)
went on for a fixed 120 s; it now goes on while the tail advances and is refused, naming how far it got and
the cutover's phase, once the tail has not moved for the stall timeout (shortened here). The drainer here
waits for the catch-up worker's checkpoint (:class:`~migrator.engine.verify.drainers.CheckpointWaiter`, as
while passes run in their own worker) and no worker runs: nothing moves, and the gate says so after the
stall timeout instead of two minutes. (A drain that keeps moving past a slice is shown in
tests/unit/engine/test_verify_waits.py.) A wait made of several slices returns what all of them applied, and
the re-check's waits carry their direction's phase (a rollback's, in a rollback)."""

from __future__ import annotations

import time

import pytest

from migrator.engine.cutover.budget import predict_freeze_ms
from migrator.engine.cutover.run import CutoverRun
from migrator.engine.migration import Options
from migrator.engine.verify import waits
from migrator.engine.verify.drainers import CatchUpDrainer, CheckpointWaiter
from migrator.fleet.mysql import binlog_pos
from migrator.fleet.mysql import connect as mysql_connect

from .cutover_setup import OPEN_DRAINERS, prepare_converged


def test_the_gates_catch_up_drain_is_refused_once_the_tail_stops_advancing(fleet, monkeypatch):
    monkeypatch.setattr(waits, "STALL_S", 2.0)
    prep = prepare_converged(fleet, (2,), options=Options(freeze_budget_ms=3000))
    creds = fleet.credentials
    waiter = CheckpointWaiter(fleet.config, prep.spec.id)
    run = CutoverRun(fleet.config, fleet.zk, creds, prep.spec, waiter)
    with mysql_connect(prep.source, creds) as src, src.cursor() as cur:  # the head moves past the checkpoint
        cur.execute("INSERT INTO db00002.pins (data) VALUES ('{}')")
        src.commit()
    t0 = time.monotonic()
    with pytest.raises(waits.Stalled, match=r"catch-up before the gate .* made no progress for 2s") as got:
        predict_freeze_ms(run)
    assert got.value.phase == "cutover"
    assert time.monotonic() - t0 < 30  # refused after the stall timeout, not after a fixed 120 s


class ShortFirstSlice(CatchUpDrainer):
    """The migration's own tail, whose first slice of a wait ends after 50 ms: short of a window of thousands of
    row changes, so the wait is made of more slices than one."""

    def __init__(self, config, migration_id):
        super().__init__(config, migration_id)
        self.slices = 0

    def drain_to(self, gtid, timeout, *, save=True):
        self.slices += 1
        return super().drain_to(gtid, 0.05 if self.slices == 1 else timeout, save=save)


def test_a_wait_of_several_slices_returns_what_all_of_them_applied(fleet):
    """A progress-based drain (:func:`waits.drain_progressing`, the re-check's, whose row changes read make each
    re-check round's ``events``) whose first slice ends short: what it returns counts every row change of the
    window, the first slice's too, not only the last slice's."""
    prep = prepare_converged(fleet, (2,), options=Options(freeze_budget_ms=3000))
    drainer = ShortFirstSlice(fleet.config, prep.spec.id)
    OPEN_DRAINERS.append(drainer)
    drainer.warm()  # the reader started and everything there applied: the window is what comes next
    rows = 300 * 100
    with mysql_connect(prep.source, fleet.credentials) as src, src.cursor() as cur:
        for _ in range(300):
            cur.executemany("INSERT INTO db00002.pins (data) VALUES (%s)", [('{"w": 1}',)] * 100)
            src.commit()
        head = binlog_pos(src)
    stats = waits.drain_progressing(drainer, head, what=f"re-check of {prep.spec.id}", stall_s=60)
    assert drainer.slices == 2 and stats.reached, (drainer.slices, stats)
    assert stats.events == rows and stats.transactions == 300, stats


def test_a_rollbacks_re_check_that_stops_advancing_is_refused_as_the_rollbacks(fleet, monkeypatch):
    """The re-check before a freeze (:func:`recheck.refresh_verified_gtid`) under a rollback's direction (its label
    and verify node, as :func:`migrator.engine.rollback.rollback_slice` makes it), with a drain that stops
    advancing: the refusal carries the rollback's phase, not verify's."""
    import dataclasses

    from migrator.engine.cutover import recheck
    from migrator.engine.cutover.direction import forward
    from migrator.engine.migration import Node
    from migrator.engine.verify.checksums import table_info

    monkeypatch.setattr(waits, "STALL_S", 1.0)
    prep = prepare_converged(fleet, (2,), options=Options(freeze_budget_ms=3000))
    creds = fleet.credentials
    direction = dataclasses.replace(forward(fleet.zk, prep.spec), label="rollback", verify_node=Node.ROLLBACK_VERIFY)
    with mysql_connect(prep.source, creds) as src, src.cursor() as cur:
        prep.store.put_progress(prep.spec.id, Node.ROLLBACK_VERIFY, {"verified_gtid": binlog_pos(src)})
        cur.execute("INSERT INTO db00002.pins (data) VALUES ('{}')")  # the head moves past what any tail applies
        src.commit()
        tables = [table_info(src, "db00002", "pins")]
    target = mysql_connect(prep.target, creds)
    try:
        moving = recheck.Moving(prep.spec, direction, prep.source, creds, tables, target,
                                CheckpointWaiter(fleet.config, prep.spec.id))  # no worker moves its checkpoint
        with pytest.raises(waits.Stalled, match=r"re-check of .* made no progress for 1s") as got:
            recheck.refresh_verified_gtid(fleet.config, prep.store, moving)
    finally:
        target.close()
    assert got.value.phase == "rollback"
