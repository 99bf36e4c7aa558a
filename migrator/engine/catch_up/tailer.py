"""The tailer: a long-lived binlog tail from a source master into a target master.

Runs inside the catch-up worker (one per pass, or one across passes), in the
cutover process for the final drain under the write fence, and in a rollback
(new master back into the tombstone schemas). It joins the
:class:`~migrator.engine.catch_up.streamer.BinlogStreamer` (what to read) to
the :class:`~migrator.engine.catch_up.applier.Applier` (how to write it) and
calls back with a checkpoint after each committed batch, never before: a
crash replays from the last checkpoint, which the idempotent apply makes
harmless.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from migrator.engine.catch_up.applier import Applier, UnsafeStatement
from migrator.engine.catch_up.streamer import BinlogStreamer
from migrator.errors import MigratorError
from migrator.fleet import mysql
from migrator.fleet.config import Credentials
from migrator.fleet.gtid import GtidPos
from migrator.fleet.model import Host
from migrator.fleet.mysql import binlog_pos

log = logging.getLogger(__name__)


class CatchUpError(MigratorError):
    component = "catch_up"


class DrainTimeout(CatchUpError):
    """The target GTID was not applied within the drain's time limit."""


@dataclass
class TailStats:
    """What one :meth:`Tailer.apply_until` call did."""

    start: str
    end: str
    reached: bool
    events: int = 0
    transactions: int = 0
    bytes: int = 0
    statements: int = 0
    batches: int = 0
    duration_s: float = 0.0
    first_ts: int = 0  # binlog timestamp of the first kept transaction (0: none)
    last_ts: int = 0

    @property
    def events_per_s(self) -> float:
        return self.events / self.duration_s if self.duration_s > 0 else 0.0


