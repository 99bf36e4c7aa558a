"""RQ jobs that run the real cutover with a fault injected at one of its named hooks.

They run inside a ``migrator worker`` started by the fault harness (the worker
imports this module by dotted name, ``tests.faults.fault_jobs.cutover_with_fault``),
so a kill at a hook is a kill -9 of the RQ worker at an exact point of the
cutover, not "somewhere near it". Arguments are ids and paths only.

Faults:

* ``kill``: SIGKILL the worker and this work-horse -- a machine loss in the middle of the cutover;
* ``expire_zk``: expire this process's ZooKeeper session on the server (a
  second client attaches to the same session and closes it), then go on;
* ``edit_map``: another client commits an edit of the moving ranges (an operator unfreezes them),
  so the flip's compare-and-set on the frozen epoch must fail.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any

from migrator.engine import cutover as cutover_mod
from migrator.fleet import config as config_mod
from migrator.fleet import zk as zk_mod
from migrator.fleet.shard_map import ShardMapStore


def kill_own_worker(_run: Any = None) -> None:
    # the work-horse runs in its own process group: kill the worker (its parent), then itself
    os.kill(os.getppid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)  # never reached


def expire_session(client: Any, timeout: float = 10.0) -> None:
    """Expire ``client``'s session on the ZooKeeper server (not a client-side simulation)."""
    from kazoo.client import KazooClient
    from kazoo.protocol.states import KazooState

    lost = []
    client.add_listener(lambda state: lost.append(state) if state == KazooState.LOST else None)
    sid, pwd = client.client_id
    other = KazooClient(hosts=",".join(f"{h}:{p}" for h, p in client.hosts))
    other._session_id, other._session_passwd = sid, pwd  # attach to the same session ...
    other.start(timeout=timeout)
    other.stop()  # ... and close it: the server expires it for the first client
    other.close()
    deadline = time.monotonic() + timeout
    while not lost and time.monotonic() < deadline:
        try:
            client.exists("/")  # the next request learns of the expiry
        except Exception:  # noqa: BLE001 - expected: SessionExpired / ConnectionLoss
            pass
        time.sleep(0.05)
    if not lost:
        raise RuntimeError("the ZooKeeper session did not expire")


def cutover_with_fault(mid: str, config_path: str, fault: str, at: str) -> dict[str, Any]:
    cfg = config_mod.load(config_path)

    def edit_map(run: Any) -> None:
        # an operator's edit of the moving ranges themselves (here: unfrozen by hand)
        def unfreeze(m: Any) -> Any:
            for lo, hi in run.ranges:
                m = m.without_frozen(lo, hi)
            return m

        with zk_mod.connect(cfg, config_mod.load_credentials(cfg)) as zk:
            ShardMapStore(zk).update(unfreeze, reason="operator edit during a freeze (fault test)")

    def expire(run: Any) -> None:
        expire_session(run.zk.client)

    action = {"kill": kill_own_worker, "expire_zk": expire, "edit_map": edit_map}[fault]
    if at.startswith("step:"):  # after a named step of the freeze (CutoverHooks.at_step)
        step = at.split(":", 1)[1]
        hooks = cutover_mod.CutoverHooks(at_step=lambda run, name: action(run) if name == step else None)
    else:
        hooks = cutover_mod.CutoverHooks(**{at: action})
    return cutover_mod.cutover(cfg, mid, hooks=hooks).to_dict()


def rollback_with_fault(mid: str, config_path: str, fault: str, at: str) -> dict[str, Any]:
    """``migrator rollback`` whose fenced flip back meets ``fault`` after the named step ``step:<name>``."""
    from migrator.engine.rollback import rollback

    cfg = config_mod.load(config_path)
    action = {"kill": kill_own_worker}[fault]
    step = at.split(":", 1)[1]
    hooks = cutover_mod.CutoverHooks(at_step=lambda run, name: action(run) if name == step else None)
    return rollback(cfg, mid, hooks=hooks).to_dict()
