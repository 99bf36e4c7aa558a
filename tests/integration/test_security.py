"""Security on real servers: ZooKeeper ACLs on every record, credentials and TLS private keys kept
out of every store and log after a real migration under load (over TLS), identifiers refused before SQL (through
the CLI), the queue API's token, and preflight's report of excess MySQL grants.

Elsewhere: the shard map and host registry ACL (``tests/integration/fleet/test_foundation.py``), unit tests of
``ident`` and the host-name check (``tests/unit/fleet/test_identifiers.py``), grant parsing
(``tests/unit/engine/test_grants.py``), MySQL TLS (``tests/integration/test_tls.py``).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import zlib
from pathlib import Path

import httpx
import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import Permissions

from migrator.engine.migration import LOCKS, MigrationStore
from migrator.engine.plan import MAINTENANCE_PAUSED
from migrator.fleet import redis_client
from migrator.fleet.shard_map import ShardMapStore
from migrator.ops import command
from migrator.ops.playbook import RunStore
from migrator.ops.playbook import load as load_playbook

from .cli_helpers import assert_one_line_error, run_cli

REPO = Path(__file__).resolve().parents[2]
INTRUDERS = (None, [("digest", "intruder:guess")], [("digest", "migrator:wrong-password")])


def secrets_of(fleet) -> dict[str, bytes]:
    creds = fleet.credentials
    out = {"mysql password": creds.mysql_password.encode(),
           "zookeeper digest password": creds.zk_digest.split(":", 1)[1].encode()}
    if creds.queue_token:
        out["queue token"] = creds.queue_token.encode()
    out.update(private_keys_of(fleet))
    assert all(len(v) >= 12 for v in out.values())  # long enough that a hit is never chance
    return out


def private_keys_of(fleet) -> dict[str, bytes]:
    """The TLS private keys' material (each key's base64 body, every line of it, and the PEM marker):
    the paths to the key files may be stored and logged, what is in them never."""
    tls = fleet.sandbox.tls
    assert fleet.sandbox.state.tls and fleet.config.mysql.tls.key == tls.client_key, "the sandbox runs with TLS"
    out = {"a PEM private key": b"PRIVATE KEY-----"}
    for key in (tls.client_key, tls.server_key, tls.ca_key):
        body = [ln for ln in key.read_bytes().splitlines() if ln and not ln.startswith(b"-----")]
        out[f"{key.name} (whole)"] = b"".join(body)
        out.update({f"{key.name} line {i}": ln for i, ln in enumerate(body) if len(ln) >= 12})
    return out


def walk(zk, path: str):
    """(path, data, acls) of ``path`` and every znode below it (a node that vanishes meanwhile, e.g. an
    ephemeral lease or lock of a worker finishing, is skipped)."""
    from kazoo.exceptions import NoNodeError

    try:
        data, _ = zk.client.get(path)
        acls, _ = zk.client.get_acls(path)
        children = zk.client.get_children(path)
    except NoNodeError:
        return
    yield path, data or b"", acls
    for ch in children:
        yield from walk(zk, f"{path}/{ch}")


def _records(fleet) -> list[str]:
    """A migration (record, spec, shard locks, maintenance pause), a queue, a playbook run."""
    from migrator.queue.model import QueueConfig
    from migrator.queue.service import QueueService

    spec = command.plan_split(fleet.config, "MySQL001A").spec
    svc = QueueService(fleet.config)
    try:
        svc.create_queue("secq", QueueConfig(partitions=2))
    finally:
        svc.close()
    zk = fleet.zk
    pb = load_playbook("split-host.yaml", (REPO / "playbooks" / "split-host.yaml").read_text())
    run_id = RunStore(zk).create(pb, {"source": "MySQL001A"})
    return [
        zk.path("migrations", spec.id), zk.path("migrations", spec.id, "spec"),
        zk.path(LOCKS, str(spec.shards[0])), zk.path(MAINTENANCE_PAUSED, str(spec.shards[0])),
        zk.path("queues", "secq"), RunStore(zk).node(run_id),
    ]


def test_records_cannot_be_changed_by_anonymous_or_wrong_identity(fleet):
    nodes = _records(fleet)
    before = {p: fleet.zk.client.get(p) for p in nodes}
    for auth in INTRUDERS:
        c = KazooClient(hosts=fleet.config.zookeeper.hosts, auth_data=auth)
        c.start(timeout=5)
        try:
            for p in nodes:
                c.get(p)  # the world may read (status, dashboards)
                with pytest.raises(NoAuthError):
                    c.set(p, b'{"phase": "done"}')
                with pytest.raises(NoAuthError):  # delete is checked on the parent: the parents are protected
                    c.delete(p)
                parent = p.rsplit("/", 1)[0]
                with pytest.raises(NoAuthError):  # no forged sibling: a fake lock, migration, queue or run
                    c.create(f"{parent}/99", b"forged")
        finally:
            c.stop()
            c.close()
    assert {p: fleet.zk.client.get(p) for p in nodes} == before


def test_every_znode_is_protected_and_holds_no_secret_after_a_real_run(fleet, tmp_path):
    """A whole split under queue load on RQ workers; then every znode, every Redis key and value
    (RQ job data and meta included, decompressed) and every worker log is searched."""
    from migrator.engine.migration import Phase
    from tests.faults.harness import FaultRun

    run = FaultRun(fleet, tmp_path).start()
    try:
        run.plan_split()
        run.launch()
        run.wait_phase(Phase.DONE)
        run.stop_load()
        run.check_ledger()
        secrets = secrets_of(fleet)
        # ZooKeeper: no secret anywhere; nothing writable by the world
        n = 0
        for path, data, acls in walk(fleet.zk, fleet.root):
            n += 1
            for what, s in secrets.items():
                assert s not in data and s not in path.encode(), f"{what} in znode {path}"
            for acl in acls:
                if acl.id.scheme == "world":
                    assert acl.perms == Permissions.READ, f"{path} is writable by the world: {acls}"
        assert n > 20
        # Redis: every key of every type, values raw and zlib-decompressed (RQ compresses job data)
        r = redis_client.connect(fleet.config)
        blobs: list[tuple[str, bytes]] = []
        for key in r.scan_iter(count=500):
            kind = r.type(key).decode()
            if kind == "string":
                vals = [r.get(key) or b""]
            elif kind == "hash":
                vals = [k + b"=" + v for k, v in r.hgetall(key).items()]
            elif kind == "list":
                vals = r.lrange(key, 0, -1)
            elif kind == "set":
                vals = list(r.smembers(key))
            elif kind == "zset":
                vals = r.zrange(key, 0, -1)
            elif kind == "stream":
                vals = [repr(e).encode() for e in r.xrange(key)]
            else:
                vals = []
            for v in vals:
                blobs.append((key.decode(errors="replace"), v))
                try:
                    blobs.append((key.decode(errors="replace"), zlib.decompress(v.split(b"=", 1)[-1])))
                except zlib.error:
                    pass
        assert any(k.startswith("rq:job:") for k, _ in blobs), "no RQ job data to search"
        for key, v in blobs:
            for what, s in secrets.items():
                assert s not in v and s not in key.encode(), f"{what} in Redis key {key}"
        # the worker logs
        assert run.logs
        for log in run.logs:
            text = log.read_bytes()
            assert b"rq.worker" in text
            for what, s in secrets.items():
                assert s not in text, f"{what} in {log.name}"
    finally:
        run.close()


# -- identifiers --------------------------------------------------------------------------------

@pytest.mark.parametrize("args,needle", [
    (("split", "MySQL001A`; DROP DATABASE db00000; --"), "not a valid host name"),
    (("move", "--shards", "4-7", "--to", "MySQL003A' OR '1'='1"), "not a valid host name"),
    (("split", "../shard_map"), "../shard_map"),
    (("split", "MySQL001A/../../x"), "MySQL001A/../../x"),
    (("move-partition", "--queue", "q`; DROP TABLE x; --", "--partition", "0", "--to", "MySQL003A"), "q`"),
    (("queue", "create", "evil`; DROP DATABASE db00001; --"), "not a valid queue name"),
    (("queue", "show", "../../etc"), "not a valid queue name"),
])
def test_malicious_names_through_the_cli_are_refused(fleet, args, needle):
    epoch = ShardMapStore(fleet.zk).read().epoch
    res = run_cli(*args, config=fleet.config_path)
    assert_one_line_error(res, needle)
    assert ShardMapStore(fleet.zk).read().epoch == epoch and MigrationStore(fleet.zk).list() == []
    with fleet.sandbox.root_conn("MySQL001A") as c, c.cursor() as cur:
        cur.execute("SELECT COUNT(*) FROM information_schema.schemata WHERE schema_name IN ('db00000', 'db00001')")
        assert cur.fetchone()[0] == 2


def test_hostile_table_name_in_a_moving_shard_is_one_quoted_identifier(fleet):
    """A legal but hostile name (created by someone else in a moving shard) is quoted
    with backticks doubled wherever it reaches SQL: the copy carries it as the one
    table it is and runs nothing it spells."""
    hostile = "x`; DROP TABLE pins; --"
    quoted = "`" + hostile.replace("`", "``") + "`"
    spec = command.plan_split(fleet.config, "MySQL001A").spec
    db = f"db{spec.shards[0]:05d}"
    with fleet.sandbox.root_conn("MySQL001A") as c, c.cursor() as cur:
        cur.execute(f"CREATE TABLE {db}.{quoted} (id INT PRIMARY KEY)")
        cur.execute(f"INSERT INTO {db}.{quoted} VALUES (1), (2)")
        cur.execute(f"SELECT COUNT(*) FROM {db}.pins")
        pins = cur.fetchone()[0]
    res = run_cli("copy", spec.id, "--sync", config=fleet.config_path)
    assert res.returncode == 0, res.stderr
    for host in ("MySQL001A", "MySQL003A"):
        with fleet.sandbox.root_conn(host) as c, c.cursor() as cur:
            cur.execute(f"SELECT COUNT(*) FROM {db}.pins")
            assert cur.fetchone()[0] == pins, host
            cur.execute(f"SELECT COUNT(*) FROM {db}.{quoted}")
            assert cur.fetchone()[0] == 2, host


# -- queue API token ---------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_queue_api_requires_the_token_on_a_real_server(fleet, tmp_path):
    token = fleet.credentials.queue_token
    assert token, "the sandbox secrets carry a queue token"
    port = _free_port()
    log = tmp_path / "serve.log"
    proc = subprocess.Popen([sys.executable, "-m", "migrator", "--config", str(fleet.config_path), "queue", "serve",
                             "--listen", f"127.0.0.1:{port}"], stdout=open(log, "wb"), stderr=subprocess.STDOUT,
                            start_new_session=True, cwd=str(REPO))
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        good = {"Authorization": f"Bearer {token}"}
        assert httpx.post(f"{base}/v1/queues", json={"name": "tokq", "config": {"partitions": 1}},
                          headers=good).status_code == 201
        calls = [("GET", "/v1/queues", None), ("GET", "/v1/queues/tokq", None),
                 ("POST", "/v1/queues/tokq/jobs", {"jobs": [{"body": "x"}]}),
                 ("POST", "/v1/queues/tokq/dequeue", {"limit": 1}),
                 ("GET", "/v1/queues/tokq/counts", None),
                 ("DELETE", "/v1/queues/tokq", None)]
        for bad in (None, {"Authorization": "Bearer wrong"}, {"Authorization": token},
                    {"Authorization": f"Basic {token}"}):
            for method, path, body in calls:
                r = httpx.request(method, base + path, json=body, headers=bad, timeout=10)
                assert r.status_code == 401, (method, path, bad, r.status_code, r.text)
                assert token not in r.text
        r = httpx.post(f"{base}/v1/queues/tokq/jobs", json={"jobs": [{"body": "x"}]}, headers=good, timeout=10)
        assert r.status_code == 200, r.text
        assert httpx.get(f"{base}/v1/queues/tokq/counts", headers=good, timeout=10).status_code == 200
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(20)
    text = log.read_bytes()
    for what, s in secrets_of(fleet).items():
        assert s not in text, f"{what} in the queue server's log"


def _without_token(fleet, tmp_path) -> Path:
    """A config of this fleet whose secrets file has no [queue] token."""
    secrets = tmp_path / "secrets-no-token.toml"
    text = fleet.sandbox.secrets_file.read_text()
    secrets.write_text(text[:text.index("[queue]")] + text[text.index("[redis]"):])
    secrets.chmod(0o600)
    cfg = tmp_path / "no-token.toml"
    cfg.write_text(fleet.config_path.read_text().replace(str(fleet.sandbox.secrets_file), str(secrets)))
    return cfg


def test_queue_api_is_never_open_by_mistake(fleet, tmp_path):
    """Without a token, `queue serve` and `queue broker` refuse to start; `--open` serves without one and
    says so at start; `--open` beside a token is refused."""
    cfg = _without_token(fleet, tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "MIGRATOR_QUEUE_TOKEN"}
    for cmd in (["queue", "serve"], ["queue", "broker"]):
        port = _free_port()
        res = run_cli(*cmd, "--listen", f"127.0.0.1:{port}", config=cfg, env=env, timeout=60)
        assert_one_line_error(res, "no queue token", "--open")
        assert res.returncode == 5, res.stderr
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0  # nothing listens
    res = run_cli("queue", "serve", "--open", "--listen", f"127.0.0.1:{_free_port()}", config=fleet.config_path,
                  timeout=60)
    assert_one_line_error(res, "drop --open")
    port = _free_port()
    log = tmp_path / "open.log"
    proc = subprocess.Popen([sys.executable, "-m", "migrator", "--config", str(cfg), "queue", "serve", "--open",
                             "--listen", f"127.0.0.1:{port}"], stdout=open(log, "wb"), stderr=subprocess.STDOUT,
                            start_new_session=True, cwd=str(REPO), env=env)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/v1/queues", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, 15)
        proc.wait(20)
    assert "serving OPEN" in log.read_text(), log.read_text()


# -- grants --------------------------------------------------------------------------------------------

def test_preflight_reports_grants_beyond_what_the_migration_needs(fleet):
    spec = command.plan_split(fleet.config, "MySQL001A").spec
    res = run_cli("preflight", spec.id, config=fleet.config_path)
    assert res.returncode == 0 and "more than it needs" not in res.stdout, res.stdout
    with fleet.sandbox.root_conn("MySQL001A") as root, root.cursor() as cur:
        cur.execute("SELECT CONCAT(QUOTE(user), '@', QUOTE(host)) FROM mysql.user WHERE user = %s",
                    (fleet.credentials.mysql_user,))
        account = cur.fetchone()[0]
        cur.execute("SET SESSION sql_log_bin = 0")  # this host only; the peer is not touched
        cur.execute(f"GRANT FILE, SHUTDOWN ON *.* TO {account}")
        try:
            res = run_cli("preflight", spec.id, config=fleet.config_path)
        finally:
            cur.execute(f"REVOKE FILE, SHUTDOWN ON *.* FROM {account}")
    out = res.stdout.replace("\n", " ")
    assert "more than it needs on MySQL001A" in out and "FILE" in out and "SHUTDOWN" in out, res.stdout
    assert fleet.credentials.mysql_password not in res.stdout + res.stderr


def test_the_sandbox_redis_refuses_a_client_without_the_password(fleet):
    """RQ runs whatever job a Redis client enqueues: the sandbox's Redis wants the secrets file's password."""
    import redis as redis_mod
    from rq import Queue

    anonymous = redis_mod.Redis.from_url(fleet.config.redis.url)
    try:
        with pytest.raises(redis_mod.exceptions.AuthenticationError):
            Queue("migrator", connection=anonymous).enqueue("jobs.copy.start", "m-nope")
    finally:
        anonymous.close()
    wrong = redis_mod.Redis.from_url(fleet.config.redis.url, password="not-the-password")
    try:
        with pytest.raises(redis_mod.exceptions.AuthenticationError):
            wrong.ping()
    finally:
        wrong.close()
    configured = redis_client.connect(fleet.config)
    try:
        assert configured.ping()
    finally:
        configured.close()
    # the password is in the secrets file only: not in the config file, not on redis-server's command line
    assert "password" not in Path(fleet.config.path).read_text()
    pid = fleet.sandbox.state.procs["redis"].pid
    assert b"requirepass" not in Path(f"/proc/{pid}/cmdline").read_bytes()
