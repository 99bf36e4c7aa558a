"""One test's fleet on a running sandbox: the shard databases reseeded, a fresh ZooKeeper root with
the hosts and the initial map, a config file pointing at it, a flushed Redis database.

Used by the ``fleet`` fixture (tests/conftest.py) and by the nemesis runner (``python -m tests.nemesis``).
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Fleet:
    """What one integration test works with."""

    sandbox: object
    config: object
    config_path: Path
    credentials: object
    zk: object
    smap: object
    hosts: dict
    root: str


def _layout(sandbox):
    from migrator.fleet.model import even_layout

    return even_layout(sandbox.state.shards, sandbox.pairs(spare=False))


def reset_shards(sandbox, rows: int = 20) -> None:
    """Drop every user database and seed the shards of the initial layout again."""
    from migrator.sandbox import reset_fleet

    reset_fleet(sandbox, _layout(sandbox), rows=rows)


@contextmanager
def open_fleet(sandbox, directory: Path, *, session_timeout: float | None = None) -> Iterator[Fleet]:
    """A fresh ZooKeeper root and config file in ``directory``; the root and Redis are wiped at the end."""
    from migrator.fleet import config as config_mod
    from migrator.fleet import redis_client
    from migrator.fleet import zk as zk_mod
    from migrator.fleet.shard_map import HostRegistry, ShardMapStore

    root = f"/t{uuid.uuid4().hex[:12]}"
    cfg = sandbox.config().with_root(root)
    cfg.credentials.file = str(sandbox.secrets_file)
    if session_timeout is not None:
        cfg.zookeeper.session_timeout = session_timeout
    cfg_path = Path(directory) / "migrator.toml"
    cfg_path.write_text(config_mod.dump(cfg))
    cfg = config_mod.load(cfg_path)
    creds = config_mod.load_credentials(cfg)
    hosts = sandbox.hosts()
    zk = zk_mod.connect(cfg, creds)
    reg = HostRegistry(zk)
    for h in hosts.values():
        reg.register(h)
    stored = ShardMapStore(zk).init(_layout(sandbox), hosts, reason="test fixture")
    r = redis_client.connect(cfg)
    r.flushdb()
    try:
        yield Fleet(sandbox, cfg, cfg_path, creds, zk, stored, hosts, root)
    finally:
        try:
            zk.client.delete(root, recursive=True)
        except Exception:  # noqa: BLE001 - the root may be gone with a broken ZooKeeper
            pass
        zk.close()
        r.flushdb()
        r.close()


def with_session_timeout(fleet: Fleet, seconds: float) -> None:
    """Give ``fleet``'s config ZooKeeper sessions of ``seconds`` (in memory, for what the test runs in its own
    process, and in its file, for the processes it starts after this): a pause of the server past them is
    that much shorter. The fixture's own client keeps its session."""
    from migrator.fleet import config as config_mod

    fleet.config.zookeeper.session_timeout = seconds
    fleet.config_path.write_text(config_mod.dump(fleet.config))


def pause_zookeeper(sandbox, seconds: float) -> threading.Thread:
    """SIGSTOP the sandbox's ZooKeeper now and SIGCONT it ``seconds`` later (from a thread: join it, in a
    ``finally``, so the server runs again whatever the test does)."""
    pid = sandbox.state.procs["zookeeper"].pid
    os.kill(pid, signal.SIGSTOP)

    def resume() -> None:
        time.sleep(seconds)
        os.kill(pid, signal.SIGCONT)

    t = threading.Thread(target=resume, daemon=True)
    t.start()
    return t
