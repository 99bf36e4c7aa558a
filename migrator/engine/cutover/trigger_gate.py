"""The trigger gate on the source pair's passive member: its clients stop, its replication does not.

Runs in the cutover worker, against the *passive* member of the pair being
fenced (``MySQL001B`` when ``MySQL001A`` is the master), around the freeze.

Why a second mechanism
----------------------
In a master-master pair a write can land on either member. The active-side
fence (:mod:`migrator.engine.cutover.rename_fence`) takes ``LOCK TABLES ... WRITE`` on the master,
and that lock blocks the master's replication SQL thread as much as its
clients: a passive-side write that arrives during the freeze would wait behind
the lock, hit the renamed table afterwards (1146), stop replication and never
reach the target. Locking the passive side the same way blocks *its* SQL
thread in the same way. What is needed on the passive side is a fence that
refuses clients but lets replicated row events through.

Triggers are exactly that: with ROW binlogs, a replica does not run triggers
for replicated row events (``slave_run_triggers_for_rbr=NO``, checked), while
every client statement fires them. So, before the freeze, each moving table on
the passive member gets ``BEFORE INSERT/UPDATE/DELETE`` triggers that read an
empty *gate table* ``_migrator_gates.moving_<suffix>`` (a MEMORY table: dropping it deletes no
file). Inside the freeze:

1. :meth:`TriggerGate.shut`: ``DROP TABLE`` the gate. The DROP waits (metadata
   lock) for every open transaction that passed the gate; writers arriving
   after it queue behind the DROP and then fail with 1146 ``Table
   '_migrator_gates.moving_<suffix>' doesn't exist``, the same clean "this
   shard moved, refresh and retry" error the master's fence gives. When it
   returns, the member's own last transactions (:func:`own_gtids`: the entries
   of its server in ``@@gtid_binlog_state``) include every write it accepted.
2. :func:`wait_applied` on the master for those transactions: the passive
   side's last writes are now in the master's binlog, ahead of the master's
   fence, so the drain carries them to the target. The wait names the passive
   member's own transactions, not a domain position, so it holds when both
   members share one GTID domain (MariaDB's default).
3. (The master's fence, drain, compare and flip follow.)
4. :meth:`TriggerGate.finish`, after the flip: wait until the passive member
   has applied the master's own transactions up to the fence (its sentinel
   write and everything before it), then rename its moving
   tables to the tombstones with the master's own protocol (``LOCK TABLES``,
   one queued RENAME per table) and drop the triggers under that lock (MariaDB
   refuses to move a table with triggers to another schema, error 1435).

The same gate fences the *active* master of a move too large for the rename
fence (more than :data:`~migrator.engine.cutover.rename_fence.MAX_TABLES` tables,
migration option ``fence=auto``, or ``fence=gate``): one ``DROP TABLE`` closes
any number of tables, and the renames to the tombstones happen after the flip,
outside the freeze, while the gate keeps every client write out. What the gate
does not stop, and the rename fence does: statements that fire no trigger
(``TRUNCATE TABLE``, DDL) and reads, which a stale client can still make on
the old master until :meth:`TriggerGate.finish` has renamed its table.

Triggers on a live table cost every client write a read of the gate table, and
a known MariaDB limit (MDEV-26048) says a server-side prepared statement prepared
*before* the triggers were created may fail on the gate table while they exist
(not seen on 10.11.19 with the binary protocol: ``tests/integration/engine/
test_gate_lifetime.py``). So the triggers exist only around the freeze: the
attempt installs them after every wait that can last (the gate's drain, the
target check, the re-check, the batch before it), takes them off and installs
them again when its freeze does not start within ``gate_lifetime_s``
(:mod:`migrator.engine.cutover.attempt`), and :meth:`TriggerGate.finish` drops
them right after the flip. :meth:`TriggerGate.triggers_ms` says how long they
existed (each attempt records it).

Ownership: an attempt installs only while it holds its lease (``owner``,
checked before the gate table and before each trigger); one that lost it stops
installing and removes what it made. A settler removes a dead attempt's
triggers before its gate table, and never leaves a trigger reading a missing
gate table (:meth:`TriggerGate.remove`).

Every statement here that needs a moving table's metadata lock outside the
freeze (``CREATE TRIGGER``, ``DROP TRIGGER``, the rename fence's ``LOCK
TABLES`` in :meth:`TriggerGate.finish`) runs through
:func:`migrator.engine.mdl.run_locking`: each try waits at most a fraction of
the freeze budget (so no client, reads included, queues behind it for longer),
tries go on with backoff, and a statement that never gets its lock stops naming
the connections that hold it. Triggers are made ``IF NOT EXISTS`` and dropped
``IF EXISTS``, so an interrupted try can be run again; an install that stops
removes its triggers and gate table.

Every statement here runs with ``sql_log_bin=0``: the gate, the triggers and
the renames stay on the member they were made on. The master renames its own
tables unlogged too (see :mod:`migrator.engine.cutover.rename_fence`), so neither side replays the
other's tombstone renames: each member renames its tables after it has applied
every row of the other.

:meth:`TriggerGate.reopen` undoes a shut (the cutover stopped before the
flip); :meth:`TriggerGate.remove` drops the triggers and the gate.

Names are per attempt
---------------------
The triggers and the gate table carry the migration's suffix *and* the
attempt's (``_mgate_<migration>_<attempt>_<table hash>_<event>``, gate table
``moving_<migration>_<attempt>``). An attempt's reopen and remove touch only
what that attempt made. That matters when a cutover process lost its lease
(its ZooKeeper session expired while it lived on): a settler undoes its attempt,
a second attempt of the same migration installs and closes its own gate, and
whatever the first process does after that (its undo, its close) cannot open
or drop the second attempt's gate. With names per migration it could, and the
passive member would take writes the second attempt's drain never sees. A
settler (:mod:`migrator.engine.cutover.reconcile`) works on every attempt of a
migration at once (``attempt=""``): it acts only when no lease is held, and no
new attempt installs anything until it has settled.

Needs ``TRIGGER`` (the triggers) and ``BINLOG ADMIN`` (``sql_log_bin``) on the
passive member, and ``log_bin_trust_function_creators=ON`` there (MariaDB
otherwise wants SUPER to create a trigger while binary logging is on; with ROW
binlogs the setting is safe). It writes there: a ``read_only`` member takes its statements only when the
migration user holds ``READ_ONLY ADMIN`` (SUPER does not since MariaDB 10.11). Preflight asks each gated
member for all of it before the copy (:mod:`migrator.engine.preflight`).
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

import pymysql

from migrator.engine.cutover.rename_fence import MAX_TABLES, Fence, Move, take_spare
from migrator.engine.mdl import DEFAULT_WAIT, Attempts, LockWait, run_locking
from migrator.errors import MigratorError
from migrator.fleet.config import Credentials
from migrator.fleet.gtid import GtidPos
from migrator.fleet.model import Host
from migrator.fleet.mysql import connect as mysql_connect
from migrator.fleet.mysql import (
    ident,
    kill_connection,
    mark_own,
    own_gtids,
    qualified,
    query,
    replication_problem,
    scalar,
    tag,
    wait_applied,
    wait_connections_gone,
)

TAG = tag("cutover-passive")
GATE_SCHEMA = "_migrator_gates"
TRIGGER_PREFIX = "_mgate_"
EVENTS = (("INSERT", "i"), ("UPDATE", "u"), ("DELETE", "d"))
#: triggers up to this many are made on the gate's own session; more, on :data:`INSTALL_PARALLEL` sessions at once
INSTALL_SERIAL_MAX = 60
INSTALL_PARALLEL = 4
#: a removal that finds triggers made meanwhile goes again this many times in all, this far apart
REMOVE_ROUNDS = 5
REMOVE_PAUSE_S = 0.2


class GateError(MigratorError):
    component = "passive_gate"


class GateNotOwned(GateError):
    """The attempt installing the gate lost its lease: it stopped installing (what it made is removed)."""


def gate_table(suffix: str) -> str:
    name = f"moving_{suffix}"
    ident(name)
    return name


def trigger_name(suffix: str, table: str, event_letter: str) -> str:
    """Unique in the table's schema, at most 64 characters, whatever the table is called."""
    h = hashlib.sha1(table.encode()).hexdigest()[:8]
    return f"{TRIGGER_PREFIX}{suffix}_{h}_{event_letter}"


