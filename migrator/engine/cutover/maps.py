"""Shard-map edits of a cutover that must survive a ZooKeeper connection loss.

Used by the cutover run (its unfreeze on undo) and by reconcile (which
re-reads the map after an interruption to learn which side of the flip it is on).
"""

from __future__ import annotations

from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_fixed

from migrator.engine.cutover.errors import ZK_LOST, CutoverError
from migrator.errors import ShardMapConflict, ShardMapGuardLost
from migrator.fleet.model import MovingSet, ShardMap
from migrator.fleet.shard_map import ShardMapStore


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
