"""The write gate's triggers live only around the freeze, and only while their attempt owns them.

A client writes on the passive member of the source pair through a cutover with a server-side prepared
statement (``PREPARE`` once, before the triggers exist, then ``EXECUTE`` every 20 ms: the statement MariaDB's
MDEV-26048 says may fail on a gate table made after it was prepared). Each write is timed against the freeze
(a hook marks the frozen map's commit).

- A wait before the freeze (the batch before this one, the re-check, the target's standby) no longer has
  triggers on the live tables: they are installed after it, and the attempt records how long they existed.
- The client sees no error before the freeze; from the passive member's close on it is refused with 1146
  or 1317 (the shard moved), as it always was.
- An attempt whose lease is lost while it installs (its session expired, then a settler removes every
  attempt's gate objects) stops installing at once: the client never meets a trigger whose gate table is
  gone.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import pymysql
import pytest

from migrator.engine.cutover import CutoverHooks, cutover, reconcile
from migrator.engine.cutover.trigger_gate import GateNotOwned
from migrator.engine.migration import Options, Phase
from migrator.fleet.mysql import MOVED_CODES
from migrator.fleet.mysql import connect as mysql_connect

from .cutover_setup import gate_leftovers, prepare_converged, source_pair_left_clean

MOVING = (2, 3)
#: how long the attempt waits before its freeze (as a batch waits for the batch before it)
HOLD_S = 3.0
#: how long the install is held with a table's triggers in place (nothing frozen yet)
TRIGGERS_HELD_S = 3.0


@dataclass
class PreparedWriter:
    """Inserts a row every 20 ms on one member with one server-side prepared statement (``PREPARE`` once,
    ``EXECUTE`` each time), recording when each error came (monotonic) and its code."""

    host: object
    creds: object
    table: str = "db00002.pins"
    writes: int = 0
    errors: list[tuple[float, int, str]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _ready: threading.Event = field(default_factory=threading.Event)

    def start(self) -> PreparedWriter:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        assert self._ready.wait(30), "the prepared writer never started"
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(60)

    def errors_before(self, t: float) -> list[tuple[float, int, str]]:
        return [e for e in self.errors if e[0] < t]

    def _run(self) -> None:
        conn = mysql_connect(self.host, self.creds, read_timeout=60)
        try:
            with conn.cursor() as cur:
                cur.execute(f"PREPARE w FROM 'INSERT INTO {self.table} (data) VALUES (?)'")
                cur.execute("SET @v = '{\"ps\": 1}'")
            self._ready.set()
            while not self._stop.is_set():
                try:
                    with conn.cursor() as cur:
                        cur.execute("EXECUTE w USING @v")
                    self.writes += 1
                except pymysql.err.MySQLError as exc:
                    self.errors.append((time.monotonic(), int(exc.args[0]) if exc.args else 0, str(exc)))
                time.sleep(0.02)
        finally:
            conn.close()


def _attempts(prep) -> list[dict]:
    node, _ = prep.store.get_progress(prep.spec.id, "cutover_attempts")
    return node["attempts"]


def test_triggers_live_only_around_the_freeze_and_a_prepared_statement_sees_no_error_before_it(fleet):
    prep = prepare_converged(fleet, MOVING, options=Options(freeze_budget_ms=2000))
    spec = prep.spec
    passive = fleet.hosts[spec.source_passive]
    marks: dict[str, float] = {}

    def hold(_run) -> None:  # a wait before the freeze that lasts (the batch before this one, in a batched move)
        time.sleep(HOLD_S)

    def at_step(_run, step: str) -> None:
        marks.setdefault(step, time.monotonic())

    writer = PreparedWriter(passive, fleet.credentials).start()
    time.sleep(0.5)
    try:
        t0 = time.monotonic()
        hooks = CutoverHooks(before_freeze=hold, after_freeze=lambda _run: marks.setdefault("frozen", time.monotonic()),
                             at_step=at_step)
        result = cutover(fleet.config, spec.id, drainer=prep.drainer, hooks=hooks)
        took = time.monotonic() - t0
        time.sleep(0.3)
    finally:
        writer.stop()
    entry = _attempts(prep)[-1]
    lived = entry["triggers_ms"][passive.name]
    print(f"\ncutover {took:.1f} s, freeze {result.freeze_ms:.0f} ms (steps {result.steps_ms}); triggers on "
          f"{passive.name} {lived:.0f} ms; before the freeze {entry['before_freeze_ms']}; "
          f"{writer.writes} prepared writes, errors {len(writer.errors)} (first {writer.errors[:1]})")
    assert prep.store.state(spec.id)[0].phase == Phase.DONE
    # the triggers were installed after the wait, not before it: they lived far less than it
    assert lived < HOLD_S * 1000 * 0.5, (lived, entry["before_freeze_ms"])
    # a prepared statement made before the triggers met no error before the freeze; after it, only "moved"
    before = writer.errors_before(marks["frozen"])
    assert not before, before[:3]
    assert {code for _, code, _ in writer.errors} <= MOVED_CODES, writer.errors[:3]
    assert writer.writes > 0
    source_pair_left_clean(fleet.credentials, prep.source, passive)


def test_a_binary_protocol_client_sees_no_error_while_the_triggers_exist_before_the_freeze(fleet):
    """sysbench ``oltp_write_only`` (server-side prepared statements over the binary protocol, prepared before
    the triggers existed) writes on the passive member's ``sbtest1`` in a moving db at 40 tps. The install is
    held for :data:`TRIGGERS_HELD_S` once that table's triggers exist (gate table in place, nothing frozen):
    no second of sysbench before the freeze has an error (MDEV-26048 would show here as 1146 on the gate
    table), and the cutover flips."""
    from bench import sysbench

    source = fleet.hosts[fleet.smap.master_of(MOVING[0])]
    sysbench.prepare(source, fleet.credentials, "db00002", tables=1, table_size=1000)
    fleet.sandbox.wait_pairs_converged()
    prep = prepare_converged(fleet, MOVING, options=Options(freeze_budget_ms=2000))
    spec = prep.spec
    passive = fleet.hosts[spec.source_passive]
    marks: dict[str, float] = {}
    check = mysql_connect(passive, fleet.credentials)

    def hold_with_triggers(_run) -> None:
        if "held" in marks:
            return
        with check.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM information_schema.TRIGGERS WHERE EVENT_OBJECT_SCHEMA = 'db00002' "
                        "AND EVENT_OBJECT_TABLE = 'sbtest1'")
            if cur.fetchone()[0] == 3:
                marks["held"] = time.monotonic()
                time.sleep(TRIGGERS_HELD_S)

    load = sysbench.Background(passive, fleet.credentials, "db00002", threads=1, rate=40, tables=1,
                               table_size=1000)
    try:
        time.sleep(2)
        hooks = CutoverHooks(gate_statement=hold_with_triggers,
                             after_freeze=lambda _run: marks.setdefault("frozen", time.monotonic()))
        result = cutover(fleet.config, spec.id, drainer=prep.drainer, hooks=hooks)
        time.sleep(1)
    finally:
        sb = load.stop()
        check.close()
    assert "held" in marks, "the install never made sbtest1's triggers"
    # a second counts only when it surely ended before the freeze (sysbench starts a little after its process)
    before = [(t, e) for t, e in sb.errors_per_s if t + 1.0 < marks["frozen"]]
    with_triggers = [(t, e) for t, e in before if t - 1.0 >= marks["held"]]
    print(f"\nsysbench {sb.transactions} transactions, {sb.errors} errors; seconds before the freeze {len(before)} "
          f"({len(with_triggers)} wholly with the triggers); freeze {result.freeze_ms:.0f} ms")
    assert sb.transactions > 40 and with_triggers, (sb, marks)
    assert all(e == 0 for _, e in before), before
    assert prep.store.state(spec.id)[0].phase == Phase.DONE


def test_triggers_older_than_their_lifetime_come_off_and_go_back_on_before_the_freeze(fleet):
    """With a lifetime shorter than what runs between the install and the freeze, the triggers are taken off
    and installed again right before it (recorded as ``gates_again``); the cutover flips as ever."""
    prep = prepare_converged(fleet, MOVING, options=Options(freeze_budget_ms=2000, gate_lifetime_s=0.001))
    spec = prep.spec
    result = cutover(fleet.config, spec.id, drainer=prep.drainer)
    entry = _attempts(prep)[-1]
    assert result.freeze_ms is not None and prep.store.state(spec.id)[0].phase == Phase.DONE
    assert "gates_again" in entry["before_freeze_ms"], entry["before_freeze_ms"]
    with mysql_connect(fleet.hosts[spec.source_passive], fleet.credentials) as b:
        assert gate_leftovers(b) == []


def test_a_lease_lost_while_installing_stops_the_install_and_no_client_errs(fleet):
    """The attempt's lease session expires after its gate table and some triggers are made, and a settler
    (any worker) removes every attempt's gate objects, the gate table included. The attempt, alive, must not
    make one more trigger (it would read the gate table that is gone: every client write would fail 1146):
    it stops installing and removes what it made. A client writing on the passive member sees no error."""
    from tests.faults.fault_jobs import expire_session

    prep = prepare_converged(fleet, MOVING, options=Options(freeze_budget_ms=2000))
    spec = prep.spec
    passive = fleet.hosts[spec.source_passive]
    calls: list[int] = []
    settled: list[Phase] = []

    def lose_lease(run) -> None:
        calls.append(1)
        if len(calls) == 4:  # the gate table and two triggers exist
            expire_session(run.lease.zk.client)
            settled.append(reconcile(fleet.config, spec.id))  # a settler: no lease held, phase converged

    writer = PreparedWriter(passive, fleet.credentials).start()
    plain = PreparedWriter(passive, fleet.credentials, table="db00003.pins").start()
    time.sleep(0.5)
    try:
        with pytest.raises(GateNotOwned):
            cutover(fleet.config, spec.id, drainer=prep.drainer, hooks=CutoverHooks(gate_statement=lose_lease))
        time.sleep(0.5)
    finally:
        writer.stop()
        plain.stop()
    assert settled == [Phase.CONVERGED]
    assert not writer.errors and not plain.errors, (writer.errors[:3], plain.errors[:3])
    with mysql_connect(passive, fleet.credentials) as b:
        assert gate_leftovers(b) == []
    # the next attempt cuts over
    result = cutover(fleet.config, spec.id, drainer=prep.drainer)
    assert result.freeze_ms is not None and prep.store.state(spec.id)[0].phase == Phase.DONE
