"""Following a rollback survives the watcher's ZooKeeper session being lost (``rollback --follow``)."""

from __future__ import annotations

import threading
import time

from kazoo.exceptions import ConnectionLoss, SessionExpiredError

from migrator.engine.migration import MigrationStore, Phase, Spec, new_id
from migrator.ops import watch


def test_a_lost_session_while_following_a_rollback_misses_nothing(fleet, monkeypatch):
    store = MigrationStore(fleet.zk)
    spec = Spec(id=new_id(), source_master="MySQL001A", source_passive="MySQL001B", target_master="MySQL002A",
                target_passive="MySQL002B", shards=(4090,))
    store.create(spec)
    try:
        store.set_phase(spec.id, Phase.DONE)
        since = time.time()
        # the watcher's reads fail as a lost session makes them fail, twice, and then the session is back
        real_state = MigrationStore.state
        failures = [SessionExpiredError(), ConnectionLoss()]

        def state(self, migration_id):
            if failures:
                raise failures.pop(0)
            return real_state(self, migration_id)

        monkeypatch.setattr(MigrationStore, "state", state)
        events: list[tuple[str, dict]] = []
        errors: list[BaseException] = []

        def follow() -> None:
            try:
                events.extend(watch.rollback_events(fleet.config, spec.id, since, every=0.05, timeout=60))
            except BaseException as exc:  # noqa: BLE001 - the test reports it
                errors.append(exc)

        t = threading.Thread(target=follow, daemon=True)
        t.start()
        deadline = time.monotonic() + 30
        while failures and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not failures, "the watcher never read the record"
        store.set_phase(spec.id, Phase.ROLLING_BACK, expect=Phase.DONE)
        time.sleep(0.3)  # the watcher sees the flip back begin
        store.set_phase(spec.id, Phase.ROLLED_BACK, expect=Phase.ROLLING_BACK)
        t.join(60)
        assert not t.is_alive() and not errors, errors
        kinds = [k for k, _ in events]
        assert kinds == ["freeze", "rolled_back"], events
    finally:
        monkeypatch.undo()
        store.release_locks(spec)
        store.delete(spec.id)
