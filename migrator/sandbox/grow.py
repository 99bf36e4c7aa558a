"""Grow a running sandbox: ``migrator sandbox add-pair`` starts one more master-master pair,
empty, and registers its hosts in ZooKeeper (a spare pair: a split, move or rebalance target,
e.g. ``migrator rebalance --add-pair MySQL005A``)."""

from __future__ import annotations

from typing import Any

from migrator.errors import MigratorError
from migrator.fleet import config as config_mod
from migrator.fleet import zk as zk_mod
from migrator.fleet.model import pair_names
from migrator.fleet.shard_map import HostRegistry
from migrator.sandbox.procs import Proc, port_free

#: ports base+1..base+80 are the MariaDB hosts' (ZooKeeper and Redis sit at +81 and +91)
MAX_SERVER_ID = 80


def add_pair(sb: Any, *, log: Any = print, register: bool = True) -> tuple[str, str]:
    """Start a new empty pair in the running sandbox ``sb`` and register it (unless not
    ``register``); returns its names."""
    if sb.state is None or not all(p.alive() for p in sb.state.procs.values()):
        raise MigratorError(f"the sandbox in {sb.dir} is not running: `migrator sandbox up` first")
    st = sb.state
    index = st.pairs + st.spare_pairs + 1
    a, b = pair_names(index)
    if a in st.procs or b in st.procs:
        raise MigratorError(f"{a}/{b} already exist in the sandbox state; see `migrator sandbox status`")
    sid = max(p.server_id or 0 for p in sb.mariadb_procs()) + 1
    if sid + 1 > MAX_SERVER_ID:
        raise MigratorError(f"the sandbox has no port left for another pair (at most {MAX_SERVER_ID // 2} pairs)")
    new = []
    for j, (name, partner) in enumerate(((a, b), (b, a))):
        p = Proc(name=name, kind="mariadb", port=st.base_port + sid + j, datadir=str(sb.dir / name),
                 server_id=sid + j, partner=partner, offset=j + 1, spare=True)
        if not port_free(p.port):
            raise MigratorError(f"port {p.port} for {name} is in use: stop what holds it and retry")
        new.append(p)
    for p in new:
        st.procs[p.name] = p
    st.spare_pairs += 1
    sb._save()
    for p in new:
        sb._install_mariadb(p)
        sb._start_mariadb(p)
    sb._save()
    for p in new:
        sb._bootstrap_users(p)
    for p in new:
        sb._start_replication(p)
    if not register:  # as a real pair would be: `migrator topology add-pair` checks and registers it
        log(f"pair {a}/{b} started on ports {new[0].port}, {new[1].port}, not registered")
        return a, b
    cfg = sb.config()
    creds = config_mod.load_credentials(cfg)
    hosts = sb.hosts()
    with zk_mod.connect(cfg, creds) as zk:
        reg = HostRegistry(zk)
        for name in (a, b):
            reg.register(hosts[name])
    log(f"pair {a}/{b} started on ports {new[0].port}, {new[1].port} and registered (empty): "
        f"`migrator rebalance --add-pair {a}` fills it")
    return a, b
