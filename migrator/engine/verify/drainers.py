"""Drainers: how verify and the cutover get the target to a source binlog position.

Runs in the verify pass and in the cutover (before its freeze, and under its
fence for the final drain to the sentinel position). While catch-up passes run
in their own worker, which owns the ``catchup`` checkpoint, a drainer waits for
that checkpoint (:class:`CheckpointWaiter`); once the passes have stopped, it
tails the binlog itself (:class:`CatchUpDrainer`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Hashable
from typing import Any, Protocol, Self

from migrator.engine.catch_up.checkpoint import open_tailer
from migrator.engine.catch_up.tailer import DrainTimeout, TailStats
from migrator.engine.migration import MigrationStore, Node, Phase
from migrator.engine.names import SENTINEL_TABLE
from migrator.engine.records import CatchupNode
from migrator.engine.verify.changes import KeyCollector
from migrator.engine.verify.checksums import Key
from migrator.engine.verify.waits import WaitTimeout
from migrator.fleet import zk as zk_mod
from migrator.fleet.config import Config, load_credentials
from migrator.fleet.gtid import GtidPos, GtidState


class Drainer(Protocol):
    """Gets the target to a source binlog position (catch-up), and every verb its callers use around that.

    Implemented by the drainers that own a catch-up tail (:class:`TailDrainer`: :class:`CatchUpDrainer`,
    :class:`~migrator.engine.rollback.ReverseDrainer`) and by the one that waits for another process's
    tail (:class:`CheckpointWaiter`, whose verbs beyond the drain are the documented no-ops of
    :class:`NoTail`). Callers call the verbs directly: a drainer with nothing to do for one does nothing.
    """

    def drain_to(self, gtid: str, timeout: float, *, save: bool = True) -> TailStats | None:
        """Get the target to ``gtid`` (a source position or state) within ``timeout`` seconds; raises
        :class:`~migrator.engine.catch_up.tailer.DrainTimeout` or :class:`WaitTimeout` when it does not.

        ``save=False``: the position reached need not be saved before returning (a drain inside
        the freeze; the saved checkpoint only bounds what a crash replays)."""

    def progress(self) -> Hashable:
        """A marker of how far the drain has got, compared between slices of a long wait
        (:func:`~migrator.engine.verify.waits.drain_progressing`): a changed marker is progress."""

    def open(self) -> Self:
        """Make the drainer ready to drain (its tail and applier lock), if not already; returns it."""

    def warm(self) -> None:
        """Start what a drain needs (the tail's reader process) and apply what is there, so that no
        drain timed later (the cutover's gate, its freeze) pays for starting it."""

    def follow(self) -> bool:
        """Keep applying the source's binlog in the background until the next drain; False when the
        drainer cannot (nothing opened yet, or no tail of its own)."""

    @property
    def following(self) -> bool:
        """The drainer applies the source's binlog in the background (:meth:`follow`)."""

    def reached(self, target: str) -> bool:
        """The drainer has applied every transaction of ``target`` (a position or state)."""

    def stop_following(self) -> None:
        """Stop applying in the background (its last round committed); raise what it failed with."""

    @property
    def position(self) -> str | None:
        """Everything up to here is applied (None: not known, e.g. before the first drain)."""

    def collect(self, keys: dict[tuple[str, str], tuple[str, ...]]) -> bool:
        """Start collecting the primary keys of the row changes the drains apply to the tables of
        ``{(schema, table): pk columns}``; False when the drainer cannot (nothing opened, no tail)."""

    def collected(self) -> dict[tuple[str, str], set[Key]]:
        """The keys collected since :meth:`collect`, per (schema, table)."""

    def close(self) -> None:
        """Release what the drainer holds (its tail, reader process, applier lock); it may be opened again."""


class NoTail:
    """The verbs of a :class:`Drainer` that owns no catch-up tail of its own (it waits for another
    process's tail, as :class:`CheckpointWaiter` does): there is nothing to open, warm, follow,
    collect or close, so each is a no-op. A subclass gives :meth:`Drainer.drain_to`."""

    def progress(self) -> Hashable:
        """No marker: a wait cannot tell progress, and is given up after one slice that ends short."""
        return None

    def open(self) -> Self:
        """Nothing to open."""
        return self

    def warm(self) -> None:
        """Nothing to start."""

    def follow(self) -> bool:
        """Nothing to follow with: False."""
        return False

    @property
    def following(self) -> bool:
        """Never follows."""
        return False

    def reached(self, target: str) -> bool:
        """No tail to ask: False (only asked of a drainer that follows)."""
        return False

    def stop_following(self) -> None:
        """Never follows: nothing to stop."""

    @property
    def position(self) -> str | None:
        """Not known here (a caller reads the source's head instead)."""
        return None

    def collect(self, keys: dict[tuple[str, str], tuple[str, ...]]) -> bool:
        """No tail whose changes could be collected: False (a caller reads the binlog instead)."""
        return False

    def collected(self) -> dict[tuple[str, str], set[Key]]:
        """Nothing collected."""
        return {}

    def close(self) -> None:
        """Nothing held."""


def default_drainer(config: Config, migration_id: str, phase: Any = None) -> Drainer:
    """How to get the target to a source position, given the migration's phase.

    While copy or catch-up passes run (their worker owns the ``catchup``
    checkpoint), wait for that worker's checkpoint: a second tailer would
    fight it for the checkpoint. Once converged (passes stopped), tail
    ourselves.
    """
    if phase in (Phase.COPYING, Phase.CATCHING_UP):
        return CheckpointWaiter(config, migration_id)
    return CatchUpDrainer(config, migration_id)


class CheckpointWaiter(NoTail):
    """:class:`Drainer` that waits for the running catch-up worker's checkpoint to pass a position."""

    def __init__(self, config: Config, migration_id: str, poll_s: float = 0.1):
        self.config = config
        self.migration_id = migration_id
        #: how often to look again while the checkpoint node does not exist yet (once it does, a
        #: ZooKeeper watch wakes the wait when it changes; ``poll_s`` x 10 bounds a missed one)
        self.poll_s = poll_s
        #: the checkpoint the last wait saw (its progress: :func:`~migrator.engine.verify.waits.drain_progressing`)
        self.seen = ""

    def drain_to(self, gtid: str, timeout: float, *, save: bool = True) -> None:
        target = GtidState.parse(str(gtid))
        deadline = time.monotonic() + timeout
        changed = threading.Event()

        # the same function object on every read: kazoo holds one watch per (node, function), so the loop
        # never piles up watches
        def on_change(_event: Any) -> None:
            changed.set()

        with zk_mod.connect(self.config, load_credentials(self.config)) as zk:
            store = MigrationStore(zk)
            while True:
                changed.clear()
                node = CatchupNode.parse(store.get_progress(self.migration_id, Node.CATCHUP, watch=on_change)[0])
                # the checkpoint's per-(domain, server) state decides (exact in any GTID layout); a
                # checkpoint saved without one names only its position
                at = GtidState.of(node.state, node.gtid)
                self.seen = str(at)
                if at.reaches(target):
                    return
                if time.monotonic() > deadline:
                    raise WaitTimeout(f"catch-up of {self.migration_id} did not reach {gtid} within {timeout:.0f}s "
                                      f"(its checkpoint is at {at or 'nothing'}); is the catch-up job running? "
                                      "(`migrator status ID`)", phase="verify")
                wait = self.poll_s if node is None else self.poll_s * 10
                changed.wait(max(0.0, min(wait, deadline - time.monotonic())))

    def progress(self) -> str:
        """How far the catch-up worker had got at the last look (its checkpoint)."""
        return self.seen


class TailDrainer(KeyCollector):
    """A :class:`Drainer` that owns a catch-up :class:`~migrator.engine.catch_up.tailer.Tailer`:
    :meth:`open` makes it on first use, and it stays open until :meth:`close`.

    Between drains the tail can keep applying in the background (:meth:`follow`):
    the cutover follows the source from its last re-check round until its
    fence, so the drain under the fence is only what came in during the last
    few milliseconds, not everything written since the last drain. The tailer
    is used by one thread at a time: :meth:`drain_to`, :meth:`collect`,
    :meth:`collected` and :meth:`close` stop the follower first.
    """

    _tailer: Any = None
    _follower: _Follower | None = None

    def open(self) -> Self:
        """Make the tail (a subclass knows which), if not made yet; returns the drainer."""
        raise NotImplementedError

    def follow(self) -> bool:
        """Keep applying the source's binlog in a background thread until the next drain."""
        if self._tailer is None:
            return False
        if self._follower is None:
            self._follower = _Follower(self._tailer)
        return True

    @property
    def following(self) -> bool:
        """A background thread applies the source's binlog (:meth:`follow`) until the next drain."""
        return self._follower is not None

    def applied(self) -> GtidPos:
        """What the tail has committed so far (read while it follows, too)."""
        return self._tailer.applied if self._tailer is not None else GtidPos.parse("")

    def progress(self) -> tuple[str, int]:
        """How far the tail has got: what it has committed, and the row changes it has read (a transaction
        of millions of rows moves the second long before the first)."""
        t = self._tailer
        return ("", 0) if t is None else (str(t.applied), t.events_read)

    def reached(self, target: str) -> bool:
        """The tail has applied every transaction of ``target`` (a position or state; exact in any GTID
        layout: :meth:`~migrator.engine.catch_up.tailer.Tailer.reached`)."""
        return self._tailer is not None and self._tailer.reached(target)

    def stop_following(self) -> None:
        """Stop the background tail (its last round committed); raise what it failed with."""
        follower, self._follower = self._follower, None
        if follower is not None:
            follower.stop()

    def drain_to(self, gtid: str, timeout: float, *, save: bool = True) -> TailStats | None:
        """Apply up to ``gtid``; returns the tail's :class:`~migrator.engine.catch_up.tailer.TailStats`
        (``events``: row changes read during the call, ``duration_s``: the whole call).

        A following tail is not stopped first: it is left to reach ``gtid`` by itself, then stopped.
        Stopping it at once would commit what it holds as a round of its own before the rest (the
        fence's sentinel) is even read; left running, it reads the rest while its last round
        commits, and sends it with what it collected meanwhile."""
        t0 = time.monotonic()
        before = self._counters()
        follower = self._follower
        reached = stopped = 0.0
        if follower is not None:
            follower.wait_for(str(gtid), t0 + timeout)
            reached = time.monotonic() - t0
            self.stop_following()
            stopped = time.monotonic() - t0
        self.open()
        try:
            stats = self._tailer.drain_to(gtid, max(0.001, t0 + timeout - time.monotonic()), save=save)
        except DrainTimeout as exc:
            if exc.stats is not None:  # what this slice of a longer wait did (waits.drain_progressing counts it)
                self._account(exc.stats, t0, before, reached, stopped)
            raise
        return self._account(stats, t0, before, reached, stopped)

    def _account(self, stats: TailStats, t0: float, before: tuple[int, int, int, int], reached: float,
                 stopped: float) -> TailStats:
        """``stats`` of the tailer's drain as this call's: its follower's rounds too, times from ``t0``."""
        tailer = self._tailer
        events, retries, rounds, connects = (now - then for now, then in zip(self._counters(), before))
        stats.events = events
        stats.duration_s = time.monotonic() - t0
        # when the last transactions arrived and the last round left, from the start of this call
        stats.read_s = max(0.0, tailer.last_txns_at - t0)
        stats.submit_s = max(0.0, tailer.last_submit_at - t0)
        stats.sent_s = max(0.0, tailer.last_txns_sent_at - t0)
        stats.rounds = rounds  # the follower's rounds too
        stats.connects = connects
        stats.last_round_ms = tailer.lanes.last_round_ms
        stats.reached_s, stats.stopped_s = reached, stopped
        stats.retries = retries
        stats.retry_cause = tailer.lanes.last_retry if stats.retries else ""
        return stats

    def _counters(self) -> tuple[int, int, int, int]:
        """The tail's running totals a drain reports the difference of: row changes read, lane
        retries, rounds, lane connections (zeros before the tail is opened)."""
        t = self._tailer
        if t is None:
            return 0, 0, 0, 0
        return t.events_read, t.lanes.retries, t.lanes.rounds, t.lanes.connects

    def warm(self) -> None:
        """Start the tail's reader process and apply what is there (before anything is timed)."""
        self.stop_following()
        self.open()
        self._tailer.warm()

    def collect(self, keys: dict[tuple[str, str], tuple[str, ...]]) -> bool:
        """Stop following, then start collecting keys (:meth:`KeyCollector.collect`)."""
        self.stop_following()
        return super().collect(keys)

    def collected(self) -> dict[tuple[str, str], set[Key]]:
        """Stop following, then the keys collected (:meth:`KeyCollector.collected`)."""
        self.stop_following()
        return super().collected()

    def close(self) -> None:
        """Stop following and close the tail (its reader process); :meth:`open` makes a new one."""
        try:
            self.stop_following()
        finally:
            if self._tailer is not None:
                self._tailer.close()
                self._tailer = None


class _Follower:
    """A thread applying a tailer's binlog until :meth:`stop` (errors kept for :meth:`stop`)."""

    SLICE_S = 5.0

    def __init__(self, tailer: Any):
        self.tailer = tailer
        self.error: BaseException | None = None
        self.done = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="drainer-follow", daemon=True)
        self._thread.start()

    def wait_for(self, pos: str, deadline: float) -> None:
        """Until the tail has applied ``pos``, has stopped (an error: :meth:`stop` raises it), or the
        deadline (monotonic) has passed."""
        tailer = self.tailer
        with tailer.applied_changed:
            tailer.applied_changed.wait_for(lambda: self.done or tailer.reached(pos),
                                            timeout=max(0.0, deadline - time.monotonic()))

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                # saved while it runs (at most every checkpoint_every_s), not again when stopped: the
                # drain that stops it under the fence must not wait for a ZooKeeper write
                self.tailer.apply_until(None, timeout_s=self.SLICE_S, stop=self._stop, save=False)
        except BaseException as exc:  # noqa: BLE001 - raised in the drainer's thread by stop()
            self.error = exc
        finally:
            with self.tailer.applied_changed:
                self.done = True
                self.tailer.applied_changed.notify_all()

    def stop(self) -> None:
        self._stop.set()
        self.tailer.wake()  # its wait for the reader ends now, not at its next 10 ms poll
        self._thread.join()
        if self.error is not None:
            raise self.error


class CatchUpDrainer(TailDrainer):
    """:class:`Drainer` over a catch-up :class:`~migrator.engine.catch_up.tailer.Tailer`, opened
    on first use and kept open (the cutover warms it before its freeze, so no
    connection is opened inside the freeze budget)."""

    def __init__(self, config: Config, migration_id: str):
        self.config = config
        self.migration_id = migration_id
        self._tailer: Any = None

    def open(self) -> CatchUpDrainer:
        if self._tailer is None:
            # A queue-partition tail keeps only the partition's tables; the cutover's
            # sentinel row lives beside them in the same db and must come through too.
            self._tailer = open_tailer(self.config, self.migration_id, extra_tables=(SENTINEL_TABLE,))
        return self
