"""One nemesis run: a split of MySQL001A under queue load and sysbench, the seed's faults fired at their
phases, recovery as an operator would do it, and the end checks.

The migration runs on ``migrator worker`` processes through the fault harness
(:class:`tests.faults.harness.FaultRun`: the queue load with its ledger, the
workers, the three end checks). On top of it:

* sysbench ``oltp_write_only`` writes a moving shard database on the source
  master the whole time (``--mysql-ignore-errors=all``: after the fence its
  tables answer 1146), and a second one, slower, another moving shard database
  on the source pair's passive member (a client writing the standby: its
  writes reach the master through the pair's replication, late when the
  ``lag_pair`` fault delays that link); a sysbench that a restart killed is
  started again;
* faults from outside (see :mod:`tests.nemesis.schedule`) fire while the
  migration copies or catches up (catch-up is held until the schedule's
  catch-up faults fired, then released); two faults at once fire from two
  threads together;
* a fault inside the cutover runs through the fault job
  (``tests.faults.fault_jobs.cutover_with_fault``): the worker running the
  cutover is killed after a named step, or its ZooKeeper session expires at a
  hook; a live worker settles it, and a cutover settled back before the flip
  is run again;
* recovery is what an operator does: dead workers replaced, then ``migrator
  resume ID`` (re-enqueue the current step from the ZooKeeper record); when
  the migration sits with an error for a while, resume once more (counted).

End checks: the harness's three (ledger 0 lost, every moved table equals its
tombstone, no write on a tombstone after the fence; the sysbench tables are
among the moved ones) and replication healthy in both directions on every
pair, with no passive-gate leftover.
"""

from __future__ import annotations

import dataclasses
import signal
import threading
import time
import traceback
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

import pymysql
from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_fixed

from bench import sysbench
from migrator.engine.migration import Phase
from migrator.fleet import config as config_mod
from migrator.fleet.mysql import connect as mysql_connect
from migrator.fleet.shard_map import ShardMapStore
from migrator.ops import command
from tests.faults.harness import HOLD_CATCH_UP, FaultRun, restart_host, signal_tree
from tests.integration.engine.cutover_setup import gate_leftovers

from . import schedule as sched

#: the workers' ZooKeeper session timeout in a run; a worker stopped longer than this loses its sessions
ZK_SESSION_S = 3.0
OPTIONS = dict(freeze_budget_ms=3000, chunk_rows=20, chunk_max_rows=50, copy_workers=2)
SB_TABLES = 2
SB_ROWS = 1000
#: how long the ``lag_pair`` fault delays the source master's link from its partner, and by how much (seconds)
LAG_FOR_S = 8.0
LAG_DELAY_S = 2
#: transactions/s of the sysbench on the source pair's passive member
PASSIVE_RATE = 10
#: a migration sitting with an error this long after its last resume is resumed again (at most MAX_RESUMES)
STALL_S = 10.0
MAX_RESUMES = 4
ORDER = [Phase.PLANNED, Phase.PREFLIGHT, Phase.COPYING, Phase.CATCHING_UP, Phase.CONVERGED, Phase.VERIFYING,
         Phase.CUTOVER, Phase.DONE]


@dataclasses.dataclass
class Outcome:
    seed: int
    ok: bool
    seconds: float
    events: list[str]
    error: str = ""  # the traceback
    where: str = ""  # where the migration stood when it failed

    def line(self) -> str:
        verdict = "ok" if self.ok else f"FAILED: {self.error.strip().splitlines()[-1] if self.error else '?'}"
        return f"seed {self.seed}: {verdict} ({self.seconds:.0f}s)" + (f"; {self.where}" if self.where else "")


