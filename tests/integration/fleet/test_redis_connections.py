"""The one Redis factory (:func:`migrator.fleet.redis_client.connect`) against real servers of
this test's own: a Redis with ``requirepass`` and an ACL user, and Redis Sentinel watching a master
and its replica. Each server runs on its own port and data dir and is stopped by its pid."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from redis import Redis
from redis.exceptions import AuthenticationError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.sentinel import SentinelConnectionPool
from rq import Queue

from migrator.errors import RedisUnavailable
from migrator.fleet import config as config_mod
from migrator.fleet import redis_client
from migrator.ops import steps
from migrator.ops.worker import SimpleWorker
from migrator.sandbox.procs import find_base_port, stop_pid

PASSWORD = "r3dis-pw-for-tests"


class Servers:
    """redis-server processes of one test, stopped by pid at teardown."""

    def __init__(self, base: Path):
        self.base = base
        self.pids: list[int] = []

    def start(self, name: str, port: int, *args: str, sentinel: str | None = None, probe: Redis | None = None) -> int:
        d = self.base / name
        d.mkdir(parents=True, exist_ok=True)
        cmd = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(d), "--save", "",
               "--appendonly", "no", *args]
        if sentinel is not None:
            conf = d / "sentinel.conf"  # a sentinel rewrites its config file: it must be its own
            conf.write_text(sentinel)
            cmd = ["redis-server", str(conf), "--sentinel", "--port", str(port), "--bind", "127.0.0.1",
                   "--dir", str(d)]
        log = (d / "redis.log").open("ab")
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        log.close()
        self.pids.append(proc.pid)
        probe = probe or Redis(port=port, password=PASSWORD if "--requirepass" in args else None, socket_timeout=1)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                if probe.ping():
                    return proc.pid
            except Exception:  # noqa: BLE001 - not up yet
                time.sleep(0.05)
        raise AssertionError(f"redis {name} on :{port} did not start: {(d / 'redis.log').read_text()[-2000:]}")

    def stop(self) -> None:
        for pid in reversed(self.pids):
            stop_pid(pid, timeout=10)


def openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_ca(d: Path, name: str) -> None:
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.pem",
            "-days", "2", "-subj", f"/CN={name}", cwd=d)


def make_server_cert(d: Path, ca: str) -> None:
    """server.pem / server.key for 127.0.0.1, signed by ``ca``."""
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out", "server.csr",
            "-subj", "/CN=127.0.0.1", cwd=d)
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
            "-out", "server.pem", "-days", "2", "-extfile", "san.ext", cwd=d)


@pytest.fixture
def servers(tmp_path):
    s = Servers(tmp_path / "redis")
    try:
        yield s
    finally:
        s.stop()


def config_with(tmp_path: Path, redis: str, secrets: str | None = None) -> config_mod.Config:
    text = f"[redis]\n{redis}\n"
    if secrets is not None:
        (tmp_path / "secrets.toml").write_text(secrets)
        text += '[credentials]\nfile = "secrets.toml"\n'
    path = tmp_path / "migrator.toml"
    path.write_text(text)
    return config_mod.load(path)


@pytest.fixture
def no_redis_env(monkeypatch):
    for k in ("MIGRATOR_REDIS_PASSWORD", "MIGRATOR_REDIS_USERNAME"):
        monkeypatch.delenv(k, raising=False)
    return monkeypatch


def test_without_the_password_nothing_is_enqueued_with_it_a_step_is(servers, tmp_path, no_redis_env):
    port = find_base_port(1)
    servers.start("main", port, "--requirepass", PASSWORD)
    url = f'url = "redis://127.0.0.1:{port}/0"'

    bare = redis_client.connect(config_with(tmp_path, url))  # no credentials anywhere
    with pytest.raises(AuthenticationError):
        steps.enqueue_maintenance(bare)
    with pytest.raises(AuthenticationError):
        Queue(steps.QUEUE, connection=Redis(port=port)).enqueue("os.getpid")
    wrong = no_redis_env
    wrong.setenv("MIGRATOR_REDIS_PASSWORD", "not-it")
    with pytest.raises((AuthenticationError, ResponseError)):
        steps.enqueue_maintenance(redis_client.connect(config_with(tmp_path, url)))
    wrong.delenv("MIGRATOR_REDIS_PASSWORD")

    # the password from the secrets file: the step is queued, and a worker on the same factory runs it
    cfg = config_with(tmp_path, url, f'[redis]\npassword = "{PASSWORD}"\n')
    conn = redis_client.connect(cfg)
    job = Queue(steps.QUEUE, connection=conn).enqueue("os.getpid")
    assert Queue(steps.QUEUE, connection=conn).count == 1
    SimpleWorker([Queue(steps.QUEUE, connection=conn)], connection=conn).work(burst=True)
    job.refresh()
    assert job.is_finished
    steps.enqueue_maintenance(conn)
    assert Queue(steps.MAINTENANCE_QUEUE, connection=conn).count == 1

    # an ACL user from the environment (the file's password is not its password)
    conn.acl_setuser("migrator", enabled=True, passwords=["+acl-user-pw"], keys=["*"], channels=["*"],
                     commands=["+@all"])
    no_redis_env.setenv("MIGRATOR_REDIS_USERNAME", "migrator")
    with pytest.raises(AuthenticationError):
        redis_client.connect(cfg).ping()
    no_redis_env.setenv("MIGRATOR_REDIS_PASSWORD", "acl-user-pw")
    user_conn = redis_client.connect(cfg)
    assert user_conn.acl_whoami() == "migrator"
    steps.enqueue_maintenance(user_conn)
    assert Queue(steps.MAINTENANCE_QUEUE, connection=conn).count == 2


def test_sentinel_resolves_the_master_and_follows_a_failover(servers, tmp_path, no_redis_env):
    base = find_base_port(3)
    master, replica, sentinel = base, base + 1, base + 2
    servers.start("master", master, "--requirepass", PASSWORD, "--masterauth", PASSWORD)
    servers.start("replica", replica, "--requirepass", PASSWORD, "--masterauth", PASSWORD,
                  "--replicaof", "127.0.0.1", str(master))
    servers.start("sentinel", sentinel, sentinel=(
        f"sentinel monitor fleetq 127.0.0.1 {master} 1\n"
        f"sentinel auth-pass fleetq {PASSWORD}\n"
        "sentinel down-after-milliseconds fleetq 1000\n"
        "sentinel failover-timeout fleetq 5000\n"))
    cfg = config_with(tmp_path, f'url = "redis://unused.invalid:1/2"\nsentinels = ["127.0.0.1:{sentinel}"]\n'
                                f'service_name = "fleetq"', f'[redis]\npassword = "{PASSWORD}"\n')
    conn = redis_client.connect(cfg, socket_timeout=5)
    assert isinstance(conn.connection_pool, SentinelConnectionPool)
    job = Queue(steps.QUEUE, connection=conn).enqueue("os.getpid")
    direct = Redis(port=master, password=PASSWORD, db=2)
    assert direct.exists(f"rq:job:{job.id}")  # it went to the master, in the config's db
    # an RQ worker on the Sentinel-resolved connection runs it (its scheduler rebuilds the connection)
    SimpleWorker([Queue(steps.QUEUE, connection=conn)], connection=conn).work(burst=True, with_scheduler=True)
    job.refresh()
    assert job.is_finished

    # a wait for the replica to hold the job, then a failover: the next client reaches the new master
    deadline = time.monotonic() + 30
    rep = Redis(port=replica, password=PASSWORD, db=2)
    while not rep.exists(f"rq:job:{job.id}") and time.monotonic() < deadline:
        time.sleep(0.1)
    Redis(port=sentinel).execute_command("SENTINEL", "FAILOVER", "fleetq")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        # the failover is complete once the master's own record names the replica (the address by name
        # already does while it is in progress)
        if int(Redis(port=sentinel).sentinel_master("fleetq")["port"]) == replica:
            break
        time.sleep(0.2)
    else:
        raise AssertionError("the sentinel did not fail over to the replica")
    fresh = redis_client.connect(cfg, socket_timeout=5)
    after = Queue(steps.QUEUE, connection=fresh).enqueue("os.getpid")
    assert fresh.info("server")["tcp_port"] == replica and rep.exists(f"rq:job:{after.id}")


def test_tls_with_the_configured_ca_and_a_password(servers, tmp_path, no_redis_env):
    pki = tmp_path / "pki"
    pki.mkdir()
    make_ca(pki, "fleet-ca")
    make_ca(pki, "other-ca")
    make_server_cert(pki, "fleet-ca")
    port = find_base_port(1)
    servers.start("tls", 0, "--tls-port", str(port), "--tls-cert-file", str(pki / "server.pem"),
                  "--tls-key-file", str(pki / "server.key"), "--tls-ca-cert-file", str(pki / "fleet-ca.pem"),
                  "--tls-auth-clients", "no", "--requirepass", PASSWORD,
                  probe=Redis(host="127.0.0.1", port=port, password=PASSWORD, ssl=True,
                              ssl_ca_certs=str(pki / "fleet-ca.pem"), socket_timeout=1))
    secrets_toml = f'[redis]\npassword = "{PASSWORD}"\n'
    url = f'url = "rediss://127.0.0.1:{port}/1"'

    cfg = config_with(tmp_path, f'{url}\nca_file = "pki/fleet-ca.pem"', secrets_toml)
    conn = redis_client.connect(cfg)
    steps.enqueue_maintenance(conn)
    assert Queue(steps.MAINTENANCE_QUEUE, connection=conn).count == 1
    assert conn.connection_pool.connection_kwargs["ssl_ca_certs"] == str(tmp_path / "pki" / "fleet-ca.pem")

    # a CA that did not sign the server's certificate: the connection is refused, nothing enqueued
    other = config_with(tmp_path, f'{url}\nca_file = "pki/other-ca.pem"', secrets_toml)
    with pytest.raises(RedisConnectionError, match="(?i)certificate verify failed"):
        steps.enqueue_maintenance(redis_client.connect(other))
    # the same port in the clear gets nowhere either
    with pytest.raises(RedisConnectionError):
        Redis(port=port, password=PASSWORD, socket_timeout=2).ping()
    missing = config_with(tmp_path, f'{url}\nca_file = "pki/absent.pem"', secrets_toml)
    with pytest.raises(RedisUnavailable, match="absent.pem"):
        redis_client.connect(missing)
    assert Queue(steps.MAINTENANCE_QUEUE, connection=conn).count == 1
