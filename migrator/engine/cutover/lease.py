"""The lease of a running cutover, and the lock that lets one process at a time settle it.

Runs in the process that runs a cutover (the holder) and in every
``migrator worker`` (the settlers, :mod:`migrator.engine.cutover.settle`).

Nodes, under ``<root>/cutovers/<migration id>``:

* the **record** (persistent): who holds the cutover (host, pid, when) and the
  last step of the freeze it reached. It exists from before the phase becomes
  ``cutover`` until the cutover is settled (done, or undone to ``converged``).
* the **lease** ``lease-<attempt>-<seq>`` (ephemeral, sequential): a child of the
  record, owned by a ZooKeeper session of the holder's own, with a short timeout
  (``zookeeper.lease_timeout``). It ends when the holder's process dies (its
  session expires) or when the holder is done. Its name is unique to the
  attempt (a random part before the sequence number, which starts again at 0
  when a settled record is dropped and made again): the lease is the guard of
  the holder's writes, and a guard another attempt could hold under the same
  name would guard nothing.

A record without a lease is an **orphan**: its holder died. Any settler may
settle it, under the settle lock (``<root>/cutover_settle/<id>``, an ephemeral
node, with a sibling of a name of its own as the guard of the settler's writes:
:class:`SettleLock`): two settlers never both act, and a settler never acts
while a lease exists. The holder's flip CAS is guarded by its lease
(checked in the same ZooKeeper transaction), so once the lease is gone the
holder can no longer flip: a settler that found no lease and undid the fence cannot be overtaken by
a holder that was merely cut off from ZooKeeper. The same guard covers every
other ZooKeeper write the holder makes for its attempt (unfreeze, phase, the
step it reached), and its settler's writes are guarded by the settle lock's
node: whoever lost its claim can no longer write over whoever holds one now.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from typing import Any

from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError, NotEmptyError

from migrator.engine.cutover.errors import CutoverError
from migrator.engine.migration import MigrationNotFound, MigrationStore, Phase
from migrator.engine.records import CutoverHolder
from migrator.fleet import zk as zk_mod
from migrator.fleet.config import Config, Credentials
from migrator.fleet.zk import ZK

CUTOVERS = "cutovers"
SETTLE = "cutover_settle"
LEASE_PREFIX = "lease-"


class CutoverRunning(CutoverError):
    """Another live process holds this cutover's lease."""

    exit_code = 3


def record_path(zk: ZK, migration_id: str) -> str:
    return zk.path(CUTOVERS, migration_id)


def _sequence(lease: str) -> str:
    return lease.rsplit("-", 1)[1]


def leases(zk: ZK, migration_id: str) -> list[str]:
    """The live leases of a cutover (sorted by sequence: the first is the holder)."""
    try:
        kids = zk.client.get_children(record_path(zk, migration_id))
    except NoNodeError:
        return []
    return sorted((k for k in kids if k.startswith(LEASE_PREFIX)), key=_sequence)


def read_record(zk: ZK, migration_id: str) -> dict[str, Any] | None:
    try:
        data, _ = zk.client.get(record_path(zk, migration_id))
    except NoNodeError:
        return None
    return json.loads(data) if data else {}


def holder_text(rec: dict[str, Any] | None) -> str:
    held = CutoverHolder.parse(rec)
    return f"{held.holder or '?'} (step {held.where})"


def where_it_was(rec: dict[str, Any] | None) -> str:
    """Where the holder of a record was when it was last heard of: after a step of the freeze, or in a
    step before it (``prepare``, ``gate``, ``passive``, ``recheck``, ``held``), for a death's record."""
    held = CutoverHolder.parse(rec)
    if held.step:
        return f"after step {held.step} of the freeze"
    return f"in step {held.where}, before the freeze"


class SettleLock:
    """An exclusive lock: an ephemeral node (protected ACL) of the settler's session.

    Not kazoo's ``Lock`` recipe: its contender nodes take the client's default
    (world-writable) ACL, and anyone could then delete the holder's node. The
    node goes with its session, so a settler that dies frees the lock.

    Made in one transaction with a sibling ``<id>.<random>``, ephemeral too: the
    :attr:`guard` of the settler's writes. The lock's own path is the same for
    every holder, so a settler whose session expired midway would find it held
    again (by the next settler) and take that for its own; the sibling is
    never anyone else's.
    """

    def __init__(self, zk: ZK, migration_id: str):
        self.zk = zk
        self.path = zk.path(SETTLE, migration_id)
        self.guard = f"{self.path}.{uuid.uuid4().hex[:12]}"
        self.held = False

    def acquire(self, blocking: bool = True, timeout: float | None = None) -> bool:
        self.zk.ensure(self.zk.path(SETTLE))
        data = json.dumps({"holder": zk_mod.holder(), "since": time.time()}).encode()
        deadline = time.monotonic() + (timeout if timeout is not None else 1e9)
        while True:
            t = self.zk.client.transaction()
            t.create(self.path, data, acl=self.zk.protected_acl(), ephemeral=True)
            t.create(self.guard, data, acl=self.zk.protected_acl(), ephemeral=True)
            results = t.commit()
            if not any(isinstance(r, Exception) for r in results):
                self.held = True
                return True
            if not isinstance(results[0], NodeExistsError):
                raise results[0] if isinstance(results[0], Exception) else results[1]
            if not blocking or time.monotonic() > deadline:
                return False
            time.sleep(0.2)

    def release(self) -> None:
        if self.held:
            self.held = False
            for path in (self.guard, self.path):
                try:
                    self.zk.client.delete(path)
                except NoNodeError:
                    pass


