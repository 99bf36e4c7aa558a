"""docker-compose.yml runs the same fleet as `migrator sandbox up`: same MariaDB flags (the default GTID
layout, a domain per server), TLS only with certificates the sandbox's own code makes, the same grants,
Redis with a password in a config file, and a queue token."""

import re
from pathlib import Path

import yaml

from migrator.sandbox import MARIADB_FLAGS, layout_flags

ROOT = Path(__file__).resolve().parents[3]


def test_every_mariadb_service_has_the_sandbox_flags():
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    services = compose["services"]
    mariadb = {k: v for k, v in services.items() if k.startswith("mysql")}
    assert len(mariadb) == 6
    want = {f"--{k}" if v is None else f"--{k}={v}" for k, v in MARIADB_FLAGS.items()}
    ids, offsets = set(), {}
    for name, svc in mariadb.items():
        cmd = set(svc["command"])
        assert want <= cmd, (name, sorted(want - cmd))
        sid = next(c for c in cmd if c.startswith("--server-id="))
        ids.add(sid)
        layout = {f"--{k}" if v is None else f"--{k}={v}"
                  for k, v in layout_flags("per-server", int(sid.split("=")[1])).items()}
        assert layout <= cmd, (name, sorted(layout - cmd))
        offsets[name] = next(c for c in cmd if c.startswith("--auto-increment-offset="))
    assert len(ids) == 6  # distinct server ids
    for pair in ("001", "002", "003"):
        assert {offsets[f"mysql{pair}a"], offsets[f"mysql{pair}b"]} == {"--auto-increment-offset=1",
                                                                          "--auto-increment-offset=2"}
    assert {"zookeeper", "redis"} <= set(services)


# -- the rest of the sandbox: TLS, grants, Redis password, queue token ------------------------------------

def _compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def _mariadb() -> dict:
    return {k: v for k, v in _compose()["services"].items() if k.startswith("mysql")}


def test_mariadb_takes_tls_only_with_the_sandbox_certificates(tmp_path):
    from migrator.sandbox.tls import FILES, SandboxTLS, server_names

    inside = SandboxTLS(Path("/etc/mysql/tls"))
    want = {f"--{opt}" for opt in inside.server_options()}
    assert "--require-secure-transport=ON" in want
    for name, svc in _mariadb().items():
        assert want <= set(svc["command"]), (name, sorted(want - set(svc["command"])))
        assert "./docker/tls:/etc/mysql/tls:ro" in svc["volumes"], name
        assert svc["depends_on"]["tls-init"] == {"condition": "service_completed_successfully"}, name
        assert "--protocol=socket" in svc["healthcheck"]["test"], name  # secure transport without TLS
    # tls-init makes them with the sandbox's own code, naming every MariaDB service
    init = " ".join(_compose()["services"]["tls-init"]["entrypoint"])
    assert "migrator/sandbox/tls.py /src/docker/tls" in init
    hostnames = tuple(svc["hostname"] for svc in _mariadb().values())
    assert all(h in init.split() for h in hostnames), init
    made = SandboxTLS(tmp_path).ensure(hostnames)
    assert set(hostnames) | {"127.0.0.1", "localhost"} == set(server_names(made.server_cert))
    produced = set(FILES.values()) | {"repl-key.pem"}  # repl-key.pem: the copy tls-init makes
    for path in (inside.ca, inside.server_cert, inside.server_key):
        assert path.name in produced
    # replication over verified TLS, as the sandbox's (SandboxTLS.change_master)
    script = (ROOT / "docker" / "fleet-init.sh").read_text()
    clauses, _ = inside.change_master()
    for key in ("MASTER_SSL=1", "MASTER_SSL_CA", "MASTER_SSL_CERT", "MASTER_SSL_KEY",
                "MASTER_SSL_VERIFY_SERVER_CERT=1"):
        assert key in clauses and key in script, key
    for used in re.findall(r"/etc/mysql/tls/([\w.-]+)", script):
        assert used in produced, used
    assert "--ssl-verify-server-cert" in script  # its own client verifies the servers too


def test_the_config_and_secrets_match_the_sandbox(tmp_path):
    import shutil

    from migrator.fleet import config as config_mod
    from migrator.sandbox.tls import FILES, SandboxTLS

    for name in ("migrator.toml", "secrets.toml"):  # beside what tls-init makes (docker/tls is not in git)
        shutil.copy(ROOT / "docker" / name, tmp_path / name)
    SandboxTLS(tmp_path / "tls").ensure()
    cfg = config_mod.load(tmp_path / "migrator.toml")
    tls = cfg.mysql.tls
    assert tls is not None and tls.verify_hostname
    for path, name in ((tls.ca, FILES["ca"]), (tls.cert, FILES["client_cert"]), (tls.key, FILES["client_key"])):
        assert Path(path) == tmp_path / "tls" / name, (path, name)
    creds = config_mod.load_credentials(cfg)
    assert creds.queue_token and creds.zk_digest and creds.mysql_user == "migrator"
    redis = config_mod.load_redis_credentials(cfg)
    conf = (ROOT / "docker" / "redis.conf").read_text()
    assert re.search(r'^requirepass "(.*)"$', conf, re.M).group(1) == redis.password
    svc = _compose()["services"]["redis"]
    assert "./docker/redis.conf:/usr/local/etc/redis/redis.conf:ro" in svc["volumes"]
    assert svc["command"][:2] == ["redis-server", "/usr/local/etc/redis/redis.conf"]
    assert redis.password not in " ".join(svc["command"])  # never on a command line `ps` shows


def test_the_migration_user_has_the_sandbox_grants():
    from migrator.sandbox import MIGRATOR_GRANTS

    sql = (ROOT / "docker" / "init-users.sql").read_text()
    m = re.search(r"GRANT (.*?) ON \*\.\* TO 'migrator'@'%'", sql, re.S)
    granted = {" ".join(g.split()) for g in m.group(1).split(",")}
    assert granted == {g.strip() for g in MIGRATOR_GRANTS.split(",")}, granted ^ {g.strip() for g in
                                                                              MIGRATOR_GRANTS.split(",")}
    assert "SET sql_log_bin = 0" in sql  # each host makes its own users, as the sandbox's do