class Nemesis(ABC):
    """The faults, the recovery, sysbench and the replication checks; a scenario (:class:`SplitNemesis`,
    :class:`tests.nemesis.rebalance.RebalanceNemesis`) runs the migration and says which hosts the
    faults hit (:meth:`pair_hosts`) and how an operator resumes (:meth:`resume_work`)."""

    WORKERS = 2

    def __init__(self, fleet: Any, directory: Path, plan: sched.Schedule, *, log: Any = print):
        self.dir = Path(directory)
        self.plan = plan
        self.log = log
        cfg = config_mod.load(fleet.config_path)
        cfg.zookeeper.session_timeout = ZK_SESSION_S
        path = self.dir / "nemesis.toml"
        path.write_text(config_mod.dump(cfg))
        self.fleet = dataclasses.replace(fleet, config_path=path, config=config_mod.load(path))
        self.run: FaultRun | None = None
        self.bench: sysbench.Background | None = None
        self.passive_bench: sysbench.Background | None = None
        self.passive_bench_args: tuple[Any, ...] | None = None
        self.bench_args: tuple = ()
        self.resumes = 0
        self._last_resume = 0.0

    # -- the run -------------------------------------------------------------------------------------
    def execute(self) -> Outcome:
        t0 = time.monotonic()
        self.log(self.plan.describe())
        run = self.run = FaultRun(self.fleet, self.dir, rate=self.plan.queue_rate, workers=self.WORKERS)
        try:
            self.scenario()
            return Outcome(self.plan.seed, True, time.monotonic() - t0, run.events)
        except Exception:  # noqa: BLE001 - every failure is the run's verdict, with its seed
            error = traceback.format_exc()
            try:
                where = f"stopped at {self.where()}"
            except Exception as exc:  # noqa: BLE001 - the report must not hide the failure
                where = f"where it stopped is unknown ({exc!r})"
            return Outcome(self.plan.seed, False, time.monotonic() - t0, run.events, error, where)
        finally:
            self.close()

    def close(self) -> None:
        for b in (self.bench, self.passive_bench):
            if b is not None:
                b.stop()
        self.bench = self.passive_bench = None
        if self.run is not None:
            self.run.close()

    @abstractmethod
    def scenario(self) -> None:
        """Run the migration with the schedule's faults, then the end checks."""

    @abstractmethod
    def pair_hosts(self) -> tuple[str, str, str]:
        """(source active, source passive, target) of the migration the restarts hit."""

    @abstractmethod
    def resume_work(self) -> str | None:
        """Re-enqueue the work from the ZooKeeper record, as ``migrator resume ID`` does; returns what was
        resumed, or None when there is nothing to resume now."""

    @abstractmethod
    def where(self) -> str:
        """Where the work is now (the phase it is in), for the log."""

    @abstractmethod
    def stalled(self) -> str | None:
        """Why the work sits with an error now (it is resumed again after a while), or None."""

    # -- faults --------------------------------------------------------------------------------------
    def _fire(self, fault: sched.Fault, delay: float) -> None:
        """Fire ``fault`` ``delay`` seconds from now (its kinds together), then recover."""
        before = self.where()
        time.sleep(delay)
        self.events(f"fire {fault.describe()} ({self.where()}; {before} when it was due)")
        actions = [getattr(self, f"_{kind}") for kind in fault.kinds]
        errors: list[BaseException] = []

        def go(action: Any) -> None:
            try:
                action()
            except BaseException as exc:  # noqa: BLE001 - re-raised below
                errors.append(exc)

        threads = [threading.Thread(target=go, args=(a,)) for a in actions]
        for t in threads:
            t.start()
        for t in threads:
            t.join(180)
        if errors:
            raise errors[0]
        self._recover()

    def _kill_workers(self) -> None:
        self.run.kill_workers()

    def _restart(self, name: str) -> None:
        restart_host(self.fleet, name, self.run)

    def _restart_source(self) -> None:
        self._restart(self.pair_hosts()[0])

    def _restart_passive(self) -> None:
        self._restart(self.pair_hosts()[1])

    def _restart_target(self) -> None:
        self._restart(self.pair_hosts()[2])

    def _expire_zk(self) -> None:
        """Stop every worker and its work-horse past the session timeout: the ZooKeeper server expires
        their sessions (the lease and settle lock with them); then let them go on."""
        procs = [p for p in self.run.procs if p.poll() is None]
        for p in procs:
            signal_tree(p.pid, signal.SIGSTOP)
        time.sleep(ZK_SESSION_S + 2.0)
        for p in procs:
            signal_tree(p.pid, signal.SIGCONT)
        self.events(f"{len(procs)} worker(s) stopped {ZK_SESSION_S + 2.0:.0f}s and continued")

    def _lag_pair(self) -> None:
        """The source master applies its partner's writes :data:`LAG_DELAY_S` late for :data:`LAG_FOR_S`."""
        master = self.pair_hosts()[0]
        self._set_delay(master, LAG_DELAY_S)
        self.events(f"{master} applies its partner's writes {LAG_DELAY_S}s late")
        try:
            time.sleep(LAG_FOR_S)
        finally:
            self._set_delay(master, 0)
        self.events(f"{master} no longer delays its partner's writes")

    def _set_delay(self, master: str, seconds: int) -> None:
        """``MASTER_DELAY`` on ``master``'s link, once it answers (a fault fired beside this one may be
        restarting it)."""
        for attempt in Retrying(stop=stop_after_delay(90), wait=wait_fixed(0.5), reraise=True,
                                retry=retry_if_exception_type(pymysql.err.MySQLError)):
            with attempt:
                self.fleet.sandbox.set_link_delay(master, seconds)

    def _wipe_redis(self) -> None:
        from migrator.fleet import redis_client

        redis_client.connect(self.fleet.config).flushall()
        self.events("redis wiped (FLUSHALL)")

    def _recover(self) -> None:
        run = self.run
        run.a_worker_died()
        if len(run.procs) < run.n_workers:
            run.start_workers(run.n_workers - len(run.procs))
        self._keep_bench()
        time.sleep(1.0)
        self._resume("after the fault")

    def _cutover_fault(self, fault: sched.Fault) -> None:
        run = self.run
        self._until(Phase.CONVERGED, 180)
        run.mark_target()
        at = f"step:{fault.at}" if fault.kinds == ("kill",) else str(fault.at)
        self.events(f"fire {fault.describe()}")
        job = run.enqueue("tests.faults.fault_jobs.cutover_with_fault", run.mid, str(self.fleet.config_path),
                          fault.kinds[0], at)
        run.wait(lambda: run.a_worker_died() or job.get_status(refresh=True) in ("finished", "failed"), 120,
                 "the cutover job to end or its worker to die")
        status = job.get_status(refresh=True)
        if status == "failed":  # e.g. the freeze did not fit its budget: the step was never reached
            exc = (job.latest_result().exc_string or "").strip().splitlines()
            self.events(f"the cutover job failed before the fault: {exc[-1] if exc else '?'}")
        else:
            self.events(f"cutover job {status}")
        if len(run.procs) < run.n_workers:
            run.start_workers(run.n_workers - len(run.procs))
        st = run.wait(lambda: (lambda s: s if s.phase in (Phase.CONVERGED, Phase.DONE) and not
                               ShardMapStore(self.fleet.zk).read().frozen else None)(run.state()), 60,
                      "the cutover to be settled")
        self.events(f"cutover settled to {st.phase.value}")
        if st.phase == Phase.CONVERGED:
            # the pipeline takes it from here: verify, then the cutover again (with catch-up passes
            # between attempts while the freeze does not fit its budget)
            command.postpone(run.cfg, run.mid, on=False)
            self._resume("the cutover was undone")

    # -- waiting and resuming ----------------------------------------------------------------------
    def _resume(self, why: str) -> None:
        what = self.resume_work()
        self._last_resume = time.monotonic()
        if what:
            self.resumes += 1
            self.events(f"resumed {what} ({why})")

    def _watch(self) -> None:
        """Work sitting with an error since the last resume (and for a while) is resumed again."""
        if time.monotonic() - self._last_resume > STALL_S and self.resumes < MAX_RESUMES:
            why = self.stalled()
            if why:
                self._resume(f"stalled: {why}")
        self._keep_bench()

    def _reach(self, phase: Phase, started: Any = None) -> None:
        """Wait until the migration is in ``phase`` (and ``started()``), or past it."""
        def there() -> bool:
            self._watch()
            st = self.run.state()
            at = ORDER.index(st.phase) if st.phase in ORDER else len(ORDER)
            return at > ORDER.index(phase) or (at == ORDER.index(phase) and (started is None or started()))

        self.run.wait(there, 120, f"phase {phase.value}", every=0.05)

    def _until(self, phase: Phase, timeout: float) -> None:
        def there() -> bool:
            self._watch()
            return self.run.state().phase == phase

        self.run.wait(there, timeout, f"phase {phase.value}", every=0.2)

    # -- sysbench ----------------------------------------------------------------------------------
    def _start_bench(self) -> None:
        self.bench = sysbench.Background(*self.bench_args, threads=2, rate=self.plan.sysbench_rate,
                                         tables=SB_TABLES, table_size=SB_ROWS)

    def _start_passive_bench(self) -> None:
        if self.passive_bench_args is not None:
            # text statements: the passive gate's triggers break statements prepared before them (MDEV-26048)
            self.passive_bench = sysbench.Background(*self.passive_bench_args, threads=1, rate=PASSIVE_RATE,
                                                     tables=SB_TABLES, table_size=SB_ROWS, prepared=False)

    def _keep_bench(self) -> None:
        """Start sysbench again when a restart of its server ended it; not when it cannot even start (its
        tables are tombstones by now: the move flipped)."""
        for attr, start, what in (("bench", self._start_bench, "sysbench"),
                                  ("passive_bench", self._start_passive_bench, "sysbench on the passive member")):
            bench = getattr(self, attr)
            if bench is not None and bench.proc.poll() is not None:
                res = bench.stop()
                setattr(self, attr, None)
                if res.seconds == 0:
                    self.events(f"{what} exited at its start (its tables moved); not started again")
                    continue
                self.events(f"{what} exited ({res}); started again")
                start()

    def _stop_bench(self) -> Any:
        res, self.bench = (self.bench.stop() if self.bench is not None else "already stopped"), None
        passive = self.passive_bench.stop() if self.passive_bench is not None else "already stopped"
        self.passive_bench = None
        return f"{res}; on the passive member: {passive}"

    # -- checks ------------------------------------------------------------------------------------
    def replication_checks(self) -> None:
        """Every pair replicates in both directions and has converged; no passive gate is left anywhere."""
        sb = self.fleet.sandbox
        sb.wait_pairs_converged()
        assert not sb.problems(), sb.problems()
        for p in sb.mariadb_procs():
            with mysql_connect(self.fleet.hosts[p.name], self.fleet.credentials) as c:
                assert gate_leftovers(c) == [], f"passive-gate leftovers on {p.name}"

    def events(self, text: str) -> None:
        self.run.events.append(text)
        self.log(f"  [{self.plan.seed}] {text}")