def settle_lock(zk: ZK, migration_id: str) -> SettleLock:
    """The lock every settler (and a holder settling a previous attempt) takes before acting."""
    return SettleLock(zk, migration_id)


def drop_record(zk: ZK, migration_id: str) -> bool:
    """Remove a settled cutover's record; refused (False) while a lease exists under it."""
    try:
        zk.client.delete(record_path(zk, migration_id))
    except NoNodeError:
        return True
    except NotEmptyError:
        return False
    return True


class CutoverLease:
    """Held by the process running a cutover, from before the phase is ``cutover`` until it is settled."""

    def __init__(self, config: Config, credentials: Credentials, migration_id: str):
        self.config = config
        self.credentials = credentials
        self.migration_id = migration_id
        self.zk: ZK | None = None
        self.path: str | None = None
        self.record: dict[str, Any] = {}

    def acquire(self) -> CutoverLease:
        """Take the lease; :class:`CutoverRunning` if a live process holds it already."""
        self.zk = zk_mod.connect(self.config, self.credentials,
                                 session_timeout=self.config.zookeeper.lease_timeout)
        zk = self.zk
        rec_path = record_path(zk, self.migration_id)
        self.record = {"holder": zk_mod.holder(), "host": socket.gethostname(),
                       "pid": os.getpid(), "since": time.time(), "step": None, "steps": {}}
        name = f"{LEASE_PREFIX}{uuid.uuid4().hex[:8]}-"  # unique: the guard of this attempt's writes
        try:
            for _ in range(5):
                zk.ensure(zk.path(CUTOVERS))
                # a new record and its lease in one transaction: a settler never sees a fresh record
                # without a lease (it would take it for an orphan and settle it)
                t = zk.client.transaction()
                t.create(rec_path, self._data(), acl=zk.protected_acl())
                t.create(f"{rec_path}/{name}", self._data(), acl=zk.protected_acl(), ephemeral=True,
                         sequence=True)
                results = t.commit()
                if not any(isinstance(r, Exception) for r in results):
                    self.path = results[1]
                    break
                if not isinstance(results[0], NodeExistsError):
                    raise results[0] if isinstance(results[0], Exception) else results[1]
                try:  # the record exists (an earlier attempt's): add a lease under it
                    self.path = zk.client.create(f"{rec_path}/{name}", self._data(),
                                                 acl=zk.protected_acl(), ephemeral=True, sequence=True)
                    break
                except NoNodeError:  # a settler dropped the record in between: make it again
                    continue
            else:
                raise CutoverError(f"could not create the cutover lease under {rec_path}", phase="cutover")
            mine = self.path.rsplit("/", 1)[1]
            first = leases(zk, self.migration_id)[0]
            if first != mine:
                other = read_record(zk, self.migration_id)
                self._drop_lease()
                raise CutoverRunning(f"a cutover of {self.migration_id} is already running in "
                                     f"{holder_text(other)}: wait for it (`migrator status "
                                     f"{self.migration_id}`); if that process dies a worker settles it",
                                     phase="cutover")
            zk.client.set(rec_path, self._data())
        except BaseException:
            self.close()
            raise
        return self

    def _data(self) -> bytes:
        return json.dumps(self.record).encode()

    @property
    def alive(self) -> bool:
        """The lease still exists (our session is alive and nobody removed it)."""
        if self.zk is None or self.path is None:
            return False
        try:
            return self.zk.client.exists(self.path) is not None
        except KazooException:
            return False

    def step(self, name: str) -> None:
        """Record the step of the freeze reached (asynchronous: it costs the freeze nothing). Guarded
        by the lease: a holder that lost it does not write over a later attempt's record."""
        if self.zk is None or self.path is None:
            return
        self.record["step"] = name
        self.record["steps"][name] = time.time()
        self._write()

    def before_freeze(self, name: str, attempt: str, label: str) -> None:
        """Record the step before the freeze under way, the attempt's id (which gates are its own) and
        ``label`` (cutover or rollback): where a holder that died before freezing was, for the settler's
        record of its death."""
        if self.zk is None or self.path is None:
            return
        self.record["before_freeze"] = name
        self.record["attempt"] = attempt
        self.record["label"] = label
        self._write()

    def _write(self) -> None:
        assert self.zk is not None and self.path is not None
        try:
            t = self.zk.client.transaction()
            t.check(self.path, -1)
            t.set_data(record_path(self.zk, self.migration_id), self._data())
            t.commit_async()
        except KazooException:
            pass  # the record is for people; the lease and the map are what settle a cutover

    def _drop_lease(self) -> None:
        if self.zk is not None and self.path is not None:
            try:
                self.zk.client.delete(self.path)
            except NoNodeError:
                pass
        self.path = None

    def release(self) -> None:
        """Give the lease up. The record goes too when the cutover is settled (phase no longer ``cutover``);
        otherwise it stays, an orphan, and a worker settles it at once."""
        if self.zk is None:
            return
        try:
            self._drop_lease()
            try:
                phase = MigrationStore(self.zk).state(self.migration_id)[0].phase
                settled = phase not in (Phase.CUTOVER, Phase.ROLLING_BACK)
            except MigrationNotFound:
                settled = True
            if settled:
                drop_record(self.zk, self.migration_id)
        except KazooException:
            pass  # the session ends below: a settler finds the record and settles it
        finally:
            self.close()

    def close(self) -> None:
        if self.zk is not None:
            self.zk.close()
            self.zk = None
