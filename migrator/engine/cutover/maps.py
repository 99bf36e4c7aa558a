"""Shard-map edits of a cutover that must survive a ZooKeeper connection loss.

:class:`MapEdits` is one attempt's freeze, flip and unfreeze, each a CAS guarded by
the attempt's lease, with what a lost answer means for each. :func:`reread_map` and
:func:`unfreeze_ranges` are used by them and by reconcile (which re-reads the map
after an interruption to learn which side of the flip it is on).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kazoo.exceptions import KazooException
from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_fixed

from migrator.engine.cutover.direction import Direction
from migrator.engine.cutover.errors import ZK_LOST, CutoverAborted, CutoverError, FlipUnknown, LeaseLost
from migrator.engine.cutover.lease import settle_lock
from migrator.errors import ShardMapConflict, ShardMapGuardLost
from migrator.fleet.model import MovingSet, ShardMap
from migrator.fleet.shard_map import ShardMapStore
from migrator.fleet.zk import ZK

if TYPE_CHECKING:
    from migrator.engine.cutover.lease import CutoverLease


def reread_map(maps: ShardMapStore, timeout: float = 60.0) -> ShardMap:
    """Read the map after a connection loss, waiting for the session to come back."""
    for attempt in Retrying(stop=stop_after_delay(timeout), wait=wait_fixed(0.2),
                            retry=retry_if_exception_type(ZK_LOST), reraise=True):
        with attempt:
            return maps.read()
    raise AssertionError("unreachable")


def unfreeze_ranges(maps: ShardMapStore, moving: MovingSet, *, reason: str, attempts: int = 5,
                    guard: str | None = None) -> None:
    """Unfreeze our ranges (or our tables' route). Re-reads on a conflict: it only undoes our own freeze.

    ``guard``: the znode of the claim the unfreeze is made under (the cutover's lease, a
    settler's lock), checked in the same ZooKeeper transaction. Once it is gone the unfreeze
    is refused (:class:`~migrator.errors.ShardMapGuardLost`, never retried): the ranges may be
    another attempt's freeze by then, and whoever took over unfreezes them.
    """
    for _ in range(attempts):
        cur = reread_map(maps)
        new = moving.unfreeze(cur)
        if new.frozen == cur.frozen and new.routes == cur.routes:
            return
        assert cur.epoch is not None
        try:
            maps.cas(new, cur.epoch, reason=reason, guard=guard)
            return
        except ShardMapGuardLost:
            raise
        except ShardMapConflict:
            continue
        except ZK_LOST:
            continue
    raise CutoverError(f"could not unfreeze {moving.describe()} after {attempts} tries: unfreeze them with "
                       "`migrator topology` by hand", phase="cutover")


class LeaseGuard:
    """The attempt's lease as its guarded writes see it (no lease at all: unguarded, as in tests)."""

    def __init__(self) -> None:
        self.lease: CutoverLease | None = None
        #: the lease's node as last seen (see :attr:`path`); a path no lease ever has until then
        self._path = "/migrator-no-lease-held"

    @property
    def path(self) -> str | None:
        """The lease's znode: the ZooKeeper writes of this attempt commit only while it exists (once
        the lease is given up, the node it had: nothing it guards commits any more)."""
        if self.lease is None:
            return None
        if self.lease.path is not None:
            self._path = self.lease.path
        return self._path

    @property
    def alive(self) -> bool:
        return self.lease is None or self.lease.alive

    def while_holding(self, zk: ZK, migration_id: str, action: Callable[[], None]) -> bool:
        """Run ``action``, a change to what is not the attempt's own (the old master's tables in a
        rollback), only while this process holds the lease: under the settle lock, which every
        settler takes before it acts, with the lease checked under it. False (nothing done) when
        the lease is gone or the lock is not free: then a settler decides, once the lease is gone."""
        if self.lease is None:
            action()
            return True
        lock = settle_lock(zk, migration_id)
        try:
            if not lock.acquire(blocking=True, timeout=5):
                return False
        except KazooException:  # ZooKeeper unreachable: the lease cannot be confirmed either
            return False
        try:
            if not self.lease.alive:
                return False
            action()
            return True
        finally:
            try:
                lock.release()
            except KazooException:
                pass  # the lock ends with this process's session


class MapEdits:
    """One attempt's edits of the shard map: freeze, flip, unfreeze.

    Each is one CAS guarded by the attempt's lease (``lease.path`` names its znode; None: no lease), so
    none of them commits once the lease is given up. A conflict with another change is read again:
    the freeze retries on the new map, the flip too but only while our ranges are exactly as we froze
    them. A CAS that went out with no answer is decided by reading the map back (for at most
    :attr:`reread_s`); when that cannot decide it, :class:`FlipUnknown` leaves it to the settler.
    """

    def __init__(self, maps: ShardMapStore, moving: MovingSet, ranges: list[Any], direction: Direction,
                 migration_id: str, lease: LeaseGuard):
        self.maps = maps
        self.moving = moving
        self.ranges = ranges
        self.direction = direction
        self.migration_id = migration_id
        self.lease = lease
        self.frozen_epoch: int | None = None
        self.frozen_map: ShardMap | None = None
        self.flipped_epoch: int | None = None
        #: after a lost answer, how long to try reading the map back before the outcome counts as
        #: unknown without it (a variable: tests shorten it)
        self.reread_s = 60.0
        #: an unfreeze found the lease gone (refused): the settler finishes the undo
        self.lease_lost = False

    @property
    def label(self) -> str:
        return self.direction.label

    def landed_once_lease_is_gone(self, timeout: float = 10.0) -> bool | None:
        """After an unknown flip: give the lease up, then read the map. True/False once the lease node
        is known gone (the guarded flip CAS can no longer commit, so the map is final); None when
        that cannot be known now (ZooKeeper unreachable)."""
        path = self.lease.path
        if self.lease.lease is None or path is None:
            return None
        self.lease.lease.release()  # its record stays while the phase is still "cutover": for the settler
        try:
            if self.maps.zk.client.exists(path) is not None:
                return None  # not deleted (the lease's own session was cut off): it ends with that session
            return self.flip_landed(reread_map(self.maps, timeout))
        except (*ZK_LOST, KazooException):
            return None

    # -- freeze ----------------------------------------------------------------------------
    def freeze(self, attempts: int = 5) -> None:
        """Freeze our ranges in one CAS; another change landing first (a concurrent move's freeze
        or flip) is read again and the freeze retried: nothing is frozen until it lands."""
        for attempt in range(attempts):
            try:
                self._freeze_once()
                return
            except ShardMapConflict:
                if attempt + 1 == attempts:
                    raise

    def _freeze_once(self) -> None:
        cur = self.maps.read()
        moving = self.moving
        for s in moving.shards:
            owner = moving.master_in(cur, s)
            if owner != self.direction.from_master:
                raise CutoverError(f"{moving.describe()}: shard {s} is served by {owner}, not "
                                   f"{self.direction.from_master}: the map changed since the plan", phase=self.label)
            if moving.frozen_in(cur, s):
                raise CutoverError(f"{moving.describe()}: shard {s} is already frozen by someone else",
                                   phase=self.label)
        new = moving.freeze(cur)
        assert cur.epoch is not None
        try:
            # guarded by the lease like the flip: once the lease is given up, a freeze still held
            # somewhere (a paused ZooKeeper server) can no longer commit
            stored = self.maps.cas(new, cur.epoch, reason=f"{self.label} {self.migration_id}: freeze",
                                   details={"migration": self.migration_id, "ranges": self.ranges,
                                            "moving": moving.describe()}, guard=self.lease.path)
        except ShardMapGuardLost:
            raise LeaseLost(self.label, "the freeze", "nothing was frozen") from None
        except ZK_LOST:
            stored = self._freeze_outcome()
        self.frozen_epoch = stored.epoch
        self.frozen_map = stored

    def _freeze_outcome(self) -> ShardMap:
        """The freeze CAS went out and no answer came back. A map read back that shows our ranges frozen
        is the answer (the shards are this migration's: nobody else freezes them) and the freeze goes
        on; anything else leaves it to the settler, which gives the lease up first (after which the
        guarded CAS cannot commit) and unfreezes what the map shows frozen."""
        try:
            smap = reread_map(self.maps, self.reread_s)
        except ZK_LOST:
            smap = None
        landed = (smap is not None and self.moving.all_frozen(smap)
                  and self.moving.served_by(smap, self.direction.from_master))
        if landed and self.lease.alive:
            assert smap is not None
            return smap
        raise FlipUnknown(
            "lost ZooKeeper during the freeze, before anything was fenced; the freeze may still commit, so "
            "the decision is left to the settler, which unfreezes the ranges from the map once this "
            f"process's lease is gone; the source serves (`migrator {self.label} ID` retries)", phase=self.label)

    # -- unfreeze --------------------------------------------------------------------------
    def unfreeze(self) -> bool:
        """Unfreeze our ranges, guarded by the lease: False (nothing changed) once the lease is gone,
        when the ranges may be a later attempt's freeze already; the settler unfreezes then."""
        try:
            unfreeze_ranges(self.maps, self.moving, reason=f"{self.label} {self.migration_id}: abort, unfreeze",
                            guard=self.lease.path)
        except ShardMapGuardLost:
            self.lease_lost = True
            return False
        return True

    # -- flip --------------------------------------------------------------------------------
    def flipped_map(self, frozen: ShardMap) -> ShardMap:
        return self.moving.flip(frozen, self.direction.to_master, self.direction.to_passive)

    def flip_landed(self, smap: ShardMap) -> bool:
        return self.moving.served_by(smap, self.direction.to_master)

    def ours_unchanged(self, smap: ShardMap) -> bool:
        """Our ranges (or route) in ``smap`` are exactly as we froze them (owner, standby, frozen)."""
        frozen = self.frozen_map
        assert frozen is not None
        return self.moving.image(smap) == self.moving.image(frozen) and self.moving.all_frozen(smap)

    def flip(self, details: dict[str, Any], attempts: int = 5) -> bool:
        """The one CAS. Returns True when the flip landed; raises (after undo by the caller) if not.

        The flip is made on the map we froze. If another change landed meanwhile (another
        migration's freeze or flip of other ranges: concurrent moves of a rebalance), the map is
        read again and the flip made on it, but only if our ranges are exactly as we froze them;
        any change to them refuses the flip."""
        assert self.frozen_epoch is not None and self.frozen_map is not None
        base = self.frozen_map
        for attempt in range(attempts):
            try:
                return self._flip_on(base, details)
            except ShardMapConflict as exc:
                cur = reread_map(self.maps)
                if attempt + 1 == attempts or not self.ours_unchanged(cur):
                    raise CutoverAborted(
                        f"the shard map changed during the freeze (epoch {self.frozen_epoch} expected): "
                        f"{exc.message} The flip was not made and the source still serves; look at "
                        f"`migrator topology history`, then retry the {self.label}", phase=self.label) from None
                base = cur
        raise AssertionError("unreachable")

    def _flip_on(self, base: ShardMap, details: dict[str, Any]) -> bool:
        assert base.epoch is not None
        new = self.flipped_map(base)
        try:
            stored = self.maps.cas(new, base.epoch, reason=f"{self.label} {self.migration_id}: flip to "
                                   f"{self.direction.to_master}/{self.direction.to_passive}",
                                   details={"migration": self.migration_id, "ranges": self.ranges,
                                            "moving": self.moving.describe(), **details,
                                            "direction": self.label},
                                   guard=self.lease.path)
            self.flipped_epoch = stored.epoch
            return True
        except ShardMapGuardLost:
            raise LeaseLost(self.label, "the flip", "the flip was not made and the source still serves") from None
        except ZK_LOST:
            # the CAS went out and no answer came back: it may have committed, or may still commit (a
            # server that held it, paused, processes it when it resumes). Only a map that shows it is
            # an answer; a map that does not is no proof it never will.
            try:
                smap = reread_map(self.maps, self.reread_s)
            except ZK_LOST:
                raise FlipUnknown(
                    "lost ZooKeeper during the flip and could not read the map back; the fences stay closed "
                    "(the source tables go to the tombstones, the gates stay shut), safe either way; once this "
                    f"process's lease is gone a worker settles it from the map (`migrator {self.label} ID` does "
                    "too)", phase=self.label) from None
            if self.flip_landed(smap) and self.lease.alive:
                self.flipped_epoch = smap.epoch
                return True
            if self.flip_landed(smap):
                # landed, but the lease ended meanwhile: a settler may be finishing it already; this
                # process does not finish it beside it (the settle, from the map, does)
                raise FlipUnknown("lost ZooKeeper during the flip; the map read back shows it landed, but this "
                                  "process lost its lease meanwhile, so a settler finishes it",
                                  phase=self.label) from None
            raise FlipUnknown(
                "lost ZooKeeper during the flip and the map read back does not show it yet; the request may "
                "still commit, so the fences stay closed (the source tables go to the tombstones, the gates "
                "stay shut) until the settler decides from the map once this process's lease is gone",
                phase=self.label) from None
