"""The settler: every ``migrator worker`` settles cutovers whose holder died.

Runs as a thread in each ``migrator worker`` process (the RQ worker itself,
not its work-horse, so it lives while the worker does and is not busy with a
job). It watches the cutover records (:mod:`migrator.engine.cutover.lease`):
a ZooKeeper children watch on ``<root>/cutovers`` and on each record wakes it
the moment a lease ends, and a sweep every few seconds catches what a watch
missed (a worker started after the holder died, a settle that failed and is
retried with backoff).

For each orphan (a record without a lease) it calls
:func:`migrator.engine.cutover.reconcile.reconcile` with a non-blocking settle
lock: one settler acts, the others skip it. Reconcile re-checks under the lock
that no lease exists, so a settler never undoes a cutover whose holder lives.
An orphan whose holder died before its freeze (phase still ``converged``) is
settled too: the gate objects it installed in its prepare step are removed.

The same thread runs the cleanups whose time is long past
(:func:`migrator.engine.cleanup.overdue`): a cleanup is scheduled on RQ when a
cutover ends, and a wiped Redis loses it; the record in ZooKeeper does not.

Why a thread in the worker rather than an RQ job: a settle must not wait for a
free worker (copy jobs run for hours), and a forking worker's main process is
idle while its work-horse runs jobs. Why a watch and not only the sweep: the
bound from the holder's death to a settled cutover is the lease session
timeout plus the settle itself; the watch adds nothing to it.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable

from kazoo.exceptions import NoNodeError
from kazoo.recipe.watchers import ChildrenWatch

from migrator.engine.cleanup import cleanup, overdue
from migrator.engine.cutover.lease import CUTOVERS, CutoverRunning, leases, read_record, where_it_was
from migrator.engine.cutover.reconcile import reconcile
from migrator.errors import MigratorError, describe
from migrator.fleet import zk as zk_mod
from migrator.fleet.config import Config, load_credentials
from migrator.fleet.zk import ZK


def orphans(zk: ZK) -> list[str]:
    """Migrations whose cutover record has no lease (its holder is gone)."""
    try:
        ids = zk.client.get_children(zk.path(CUTOVERS))
    except NoNodeError:
        return []
    return sorted(migration_id for migration_id in ids if not leases(zk, migration_id))


def settle_one(config: Config, zk: ZK, migration_id: str) -> str:
    """Settle one orphan if nobody else is; returns what happened (for the log)."""
    rec = read_record(zk, migration_id) or {}
    try:
        phase = reconcile(config, migration_id, zk=zk, blocking=False)
    except CutoverRunning as exc:
        return f"skipped: {exc.message}"
    return f"settled, phase {phase.value} (holder {rec.get('holder')} ended {where_it_was(rec)})"


class Settler:
    """A daemon thread that settles orphaned cutovers (see the module doc)."""

    def __init__(self, config: Config, *, sweep_s: float = 3.0, log: Callable[[str], None] | None = None,
                 cleanup_every_s: float = 30.0, cleanup_grace_s: float = 120.0):
        self.config = config
        self.sweep_s = sweep_s
        self.cleanup_every_s = cleanup_every_s
        self.cleanup_grace_s = cleanup_grace_s
        self._cleanups_at = 0.0
        self.log = log or (lambda msg: print(f"settler: {msg}", file=sys.stderr, flush=True))
        self.zk: ZK | None = None
        self._kick = threading.Event()
        self._stop = threading.Event()
        self._watched: set[str] = set()
        self._retry_at: dict[str, tuple[float, int]] = {}
        self._thread: threading.Thread | None = None

    def start(self) -> Settler:
        self.zk = zk_mod.connect(self.config, load_credentials(self.config))
        self.zk.ensure(self.zk.path(CUTOVERS))
        ChildrenWatch(self.zk.client, self.zk.path(CUTOVERS), self._on_records)
        self._thread = threading.Thread(target=self._loop, name="cutover-settler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._kick.set()
        if self._thread is not None:
            self._thread.join(30)
        if self.zk is not None:
            self.zk.close()

    # -- watches (kazoo's thread: never block here) ----------------------------------------
    def _on_records(self, ids: list[str]) -> bool:
        if self._stop.is_set():
            return False
        self._watched &= set(ids)  # a record that went and comes back gets a new watch
        for migration_id in set(ids) - self._watched:
            self._watched.add(migration_id)
            # fires when a lease comes or goes; ends by itself when the record is deleted
            ChildrenWatch(self.zk.client, self.zk.path(CUTOVERS, migration_id), self._on_leases)  # type: ignore[union-attr]
        self._kick.set()
        return True

    def _on_leases(self, _kids: list[str]) -> bool:
        self._kick.set()
        return not self._stop.is_set()

    # -- the settling thread ------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.is_set():
            self._kick.wait(self.sweep_s)
            self._kick.clear()
            if self._stop.is_set():
                return
            try:
                self.sweep()
                if time.monotonic() >= self._cleanups_at:
                    self._cleanups_at = time.monotonic() + self.cleanup_every_s
                    self.cleanups()
            except Exception as exc:  # noqa: BLE001 - keep watching; the next sweep retries
                self.log(f"sweep failed: {type(exc).__name__}: {exc}")

    def sweep(self) -> None:
        assert self.zk is not None
        now = time.monotonic()
        for migration_id in orphans(self.zk):
            at, _ = self._retry_at.get(migration_id, (0.0, 0))
            if now < at:
                continue
            try:
                what = settle_one(self.config, self.zk, migration_id)
            except Exception as exc:  # noqa: BLE001 - logged and retried with backoff
                _, n = self._retry_at.get(migration_id, (0.0, 0))
                wait = min(60.0, 2.0 ** n)
                self._retry_at[migration_id] = (time.monotonic() + wait, n + 1)
                msg = describe(exc)
                self.log(f"{migration_id}: settling failed ({msg}); retry in {wait:.0f}s")
                continue
            self._retry_at.pop(migration_id, None)
            self.log(f"{migration_id}: {what}")

    def cleanups(self) -> None:
        """Run the overdue cleanups (their RQ job was lost), one settler at a time for each."""
        assert self.zk is not None
        for migration_id in overdue(self.zk, grace_s=self.cleanup_grace_s):
            lock = self.zk.client.Lock(self.zk.path("locks", "cleanup", migration_id), identifier="settler")
            if not lock.acquire(blocking=False):
                continue
            try:
                res = cleanup(self.config, migration_id)
                self.log(f"{migration_id}: cleanup was overdue (its job lost?): "
                         f"dropped {len(res.dropped)} tombstone schemas")
            except MigratorError as exc:
                self.log(f"{migration_id}: overdue cleanup failed: {exc.message}")
            finally:
                lock.release()