#: the tail of a trigger name after its suffix: ``_<8 hex>_<letter>``
_NAME_TAIL = 11


def gate_of_trigger(name: str) -> str:
    """The gate table a trigger made by this module reads (from its name)."""
    return gate_table(name[len(TRIGGER_PREFIX):-_NAME_TAIL])


def _like(text: str) -> str:
    """``text`` as a literal LIKE pattern (``_`` and ``%`` are wildcards there)."""
    return text.replace("\\", "\\\\").replace("_", "\\_").replace("%", "\\%")


class TriggerGate:
    """Triggers and a gate table that close the moving tables of one member to clients only (not to replication).

    ``suffix`` names the migration, ``attempt`` the cutover attempt (see "Names are per
    attempt" above). With ``attempt=""`` the gate stands for every attempt of the
    migration: what it finds, closes, finishes or removes is every attempt's (a settler's
    view); what it installs has the migration's name only.
    """

    def __init__(self, host: Host, credentials: Credentials, tables: Sequence[tuple[str, str]], suffix: str,
                 tomb_db_of: dict[str, str], attempt: str = "", *, lock_wait: LockWait = DEFAULT_WAIT,
                 phase: str = "cutover", owner: Callable[[], bool] | None = None):
        #: the direction's label (``cutover``, ``rollback``): the phase its errors name
        self.phase = phase
        if not tables:
            raise GateError("nothing to gate: no moving tables", phase=phase)
        self.host = host
        self.credentials = credentials
        self.tables = list(tables)
        self.family = suffix
        self.attempt = attempt
        self.suffix = f"{suffix}_{attempt}" if attempt else suffix
        self.gate = gate_table(self.suffix)
        self.tomb_db_of = dict(tomb_db_of)
        #: how its statements on the moving tables wait for their metadata locks, and what that cost
        self.lock_wait = lock_wait
        self.lock_attempts = Attempts()
        self._attempts_lock = threading.Lock()
        self.conn: pymysql.connections.Connection | None = None
        self._spare: pymysql.connections.Connection | None = None
        self.conn_id: int | None = None
        self.closed_at: GtidPos | None = None
        #: set by :meth:`reopen` (maybe from the watchdog's thread): no shut after it
        self.aborted = False
        self._closing = False
        self._state = threading.Lock()
        #: True while the attempt that installs this gate still holds its lease (None: a settler's gate)
        self.owner = owner
        #: monotonic time the first trigger of the current install was made (None: none on the member now),
        #: and the ms the triggers of earlier installs existed
        self.installed_at: float | None = None
        self._lived_ms = 0.0

    # -- connection ----------------------------------------------------------------
    def open(self) -> TriggerGate:
        self._spare = mark_own(mysql_connect(self.host, self.credentials, read_timeout=30))
        self.conn = mark_own(mysql_connect(self.host, self.credentials, read_timeout=600))
        self.conn_id = int(scalar(self.conn, "SELECT CONNECTION_ID()"))
        with self.conn.cursor() as cur:
            cur.execute(f"{TAG}SET SESSION sql_log_bin = 0")
        return self

    def close_connection(self) -> None:
        for conn in (self._spare, self.conn):
            if conn is not None:
                try:
                    conn.close()
                except Exception:  # already gone
                    pass
        self._spare = self.conn = None

    def _cur(self) -> pymysql.cursors.Cursor:
        if self.conn is None:
            self.open()
        assert self.conn is not None
        return self.conn.cursor()

    # -- before the freeze -------------------------------------------------------------
    def check(self) -> None:
        """Refuse what would make the gate unsafe; raises :class:`GateError`."""
        assert self.conn is not None
        trust = int(scalar(self.conn, "SELECT @@log_bin_trust_function_creators"))
        if not trust:
            raise GateError(
                f"{self.host.name} has log_bin_trust_function_creators=OFF: the cutover's write gate needs triggers, "
                "which then need SUPER; with ROW binlogs it is safe to SET GLOBAL log_bin_trust_function_creators=ON "
                "there (and in its config)", phase=self.phase)
        rbr = str(scalar(self.conn, "SELECT @@slave_run_triggers_for_rbr")).upper()
        if rbr != "NO":
            raise GateError(
                f"{self.host.name} runs triggers for replicated row events (slave_run_triggers_for_rbr={rbr}): "
                "the cutover's write gate would stop its replication; SET GLOBAL slave_run_triggers_for_rbr=NO there",
                phase=self.phase)
        problem = replication_problem(self.conn, self.host.name, self.host.partner)
        if problem:
            raise GateError(f"{problem}: the passive side's writes could not be followed; repair the pair, "
                                   "or set the migration option fence_passive=false if that host is down for good",
                                   phase=self.phase)

    def _own(self) -> None:
        """Raise :class:`GateNotOwned` when the attempt installing this gate lost its lease (a settler may be
        removing every attempt's gate objects now: no new trigger may read a gate table it drops)."""
        if self.owner is not None and not self.owner():
            raise GateNotOwned(f"this {self.phase} attempt lost its lease while installing its write gate on "
                               f"{self.host.name}: it stopped installing and removes what it made; a settler "
                               "settles the attempt", phase=self.phase)

    def triggers_ms(self) -> float:
        """How long this gate's triggers existed on the member (every install of it, until now if they still do)."""
        now = (time.monotonic() - self.installed_at) * 1000 if self.installed_at is not None else 0.0
        return round(self._lived_ms + now, 1)

    def age_s(self) -> float:
        """Seconds since the current install began (0 when none is on the member)."""
        return time.monotonic() - self.installed_at if self.installed_at is not None else 0.0

    def _triggers_gone(self) -> None:
        if self.installed_at is not None:
            self._lived_ms += (time.monotonic() - self.installed_at) * 1000
            self.installed_at = None

    def install(self) -> None:
        """Create the open gate and the triggers (idempotent; not binlogged), each group of statements only
        while the attempt holds its lease (:attr:`owner`)."""
        self.check()
        self._own()
        with self._cur() as cur:
            cur.execute(f"{TAG}CREATE DATABASE IF NOT EXISTS {ident(GATE_SCHEMA)}")
            cur.execute(f"{TAG}CREATE TABLE IF NOT EXISTS {qualified(GATE_SCHEMA, self.gate)} "
                        "(open TINYINT NOT NULL) ENGINE=MEMORY")
            existing = {(db, name) for db, name, _ in self._existing_triggers()}
        made = [(db, name, table) for db, table in self.tables for _, letter in EVENTS
                if (db, name := trigger_name(self.suffix, table, letter)) not in existing]
        todo = [(db, table, "the write gate's CREATE TRIGGER", self._create_sql(db, table, name))
                for db, name, table in made]
        if self.installed_at is None:
            self.installed_at = time.monotonic()
        try:
            if len(todo) <= INSTALL_SERIAL_MAX:
                assert self.conn is not None
                self._run_on(self.conn, todo, owned=True)
                return
            # a CREATE TRIGGER waits mostly on its own table's files: a few sessions at once take about half as long
            with ThreadPoolExecutor(max_workers=INSTALL_PARALLEL, thread_name_prefix="gate-install") as pool:
                for f in [pool.submit(self._run_on_own_session, todo[k::INSTALL_PARALLEL])
                          for k in range(INSTALL_PARALLEL)]:
                    f.result()
        except BaseException:
            # nothing half-installed: this attempt's triggers and gate table go (bounded too; what cannot go
            # now carries this attempt's name, and the settler or the next attempt removes it)
            try:
                self.remove()
            except Exception:  # noqa: BLE001 - the install's own error is the one to raise
                pass
            raise

    def _create_sql(self, db: str, table: str, name: str, gate: str | None = None) -> str:
        event = next(ev for ev, letter in EVENTS if name.endswith(f"_{letter}"))
        return (f"{TAG}CREATE TRIGGER IF NOT EXISTS {qualified(db, name)} BEFORE {event} ON {qualified(db, table)} "
                "FOR EACH ROW BEGIN DECLARE n INT; "
                f"SELECT COUNT(*) INTO n FROM {qualified(GATE_SCHEMA, gate or self.gate)}; END")

    def _run_on(self, conn: pymysql.connections.Connection,
                statements: Sequence[tuple[str, str, str, str]], *, owned: bool = False) -> None:
        """``(db, table, what, sql)`` statements that lock their table, each bounded
        (:func:`~migrator.engine.mdl.run_locking`); the cost is added to :attr:`lock_attempts`. ``owned``:
        each only while the attempt holds its lease (:meth:`_own`)."""
        mine = Attempts()
        try:
            for db, table, what, sql in statements:
                if owned:
                    self._own()  # each trigger made only while the attempt holds its lease
                run_locking(conn, sql, tables=[(db, table)], server=self.host.name, wait=self.lock_wait,
                            what=f"{what} on {db}.{table}", attempts=mine, side=self._watch_connection)
        finally:
            with self._attempts_lock:
                self.lock_attempts.add(mine)

    def _watch_connection(self) -> pymysql.connections.Connection:
        """A connection that watches the process list beside a try longer than the bound (a CREATE TRIGGER
        on a table of many partitions): :func:`~migrator.engine.mdl.run_locking` interrupts the try when a
        client queues behind it."""
        return mark_own(mysql_connect(self.host, self.credentials, read_timeout=30))

    def _run_on_own_session(self, statements: Sequence[tuple[str, str, str, str]]) -> None:
        """The install's statements on a session of their own (each while the attempt holds its lease)."""
        conn = mark_own(mysql_connect(self.host, self.credentials, read_timeout=600))
        try:
            with conn.cursor() as cur:
                cur.execute(f"{TAG}SET SESSION sql_log_bin = 0")
            self._run_on(conn, statements, owned=True)
        finally:
            conn.close()

    def _drop_triggers(self, triggers: set[tuple[str, str, str]],
                       conn: pymysql.connections.Connection | None = None) -> None:
        """DROP TRIGGER IF EXISTS each ``(db, trigger, table)``, bounded."""
        conn = conn or self.conn
        if conn is None:
            self.open()
            conn = self.conn
        assert conn is not None
        self._run_on(conn, [(db, table, "the write gate's DROP TRIGGER", f"{TAG}DROP TRIGGER IF EXISTS "
                             f"{qualified(db, name)}") for db, name, table in sorted(triggers)])

    def _existing_triggers(self, conn: pymysql.connections.Connection | None = None) -> set[tuple[str, str, str]]:
        """(schema, trigger, table) of this gate's triggers on the member: this attempt's, or with
        ``attempt=""`` every attempt's of the migration."""
        conn = conn or self.conn
        assert conn is not None
        dbs = sorted({db for db, _ in self.tables})
        marks = ", ".join(["%s"] * len(dbs))
        rows = query(conn, "SELECT TRIGGER_SCHEMA, TRIGGER_NAME, EVENT_OBJECT_TABLE FROM information_schema.TRIGGERS "
                           f"WHERE TRIGGER_SCHEMA IN ({marks}) AND TRIGGER_NAME LIKE %s",
                     (*dbs, f"{_like(TRIGGER_PREFIX + self.suffix)}\\_%"))
        return {(r[0], r[1], r[2]) for r in rows}

    def _gate_tables(self) -> list[str]:
        """This gate's gate tables on the member (with ``attempt=""``: every attempt's)."""
        assert self.conn is not None
        if self.attempt:
            rows = query(self.conn, "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
                                    "AND TABLE_NAME = %s", (GATE_SCHEMA, self.gate))
        else:
            rows = query(self.conn, "SELECT TABLE_NAME FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s "
                                    "AND (TABLE_NAME = %s OR TABLE_NAME LIKE %s)",
                         (GATE_SCHEMA, self.gate, f"{_like(self.gate)}\\_%"))
        return sorted(r[0] for r in rows)

    def installed(self) -> bool:
        """Any of this gate's triggers, or its gate table, on the member."""
        return bool(self._existing_triggers()) or self.gate_exists()

    def gate_exists(self) -> bool:
        return bool(self._gate_tables())

    # -- in the freeze -----------------------------------------------------------------
    def shut(self, timeout: float) -> GtidPos:
        """Drop the gate: every client write on the moving tables fails from now on.

        Returns the member's own last transactions (:func:`own_gtids`), which include every write it
        accepted: what the master must apply before its fence.
        """
        with self._state:
            if self.aborted:
                raise GateError(f"the gate on {self.host.name} was reopened; not closing it", phase=self.phase)
            self._closing = True
        try:
            gates = [self.gate] if self.attempt else (self._gate_tables() or [self.gate])
            with self._cur() as cur:
                cur.execute(f"{TAG}SET SESSION lock_wait_timeout = {max(1, int(timeout + 0.999))}")
                cur.execute(f"{TAG}DROP TABLE IF EXISTS " + ", ".join(qualified(GATE_SCHEMA, g) for g in gates))
            assert self.conn is not None
            own = own_gtids(self.conn)
        except pymysql.err.MySQLError as exc:
            if self.aborted:
                raise GateError(f"the gate on {self.host.name} was reopened while closing",
                                       phase=self.phase) from None
            raise GateError(f"could not close the gate on {self.host.name} within {timeout:.1f}s "
                                   f"({exc.args[-1]}): a long transaction holds a moving table there; retry "
                                   "the cutover when it is gone", phase=self.phase) from None
        finally:
            with self._state:
                self._closing = False
        self.closed_at = own
        return own

    def reopen(self) -> None:
        """Undo :meth:`shut` (the cutover stopped before the flip): clients may write again.

        Safe from another thread at any moment: a close still in flight has its
        connection killed first, so it cannot drop the gate after this returns.
        """
        with self._state:
            self.aborted = True
            closing = self._closing
        # the connection opened ahead for this (no connect inside a freeze's undo), else a new one
        side = take_spare(self, "_spare") or mysql_connect(self.host, self.credentials, read_timeout=30)
        with side, side.cursor() as cur:
            cur.execute(f"{TAG}SET SESSION sql_log_bin = 0")
            if closing and self.conn_id is not None:
                if (exc := kill_connection(cur, int(self.conn_id), TAG)) is not None:
                    raise GateError(
                        f"could not kill the closing gate connection on {self.host.name} (thread "
                        f"{self.conn_id}): {exc.args[-1]}; kill it by hand, then retry", phase=self.phase)
                # a killed DROP granted its lock before its thread woke still runs: the gate tables are made
                # again only once it has ended
                if wait_connections_gone(cur, [int(self.conn_id)], timeout=10):
                    raise GateError(f"the closing gate connection on {self.host.name} (thread {self.conn_id}) "
                                    "did not end after its KILL; kill it by hand, then retry", phase=self.phase)
                self.conn = None
            cur.execute(f"{TAG}CREATE DATABASE IF NOT EXISTS {ident(GATE_SCHEMA)}")
            for gate in self._gates_read(side):
                cur.execute(f"{TAG}CREATE TABLE IF NOT EXISTS {qualified(GATE_SCHEMA, gate)} "
                            "(open TINYINT NOT NULL) ENGINE=MEMORY")

    def _gates_read(self, conn: pymysql.connections.Connection) -> list[str]:
        """The gate tables this gate's triggers read: its own, or with ``attempt=""`` every attempt's."""
        if self.attempt:
            return [self.gate]
        return sorted({gate_of_trigger(name) for _, name, _ in self._existing_triggers(conn)} | {self.gate})

    # -- after the flip -----------------------------------------------------------------
    def finish(self, peer_gtids: GtidPos | str, timeout: float = 60.0, *, log_renames: bool = False) -> None:
        """Rename the member's moving tables to the tombstones, once it has every row of its peer.

        ``peer_gtids``: the peer's own transactions up to its fence (:func:`own_gtids` read on the peer
        after the fence's sentinel): the member applies them before anything is renamed.

        The gate stays closed throughout: the triggers are dropped under the
        rename fence's lock, so no client write gets in between. At most
        :data:`~migrator.engine.cutover.rename_fence.MAX_TABLES` tables at a time (one
        connection each); the rest stay closed by the gate meanwhile.
        ``log_renames``: binlog the renames (the master of a pair whose partner is not gated).
        """
        if self.conn is None:
            self.open()
        deadline = time.monotonic() + timeout
        if not wait_applied(self.conn, peer_gtids, timeout):  # type: ignore[arg-type]
            raise GateError(
                f"{self.host.name} did not apply its peer's writes up to the fence ({peer_gtids}) within "
                f"{timeout:.0f}s; its moving tables stay closed (gate dropped); run `migrator cutover ID` again "
                "to finish", phase=self.phase)
        live = self._live_tables()
        todo = [(db, t) for db, t in self.tables if (db, t) in live]
        triggers: dict[tuple[str, str], list[str]] = {}
        if todo:
            for db, name, table in self._existing_triggers():
                triggers.setdefault((db, table), []).append(name)
            with self._cur() as cur:
                for tomb in sorted({self.tomb_db_of[db] for db, _ in todo}):
                    cur.execute(f"{TAG}CREATE DATABASE IF NOT EXISTS {ident(tomb)}")
        for k in range(0, len(todo), MAX_TABLES):
            left = max(1.0, deadline - time.monotonic())
            self._rename_group(todo[k:k + MAX_TABLES], triggers, left, log_renames)
        self.drop_triggers_of_renamed()
        self._triggers_gone()

    def _rename_group(self, tables: list[tuple[str, str]], triggers: dict[tuple[str, str], list[str]],
                      timeout: float, log_renames: bool) -> None:
        deadline = time.monotonic() + timeout
        moves = [Move(db, t, self.tomb_db_of[db]) for db, t in tables]
        fence = Fence(self.host, self.credentials, moves, log_lock=False, log_renames=log_renames, phase=self.phase,
                      lock_wait_timeout=timeout, lock_wait=self.lock_wait).open()
        dropped: list[tuple[str, str, str]] = []  # (db, table, trigger) dropped under the lock
        try:
            fence.lock()
            assert fence.a is not None
            with fence.a.cursor() as cur:
                for db, t in tables:
                    for name in sorted(triggers.get((db, t), [])):
                        cur.execute(f"{TAG}DROP TRIGGER IF EXISTS {qualified(db, name)}")
                        dropped.append((db, t, name))
            fence.queue_rename(timeout=max(1.0, deadline - time.monotonic()))
            fence.release(timeout=max(1.0, deadline - time.monotonic()))
        except BaseException as exc:
            # the tables are still live: they must not be left without their triggers (a stale writer
            # would get in after the flip). Put them back under the lock while it holds, then let go
            renamed = {(r.move.db, r.move.table) for r in fence.renamers if r.renamed}
            live = [d for d in dropped if (d[0], d[1]) not in renamed]
            if live:
                self._restore_triggers(fence.a if fence.locked else None, live, exc)
            fence.abort(rename_back=False)  # after the flip: a table renamed stays fenced in its tombstone
            raise
        finally:
            fence.close()

    def _restore_triggers(self, conn: pymysql.connections.Connection | None, dropped: list[tuple[str, str, str]],
                          failure: BaseException) -> None:
        """Create again the triggers a failed rename batch dropped (on the fence's lock connection while it
        lives, else on a new one: then a writer may have got in between, which the error says)."""
        lost_lock = conn is None or not conn.open
        try:
            if lost_lock:
                conn = mysql_connect(self.host, self.credentials, read_timeout=30)
            assert conn is not None
            with conn.cursor() as cur:
                cur.execute(f"{TAG}SET SESSION sql_log_bin = 0")
            # under the fence's lock these wait for nothing; on a new connection each is bounded
            self._run_on(conn, [(db, table, "the write gate's CREATE TRIGGER (put back)",
                                 self._create_sql(db, table, name, gate_of_trigger(name)))
                                for db, table, name in dropped])
        except Exception as exc:  # noqa: BLE001 - added to the rename's own error, which is raised
            note = (f"the gate's triggers on {self.host.name} could not be put back after the failed rename "
                    f"({type(exc).__name__}: {exc}): its moving tables take client writes; run `migrator cutover "
                    "ID` again at once to finish")
            if isinstance(failure, MigratorError):
                failure.message = f"{failure.message}; {note}"
            else:
                failure.add_note(note)
            return
        finally:
            if lost_lock and conn is not None:
                conn.close()
        if lost_lock:
            note = (f"the rename fence's lock on {self.host.name} was gone when its triggers were put back: a "
                    "client write may have reached its moving tables in between")
            if isinstance(failure, MigratorError):
                failure.message = f"{failure.message}; {note}"
            else:
                failure.add_note(note)

    def _relink(self, triggers: set[tuple[str, str, str]]) -> None:
        """Make the triggers still listed after their DROP droppable again: rename each one's table to a spare
        name and back in one statement (clients never miss the table; not binlogged).

        A trigger that its table's trigger list (``.TRG``) holds but whose name file (``.TRN``) is gone is
        listed in information_schema, fires, and keeps a RENAME out of its schema (1435), yet ``DROP TRIGGER IF
        EXISTS`` only notes 1360 "Trigger does not exist" and leaves it (seen on MariaDB 10.11 after an undone
        host-split batch: its settle failed for 10 minutes). A RENAME writes every name file of the table's
        triggers again, after which the DROP works; on a table whose triggers are whole it changes nothing."""
        assert self.conn is not None
        todo = []
        for db, table in sorted({(db, table) for db, _, table in triggers}):
            spare = f"_mgrelink_{hashlib.sha1(table.encode()).hexdigest()[:8]}"
            todo.append((db, table, "the write gate's relinking RENAME",
                         f"{TAG}RENAME TABLE {qualified(db, table)} TO {qualified(db, spare)}, "
                         f"{qualified(db, spare)} TO {qualified(db, table)}"))
        self._run_on(self.conn, todo)

    def drop_triggers_of_renamed(self) -> None:
        """Triggers left on tables already renamed (a finish that died midway)."""
        self._drop_triggers(self._existing_triggers())

    def _live_tables(self) -> set[tuple[str, str]]:
        assert self.conn is not None
        dbs = sorted({db for db, _ in self.tables})
        marks = ", ".join(["%s"] * len(dbs))
        return {(r[0], r[1]) for r in query(self.conn,
                                            f"SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
                                            f"WHERE TABLE_SCHEMA IN ({marks}) AND TABLE_TYPE = 'BASE TABLE'", dbs)}

    # -- removal --------------------------------------------------------------------------
    def remove(self) -> None:
        """Drop the triggers and the gate: the member is as it was before the cutover prepared it.

        Only for a gate that is open, or whose cutover was undone (never after a flip:
        then :meth:`finish`). The triggers go first: from then on no client statement reads the gate, so
        its DROP waits only for transactions that fired a trigger before. A trigger found after the gate
        table went (made meanwhile by an attempt that lost its lease, its statement already sent) gets its
        gate table back, open, so no client write fails on a missing table, and the removal goes again."""
        if self.conn is None:
            self.open()
        for _ in range(REMOVE_ROUNDS):
            self._drop_triggers(self._existing_triggers())
            gates = [self.gate] if self.attempt else (self._gate_tables() or [self.gate])
            self._run_on(self.conn, [(GATE_SCHEMA, g, "the write gate's DROP TABLE",  # type: ignore[arg-type]
                                      f"{TAG}DROP TABLE IF EXISTS {qualified(GATE_SCHEMA, g)}") for g in gates])
            left = self._existing_triggers()
            if not left:
                self._triggers_gone()
                return
            self._relink(left)
            with self._cur() as cur:
                for gate in sorted({gate_of_trigger(name) for _, name, _ in left}):
                    cur.execute(f"{TAG}CREATE TABLE IF NOT EXISTS {qualified(GATE_SCHEMA, gate)} "
                                "(open TINYINT NOT NULL) ENGINE=MEMORY")
            time.sleep(REMOVE_PAUSE_S)
        raise GateError(f"triggers of the write gate on {self.host.name} came back while it was removed (an "
                        "attempt that lost its lease still installing, or a trigger the server lists but cannot drop "
                        "even after a relinking RENAME of its table): their gate tables are kept, open; the next "
                        "settle removes them", phase=self.phase)
