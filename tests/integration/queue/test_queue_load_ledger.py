"""The load generator and the ledger check on the real fleet."""

from __future__ import annotations

import sqlite3

from migrator.queue.ledger import check_ledger
from migrator.queue.load import run_load


def test_load_then_ledger_check_is_clean(qs, fleet, tmp_path):
    ledger = tmp_path / "ledger.db"
    res = run_load(fleet.config, "ld", rate=300, duration=1.5, ledger_path=ledger, service=qs, partitions=2)
    assert res.enqueued >= 200 and res.acked_ok >= 200, res.to_text()
    assert not res.errors, res.to_text()
    rep = check_ledger(fleet.config, ledger, service=qs)
    assert rep.ok and rep.lost == 0 and rep.double_bug == 0, rep.to_text()
    assert rep.enqueued == res.enqueued
    assert rep.completed + rep.pending == rep.enqueued
    assert rep.enqueue_p50_ms is not None and rep.enqueue_p99_ms >= rep.enqueue_p50_ms
    assert 50 < rep.enqueue_rate < 600, rep.to_text()
    assert "RESULT: OK" in rep.to_text()


def test_ledger_check_catches_loss_and_double_ack(qs, fleet, tmp_path):
    """A check that cannot fail is a defect: delete a job behind the ledger's back
    and forge a second OK execution, and the check must say so."""
    ledger = tmp_path / "ledger.db"
    # no consumers: every job stays pending
    run_load(fleet.config, "ld2", rate=0, duration=0.3, ledger_path=ledger, service=qs, consumers=0,
             drain_seconds=0)
    db = sqlite3.connect(ledger)
    (key, jid), (key2, jid2) = db.execute("SELECT key, job_id FROM enqueued LIMIT 2").fetchall()
    from migrator.queue.model import JobFilter

    assert qs.delete_jobs("ld2", "NEW", filter=JobFilter(ids=[jid])) == 1
    db.executemany("INSERT INTO executions VALUES (?, ?, ?, ?, ?, ?, ?)",
                   [(key2, jid2, "c1", 1, 1.0, 2.0, "OK"), (key2, jid2, "c2", 2, 3.0, 4.0, "OK")])
    db.commit()
    db.close()
    rep = check_ledger(fleet.config, ledger, service=qs)
    assert rep.lost == 1 and rep.lost_ids == [jid]
    assert rep.double_bug == 1
    assert not rep.ok and "RESULT: FAILED" in rep.to_text()