class Tailer:
    """A long-lived binlog tail from ``source`` into ``target``.

    ``schema_map``: source schema -> target schema; its keys are the schemas
    streamed. ``tables``: only these tables of those schemas (None: all).
    ``on_checkpoint(pos)`` is called after each committed batch with the
    position whose every transaction is now applied.

    ``pipeline``: write each batch in a background thread while the next one
    is read and decoded (one batch in flight; checkpoints stay in commit order).
    Off by default: on a 2-core box it was slower (the decoding thread and the
    writer contend for the GIL; see ``python -m bench.catchup``).

    Keep one open across several calls (passes, then the cutover's drain): the
    binlog connection, the target connection and the source control
    connection are opened once.
    """

    def __init__(
        self,
        source: Host,
        target: Host,
        credentials: Credentials,
        *,
        start: GtidPos,
        schema_map: Mapping[str, str],
        tables: Iterable[str] | None = None,
        on_checkpoint: Callable[[GtidPos], None] | None = None,
        batch_events: int = 2000,
        batch_ms: float = 200.0,
        idle_checkpoint_s: float = 1.0,
        freeze_schema: bool = True,
        heartbeat_s: float = 0.25,
        pipeline: bool = False,
    ):
        self.source = source
        self.target = target
        self.schema_map = dict(schema_map)
        self.tables = set(tables) if tables else None
        self.on_checkpoint = on_checkpoint
        self.batch_events = batch_events
        self.batch_ms = batch_ms
        self.idle_checkpoint_s = idle_checkpoint_s
        self.applied = start
        self._credentials = credentials
        self.streamer = BinlogStreamer(
            source, credentials, start=start, schemas=self.schema_map, tables=self.tables,
            freeze_schema=freeze_schema, heartbeat_s=heartbeat_s,
        )
        self.applier = Applier(
            lambda: mysql.connect(target, credentials, autocommit=False, read_timeout=600), self.schema_map,
            tables=self.tables,
        )
        self._source_conn: Any = None
        self._last_checkpoint_at = time.monotonic()
        self.pipeline = pipeline
        self._executor: ThreadPoolExecutor | None = None
        self._inflight: Future[None] | None = None

    # -- source head --------------------------------------------------------------------
    def source_head(self) -> GtidPos:
        """The source's ``@@gtid_binlog_pos`` now (one query on a kept connection)."""
        for attempt in range(2):
            try:
                if self._source_conn is None or not self._source_conn.open:
                    self._source_conn = mysql.connect(self.source, self._credentials)
                return GtidPos.parse(binlog_pos(self._source_conn))
            except MigratorError:
                raise
            except Exception as exc:  # noqa: BLE001 - a dropped connection is retried once
                self._source_conn = None
                if attempt:
                    raise CatchUpError(f"cannot read @@gtid_binlog_pos on {self.source.name}: {exc}") from None
        raise AssertionError("unreachable")

    # -- applying ----------------------------------------------------------------------------
    def _checkpoint(self, pos: GtidPos) -> None:
        if pos == self.applied:
            return
        self.applied = pos
        self._last_checkpoint_at = time.monotonic()
        if self.on_checkpoint is not None:
            self.on_checkpoint(pos)

    def _flush(self, pos: GtidPos, stats: TailStats, *, wait: bool = False) -> None:
        """Write the pending batch, then checkpoint ``pos``. With ``pipeline`` the
        write runs in the background while the next batch is read (one batch in
        flight at most; its checkpoint follows its commit, in order)."""
        batch = self.applier.take_batch()
        self._wait()
        if batch is not None:
            stats.batches += 1
            if self.pipeline:
                if self._executor is None:
                    self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="catchup-apply")
                self._inflight = self._executor.submit(self._write_then_checkpoint, batch, pos)
            else:
                self._write_then_checkpoint(batch, pos)
        else:
            self._checkpoint(pos)
        if wait:
            self._wait()

    def _write_then_checkpoint(self, batch: Any, pos: GtidPos) -> None:
        self.applier.write_batch(batch)
        self._checkpoint(pos)

    def _wait(self) -> None:
        """Wait for the batch in flight (its errors surface here)."""
        if self._inflight is not None:
            fut, self._inflight = self._inflight, None
            fut.result()

    def apply_until(self, until: GtidPos | None, *, timeout_s: float | None = None) -> TailStats:
        """Apply every kept transaction up to and including ``until`` (None: until
        the timeout), checkpointing after each batch. Returns once ``until`` is
        committed on the target and checkpointed, or at the timeout
        (``reached`` False)."""
        try:
            return self._apply_until(until, timeout_s)
        except BaseException:
            try:
                self._wait()  # leave no write running behind an error
            except Exception as exc:  # noqa: BLE001 - the first error is the one to report
                log.warning("a batch in flight failed too: %s", exc)
            raise

    def _apply_until(self, until: GtidPos | None, timeout_s: float | None) -> TailStats:
        t0 = time.monotonic()
        deadline = t0 + timeout_s if timeout_s is not None else None
        stats = TailStats(start=str(self.applied), end="", reached=False)
        streamer, applier = self.streamer, self.applier
        moving = list(self.schema_map)
        batch_started = 0.0
        batch_s = self.batch_ms / 1000.0
        for txn in streamer.transactions(until, deadline=deadline):
            now = time.monotonic()
            if txn is None:
                if applier.pending_events and now - batch_started >= batch_s:
                    self._flush(streamer.position, stats)
                elif not applier.pending_events and now - self._last_checkpoint_at >= self.idle_checkpoint_s:
                    self._flush(streamer.position, stats)  # waits for the batch in flight first
                continue
            stats.transactions += 1
            if not stats.first_ts:
                stats.first_ts = txn.timestamp
            stats.last_ts = txn.timestamp
            if txn.statements:
                before = streamer.position_before(txn)
                if txn.events:
                    stats.events += applier.add(txn.events)
                self._wait()  # the statement runs on the applier's connection: no batch in flight
                for st in txn.statements:
                    try:
                        result = applier.apply_statement(st, moving)  # flushes pending rows first
                    except UnsafeStatement:
                        # everything before this statement is applied: checkpoint just before it
                        self._flush(before, stats, wait=True)
                        raise
                    if result != "ignored":
                        stats.statements += 1
                self._flush(streamer.position, stats, wait=True)
                continue
            if not applier.pending_events:
                batch_started = now
            stats.events += applier.add(txn.events)
            stats.bytes += txn.size
            if applier.pending_events >= self.batch_events or now - batch_started >= batch_s:
                self._flush(streamer.position, stats)
        self._flush(streamer.position, stats, wait=True)
        stats.reached = until is None or self.applied.contains(until)
        stats.end = str(self.applied)
        stats.duration_s = time.monotonic() - t0
        return stats

    def warm(self) -> TailStats:
        """Connect the binlog stream now (the server looks up our GTID position,
        which can take a few hundred ms over many binlog files) and apply
        whatever is already there. Call it before a freeze, not inside one."""
        return self.apply_until(None, timeout_s=0.0)

    def drain_to(self, target_gtid: GtidPos | str, timeout_s: float) -> TailStats:
        """Apply up to and including ``target_gtid``; raise :class:`DrainTimeout` if
        it is not committed and checkpointed within ``timeout_s``."""
        target = GtidPos.parse(target_gtid) if isinstance(target_gtid, str) else target_gtid
        stats = self.apply_until(target, timeout_s=timeout_s)
        if not stats.reached:
            raise DrainTimeout(
                f"drain to {target} did not finish within {timeout_s:.3f}s (applied up to {self.applied}); "
                "the cutover should release its fence and retry later"
            )
        return stats

    def close(self) -> None:
        try:
            self._wait()
        except Exception as exc:  # noqa: BLE001 - closing; the error was or will be seen by the caller
            log.warning("the last batch failed while closing: %s", exc)
        if self._executor is not None:
            self._executor.shutdown(wait=True)
            self._executor = None
        self.streamer.close()
        self.applier.close()
        if self._source_conn is not None:
            try:
                self._source_conn.close()
            except Exception:  # already gone
                pass
            self._source_conn = None

    def __enter__(self) -> Tailer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