class SplitNemesis(Nemesis):
    """``migrator split MySQL001A`` (to the spare pair) with sysbench writing a moving shard database."""

    def pair_hosts(self) -> tuple[str, str, str]:
        spec = self.run.spec
        return spec.source_master, spec.source_passive, spec.target_master

    def resume_work(self) -> str | None:
        phase = self.run.state().phase
        if phase in (Phase.CUTOVER, Phase.DONE):
            return None  # a cutover is settled by the live workers; nothing is left after done
        self.run.resume()
        return f"{self.run.mid} in {phase.value}"

    def where(self) -> str:
        return f"phase {self.run.state().phase.value}"

    def stalled(self) -> str | None:
        st = self.run.state()
        return f"{st.phase.value}: {st.error}" if st.error and st.phase not in (Phase.CUTOVER, Phase.DONE) else None

    def scenario(self) -> None:
        run, plan, fleet = self.run, self.plan, self.fleet
        assert run is not None
        run.start()
        held = bool(plan.in_phase(sched.CATCHING_UP))
        in_cutover = plan.in_phase(sched.CUTOVER)
        spec = run.plan_split(**OPTIONS, **(HOLD_CATCH_UP if held else {}))
        source = fleet.hosts[spec.source_master]
        passive = fleet.hosts[spec.source_passive]
        sysbench.prepare(source, fleet.credentials, spec.databases[0], tables=SB_TABLES, table_size=SB_ROWS)
        sysbench.prepare(passive, fleet.credentials, spec.databases[-1], tables=SB_TABLES, table_size=SB_ROWS)
        fleet.sandbox.wait_pairs_converged()
        self.bench_args = (source, fleet.credentials, spec.databases[0])
        self.passive_bench_args = (passive, fleet.credentials, spec.databases[-1])
        self._start_bench()
        self._start_passive_bench()
        run.launch(postpone=bool(in_cutover))
        for fault in plan.in_phase(sched.COPYING):
            self._reach(Phase.COPYING, lambda: run.copy_started())
            self._fire(fault, fault.offset_s)
        for fault in plan.in_phase(sched.CATCHING_UP):
            self._reach(Phase.CATCHING_UP)
            self._fire(fault, fault.offset_s)
        if held:
            run.release_catch_up()
            self._resume("catch-up released")
        if in_cutover:
            self._cutover_fault(in_cutover[0])
        self._until(Phase.DONE, 240)
        self.events(f"sysbench: {self._stop_bench()}")
        out = run.end_checks()
        moved = set(out["tables"])
        sb = {f"{db}.sbtest{i}" for db in {spec.databases[0], spec.databases[-1]} for i in range(1, SB_TABLES + 1)}
        assert sb <= moved, f"the sysbench tables did not move: {sorted(moved)}"
        self.replication_checks()
        self.events(f"resumes {self.resumes}; tables {len(moved)} equal to their tombstones; replication healthy")
