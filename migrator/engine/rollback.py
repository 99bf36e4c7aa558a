"""Rollback: move the ranges of a finished migration back to the old pair, within the retention.

Runs in the migration worker (``migrator rollback ID``) after a cutover, while
the tombstones still exist on the old master.

The old master's tombstones (``_tomb_<suffix>_dbNNNNN``) hold the rows as they
were at the flip. Since then clients wrote to the new master. So:

1. **Reverse tail**: the catch-up :class:`~migrator.engine.catch_up.tailer.Tailer` reads the
   new master's binlog from the position recorded under the cutover fence
   (``cutover`` progress node, ``target_gtid``) and applies the moving
   schemas' events to the old master with a schema mapping ``dbNNNNN ->
   _tomb_<suffix>_dbNNNNN``; its checkpoint lives in ``rollback_tail``.
2. **Verify**: at the flip the tombstones equalled the new tables (the cutover
   proved it under its fence), so the rows that can differ are exactly those
   changed on the new master since ``target_gtid``. They are compared (and
   re-copied) before the freeze, and again inside it for the last few.
3. **Flip back with the same protocol** (:class:`migrator.engine.cutover.run.CutoverRun`
   with the reverse :class:`~migrator.engine.cutover.direction.Direction`): freeze, fence the
   new master's tables (they become its tombstones), sentinel through the
   reverse tail, compare, then, still under the fence, rename the old master's
   tombstones back to ``dbNNNNN`` and flip the ranges back in one CAS. If the
   flip does not land, the old master's tables go back to the tombstone names
   and the new master's fence is undone: the new master keeps serving.

Phase ``done`` -> ``rolled_back``. The new master's tables stay as tombstones
(``_tomb_<suffix>_dbNNNNN`` on that host) until :func:`migrator.engine.cleanup.cleanup`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from migrator.engine.catch_up.checkpoint import moving_tables as tail_tables
from migrator.engine.catch_up.tailer import Tailer
from migrator.engine.cutover.direction import Direction, passive_of
from migrator.engine.cutover.errors import CutoverError, FlipUnknown, FreezeBudgetExceeded
from migrator.engine.cutover.gate import FIXED_FREEZE_MS
from migrator.engine.cutover.hooks import CutoverHooks, CutoverResult
from migrator.engine.cutover.run import CutoverRun
from migrator.engine.cutover.sentinel import ensure_sentinel
from migrator.engine.migration import MigrationStore, Phase, Spec
from migrator.engine.names import SENTINEL_TABLE, tomb_db
from migrator.engine.verify.checksums import moving_tables
from migrator.engine.verify.drainers import Drainer, TailDrainer
from migrator.errors import MigratorError
from migrator.fleet import zk as zk_mod
from migrator.fleet.config import Config, Credentials, load_credentials
from migrator.fleet.gtid import GtidPos
from migrator.fleet.model import Host
from migrator.fleet.mysql import binlog_pos, qualified, tag
from migrator.fleet.mysql import connect as mysql_connect
from migrator.fleet.shard_map import HostRegistry

TAG = tag("rollback")
TAIL_NODE = "rollback_tail"
VERIFY_NODE = "rollback_verify"

class RollbackError(CutoverError):
    component = "rollback"


class ReverseDrainer(TailDrainer):
    """:class:`~migrator.engine.verify.drainers.Drainer` tailing the new master back into the old
    master's tombstones."""

    def __init__(self, store: MigrationStore, spec: Spec, new_master: Host, old_master: Host,
                 credentials: Credentials, start: str):
        self.store = store
        self.spec = spec
        self.new_master = new_master
        self.old_master = old_master
        self.credentials = credentials
        self.start = start
        self._tailer: Any = None

    def open(self) -> ReverseDrainer:
        if self._tailer is None:
            node, _ = self.store.get_progress(self.spec.id, TAIL_NODE)
            start = (node or {}).get("gtid") or self.start

            def checkpoint(pos: GtidPos) -> None:
                self.store.put_progress(self.spec.id, TAIL_NODE, {"gtid": str(pos), "at": time.time()})

            self._tailer = Tailer(
                self.new_master, self.old_master, self.credentials, start=GtidPos.parse(start),
                schema_map={db: tomb_db(self.spec.id, db) for db in self.spec.databases},
                tables=_with_sentinel(tail_tables(self.spec)), on_checkpoint=checkpoint,
            )
        return self


def _with_sentinel(tables: set[str] | None) -> set[str] | None:
    """A table filter that lets the sentinel row through (None: every table)."""
    return None if tables is None else set(tables) | {SENTINEL_TABLE}


