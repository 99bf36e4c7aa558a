"""Preflight: everything that must hold before the copy touches the target.

Runs in the CLI process (``migrator preflight ID``) and automatically at the
start of the copy step (in an RQ worker). It only reads: server variables,
replication status, grants, table keys, the shard map. Each problem is one
line that says what is wrong, where, and what to do; the result is a
structured :class:`PreflightResult` the CLI prints and playbooks gate on.

Checks (source = the source pair's master, target = the target pair):

* binlog: ``log_bin``, ``binlog_format=ROW``, ``binlog_row_image=FULL``,
  ``binlog_row_metadata=FULL`` on all four hosts (the passive members' writes
  reach the masters' binlogs through replication; the target pair's binlog is
  what a rollback reads), ``log_slave_updates`` on all four (whether a member
  has applied its partner's writes is read from its binlog state:
  :func:`migrator.fleet.mysql.wait_applied`);
* distinct ``server_id`` on the four hosts; GTID position readable;
* binlog retention longer than the estimated copy;
* every moving table has a primary key (or a NOT NULL unique key);
* every moving table is transactional (:func:`_check_engines` says why the
  others are refused);
* no foreign key of a moving table has an action (``CASCADE``, ``SET NULL``,
  ``SET DEFAULT``), and none crosses the moving set (:func:`_check_foreign_keys`);
* no trigger or event in the moving shards (they are not carried), and the
  views and routines (which the copy carries) can be created on the target:
  privileges, DEFINER accounts (:mod:`migrator.engine.objects`);
* the target pair replicates both ways with lag under the threshold;
* the target holds none of the moving databases (or, for a partition move,
  not the moving table);
* the source is the active master of every moving shard in the shard map;
* the migration user has the grants it needs; grants beyond them are warnings;
* every member a later step writes to takes the migration user's writes
  (:func:`_check_writable`): not ``read_only`` unless the user holds ``READ_ONLY
  ADMIN`` there, no ``super_read_only``, no read-only transactions by default.
  Those members are the two masters always, and the two passive members unless
  the option ``fence_passive`` is off: the cutover's write gate closes the source
  pair's passive member, a rollback's closes the target pair's. A gated member
  also needs the gate's grants (:data:`GATE_GRANTS`) and settings
  (:func:`_check_gate`);
* TLS: every host's certificate verifies against ``[mysql.tls]`` (one line for all
  the hosts that fail), and no host requires secure transport
  (``require_secure_transport=ON``) while no TLS is configured for it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import pymysql

from migrator.engine import inspector, objects
from migrator.engine.fencing import MAX_TABLES as FENCE_MAX_TABLES
from migrator.engine.fencing import FenceError, fence_mode
from migrator.engine.migration import Phase, Spec
from migrator.engine.plan import estimate, moving_tables, routed_to
from migrator.errors import ExitCode, MigratorError, MySQLUnavailable
from migrator.fleet.config import Credentials
from migrator.fleet.ids import shard_db
from migrator.fleet.model import Host
from migrator.fleet.mysql import MySQLTLSFailed, binlog_pos, connect, query, tag, tls_of
from migrator.fleet.shard_map import HostRegistry, ShardMapStore
from migrator.fleet.zk import ZK

T = tag("preflight")

#: the privileges the migration identity needs on every host, and why
REQUIRED_GRANTS: dict[str, str] = {
    "SELECT": "read rows (copy, verify)",
    "INSERT": "write rows on the target",
    "UPDATE": "apply row changes on the target",
    "DELETE": "apply row deletes on the target",
    "CREATE": "create the moving databases and tables on the target",
    "DROP": "drop target copies on abort and tombstones at cleanup",
    "ALTER": "carry AUTO_INCREMENT over; cutover renames",
    "INDEX": "carry index changes over",
    "LOCK TABLES": "the cutover write fence",
    "CREATE TEMPORARY TABLES": "verify's scratch tables",
    "RELOAD": "flush binary logs at cutover",
    "PROCESS": "see writers on the passive side and fence waiters",
    "REPLICATION SLAVE": "tail the source binlog",
    "BINLOG MONITOR": "read binlog positions (SHOW BINARY LOGS, GTIDs)",
    "SLAVE MONITOR": "read replication lag (SHOW SLAVE STATUS)",
    "REPLICATION SLAVE ADMIN": "wait for and steer replication at cutover and rollback",
    "CONNECTION ADMIN": "end stale writer connections at cutover",
    "TRIGGER": "close the moving tables on the passive side at cutover (its write gate)",
    "BINLOG ADMIN": "keep the fence's renames and the passive gate out of the binlog (sql_log_bin=0)",
}
#: what the write gate does on a pair's passive member (:mod:`migrator.engine.cutover.trigger_gate`), by
#: privilege: the triggers, the gate table and its schema, the renames to the tombstones under LOCK TABLES,
#: ``sql_log_bin=0``, the fence's sweeps of waiting clients, the replication check
GATE_GRANTS = ("SELECT", "INSERT", "CREATE", "DROP", "ALTER", "LOCK TABLES", "TRIGGER", "BINLOG ADMIN", "PROCESS",
               "CONNECTION ADMIN", "SLAVE MONITOR")
#: the privilege that lets a user write on a ``read_only`` server (MariaDB 10.11: SUPER no longer does, MDEV-29596);
#: never reported as more than the migration needs: a read_only member is why it is granted
READ_ONLY_ADMIN = "READ_ONLY ADMIN"
#: the privilege of the fast apply path (``BINLOG '<base64>'``, migrator.engine.catch_up.fast); without it every
#: tail stays on the row path: slower, as correct
FAST_APPLY_GRANT = "BINLOG REPLAY"
#: MariaDB spells some privileges two ways
GRANT_ALIASES = {
    "REPLICATION CLIENT": "BINLOG MONITOR",
    "REPLICA MONITOR": "SLAVE MONITOR",
    "REPLICATION REPLICA": "REPLICATION SLAVE",
    "REPLICATION REPLICA ADMIN": "REPLICATION SLAVE ADMIN",
}
GLOBAL_GRANT_RE = re.compile(r"^GRANT (.+?) ON \*\.\* TO ", re.S)


@dataclass
class Check:
    name: str
    ok: bool
    message: str
    severity: str = "error"  # error | warning | info

    def line(self) -> str:
        mark = "ok  " if self.ok else ("FAIL" if self.severity == "error" else "WARN")
        if self.ok and self.severity == "info":
            mark = "skip"
        return f"{mark} {self.name}: {self.message}"


@dataclass
class PreflightResult:
    migration: str
    checks: list[Check] = field(default_factory=list)

    def add(self, name: str, ok: bool, message: str, severity: str = "error") -> None:
        self.checks.append(Check(name, ok, message, severity))

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if not c.ok and c.severity == "error"]

    @property
    def warnings(self) -> list[Check]:
        return [c for c in self.checks if not c.ok and c.severity == "warning"]

    @property
    def ok(self) -> bool:
        return not self.failures

    def lines(self) -> list[str]:
        return [c.line() for c in self.checks]

    def as_dict(self) -> dict[str, Any]:
        return {"migration": self.migration, "ok": self.ok,
                "failures": [c.line() for c in self.failures], "warnings": [c.line() for c in self.warnings],
                "checks": [c.__dict__ for c in self.checks]}


class PreflightFailed(MigratorError):
    component = "preflight"
    exit_code = ExitCode.REFUSED

    def __init__(self, result: PreflightResult):
        n = len(result.failures)
        first = result.failures[0].line() if n else ""
        super().__init__(f"{n} preflight check(s) failed, first: {first}; run `migrator preflight "
                         f"{result.migration}` for all of them", phase="preflight")
        self.result = result


def parse_global_grants(rows: list[str]) -> set[str]:
    """The privileges granted ON *.* in ``SHOW GRANTS`` output (never logs the lines)."""
    privs: set[str] = set()
    for line in rows:
        m = GLOBAL_GRANT_RE.match(line)
        if not m:
            continue
        for p in m.group(1).split(","):
            p = p.strip().upper()
            if p == "ALL PRIVILEGES" or p == "ALL":
                privs.add("ALL PRIVILEGES")
            elif p and p != "USAGE":
                privs.add(GRANT_ALIASES.get(p, p))
    return privs


def grant_findings(privs: set[str]) -> tuple[list[str], list[str]]:
    """(missing, extra) against :data:`REQUIRED_GRANTS`."""
    if "ALL PRIVILEGES" in privs:
        return [], ["ALL PRIVILEGES"]
    missing = [p for p in REQUIRED_GRANTS if p not in privs]
    # the grants views and routines need are checked with them (migrator.engine.objects)
    extra = sorted(privs - set(REQUIRED_GRANTS) - set(objects.OBJECT_GRANTS) - {READ_ONLY_ADMIN, FAST_APPLY_GRANT})
    return missing, extra


def run(zk: ZK, spec: Spec, creds: Credentials, *, phase: Phase = Phase.PLANNED) -> PreflightResult:
    """Run every check; never raises for a failed check (the result says)."""
    res = PreflightResult(spec.id)
    hosts = HostRegistry(zk).all()
    roles = {"source master": spec.source_master, "source slave": spec.source_passive,
             "target master": spec.target_master, "target slave": spec.target_passive}
    conns: dict[str, pymysql.connections.Connection] = {}
    tls_failed: dict[str, MySQLTLSFailed] = {}
    try:
        for role, name in roles.items():
            if name not in hosts:
                res.add("hosts", False, f"{role} {name} is not in the host registry; register it or plan again")
                continue
            try:
                conns[role] = connect(hosts[name], creds, connect_timeout=5, read_timeout=30)
            except MySQLTLSFailed as exc:
                tls_failed[name] = exc
            except MySQLUnavailable as exc:
                res.add("hosts", False, f"{role} {name}: {exc.message}")
        if len(conns) == len(roles):
            res.add("hosts", True, "all four hosts answer")
        _check_tls(conns, roles, hosts, creds, tls_failed, res)
        _check_source_master(zk, spec, res)
        src = conns.get("source master")
        _check_binlog(conns, roles, res)
        if src is not None:
            _check_gtid(src, spec, res)
            _check_keys(src, spec, res)
            _check_engines(src, spec, res)
            _check_foreign_keys(src, spec, res)
            _check_retention(zk, src, spec, creds, res)
        if len(conns) == len(roles):
            _check_server_ids(conns, roles, res)
        _check_target_replication(conns, hosts, spec, res)
        for role, why in written_members(spec).items():
            if role in conns:
                _check_writable(conns[role], role, roles[role], why, res)
        if spec.options.fence_passive:
            for role in ("source slave", "target slave"):
                if role in conns:
                    _check_gate(conns[role], roles[role], res)
                    _check_gate_grants(conns[role], role, roles[role], res)
        _check_target_empty(conns, spec, res, phase)
        if "target master" in conns:
            _check_local_infile(conns["target master"], spec.target_master, res)
        for role in ("source master", "target master"):
            if role in conns:
                _check_grants(conns[role], roles[role], res)
        _check_apply_path(conns, roles, res)
        if src is not None:
            _check_objects(src, conns.get("target master"), spec, res)
    finally:
        for c in conns.values():
            try:
                c.close()
            except Exception:  # closing a broken connection is not a finding
                pass
    return res


def _check_source_master(zk: ZK, spec: Spec, res: PreflightResult) -> None:
    smap = ShardMapStore(zk).read()
    moving = spec.moving
    wrong: dict[str, list[int]] = {}
    for s in spec.shards:
        owner = moving.master_in(smap, s)
        if owner != spec.source_master:
            wrong.setdefault(owner, []).append(s)
    if not wrong:
        res.add("source is master", True, f"{spec.source_master} is the shard map's master of {moving.describe()}")
    for master, shards in sorted(wrong.items()):
        res.add("source is master", False,
                f"{spec.source_master} is not the active master of shards {_list(shards)}"
                f"{' (' + ', '.join(spec.tables) + ')' if moving.tables else ''}: the shard map names "
                f"{master}; abort this migration and plan again from the active master")
    frozen = [s for s in spec.shards if moving.frozen_in(smap, s)]
    if frozen:
        res.add("not frozen", False, f"shards {_list(frozen)} are frozen for a cutover; wait for it to finish")
    there = routed_to(smap, list(spec.shards), (spec.target_master, spec.target_passive)) if not moving.tables else []
    if there:
        res.add("routes", False, f"{spec.target_master}/{spec.target_passive} already serves {', '.join(there)} (a "
                "queue partition moved there on its own); abort this migration and pick another target pair, or "
                "move the partition elsewhere first")


def written_members(spec: Spec) -> dict[str, str]:
    """The members a later step of ``spec`` writes to (by role), and what writes there.

    The passive members only while the option ``fence_passive`` is on: without it no step writes
    to them (the masters' renames reach them through replication, which ``read_only`` lets through)."""
    members = {
        "source master": "the cutover's fence (the tombstone schemas and the renames to them), the sentinel rows, "
                         "a rollback's reverse tail and cleanup's drops",
        "target master": "the copy, catch-up, the cutover's sentinel checks and a rollback's fence",
    }
    if spec.options.fence_passive:
        members["source slave"] = "the cutover's write gate (a gate table, triggers, the renames to the tombstones)"
        members["target slave"] = "a rollback's write gate (a gate table, triggers, the renames to the tombstones)"
    return members


def _bypasses_read_only(privs: set[str], version: str) -> str | None:
    """The privilege that lets the migration user write on a read_only server, or None.

    ``READ_ONLY ADMIN`` (or ALL PRIVILEGES, which holds it). SUPER counts only before MariaDB 10.11,
    which split READ_ONLY ADMIN out of it (checked on 10.11: a SUPER user gets 1290 under read_only)."""
    if "ALL PRIVILEGES" in privs:
        return "ALL PRIVILEGES"
    if READ_ONLY_ADMIN in privs:
        return READ_ONLY_ADMIN
    m = re.match(r"(\d+)\.(\d+)", version)
    if "SUPER" in privs and m and (int(m.group(1)), int(m.group(2))) < (10, 11):
        return "SUPER"
    return None


def _check_writable(conn: pymysql.connections.Connection, role: str, name: str, why: str,
                    res: PreflightResult) -> None:
    """The member takes the migration user's writes: what ``why`` names would otherwise fail there, after
    hours of copy (a read_only passive member is a common master-master setting, and the cutover
    writes to it: its write gate)."""
    v = inspector.global_variables(conn, ["read_only", "super_read_only", "tx_read_only", "transaction_read_only",
                                          "version"])
    on = {k for k in ("read_only", "super_read_only", "tx_read_only", "transaction_read_only")
          if str(v.get(k, "OFF")).upper() in ("ON", "1")}
    bypass = None
    if "read_only" in on:
        privs = parse_global_grants([r[0] for r in query(conn, T + "SHOW GRANTS")])
        bypass = _bypasses_read_only(privs, str(v.get("version", "")))
        if bypass is None:
            res.add("writable", False,
                    f"read_only is ON on {role} {name} and the migration user has no {READ_ONLY_ADMIN} there: "
                    f"{why} would fail; SET GLOBAL read_only=0 on {name} (and in its config), or GRANT "
                    f"{READ_ONLY_ADMIN} ON *.* to the migration user there"
                    + (" (or, when no client can write there either, plan with the migration option "
                       "fence_passive=false)" if role.endswith("slave") else ""))
    for var in sorted(on - {"read_only"}):
        what = ("refuses every write, whatever the grants" if var == "super_read_only"
                else "makes every transaction read-only by default")
        res.add("writable", False, f"{var} is ON on {role} {name}, which {what}: {why} would fail; "
                f"SET GLOBAL {var}=0 on {name} (and in its config)")
    if not on:
        res.add("writable", True, f"{role} {name} takes the migration's writes")
    elif on == {"read_only"} and bypass is not None:
        res.add("writable", True, f"{role} {name} is read_only; the migration user writes there with {bypass}")


def _check_gate_grants(conn: pymysql.connections.Connection, role: str, name: str, res: PreflightResult) -> None:
    """The migration user holds what the write gate needs on a passive member (:data:`GATE_GRANTS`):
    grants are per server, and the masters' are checked by :func:`_check_grants`."""
    privs = parse_global_grants([r[0] for r in query(conn, T + "SHOW GRANTS")])
    missing = [] if "ALL PRIVILEGES" in privs else [p for p in GATE_GRANTS if p not in privs]
    for p in missing:
        res.add("grants", False, f"the migration user lacks {p} on {role} {name}, which the write gate needs there "
                f"(triggers, a gate table, the renames to the tombstones); GRANT {p} ON *.* to it there")
    if not missing:
        res.add("grants", True, f"the migration user can gate {name}")


def _check_gate(conn: pymysql.connections.Connection, name: str, res: PreflightResult, *,
                label: str = "passive gate") -> None:
    """The host can be closed by the cutover's trigger gate (see migrator.engine.cutover.trigger_gate)."""
    v = inspector.global_variables(conn, ["log_bin_trust_function_creators", "slave_run_triggers_for_rbr",
                                          "enforce_storage_engine"])
    ok = True
    engine = str(v.get("enforce_storage_engine") or "").upper()
    if engine and engine != "MEMORY":
        ok = False
        res.add(label, False, f"enforce_storage_engine is {engine} on {name}: the cutover's write gate there is a "
                "MEMORY table, which the server would refuse; SET GLOBAL enforce_storage_engine=NULL (and in its "
                "config)")
    if str(v.get("log_bin_trust_function_creators", "")).upper() != "ON":
        ok = False
        res.add(label, False, f"log_bin_trust_function_creators is OFF on {name}: the cutover closes "
                "the moving tables there with triggers, which then need SUPER; with ROW binlogs it is safe to set "
                "it ON (my.cnf and SET GLOBAL)")
    if str(v.get("slave_run_triggers_for_rbr", "NO")).upper() != "NO":
        ok = False
        res.add(label, False, f"slave_run_triggers_for_rbr is {v.get('slave_run_triggers_for_rbr')} on "
                f"{name}: the cutover's write gate would stop its replication; set it to NO")
    if ok:
        res.add(label, True, f"{name} can be closed to clients during the freeze")


#: what every pair member's binlog must be: catch-up decodes full row images by column name
BINLOG_SETTINGS = {"log_bin": "ON", "binlog_format": "ROW", "binlog_row_image": "FULL", "binlog_row_metadata": "FULL"}


def _check_binlog(conns: dict[str, pymysql.connections.Connection], roles: dict[str, str],
                  res: PreflightResult) -> None:
    """ROW binlogs with full images and metadata, and ``log_slave_updates``, on the four hosts.

    The passive members count as much as the masters: a write a client makes on a passive member reaches
    its master's binlog through replication (``log_slave_updates``), and a statement-format event from
    there would reach catch-up as a statement, not as rows; the target pair's binlog is what a rollback
    tails back. Every member needs ``log_slave_updates`` because every wait for a partner's writes (the
    passive member's before the fence and after the flip, the target standby's, cleanup's) reads the
    waiting member's binlog state, which holds the partner's transactions only when it logs them."""
    bad = False
    for role, conn in conns.items():
        want = dict(BINLOG_SETTINGS)
        want["log_slave_updates"] = "ON"
        v = inspector.global_variables(conn, list(want))
        for name, value in want.items():
            got = str(v.get(name, "")).upper()
            if got != value:
                bad = True
                res.add("binlog", False, f"{name} is {got or 'unset'} on {role} {roles[role]}; set {name}={value} "
                        "(my.cnf and SET GLOBAL) and reconnect writers")
    if not bad and conns:
        res.add("binlog", True, "ROW format, FULL row image and metadata, log_slave_updates on every member")


def _check_gtid(src: pymysql.connections.Connection, spec: Spec, res: PreflightResult) -> None:
    try:
        pos = binlog_pos(src)
        query(src, T + "SHOW BINARY LOGS")
        res.add("gtid", True, f"source position {pos or '(empty)'} readable")
    except pymysql.err.MySQLError as exc:
        res.add("gtid", False, f"cannot read the binlog position on {spec.source_master}: {exc.args[-1]}; "
                "grant BINLOG MONITOR")


def _check_keys(src: pymysql.connections.Connection, spec: Spec, res: PreflightResult) -> None:
    tables = moving_tables(src, spec)
    bad = []
    for db, t in tables:
        if spec.kind == "queue_partition" and not inspector.table_exists(src, db, t):
            res.add("tables", False, f"{db}.{t} does not exist on source {spec.source_master}")
            continue
        key, _ = inspector.copy_key(src, db, t)
        if not key:
            bad.append(f"{db}.{t}")
            res.add("primary keys", False, f"{db}.{t} has no primary key (nor a NOT NULL unique key); "
                    "add one: the copy and the binlog apply work by key")
    if spec.kind == "shards":
        missing = [db for db in spec.databases if not inspector.database_exists(src, db)]
        for db in missing:
            res.add("tables", False, f"database {db} does not exist on source {spec.source_master}")
    if not bad:
        res.add("primary keys", True, f"all {len(tables)} moving tables have a key")
    # what the cutover would refuse, refused now, before any copy
    try:
        mode = fence_mode(spec.options.fence, len(tables))
    except FenceError as exc:
        res.add("fence", False, exc.message)
        return
    if mode == "rename":
        res.add("fence", True, f"{len(tables)} moving tables: fenced by LOCK TABLES and one queued RENAME each")
        return
    res.add("fence", True, f"{len(tables)} moving tables (more than the {FENCE_MAX_TABLES} of a rename fence): "
            "fenced by a write gate of triggers, renamed to the tombstones after the flip")
    res.add("prepared statements", False, f"the write gate's triggers make server-side prepared statements that "
            f"clients prepared before the cutover fail with 1146 on the moving tables of {spec.source_master} "
            "until they prepare them again (MariaDB MDEV-26048); clients that keep prepared statements should "
            f"move at most {FENCE_MAX_TABLES} tables at a time (fence=rename)", "warning")
    _check_gate(src, spec.source_master, res, label="master gate")


def _names(items: list[str], most: int = 10) -> str:
    return ", ".join(items[:most]) + (f" and {len(items) - most} more" if len(items) > most else "")


def _schemas_sql(dbs: list[str]) -> str:
    return ", ".join(["%s"] * len(dbs)) or "NULL"


def _check_engines(src: pymysql.connections.Connection, spec: Spec, res: PreflightResult) -> None:
    """Every moving table is transactional (InnoDB); Aria, MyISAM, MEMORY and the like are refused.

    Refused rather than handled, because what makes a move lossless rests on
    rolling writes on the target back whole: the copy loads a chunk in one
    target transaction and rolls it back when a value changed on the way;
    catch-up's lanes and verify's repairs roll back a batch that lost a deadlock
    and write it again; fencing a stale applier (DESIGN.md, section 8) means its
    transaction finds its token gone and rolls back. On a non-transactional table
    each of these keeps the part that ran. A MEMORY table also empties when its
    server restarts, a change no row event carries, on the source or on the
    target. Converting the table (``ALTER TABLE .. ENGINE=InnoDB``) is one
    statement; carrying each engine's own ways of losing rows would not be.
    """
    moving = set(moving_tables(src, spec))
    dbs = sorted({db for db, _ in moving})
    rows = query(src, T + "SELECT t.TABLE_SCHEMA, t.TABLE_NAME, t.ENGINE FROM information_schema.TABLES t "
                 "LEFT JOIN information_schema.ENGINES e ON e.ENGINE = t.ENGINE "
                 f"WHERE t.TABLE_SCHEMA IN ({_schemas_sql(dbs)}) AND t.TABLE_TYPE = 'BASE TABLE' "
                 "AND COALESCE(e.TRANSACTIONS, 'NO') <> 'YES' ORDER BY 1, 2", dbs)
    by_engine: dict[str, list[str]] = {}
    for db, table, engine in rows:
        if (db, table) in moving:
            by_engine.setdefault(engine or "unknown", []).append(f"{db}.{table}")
    for engine, names in sorted(by_engine.items()):
        first = names[0].split(".", 1)
        res.add("transactional tables", False,
                f"{len(names)} moving table(s) use {engine}, which is not transactional: {_names(names)}; "
                f"convert them (ALTER TABLE `{first[0]}`.`{first[1]}` ENGINE=InnoDB, and the same for each) or "
                "keep them out of the shards, then plan again: the copy, catch-up and the cutover's fence "
                "need transactions to lose nothing")
    if not by_engine:
        res.add("transactional tables", True, f"all {len(moving)} moving tables are transactional")


#: foreign-key rules that never change another row (the only ones a move can carry)
INERT_RULES = frozenset({"RESTRICT", "NO ACTION"})


def _check_foreign_keys(src: pymysql.connections.Connection, spec: Spec, res: PreflightResult) -> None:
    """No moving table has a foreign key with an action, and no foreign key crosses the moving set.

    An action (``ON DELETE/UPDATE CASCADE``, ``SET NULL``, ``SET DEFAULT``)
    changes the child rows inside the server: MariaDB's row binlog holds the
    parent's change only, and the copy, catch-up and repairs write with
    ``foreign_key_checks=0`` (rows arrive in any order), so the target would
    keep children the source removed. A key between a moving table and one that
    stays (another schema, or a table a queue-partition move leaves behind)
    would reference a table on another pair after the flip. Keys with
    ``RESTRICT``/``NO ACTION`` inside the moving set only check, never write:
    they move with their tables.
    """
    moving = set(moving_tables(src, spec))
    dbs = sorted({db for db, _ in moving})
    marks = _schemas_sql(dbs)
    rows = query(src, T + "SELECT CONSTRAINT_SCHEMA, CONSTRAINT_NAME, TABLE_NAME, UNIQUE_CONSTRAINT_SCHEMA, "
                 "REFERENCED_TABLE_NAME, UPDATE_RULE, DELETE_RULE FROM information_schema.REFERENTIAL_CONSTRAINTS "
                 f"WHERE CONSTRAINT_SCHEMA IN ({marks}) OR UNIQUE_CONSTRAINT_SCHEMA IN ({marks}) ORDER BY 1, 3, 2",
                 dbs + dbs)
    bad = 0
    for schema, name, table, ref_schema, ref_table, on_update, on_delete in rows:
        child, parent = (schema, table), (ref_schema, ref_table)
        if child not in moving and parent not in moving:
            continue
        what = f"foreign key `{name}` of {schema}.{table} on {ref_schema}.{ref_table}"
        actions = [f"ON {verb} {rule}" for verb, rule in (("DELETE", on_delete), ("UPDATE", on_update))
                   if rule not in INERT_RULES]
        if actions and child in moving:
            bad += 1
            res.add("foreign keys", False,
                    f"{what} has {' and '.join(actions)}: the server changes {schema}.{table} for it without row "
                    "events, so the target would keep rows the source removed or changed; drop the constraint "
                    f"(ALTER TABLE `{schema}`.`{table}` DROP FOREIGN KEY `{name}`) or make it RESTRICT and "
                    "change the child rows in the application, then plan again")
        if (child in moving) != (parent in moving):
            bad += 1
            stays = parent if child in moving else child
            res.add("foreign keys", False,
                    f"{what} crosses the moving set: {stays[0]}.{stays[1]} does not move, so after the move the "
                    "key would join tables on two pairs; move both tables together (or neither), or drop the "
                    f"constraint (ALTER TABLE `{schema}`.`{table}` DROP FOREIGN KEY `{name}`), then plan again")
    if not bad:
        n = sum(1 for r in rows if (r[0], r[2]) in moving)
        res.add("foreign keys", True, f"{n} foreign key(s) of moving tables, all RESTRICT/NO ACTION inside the "
                "moving set" if n else "no foreign key on a moving table")


def _check_retention(zk: ZK, src: pymysql.connections.Connection, spec: Spec, creds: Credentials,
                     res: PreflightResult) -> None:
    v = inspector.global_variables(src, ["binlog_expire_logs_seconds", "expire_logs_days"])
    secs = float(v.get("binlog_expire_logs_seconds") or 0)
    if not secs:
        secs = float(v.get("expire_logs_days") or 0) * 86400
    if not secs:
        res.add("binlog retention", True, "binlogs never expire on the source")
        return
    try:
        est = estimate(zk, spec, creds)
        eta = est.eta_s
    except MigratorError as exc:
        res.add("binlog retention", False, f"cannot estimate the copy time: {exc.message}", "warning")
        return
    if eta >= secs:
        res.add("binlog retention", False,
                f"binlogs expire after {secs / 3600:.1f}h on {spec.source_master} but the copy is estimated at "
                f"{eta / 3600:.1f}h; raise binlog_expire_logs_seconds above the copy time")
    else:
        res.add("binlog retention", True, f"binlogs kept {secs / 3600:.1f}h, copy estimated {eta:.0f}s")


def _check_server_ids(conns: dict[str, pymysql.connections.Connection], roles: dict[str, str],
                      res: PreflightResult) -> None:
    ids: dict[int, list[str]] = {}
    for role, c in conns.items():
        sid = int(query(c, T + "SELECT @@server_id")[0][0])
        ids.setdefault(sid, []).append(f"{roles[role]} ({role})")
    dup = {k: v for k, v in ids.items() if len(v) > 1}
    for sid, who in dup.items():
        res.add("server ids", False, f"server_id {sid} is shared by {' and '.join(who)}; give each host its own")
    if not dup:
        res.add("server ids", True, "distinct on all four hosts")


def _check_target_replication(conns: dict[str, pymysql.connections.Connection], hosts: dict[str, Host],
                              spec: Spec, res: PreflightResult) -> None:
    ok = True
    for role, peer in (("target master", spec.target_passive), ("target slave", spec.target_master)):
        c = conns.get(role)
        if c is None:
            continue
        name = spec.target_master if role == "target master" else spec.target_passive
        st = inspector.slave_status(c)
        if not st:
            ok = False
            res.add("target replication", False, f"{name} does not replicate from {peer}; set up master-master "
                    "replication on the target pair first")
            continue
        if peer in hosts and int(st.get("Master_Port") or 0) != hosts[peer].port:
            ok = False
            res.add("target replication", False, f"{name} replicates from port {st.get('Master_Port')}, "
                    f"not from its partner {peer} (port {hosts[peer].port})")
        if st.get("Slave_IO_Running") != "Yes" or st.get("Slave_SQL_Running") != "Yes":
            ok = False
            err = st.get("Last_IO_Error") or st.get("Last_SQL_Error") or "stopped"
            res.add("target replication", False, f"{name} <- {peer} is not running (io={st.get('Slave_IO_Running')}"
                    f" sql={st.get('Slave_SQL_Running')}: {err}); fix it with START SLAVE")
            continue
        lag = st.get("Seconds_Behind_Master")
        if lag is None or float(lag) > spec.options.max_passive_lag_s:
            ok = False
            res.add("target replication", False, f"{name} lags {lag}s behind {peer} "
                    f"(threshold {spec.options.max_passive_lag_s:g}s); wait for it to catch up")
    if ok and "target master" in conns and "target slave" in conns:
        res.add("target replication", True, f"{spec.target_master} <-> {spec.target_passive} both ways, lag in bounds")


def _check_target_empty(conns: dict[str, pymysql.connections.Connection], spec: Spec, res: PreflightResult,
                        phase: Phase) -> None:
    if phase not in (Phase.PLANNED, Phase.PREFLIGHT):
        res.add("target empty", True, f"skipped: the copy already started (phase {phase.value})", "info")
        return
    found = []
    for role in ("target master", "target slave"):
        c = conns.get(role)
        if c is None:
            continue
        name = spec.target_master if role == "target master" else spec.target_passive
        if spec.kind == "queue_partition":
            db = shard_db(spec.shards[0])
            for t in spec.tables:
                if inspector.table_exists(c, db, t):
                    found.append(f"{db}.{t} on {name}")
        else:
            for db in spec.databases:
                if inspector.database_exists(c, db):
                    found.append(f"{db} on {name}")
    for f in found:
        res.add("target empty", False, f"the target already holds {f}; drop it (if it is a stale copy) or pick "
                "another target")
    if not found:
        res.add("target empty", True, "the target holds none of the moving data")


def _check_objects(src: pymysql.connections.Connection, tgt: pymysql.connections.Connection | None, spec: Spec,
                   res: PreflightResult) -> None:
    if spec.kind == "queue_partition":
        dbs = [shard_db(spec.shards[0])]
        tables: set[tuple[str, str]] | None = {(dbs[0], t) for t in spec.tables}
    else:
        dbs, tables = [db for db in spec.databases if inspector.database_exists(src, db)], None
    privs = parse_global_grants([r[0] for r in query(tgt, T + "SHOW GRANTS")]) if tgt is not None else set()
    problems = objects.findings(src, tgt, dbs, tables, privs)
    for p in problems:
        res.add("schema objects", False, p)
    if not problems:
        res.add("schema objects", True, "no trigger or event; views and routines can be created on the target")


def _check_local_infile(c: pymysql.connections.Connection, name: str, res: PreflightResult) -> None:
    """The copy loads chunks with LOAD DATA LOCAL INFILE: the target master must allow it."""
    value = str(query(c, T + "SELECT @@global.local_infile")[0][0])
    if value not in ("1", "ON"):
        res.add("local_infile", False, f"{name} refuses LOAD DATA LOCAL (local_infile=OFF), which the copy loads "
                f"chunks with; SET GLOBAL local_infile = ON on {name} (and in its config file)")
    else:
        res.add("local_infile", True, f"{name} accepts LOAD DATA LOCAL")


def _check_grants(c: pymysql.connections.Connection, name: str, res: PreflightResult) -> None:
    rows = [r[0] for r in query(c, T + "SHOW GRANTS")]
    missing, extra = grant_findings(parse_global_grants(rows))
    for p in missing:
        res.add("grants", False, f"the migration user lacks {p} on {name} (needed to {REQUIRED_GRANTS[p]}); "
                f"GRANT {p} ON *.* to it")
    if extra:
        res.add("grants", False, f"the migration user holds more than it needs on {name}: {', '.join(extra)}; "
                "consider revoking", "warning")
    if not missing:
        res.add("grants", True, f"the migration user has what it needs on {name}")


def _check_apply_path(conns: dict[str, pymysql.connections.Connection], roles: dict[str, str],
                      res: PreflightResult) -> None:
    """Which apply path catch-up will take, said plainly: the fast path (the source's rows events through
    the target's own applier, from the verified position on) needs ``BINLOG REPLAY`` on the target master
    (and on the source master for a rollback's reverse tail) and a binlog checksum it knows (CRC32 or
    NONE) on the side it reads; otherwise the row path applies throughout (a warning, not a refusal)."""
    lacking = []
    for role in ("target master", "source master"):
        c = conns.get(role)
        if c is None:
            continue
        privs = parse_global_grants([r[0] for r in query(c, T + "SHOW GRANTS")])
        if "ALL PRIVILEGES" not in privs and FAST_APPLY_GRANT not in privs:
            lacking.append((role, roles[role]))
    odd = []
    for role in ("source master", "target master"):
        c = conns.get(role)
        if c is not None:
            alg = str(inspector.global_variables(c, ["binlog_checksum"]).get("binlog_checksum", "")).upper()
            if alg not in ("CRC32", "NONE"):
                odd.append(f"binlog_checksum={alg or 'unset'} on {role} {roles[role]}")
    if odd:
        res.add("apply_path", False, f"the row path will apply throughout ({'; '.join(odd)}: the fast path "
                "forwards CRC32 or unchecked events only)", "warning")
    elif lacking and lacking[0][0] == "target master":
        res.add("apply_path", False, f"the row path will apply throughout: the migration user lacks "
                f"{FAST_APPLY_GRANT} on {lacking[0][1]}; GRANT {FAST_APPLY_GRANT} ON *.* to it there for the "
                "fast path (the server applies the source's rows events itself once verify proved the copy equal)",
                "warning")
    elif lacking:
        res.add("apply_path", False, f"the fast path applies catch-up from the verified position on; a rollback's "
                f"reverse tail will take the row path: the migration user lacks {FAST_APPLY_GRANT} on "
                f"{lacking[0][1]} (GRANT {FAST_APPLY_GRANT} ON *.* to it there)", "warning")
    elif conns:
        res.add("apply_path", True, "the fast path applies catch-up from the verified position on "
                f"({FAST_APPLY_GRANT} held, binlog checksums known); the row path before it")


def _check_tls(conns: dict[str, pymysql.connections.Connection], roles: dict[str, str], hosts: dict[str, Host],
               creds: Credentials, failed: dict[str, MySQLTLSFailed], res: PreflightResult) -> None:
    """One line for the hosts whose TLS handshake failed (the first host's reason stands for all: they
    share the settings); one line for the hosts that require TLS while none is configured for them."""
    if failed:
        names = sorted(set(failed))
        first = failed[names[0]].message
        others = f" (and the same on {', '.join(names[1:])})" if len(names) > 1 else ""
        res.add("tls", False, f"{first}{others}")
    unset = []
    for role, c in conns.items():
        if tls_of(hosts[roles[role]], creds) is None:
            required = query(c, T + "SELECT @@global.require_secure_transport")[0][0]
            if str(required) in ("1", "ON"):
                unset.append(roles[role])
    if unset:
        res.add("tls", False, f"{', '.join(sorted(set(unset)))} require secure transport (require_secure_transport=ON) "
                "but the config sets no TLS for them: add [mysql.tls] with ca = the CA that signed their "
                "certificates (and cert/key for a client certificate)")
    elif not failed and conns:
        verified = [roles[r] for r in conns if tls_of(hosts[roles[r]], creds) is not None]
        res.add("tls", True, f"verified TLS to {', '.join(sorted(set(verified)))}" if verified
                else "no host requires TLS and none is configured", "info" if not verified else "error")


def _list(shards: list[int]) -> str:
    return ",".join(str(s) for s in sorted(shards))
