"""The nemesis over ``migrator rebalance``: four pairs (three with skewed data, one empty added pair), the
moves running at once on ``migrator worker`` processes, the seed's faults at offsets from the start.

The restarts hit the pairs of the plan's first move; sysbench writes a shard database of that move on
its source. Recovery is ``migrator resume RID`` (:func:`migrator.ops.rebalance.command.resume`: every
running or failed move resumed from its record, the schedule's advance re-enqueued). End checks: the
ledger (0 lost), every moved table of every move equal to its tombstone, no write on a tombstone after
its fence, replication healthy on every pair.
"""

from __future__ import annotations

import time
from typing import Any

from bench import sysbench
from migrator.engine.migration import MigrationStore, Options, Phase
from migrator.errors import MigratorError
from migrator.fleet.ids import shard_db
from migrator.fleet.mysql import binlog_pos
from migrator.fleet.mysql import connect as mysql_connect
from migrator.ops.rebalance import command as rebalance
from migrator.ops.rebalance import record as rec_mod
from tests.faults.harness import compare_moved, tombstone_writes
from tests.integration.ops.rebalance_support import skew

from .run import OPTIONS, SB_ROWS, SB_TABLES, Nemesis

#: the sandbox of a rebalance run: 3 pairs holding 24 shards of 5 rows, and one empty pair to add
FLEET = dict(pairs=3, spare_pairs=1, shards=24, rows=5)
#: pins of ~2 KB added to each shard, by master: the first pair ~3x the bytes of the third
SKEW = {"MySQL001A": 240, "MySQL002A": 160, "MySQL003A": 80}
THRESHOLD = 0.15
TIMEOUT_S = 300


class RebalanceNemesis(Nemesis):
    WORKERS = 3  # two moves at once and the schedule's advance

    rid: str | None = None
    first: tuple[str, str, str] = ("", "", "")

    def pair_hosts(self) -> tuple[str, str, str]:
        return self.first

    def record(self) -> dict[str, Any]:
        return rebalance.status(self.fleet.config, self.rid)

    def resume_work(self) -> str | None:
        try:
            out = rebalance.resume(self.fleet.config, self.rid)
        except MigratorError as exc:  # done, or aborted: nothing to resume
            self.events(f"resume refused: {exc}")
            return None
        return f"rebalance {self.rid} (moves {out['resumed']})"

    def where(self) -> str:
        rec = self.record()["record"]
        store = MigrationStore(self.fleet.zk)
        phases = []
        for m in rec["moves"]:
            try:
                st = store.state(m["migration"])[0]
                phases.append(f"{m['index']}:{st.phase.value}" + (f" (error {st.error!r})" if st.error else ""))
            except MigratorError:
                phases.append(f"{m['index']}:{m['state']}")
        return f"rebalance {rec['phase']}, moves {' '.join(phases)}"

    def stalled(self) -> str | None:
        rec = self.record()["record"]
        store = MigrationStore(self.fleet.zk)
        for m in rec["moves"]:
            if m["state"] == "failed":
                return f"rebalance {rec['phase']}, move {m['index']} failed: {m['error']}"
            if m["state"] == "running":
                try:
                    st, _ = store.state(m["migration"])
                except MigratorError:
                    continue
                if st.error and st.phase not in (Phase.CUTOVER, Phase.DONE):
                    return f"move {m['index']} {st.phase.value}: {st.error}"
        return "the rebalance stopped" if rec["phase"] == "stopped" else None

    def scenario(self) -> None:
        run, fleet, creds = self.run, self.fleet, self.fleet.credentials
        run.start()
        skew(fleet.smap, fleet.hosts, creds, SKEW)
        spare = fleet.sandbox.pairs(spare=True)[0][0]
        live = rebalance.plan_live(fleet.config, threshold=THRESHOLD, add_pairs=[spare], window_s=0.5)
        assert len(live.plan.moves) >= 2, live.plan.moves
        move = live.plan.moves[0]
        self.first = (move.source, live.passives[move.source], move.target)
        db = shard_db(move.runs[0][0])
        source = fleet.hosts[move.source]
        sysbench.prepare(source, creds, db, tables=SB_TABLES, table_size=SB_ROWS)
        fleet.sandbox.wait_pairs_converged()
        marks = {}
        for m in live.plan.moves:  # targets before any cutover: widens what the ledger accounts for
            with mysql_connect(fleet.hosts[m.target], creds) as c:
                marks[m.target] = binlog_pos(c)
        self.bench_args = (source, creds, db)
        self._start_bench()
        self.rid = rebalance.start(fleet.config, live, options=Options(**OPTIONS))
        self.events(f"rebalance {self.rid}: {len(live.plan.moves)} moves; first {move.source} -> {move.target}")
        t0 = time.monotonic()
        for fault in self.plan.faults:
            self._fire(fault, max(0.0, t0 + fault.offset_s - time.monotonic()))

        first = MigrationStore(fleet.zk)

        def done() -> bool:
            self._watch()
            if self.bench is not None and self._phase(first, rec_mod.migration_id(self.rid, 0)) == Phase.DONE:
                # its tables are tombstones now: it would only spin on 1146 for the rest of the rebalance
                self.events(f"sysbench: {self._stop_bench()}")
            return self.record()["phase"] == "done"

        run.wait(done, TIMEOUT_S, f"rebalance {self.rid} to be done", every=0.5)
        self.end_checks(marks, db)

    @staticmethod
    def _phase(store: MigrationStore, mid: str) -> Phase | None:
        try:
            return store.state(mid)[0].phase
        except MigratorError:  # not stored yet
            return None

    def end_checks(self, marks: dict[str, str], sb_db: str) -> None:
        run, fleet, creds = self.run, self.fleet, self.fleet.credentials
        run.stop_load()
        ledger = run.check_ledger()
        store = MigrationStore(fleet.zk)
        moved: list[str] = []
        for m in self.record()["record"]["moves"]:
            spec = store.spec(m["migration"])
            assert store.state(spec.id)[0].phase == Phase.DONE, (spec.id, store.state(spec.id)[0])
            run.spec = spec  # the harness reads the flip's audit record of this migration
            node, _ = store.get_progress(spec.id, "cutover")
            fence = (node or {}).get("fence_gtid") or run._fence_from_audit()
            target_ref = (node or {}).get("target_gtid") or marks[spec.target_master]
            assert fence, f"{spec.id}: no fence position recorded"
            source, target = fleet.hosts[spec.source_master], fleet.hosts[spec.target_master]
            writes = tombstone_writes(source, creds, spec, fence)
            assert not writes, f"{spec.id}: row events on the source after the fence {fence}: {writes[:10]}"
            moved += list(compare_moved(source, target, creds, spec, target_ref))
        sb = {f"{sb_db}.sbtest{i}" for i in range(1, SB_TABLES + 1)}
        assert sb <= set(moved), f"the sysbench tables did not move: {sorted(moved)}"
        self.replication_checks()
        self.events(f"{ledger.enqueued} acknowledged enqueues, lost {ledger.lost}; resumes {self.resumes}; "
                    f"{len(moved)} tables equal to their tombstones; replication healthy")
