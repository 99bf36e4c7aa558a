"""A handed-over shard has one applier: a tail or a verify of the batched migration that read its spec
before a hand-over never applies (or repairs) the shard the batch now owns.

The hand-over is held, by a hook, after it took the batched migration's applier lock and before its
ZooKeeper transaction; meanwhile an operator's ``migrator catchup <parent>`` (and, in the second test, the
parent's verify) starts and queues on that lock. Once the hand-over commits and lets go, the queued tail
gets the lock with a newer fencing token than the hand-over raised: only the spec it reads under the lock
keeps it off the handed-over shard. A writer updates rows of that shard throughout; at the end the batch
cuts over and every row on the new owner equals its image on the source (``CHECKSUM TABLE``).
"""

from __future__ import annotations

import threading
import time

import pytest

from migrator.engine.catch_up.checkpoint import APPLIERS
from migrator.engine.cutover import cutover
from migrator.engine.migration import Options, Phase
from migrator.engine.names import tomb_db
from migrator.engine.verify.run import verify_migration
from migrator.fleet.mysql import connect as mysql_connect
from migrator.ops import command
from migrator.ops.batched import handover as handover_mod

from .cutover_setup import prepare_converged


class Updater:
    """Updates rows of one shard's pins on the source master, every few ms, with ever newer values."""

    def __init__(self, host, creds, shard: int):
        self.conn = mysql_connect(host, creds)
        self.shard, self.n = shard, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Updater:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            self.n += 1
            with self.conn.cursor() as cur:
                cur.execute(f"UPDATE `db{self.shard:05d}`.pins SET data = %s WHERE local_id %% 7 = %s",
                            (f'{{"n": {self.n}}}', self.n % 7))
            self.conn.commit()
            time.sleep(0.005)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.conn.close()


def _contenders(fleet, pid: str) -> int:
    return len(fleet.zk.client.Lock(fleet.zk.path(APPLIERS, pid)).contenders())


def _checksum(conn, db: str) -> int:
    with conn.cursor() as cur:
        cur.execute(f"CHECKSUM TABLE `{db}`.pins")
        return int(cur.fetchone()[1])


@pytest.mark.parametrize("late", ["catchup", "verify"])
def test_a_tail_that_read_the_spec_before_a_hand_over_never_applies_the_handed_over_shard(fleet, monkeypatch, late):
    prep = prepare_converged(fleet, (2, 3), options=Options(freeze_budget_ms=3000), batched=True)
    pid, store, creds = prep.spec.id, prep.store, fleet.credentials
    for db in prep.spec.databases:
        store.put_progress(pid, f"copy/{db}.pins", {"db": db, "table": "pins", "done": True})
    verify_migration(fleet.config, pid, drainer=prep.drainer)
    prep.drainer.close()
    writer = Updater(prep.source, creds, 3).start()
    late_done: dict[str, object] = {}

    def late_tail() -> None:
        try:
            if late == "catchup":
                late_done["out"] = command.catchup(fleet.config, pid, passes=1)
            else:
                late_done["out"] = command.verify(fleet.config, pid)
        except BaseException as exc:  # noqa: BLE001 - read below
            late_done["error"] = exc

    real_claim = handover_mod.applier_claim
    started: list[threading.Thread] = []

    baseline: list[int] = []

    def held_claim(zk, lock, key):
        claim = real_claim(zk, lock, key)
        # no tail of the parent applies while the hand-over holds the lock, and the batch does not exist yet:
        # this is shard 3 on the target as the batch takes it over
        with mysql_connect(prep.target, creds) as conn:
            baseline.append(_checksum(conn, "db00003"))
        # the hand-over holds the lock: a tail of the parent starts now, reads its spec and queues on the lock
        t = threading.Thread(target=late_tail, daemon=True)
        t.start()
        started.append(t)
        deadline = time.monotonic() + 30
        while _contenders(fleet, pid) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _contenders(fleet, pid) >= 2, "the late tail never queued on the applier lock"
        time.sleep(0.3)
        return claim

    monkeypatch.setattr(handover_mod, "applier_claim", held_claim)
    try:
        batch = handover_mod.hand_over(fleet.zk, creds, pid, [3], tables=5)
        started[0].join(120)
        assert "error" not in late_done, late_done.get("error")
        dst, src = mysql_connect(prep.target, creds), mysql_connect(prep.source, creds)
        try:
            # the late tail (or verify) ran after the hand-over: shard 3 on the target is as the hand-over left
            # it, untouched by the parent, while the source moved on
            assert _checksum(src, "db00003") != baseline[0]
            assert _checksum(dst, "db00003") == baseline[0]
        finally:
            dst.close()
            src.close()
    finally:
        writer.stop()
    cutover(fleet.config, batch.id)
    assert store.state(batch.id)[0].phase == Phase.DONE
    src, dst = mysql_connect(prep.source, creds), mysql_connect(prep.target, creds)
    try:
        # every row of the moved shard on its new owner equals its last image on the source (now the tombstone)
        assert _checksum(dst, "db00003") == _checksum(src, tomb_db(batch.id, "db00003"))
    finally:
        src.close()
        dst.close()
