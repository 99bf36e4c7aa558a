"""What the benchmarks share about their fleet: a fresh ZooKeeper root over the same seeded data."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

from migrator.fleet import config as config_mod
from migrator.fleet import zk as zk_mod
from migrator.fleet.model import even_layout
from migrator.fleet.shard_map import HostRegistry, ShardMapStore
from migrator.sandbox import Sandbox, reset_fleet


def seeded_root(sb: Sandbox, prefix: str, rows: int, reason: str) -> tuple[config_mod.Config, Path]:
    """The sandbox's shards reset to ``rows`` seeded rows each, laid out evenly over its pairs (not the
    spare ones), under a new ZooKeeper root ``/<prefix><random>`` with its hosts and shard map; returns
    the config and the file it was written to (for worker processes)."""
    root = f"/{prefix}{uuid.uuid4().hex[:10]}"
    cfg = sb.config().with_root(root)
    cfg.credentials.file = str(sb.secrets_file)
    path = Path(sb.dir) / f"bench-{root[1:]}.toml"
    path.write_text(config_mod.dump(cfg))
    cfg = config_mod.load(path)
    creds = config_mod.load_credentials(cfg)
    assert sb.state is not None
    smap = even_layout(sb.state.shards, sb.pairs(spare=False))
    reset_fleet(sb, smap, rows=rows)
    with zk_mod.connect(cfg, creds) as zk:
        reg = HostRegistry(zk)
        hosts = sb.hosts()
        for h in hosts.values():
            reg.register(h)
        ShardMapStore(zk).init(smap, hosts, reason=reason)
    return cfg, path


def cpu_s(pid: int) -> float:
    """CPU seconds (user and system) a live process has used so far (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0
