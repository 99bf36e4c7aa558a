"""The sandbox fleet: real MariaDB pairs, ZooKeeper and Redis from Debian packages.

No Docker. ``migrator sandbox up`` starts one ``mariadbd`` per host (pairs
``MySQL001A``/``MySQL001B``, ... replicating both ways with GTID), one
standalone ZooKeeper and one Redis, each on its own port and data dir under the
sandbox directory; registers the hosts and an even shard map in ZooKeeper; and
creates and seeds the shard databases on their owning masters. Spare pairs
start empty: they are split targets.

Everything the sandbox started is recorded in ``<dir>/state.json`` (process,
port, pid) and stopped by pid.

GTID layouts (``--gtid-layout``, fixed when the sandbox is created): the
fleets people run differ in how their servers number transactions, and every
guarantee must hold in each (:data:`GTID_LAYOUTS`). ``per-server`` gives every
server a domain of its own with ``gtid_strict_mode`` (what this sandbox did
first); ``shared`` is MariaDB's default: every server in domain 0, strict mode
off, so a pair member's binlog holds its partner's late transactions with lower
seq_nos than its own. ``--parallel-replication N`` turns on N optimistic
parallel applier threads on every pair link. :meth:`Sandbox.set_link_delay`
makes a member apply its partner's writes late (``MASTER_DELAY``): lag inside a
pair, on demand. The settings mirror ``docker-compose.yml``; keep
the two in step (``tests/unit/sandbox/test_compose_in_step.py`` checks it).

:mod:`.procs` starts nothing itself: it finds free ports and checks, and stops
by pid, the processes the sandbox recorded. :mod:`.reset` gives every test a
freshly seeded fleet on the shared sandbox.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import threading
import time
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pymysql

from migrator.errors import SandboxError, SandboxRefused
from migrator.fleet import config as config_mod
from migrator.fleet import zk as zk_mod
from migrator.fleet.config import Config, Credentials
from migrator.fleet.model import Host, ShardMap, even_layout, pair_names
from migrator.fleet.mysql import own_gtids, wait_applied
from migrator.fleet.shard_map import HostRegistry, ShardMapStore
from migrator.fleet.topology import create_shards
from migrator.sandbox.procs import (
    ZK_JAR_DIR,
    Proc,
    SandboxState,
    check_binaries,
    find_base_port,
    four_letter,
    pid_alive,
    port_free,
    read_state,
    reap,
    redis_ping,
    stop_pid,
)
from migrator.sandbox.reset import reset_fleet
from migrator.sandbox.tls import SandboxTLS

__all__ = ["GTID_LAYOUTS", "MARIADB_FLAGS", "MIGRATOR_GRANTS", "Sandbox", "find_base_port", "layout_flags", "port_free",
           "reset_fleet", "stop_pid"]

DEFAULT_DIR = Path(".sandbox")
DEFAULT_BASE_PORT = 33100

#: how the servers' GTID domains are laid out: what ``gtid_domain_id`` each server gets (from its server
#: id) and whether ``gtid_strict_mode`` is on
GTID_LAYOUTS: dict[str, str] = {
    "per-server": "a domain per server (gtid_domain_id = server_id), gtid_strict_mode on",
    "shared": "one domain for every server (gtid_domain_id = 0, MariaDB's default), gtid_strict_mode off",
}


def layout_flags(layout: str, server_id: int, parallel_threads: int = 0) -> dict[str, str | None]:
    """The mariadbd settings of one server in a GTID layout (docker-compose.yml runs ``per-server``)."""
    if layout not in GTID_LAYOUTS:
        raise SandboxError(f"unknown GTID layout {layout!r}: choose one of {', '.join(GTID_LAYOUTS)}")
    shared = layout == "shared"
    flags: dict[str, str | None] = {"gtid-domain-id": "0" if shared else str(server_id),
                                    "gtid-strict-mode": "0" if shared else "1"}
    if parallel_threads:
        flags["slave-parallel-threads"] = str(int(parallel_threads))
        flags["slave-parallel-mode"] = "optimistic"
    return flags


#: mariadbd settings every pair member gets, whatever the GTID layout (docker-compose.yml repeats them)
MARIADB_FLAGS: dict[str, str | None] = {
    "log-slave-updates": None,
    "binlog-format": "ROW",
    "binlog-row-image": "FULL",
    "binlog-row-metadata": "FULL",
    "auto-increment-increment": "2",
    "innodb-buffer-pool-size": "32M",
    "innodb-log-file-size": "16M",
    "max-binlog-size": "64M",
    "binlog-expire-logs-seconds": "604800",
    "skip-name-resolve": None,
    "performance-schema": "OFF",
    "character-set-server": "utf8mb4",
    "collation-server": "utf8mb4_general_ci",
    "max-connections": "500",
    # the passive-side write gate creates triggers; with ROW binlogs that is safe (no SUPER needed)
    "log-bin-trust-function-creators": "1",
    # information_schema.METADATA_LOCK_INFO: a freeze that waits for a lock names who holds it
    # (migrator/engine/cutover/blockers.py; without it the refusal names the open transactions)
    "plugin-load-add": "metadata_lock_info",
}

#: what the migration identity is granted on the sandbox (preflight checks for these)
MIGRATOR_GRANTS = (
    "SELECT, INSERT, UPDATE, DELETE, CREATE, DROP, ALTER, INDEX, LOCK TABLES, "
    "CREATE TEMPORARY TABLES, RELOAD, PROCESS, REPLICATION SLAVE, BINLOG MONITOR, "
    "SLAVE MONITOR, REPLICATION SLAVE ADMIN, CONNECTION ADMIN, TRIGGER, BINLOG ADMIN, "
    "SHOW VIEW, CREATE VIEW, CREATE ROUTINE, ALTER ROUTINE, BINLOG REPLAY"
)


class Sandbox:
    """A sandbox fleet rooted at one directory."""

    def __init__(self, directory: str | os.PathLike[str] = DEFAULT_DIR):
        self.dir = Path(directory).resolve()
        self.state_file = self.dir / "state.json"
        self.config_file = self.dir / "migrator.toml"
        self.secrets_file = self.dir / "secrets.toml"
        self.tls = SandboxTLS(self.dir / "tls")
        self.state: SandboxState | None = None
        if self.state_file.is_file():
            self.state = read_state(self.state_file)

    # -- layout ---------------------------------------------------------------
    def _layout(self, pairs: int, spare_pairs: int, base_port: int) -> dict[str, Proc]:
        procs: dict[str, Proc] = {}
        sid = 1
        for i in range(1, pairs + spare_pairs + 1):
            a, b = pair_names(i)
            for j, (name, partner) in enumerate(((a, b), (b, a))):
                procs[name] = Proc(
                    name=name,
                    kind="mariadb",
                    port=base_port + sid,
                    datadir=str(self.dir / name),
                    server_id=sid,
                    partner=partner,
                    offset=j + 1,
                    spare=i > pairs,
                )
                sid += 1
        procs["zookeeper"] = Proc("zookeeper", "zookeeper", base_port + 81, datadir=str(self.dir / "zookeeper"))
        procs["redis"] = Proc("redis", "redis", base_port + 91, datadir=str(self.dir / "redis"))
        return procs

    def mariadb_procs(self) -> list[Proc]:
        assert self.state
        return [p for p in self.state.procs.values() if p.kind == "mariadb"]

    def hosts(self) -> dict[str, Host]:
        return {
            p.name: Host(name=p.name, address="127.0.0.1", port=p.port, partner=p.partner or "")
            for p in self.mariadb_procs()
        }

    def pairs(self, *, spare: bool | None = None) -> list[tuple[str, str]]:
        out = []
        for p in self.mariadb_procs():
            if p.offset == 1 and (spare is None or p.spare == spare):
                out.append((p.name, p.partner or ""))
        return out

    def config(self) -> Config:
        return config_mod.load(self.config_file)

    def credentials(self) -> Credentials:
        return config_mod.load_credentials(self.config())

    def running(self) -> bool:
        return bool(self.state) and any(p.alive() for p in self.state.procs.values())  # type: ignore[union-attr]

    def made_here(self) -> bool:
        """This directory holds a sandbox this tool made: a state file that parses and names this very
        directory (a copied or moved sandbox, or a stray ``state.json``, is not recognised)."""
        return self.state is not None and Path(self.state.dir).resolve() == self.dir

    # -- up -----------------------------------------------------------------------
    def up(
        self,
        *,
        pairs: int = 2,
        spare_pairs: int = 1,
        shards: int = 16,
        rows: int = 100,
        base_port: int = DEFAULT_BASE_PORT,
        zk_root: str = "/migrator",
        tls: bool = True,
        gtid_layout: str = "per-server",
        parallel_threads: int = 0,
        log: Any = print,
    ) -> bool:
        """Start the fleet. Returns False (and changes nothing) if it already runs. With ``tls`` (a new
        sandbox only) MariaDB takes TLS connections only, with certificates of the sandbox's own CA.
        ``gtid_layout`` (:data:`GTID_LAYOUTS`) and ``parallel_threads`` (optimistic parallel appliers on
        every pair link, 0: one SQL thread) are fixed when the sandbox is created."""
        if self.state and all(p.alive() for p in self.state.procs.values()):
            log(f"sandbox in {self.dir} is already running; nothing to do (`migrator sandbox status`)")
            return False
        check_binaries()
        t0 = time.monotonic()
        if self.state is None:
            if self.dir.exists() and (not self.dir.is_dir() or any(self.dir.iterdir())):
                raise SandboxRefused(f"{self.dir} exists and holds no sandbox: a sandbox starts in an empty or "
                                     "new directory; pick another --dir")
            if pairs < 1 or spare_pairs < 0:
                raise SandboxError("--pairs must be at least 1 and --spare-pairs at least 0")
            if shards < pairs:
                raise SandboxError(f"--shards {shards} cannot be spread over {pairs} pairs")
            layout_flags(gtid_layout, 1, parallel_threads)  # an unknown layout is refused before anything
            if parallel_threads < 0:
                raise SandboxError("--parallel-replication must be 0 (off) or a number of threads")
            self.dir.mkdir(parents=True, exist_ok=True)
            self.state = SandboxState(
                dir=str(self.dir), base_port=base_port, pairs=pairs, spare_pairs=spare_pairs,
                shards=shards, rows=rows, procs=self._layout(pairs, spare_pairs, base_port), tls=tls,
                gtid_layout=gtid_layout, parallel_threads=parallel_threads,
            )
        busy = [p for p in self.state.procs.values() if not p.alive() and not port_free(p.port)]
        if busy:
            names = ", ".join(f"{p.name}:{p.port}" for p in busy)
            raise SandboxError(f"ports already in use: {names}; pick another --base-port or stop what holds them")
        self._write_secrets()
        if self.state.tls:
            self.tls.ensure()
        self._write_config(zk_root)
        self._save()
        dead = [p for p in self.mariadb_procs() if not p.alive()]
        fresh = [p for p in dead if not (Path(p.datadir) / "data" / "mysql").exists()]
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(self._install_mariadb, fresh))
            futs = [pool.submit(self._start_mariadb, p) for p in dead]
            if not self.state.procs["zookeeper"].alive():
                futs.append(pool.submit(self._start_zookeeper))
            if not self.state.procs["redis"].alive():
                futs.append(pool.submit(self._start_redis))
            for f in futs:
                f.result()
        self._save()
        for p in fresh:
            self._bootstrap_users(p)
        for p in fresh:
            self._start_replication(p)
        if not self.state.seeded:
            self._seed_fleet(zk_root, log)
            self.state.seeded = True
            self._save()
        log(f"sandbox up in {time.monotonic() - t0:.1f}s: {len(self.mariadb_procs())} MariaDB hosts, "
            f"ZooKeeper :{self.state.procs['zookeeper'].port}, Redis :{self.state.procs['redis'].port}; "
            f"config {self.config_file}")
        return True

    def _save(self) -> None:
        """Write the state file atomically; safe from several threads at once (hosts stopped or started
        together), each through a temporary file of its own."""
        assert self.state
        tmp = self.state_file.with_suffix(f".{os.getpid()}-{threading.get_ident()}.tmp")
        tmp.write_text(self.state.to_json())
        tmp.replace(self.state_file)

    def _write_secrets(self) -> None:
        if self.secrets_file.exists():
            return
        pw = secrets.token_urlsafe(18)
        zk = secrets.token_urlsafe(18)
        token = secrets.token_urlsafe(18)
        redis_pw = secrets.token_urlsafe(18)
        self.secrets_file.write_text(
            "# sandbox credentials: never copied into ZooKeeper, Redis, logs or job meta\n"
            f'[mysql]\nuser = "migrator"\npassword = "{pw}"\n\n'
            f'[zookeeper]\ndigest = "migrator:{zk}"\n\n'
            f'[queue]\ntoken = "{token}"\n\n'
            f'[redis]\npassword = "{redis_pw}"\n'
        )
        os.chmod(self.secrets_file, 0o600)

    def _write_config(self, zk_root: str) -> None:
        assert self.state
        cfg = Config(
            zookeeper={"hosts": f"127.0.0.1:{self.state.procs['zookeeper'].port}", "root": zk_root},  # type: ignore[arg-type]
            redis={"url": f"redis://127.0.0.1:{self.state.procs['redis'].port}/0"},  # type: ignore[arg-type]
            credentials={"file": "secrets.toml"},  # type: ignore[arg-type]
            queue={"listen": f"127.0.0.1:{self.state.base_port + 95}"},  # type: ignore[arg-type]
            mysql={"tls": self.tls.config_section() if self.state.tls else None},  # type: ignore[arg-type]
        )
        self.config_file.write_text(config_mod.dump(cfg))

    # -- MariaDB ----------------------------------------------------------------
    def _cnf(self, p: Proc) -> Path:
        d = Path(p.datadir)
        lines = [
            "[mariadbd]",
            "user=root",
            f"datadir={d / 'data'}",
            f"socket={d / 'mysqld.sock'}",
            f"pid-file={d / 'mysqld.pid'}",
            f"port={p.port}",
            "bind-address=127.0.0.1",
            f"tmpdir={d / 'tmp'}",
            f"log-error={d / 'error.log'}",
            f"server-id={p.server_id}",
            f"log-bin={d / 'binlog' / 'mysql-bin'}",
            f"relay-log={d / 'binlog' / 'relay-bin'}",
            f"auto-increment-offset={p.offset}",
        ]
        st = self.state
        flags = {**MARIADB_FLAGS, **layout_flags(st.gtid_layout if st else "per-server", p.server_id or 0,
                                                 st.parallel_threads if st else 0)}
        for k, v in flags.items():
            lines.append(k if v is None else f"{k}={v}")
        if self.state and self.state.tls:
            lines += self.tls.server_options()
        cnf = d / "my.cnf"
        cnf.write_text("\n".join(lines) + "\n")
        return cnf

    def _install_mariadb(self, p: Proc) -> None:
        d = Path(p.datadir)
        for sub in ("data", "tmp", "binlog"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        cnf = self._cnf(p)
        res = subprocess.run(
            ["mariadb-install-db", f"--defaults-file={cnf}", "--auth-root-authentication-method=normal",
             "--skip-test-db", "--skip-name-resolve"],
            capture_output=True, text=True,
        )
        if res.returncode != 0:
            raise SandboxError(f"mariadb-install-db for {p.name} failed: {res.stderr.strip()[-500:]}")

    def _start_mariadb(self, p: Proc) -> None:
        cnf = self._cnf(p)
        log = open(Path(p.datadir) / "stdout.log", "ab")
        proc = subprocess.Popen(
            ["mariadbd", f"--defaults-file={cnf}"], stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True,
        )
        p.pid = proc.pid
        self._wait(lambda: self._ping(p), f"{p.name} (mariadbd on :{p.port})", p, timeout=60)

    def root_conn(self, name: str, **kw: Any) -> pymysql.connections.Connection:
        """A root connection over the host's unix socket (sandbox admin only)."""
        assert self.state
        p = self.state.procs[name]
        # a unix socket is secure transport: no TLS on it (and no TLS context to build per connection)
        return pymysql.connect(unix_socket=str(Path(p.datadir) / "mysqld.sock"), user="root",
                               autocommit=True, connect_timeout=3, ssl_disabled=True, **kw)

    def _ping(self, p: Proc) -> bool:
        try:
            self.root_conn(p.name).close()
            return True
        except pymysql.err.MySQLError:
            return False

    def _bootstrap_users(self, p: Proc) -> None:
        creds = self.credentials()
        repl_pw = self._repl_password()
        with self.root_conn(p.name) as c, c.cursor() as cur:
            # not binlogged: each host creates its own users, so the peer never replays them
            cur.execute("SET sql_log_bin=0")
            cur.execute("CREATE USER IF NOT EXISTS %s@'%%' IDENTIFIED BY %s", (creds.mysql_user, creds.mysql_password))
            cur.execute(f"GRANT {MIGRATOR_GRANTS} ON *.* TO %s@'%%'", (creds.mysql_user,))
            cur.execute("CREATE USER IF NOT EXISTS 'repl'@'%%' IDENTIFIED BY %s", (repl_pw,))
            cur.execute("GRANT REPLICATION SLAVE ON *.* TO 'repl'@'%'")
            cur.execute("RESET MASTER")

    def _repl_password(self) -> str:
        f = self.dir / ".repl"
        if not f.exists():
            f.write_text(secrets.token_urlsafe(18))
            os.chmod(f, 0o600)
        return f.read_text().strip()

    def _start_replication(self, p: Proc) -> None:
        assert self.state
        peer = self.state.procs[p.partner or ""]
        ssl_sql, ssl_args = self.tls.change_master() if self.state.tls else ("", ())
        with self.root_conn(p.name) as c, c.cursor() as cur:
            cur.execute(
                "CHANGE MASTER TO MASTER_HOST='127.0.0.1', MASTER_PORT=%s, MASTER_USER='repl', "
                "MASTER_PASSWORD=%s, MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1" + ssl_sql,
                (peer.port, self._repl_password(), *ssl_args),
            )
            cur.execute("START SLAVE")

    # -- ZooKeeper and Redis ------------------------------------------------------
    def _start_zookeeper(self) -> None:
        assert self.state
        p = self.state.procs["zookeeper"]
        d = Path(p.datadir)
        (d / "data").mkdir(parents=True, exist_ok=True)
        cfg = d / "zoo.cfg"
        cfg.write_text(
            f"dataDir={d / 'data'}\nclientPort={p.port}\nclientPortAddress=127.0.0.1\n"
            "tickTime=500\ninitLimit=10\nsyncLimit=5\nmaxSessionTimeout=60000\nminSessionTimeout=1000\n"
            "admin.enableServer=false\n4lw.commands.whitelist=ruok,srvr,stat,mntr,envi\n"
            "autopurge.snapRetainCount=3\nautopurge.purgeInterval=1\n"
        )
        cp = f"{ZK_JAR_DIR / 'zookeeper.jar'}:{ZK_JAR_DIR / 'slf4j-api.jar'}:{ZK_JAR_DIR / 'slf4j-simple.jar'}"
        for extra in ("netty.jar", "netty-all.jar", "jline.jar", "commons-cli.jar", "snappy-java.jar",
                      "jute.jar", "zookeeper-jute.jar", "metrics-core.jar"):
            if (ZK_JAR_DIR / extra).exists():
                cp += f":{ZK_JAR_DIR / extra}"
        log = open(d / "zookeeper.log", "ab")
        proc = subprocess.Popen(
            ["java", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", f"-Dzookeeper.datadir.marker={d}",
             "-cp", cp, "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(cfg)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True, cwd=d,
        )
        p.pid = proc.pid
        self._wait(lambda: four_letter(p.port, "ruok") == "imok", f"ZooKeeper on :{p.port}", p, timeout=60)

    def _start_redis(self) -> None:
        assert self.state
        p = self.state.procs["redis"]
        d = Path(p.datadir)
        d.mkdir(parents=True, exist_ok=True)
        log = open(d / "redis.log", "ab")
        # the password (the secrets file's [redis] password) goes in a config file only its owner
        # reads, never on the command line where `ps` shows it
        conf = d / "redis.conf"
        password = tomllib.loads(self.secrets_file.read_text()).get("redis", {}).get("password")
        conf.write_text(f'requirepass "{password}"\n' if password else "")
        os.chmod(conf, 0o600)
        proc = subprocess.Popen(
            ["redis-server", str(conf), "--port", str(p.port), "--bind", "127.0.0.1", "--dir", str(d),
             "--save", "", "--appendonly", "no", "--daemonize", "no"],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
        )
        p.pid = proc.pid
        self._wait(lambda: redis_ping(p.port), f"Redis on :{p.port}", p, timeout=30)

    def _wait(self, check: Any, what: str, p: Proc, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return
            if p.pid and not pid_alive(p.pid):
                raise SandboxError(f"{what} exited during start; see its log in {p.datadir}")
            time.sleep(0.05)
        raise SandboxError(f"{what} did not come up within {timeout:.0f}s; see its log in {p.datadir}")

    # -- fleet seeding ---------------------------------------------------------------
    def _seed_fleet(self, zk_root: str, log: Any) -> None:
        assert self.state
        cfg = self.config()
        creds = config_mod.load_credentials(cfg)
        hosts = self.hosts()
        smap = even_layout(self.state.shards, self.pairs(spare=False))
        with zk_mod.connect(cfg, creds) as zk:
            reg = HostRegistry(zk)
            for h in hosts.values():
                reg.register(h)
            store = ShardMapStore(zk)
            if not store.exists():
                store.init(smap, hosts, reason="sandbox up")
        self.seed_shards(smap, hosts, creds, rows=self.state.rows)
        self.wait_pairs_converged()

    def seed_shards(self, smap: ShardMap, hosts: dict[str, Host], creds: Credentials, *, rows: int) -> None:
        create_shards(smap, hosts, creds, rows=rows)

    def wait_pairs_converged(self, timeout: float = 60) -> None:
        """Each side has applied every transaction its peer wrote itself (in any GTID layout:
        :func:`migrator.fleet.mysql.wait_applied`)."""
        for p in self.mariadb_procs():
            with self.root_conn(p.partner or "") as peer:
                own = own_gtids(peer)
            with self.root_conn(p.name, read_timeout=timeout + 5) as c:
                if not wait_applied(c, own, timeout):
                    raise SandboxError(f"{p.name} did not catch up with {p.partner} within {timeout}s")

    def problems(self) -> list[str]:
        """Why this sandbox cannot serve a test now: a dead process, a pair not replicating. Empty if healthy."""
        if not self.state:
            return ["no sandbox state"]
        out = [f"{p.name} (pid {p.pid}) is not running" for p in self.state.procs.values() if not p.alive()]
        if out:
            return out
        for p in self.mariadb_procs():
            st = self.replica_status(p.name)
            if not st.get("ok"):
                out.append(f"replication {p.partner} -> {p.name} is broken: {st.get('error') or st}")
        return out

    # -- status / down ------------------------------------------------------------------
    def status(self) -> list[dict[str, Any]]:
        if not self.state:
            return []
        out = []
        for p in self.state.procs.values():
            row: dict[str, Any] = {"name": p.name, "kind": p.kind, "port": p.port, "pid": p.pid,
                                   "alive": p.alive(), "spare": p.spare}
            if p.kind == "mariadb" and row["alive"]:
                row["replication"] = self.replica_status(p.name)
            out.append(row)
        return out

    def replica_status(self, name: str) -> dict[str, Any]:
        """This host's view of replication from its partner."""
        try:
            with self.root_conn(name) as c, c.cursor(pymysql.cursors.DictCursor) as cur:
                cur.execute("SHOW SLAVE STATUS")
                st = cur.fetchone()
        except pymysql.err.MySQLError as exc:
            return {"ok": False, "error": str(exc)}
        if not st:
            return {"ok": False, "error": "no replication configured"}
        io, sql = st["Slave_IO_Running"], st["Slave_SQL_Running"]
        return {
            "from": self.state.procs[name].partner if self.state else None,
            "io": io, "sql": sql, "lag": st["Seconds_Behind_Master"],
            "error": st["Last_IO_Error"] or st["Last_SQL_Error"] or "",
            "ok": io == "Yes" and sql == "Yes",
        }

    def down(self, *, purge: bool = False, timeout: float = 30) -> list[str]:
        """Stop every process by pid (TERM, then KILL after ``timeout``); ``purge`` then deletes the
        directory, only when it holds a sandbox this tool made (:meth:`made_here`): anything else is refused
        before a process is stopped or a file removed."""
        if purge and self.dir.exists() and not self.made_here():
            why = ("its state file names another directory" if self.state is not None
                   else "it has no sandbox state file")
            raise SandboxRefused(f"{self.dir} is not a sandbox this tool made ({why}): refusing to delete it; "
                                 "remove it yourself if it is yours to delete")
        stopped = []
        if self.state:
            for p in self.state.procs.values():
                if p.alive():
                    stop_pid(p.pid, timeout=timeout, marker=p.marker)  # type: ignore[arg-type]
                    stopped.append(p.name)
                p.pid = None
            self._save()
        if purge and self.dir.exists():
            shutil.rmtree(self.dir)
            self.state = None
        return stopped

    # -- single-host control (fault tests) ---------------------------------------------------
    def set_link_delay(self, name: str, seconds: int) -> None:
        """Make ``name`` apply its partner's writes ``seconds`` late (``MASTER_DELAY``; 0: no delay):
        lag inside a pair, as a lagging link of a production pair has it."""
        with self.root_conn(name) as c, c.cursor() as cur:
            cur.execute("STOP SLAVE")
            cur.execute("CHANGE MASTER TO MASTER_DELAY = %s", (int(seconds),))
            cur.execute("START SLAVE")

    def link_delay(self, name: str) -> int:
        """The ``MASTER_DELAY`` of ``name``'s link from its partner (seconds)."""
        with self.root_conn(name) as c, c.cursor(pymysql.cursors.DictCursor) as cur:
            cur.execute("SHOW SLAVE STATUS")
            st = cur.fetchone() or {}
        return int(st.get("SQL_Delay") or 0)

    def stop_host(self, name: str, *, kill: bool = False) -> None:
        assert self.state
        p = self.state.procs[name]
        if p.alive():
            if kill:
                os.kill(p.pid, signal.SIGKILL)  # type: ignore[arg-type]
                reap(p.pid, 10)  # type: ignore[arg-type]
            else:
                stop_pid(p.pid, marker=p.marker)  # type: ignore[arg-type]
        p.pid = None
        self._save()

    def start_host(self, name: str) -> None:
        assert self.state
        p = self.state.procs[name]
        if p.alive():
            return
        {"mariadb": lambda: self._start_mariadb(p), "zookeeper": self._start_zookeeper,
         "redis": self._start_redis}[p.kind]()
        self._save()

    def memory_rss_mb(self) -> float:
        total = 0
        if self.state:
            for p in self.state.procs.values():
                if p.alive():
                    for line in Path(f"/proc/{p.pid}/status").read_text().splitlines():
                        if line.startswith("VmRSS:"):
                            total += int(line.split()[1])
        return total / 1024