def _renamer(old_master: Host, creds: Credentials, spec: Spec, tables: Callable[[], list[tuple[str, str]]],
             *, to_live: bool) -> Callable[[CutoverRun], None]:
    """Rename the old master's tombstones to the live names (or back), in one statement."""

    def run(_: CutoverRun) -> None:
        pairs = tables()
        if not pairs:
            return
        parts = []
        for db, t in pairs:
            tomb = tomb_db(spec.id, db)
            a, b = (qualified(tomb, t), qualified(db, t)) if to_live else (qualified(db, t), qualified(tomb, t))
            parts.append(f"{a} TO {b}")
        with mysql_connect(old_master, creds) as conn, conn.cursor() as cur:
            cur.execute(f"{TAG}RENAME TABLE " + ", ".join(parts))

    return run


def rollback(config: Config, migration_id: str, *, drainer: Drainer | None = None,
             hooks: CutoverHooks | None = None) -> CutoverResult:
    """Flip a finished migration back to its old pair (see the module doc)."""
    creds = load_credentials(config)
    with zk_mod.connect(config, creds) as zk:
        store = MigrationStore(zk)
        spec = store.spec(migration_id)
        state, _ = store.state(migration_id)
        if state.phase != Phase.DONE:
            raise RollbackError(f"migration {migration_id} is {state.phase.value}: only a finished (done) migration "
                                "with its tombstones can be rolled back", phase="rollback")
        node, _ = store.get_progress(migration_id, "cutover")
        if not node or not node.get("target_gtid"):
            raise RollbackError(f"migration {migration_id} recorded no new-master position at its flip; "
                                "it cannot be tailed back", phase="rollback")
        reg = HostRegistry(zk)
        old_master, new_master = reg.get(spec.source_master), reg.get(spec.target_master)
        moved: list[tuple[str, str]] = []
        with mysql_connect(old_master, creds) as conn:
            for db in spec.databases:
                tomb = tomb_db(migration_id, db)
                names = moving_tables(conn, tomb, spec.tables)
                if not names:
                    raise RollbackError(f"no tombstones in {tomb} on {old_master.name}: cleaned up already?",
                                        phase="rollback")
                moved += [(db, t) for t in names]
                ensure_sentinel(conn, tomb)
        if store.get_progress(migration_id, VERIFY_NODE)[0] is None:
            # the cutover proved tombstones == new tables at target_gtid
            store.put_progress(migration_id, VERIFY_NODE, {"verified_gtid": node["target_gtid"],
                                                           "suspect_chunks": [], "at": time.time()})
        own_drainer = drainer is None
        if drainer is None:
            drainer = ReverseDrainer(store, spec, new_master, old_master, creds, node["target_gtid"])
        direction = Direction(
            "rollback", source=new_master, target=old_master, from_master=spec.target_master,
            to_master=spec.source_master, to_slave=spec.source_slave, verify_node=VERIFY_NODE,
            target_db_of=lambda db: tomb_db(migration_id, db),
            passive=passive_of(reg, spec.target_master, spec.target_slave, spec),
            pre_flip=_renamer(old_master, creds, spec, lambda: moved, to_live=True),
            undo_pre_flip=_renamer(old_master, creds, spec, lambda: moved, to_live=False),
        )
        run = CutoverRun(config, zk, creds, spec, drainer, direction)
        try:
            run.prepare()
            with mysql_connect(new_master, creds) as c:
                head = binlog_pos(c)
            t0 = time.monotonic()
            drainer.drain_to(head, 120)
            predicted = (time.monotonic() - t0) * 1000 + FIXED_FREEZE_MS
            if predicted > spec.options.freeze_budget_ms:
                raise FreezeBudgetExceeded(f"predicted freeze {predicted:.0f} ms exceeds the budget of "
                                           f"{spec.options.freeze_budget_ms} ms: retry when the reverse tail keeps up",
                                           phase="rollback")
            run.refresh_verified_gtid()
            try:
                result = run.run(hooks or CutoverHooks())
            except FlipUnknown:
                raise
            except BaseException as exc:
                msg = exc.message if isinstance(exc, MigratorError) else f"{type(exc).__name__}: {exc}"
                if run.flipped_epoch is not None:
                    store.set_phase(migration_id, Phase.ROLLED_BACK, error=f"flipped back; release failed: {msg}")
                    raise RollbackError(f"the ranges flipped back to {spec.source_master} but releasing the fence on "
                                        f"{spec.target_master} failed ({msg}); check its tables and "
                                        f"{tomb_db(migration_id, spec.databases[0])}", phase="rollback") from None
                store.set_phase(migration_id, Phase.DONE, error=f"rollback aborted: {msg}")
                raise
            store.set_phase(migration_id, Phase.ROLLED_BACK, freeze_ms=result.freeze_ms,
                            flipped_epoch=result.flipped_epoch)
            store.put_progress(migration_id, "rollback", result.to_dict())
            return result
        finally:
            run.close()
            if own_drainer and hasattr(drainer, "close"):
                drainer.close()
