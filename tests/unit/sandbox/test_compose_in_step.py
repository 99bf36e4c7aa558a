"""docker-compose.yml runs the same fleet as `migrator sandbox up`: same MariaDB flags (the default GTID
layout, a domain per server)."""

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
