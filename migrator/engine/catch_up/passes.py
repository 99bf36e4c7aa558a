"""Catch-up: replay the source master's binlog onto the target until the target
is close enough behind for a cutover.

Where it runs: the catch-up RQ job (``jobs.catch_up.run_passes``), the
``migrator catchup ID`` command, and, for the final drain under the write
fence, the cutover (:func:`drain_to`, or a long-lived :class:`Tailer`).

The runbook of one pass (:func:`run_pass`):

1. read the source head (``@@gtid_binlog_pos``) at the start of the pass;
2. tail the binlog from the checkpoint (first pass: the earliest ``start_gtid``
   the copy recorded, per domain) up to that head, filtered to the moving
   schemas (and, for a queue partition, its tables), applying row changes in
   batches; the checkpoint (``catchup`` progress node, ``gtid``) is written
   after each committed batch;
3. record the pass: events, bytes, duration, apply rate, source write rate,
   lag and the predicted cutover freeze;
4. converged when the delta and lag fall under ``Options.converge_events`` /
   ``converge_lag_s`` (phase CONVERGED); *not converging* when the apply rate
   stayed below the write rate for ``Options.not_converging_passes`` passes
   (reported with both rates, not retried forever).

Resume: everything restarts from the ``catchup`` node's ``gtid``; replaying
from an earlier position is harmless because apply is idempotent by key.

The :class:`Tailer` keeps source, target and schema mapping explicit, so the
same code tails a new master back into tombstone schemas for a rollback.
"""

from __future__ import annotations

import logging
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from kazoo.exceptions import BadVersionError

from migrator.fleet import config as config_mod
from migrator.fleet import mysql
from migrator.fleet import zk as zk_mod
from migrator.engine.catch_up.applier import Applier, UnsafeStatement
from migrator.fleet.config import Config, Credentials
from migrator.errors import MigratorError
from migrator.fleet.model import Host
from migrator.fleet.gtid import GtidPos, earliest
from migrator.engine.migration import MigrationStore, Options, Phase, Spec, State
from migrator.fleet.shard_map import HostRegistry
from migrator.engine.catch_up.streamer import BinlogStreamer, binlog_pos

log = logging.getLogger(__name__)

CHECKPOINT_KEY = "catchup"
COPY_PREFIX = "copy"
#: passes kept in the progress node (older ones are dropped)
PASS_HISTORY = 50

#: phases in which catch-up may run, and the phase it leaves them in
_RUNNABLE = {Phase.COPYING, Phase.CATCHING_UP, Phase.CONVERGED, Phase.VERIFYING, Phase.CUTOVER}


class CatchUpError(MigratorError):
    component = "catch_up"


class CatchUpConflict(CatchUpError):
    """Someone else wrote the checkpoint meanwhile: two catch-up workers run."""

    exit_code = 3


class NotConverging(CatchUpError):
    """The apply rate stays below the source's write rate."""


class DrainTimeout(CatchUpError):
    """The target GTID was not applied within the drain's time limit."""


# -- the tailer ---------------------------------------------------------------------

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
                return binlog_pos(self._source_conn)
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


# -- the migration's checkpoint node ------------------------------------------------------------

class Checkpoint:
    """The ``catchup`` progress node of one migration, written by compare-and-set.

    Holds ``gtid`` (every transaction up to it is applied on the target), the
    pass table, and the convergence verdict. A lost CAS means a second
    catch-up worker writes it too: that raises :class:`CatchUpConflict`.
    """

    def __init__(self, store: MigrationStore, migration_id: str):
        self.store = store
        self.mid = migration_id
        data, version = store.get_progress(migration_id, CHECKPOINT_KEY)
        self.data: dict[str, Any] = data or {"gtid": None, "passes": []}
        self.version = version

    @property
    def gtid(self) -> GtidPos | None:
        g = self.data.get("gtid")
        return None if g is None else GtidPos.parse(g)

    def save(self, **fields: Any) -> None:
        self.data.update(fields)
        self.data["updated_at"] = time.time()
        try:
            self.version = self.store.put_progress(self.mid, CHECKPOINT_KEY, self.data, version=self.version)
        except BadVersionError:
            raise CatchUpConflict(
                f"migration {self.mid}: the catch-up checkpoint was written by someone else meanwhile; "
                "only one catch-up worker may run per migration (check `rq info` and stop the other one)"
            ) from None

    def set_gtid(self, pos: GtidPos) -> None:
        self.save(gtid=str(pos))


def copy_start(store: MigrationStore, migration_id: str) -> tuple[GtidPos, list[str]]:
    """The earliest ``start_gtid`` (per domain) of the copy's table nodes, and those
    still not done. Raises when the copy recorded nothing."""
    keys = store.progress_keys(migration_id, COPY_PREFIX)
    starts, unfinished = [], []
    for key in keys:
        node, _ = store.get_progress(migration_id, f"{COPY_PREFIX}/{key}")
        if not node or node.get("start_gtid") is None:
            unfinished.append(key)
            continue
        starts.append(GtidPos.parse(node["start_gtid"]))
        if not node.get("done"):
            unfinished.append(key)
    if not starts:
        raise CatchUpError(
            f"migration {migration_id}: the copy recorded no start position (no copy/<db>.<table> node with "
            "start_gtid); run the copy first (`migrator copy ID`)"
        )
    return earliest(starts), unfinished


def _hosts(zk: zk_mod.ZK, spec: Spec) -> tuple[Host, Host]:
    reg = HostRegistry(zk)
    return reg.get(spec.source_master), reg.get(spec.target_master)


def moving_tables(spec: Spec) -> set[str] | None:
    """Table filter of a migration: the queue partition's tables, or None (whole shards)."""
    if spec.kind == "queue_partition":
        if not spec.tables:
            raise CatchUpError(f"migration {spec.id}: a queue_partition migration names no tables")
        return set(spec.tables)
    return set(spec.tables) if spec.tables else None


class _Session:
    """ZooKeeper + credentials for one call; closes what it opened."""

    def __init__(self, config_or_zk: Config | zk_mod.ZK, credentials: Credentials | None):
        self.own_zk = False
        if isinstance(config_or_zk, zk_mod.ZK):
            self.zk = config_or_zk
            creds = credentials or config_or_zk.credentials
        else:
            creds = credentials or config_mod.load_credentials(config_or_zk)
            self.zk = zk_mod.connect(config_or_zk, creds)
            self.own_zk = True
        if creds is None:
            raise CatchUpError("no credentials: pass them, or a ZK connected with them")
        self.credentials: Credentials = creds
        self.store = MigrationStore(self.zk)

    def close(self) -> None:
        if self.own_zk:
            self.zk.close()


def open_tailer(
    config_or_zk: Config | zk_mod.ZK,
    migration_id: str,
    *,
    credentials: Credentials | None = None,
    batch_events: int = 2000,
    batch_ms: float = 200.0,
    freeze_schema: bool = True,
) -> Tailer:
    """A :class:`Tailer` for a migration, from its checkpoint (or the copy's
    earliest start), checkpointing into its ``catchup`` node. The cutover opens
    one before its freeze and calls :meth:`Tailer.drain_to` under the fence.
    The caller closes it (``tailer.close()``; also closes its ZooKeeper
    session when it opened one)."""
    sess = _Session(config_or_zk, credentials)
    try:
        spec = sess.store.spec(migration_id)
        ckpt = Checkpoint(sess.store, migration_id)
        start = ckpt.gtid
        if start is None:
            start, unfinished = copy_start(sess.store, migration_id)
            if unfinished:
                raise CatchUpError(
                    f"migration {migration_id}: the copy of {', '.join(unfinished[:5])} is not finished; "
                    "catch-up starts once every table is copied"
                )
            ckpt.save(gtid=str(start), start_gtid=str(start), source=spec.source_master,
                      target=spec.target_master, passes=ckpt.data.get("passes", []))
        source, target = _hosts(sess.zk, spec)
        tailer = Tailer(
            source, target, sess.credentials, start=start,
            schema_map={db: db for db in spec.databases}, tables=moving_tables(spec),
            on_checkpoint=ckpt.set_gtid, batch_events=batch_events, batch_ms=batch_ms,
            freeze_schema=freeze_schema,
        )
    except BaseException:
        sess.close()
        raise
    tailer.checkpoint_node = ckpt  # type: ignore[attr-defined]
    tailer.spec = spec  # type: ignore[attr-defined]
    inner_close = tailer.close

    def close() -> None:
        inner_close()
        sess.close()

    tailer.close = close  # type: ignore[method-assign]
    return tailer


# -- passes ------------------------------------------------------------------------------------

@dataclass
class PassResult:
    """One row of the pass table (stored in the ``catchup`` node)."""

    number: int
    started_at: float
    head: str
    from_gtid: str
    to_gtid: str
    events: int
    transactions: int
    bytes: int
    statements: int
    duration_s: float
    apply_rate: float  # events/s
    write_rate: float  # events/s written on the source for the moving tables
    lag_s: float
    predicted_freeze_ms: float
    converged: bool = False
    not_converging: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


def judge(result: PassResult, previous: list[dict[str, Any]], opts: Options) -> tuple[bool, bool]:
    """(converged, not_converging) for a pass, given the earlier passes' rows.

    Converged: the pass's delta is at most ``converge_events`` and its lag
    under ``converge_lag_s``. Not converging: this pass and the
    ``not_converging_passes - 1`` before it all applied slower than the
    source wrote (and none of them converged).
    """
    converged = result.events <= opts.converge_events and result.lag_s < opts.converge_lag_s
    if converged or result.apply_rate >= result.write_rate:
        return converged, False
    k = opts.not_converging_passes
    recent = previous[-(k - 1):] if k > 1 else []
    slow = len(recent) == k - 1 and all(
        not p.get("converged") and p.get("apply_rate", 0.0) < p.get("write_rate", 0.0) for p in recent
    )
    return False, slow


def _check_phase(state: State, migration_id: str) -> None:
    if state.phase not in _RUNNABLE:
        hint = {
            Phase.PLANNED: "run preflight and the copy first",
            Phase.PREFLIGHT: "run the copy first",
            Phase.FAILED: f"it failed: {state.error}",
        }.get(state.phase, "nothing to catch up")
        raise CatchUpError(f"migration {migration_id} is {state.phase.value}: {hint}", phase=state.phase.value)
    if state.paused:
        raise CatchUpError(f"migration {migration_id} is paused; resume it first (`migrator resume ID`)")


def run_pass(
    config_or_zk: Config | zk_mod.ZK,
    migration_id: str,
    *,
    credentials: Credentials | None = None,
    tailer: Tailer | None = None,
    timeout_s: float = 3600.0,
    batch_events: int = 2000,
) -> PassResult:
    """One catch-up pass: from the checkpoint to the source head seen at its start."""
    sess = _Session(config_or_zk, credentials)
    own_tailer = tailer is None
    try:
        store = sess.store
        spec = store.spec(migration_id)
        state, _ = store.state(migration_id)
        _check_phase(state, migration_id)
        if tailer is None:
            tailer = open_tailer(sess.zk, migration_id, credentials=sess.credentials, batch_events=batch_events)
        ckpt: Checkpoint = tailer.checkpoint_node  # type: ignore[attr-defined]
        if state.phase == Phase.COPYING:
            store.set_phase(migration_id, Phase.CATCHING_UP)
        opts = spec.options
        started_at = time.time()
        head = tailer.source_head()
        head_at = time.time()
        try:
            stats = tailer.apply_until(head, timeout_s=timeout_s)
        except UnsafeStatement as exc:
            store.set_phase(migration_id, Phase.FAILED, error=exc.message)
            raise CatchUpError(exc.message, phase="catch_up") from None
        if not stats.reached:
            raise CatchUpError(
                f"pass did not reach the source head {head} within {timeout_s:.0f}s (at {stats.end}); "
                "it resumes from the checkpoint when run again"
            )
        passes: list[dict[str, Any]] = list(ckpt.data.get("passes", []))
        prev_head_at = ckpt.data.get("head_at")
        if prev_head_at:
            window = max(head_at - float(prev_head_at), 1e-3)
        elif stats.first_ts:
            window = max(head_at - stats.first_ts, 1.0)  # binlog timestamps have 1 s resolution
        else:
            window = 0.0
        duration = max(stats.duration_s, 1e-6)
        apply_rate = stats.events / duration if stats.events else 0.0
        write_rate = stats.events / window if window > 0 and stats.events else 0.0
        lag_s = stats.duration_s if stats.events else 0.0
        predicted_ms = (write_rate * stats.duration_s / apply_rate * 1000.0) if apply_rate > 0 else 0.0
        result = PassResult(
            number=(passes[-1]["number"] + 1) if passes else 1,
            started_at=started_at, head=str(head), from_gtid=stats.start, to_gtid=stats.end,
            events=stats.events, transactions=stats.transactions, bytes=stats.bytes,
            statements=stats.statements, duration_s=round(stats.duration_s, 4),
            apply_rate=round(apply_rate, 1), write_rate=round(write_rate, 1), lag_s=round(lag_s, 4),
            predicted_freeze_ms=round(predicted_ms, 1),
        )
        result.converged, result.not_converging = judge(result, passes, opts)
        passes.append(asdict(result))
        verdict: dict[str, Any] = {"converged": result.converged, "not_converging": None}
        if result.not_converging:
            verdict["not_converging"] = {"apply_rate": result.apply_rate, "write_rate": result.write_rate,
                                         "passes": opts.not_converging_passes}
        ckpt.save(passes=passes[-PASS_HISTORY:], head_at=head_at, gtid=str(tailer.applied), **verdict)

        def record(st: State) -> State:
            st.predicted_freeze_ms = result.predicted_freeze_ms
            if result.converged and st.phase == Phase.CATCHING_UP:
                st.history.append({"who": "catch_up", "when": time.time(), "from": st.phase.value,
                                   "to": Phase.CONVERGED.value})
                st.phase = Phase.CONVERGED
                st.error = None
            elif result.not_converging:
                st.error = not_converging_message(migration_id, result, opts.not_converging_passes)
            return st

        store.update(migration_id, record)
        log.info("catch-up pass %d of %s: %d events in %.3fs (%.0f/s, source writes %.0f/s)%s",
                 result.number, migration_id, result.events, result.duration_s, result.apply_rate,
                 result.write_rate, " converged" if result.converged else "")
        return result
    finally:
        if own_tailer and tailer is not None:
            tailer.close()
        sess.close()


def not_converging_message(migration_id: str, result: PassResult, k: int) -> str:
    return (
        f"migration {migration_id} is not converging: for {k} passes the apply rate stayed below the source "
        f"write rate (last pass: apply {result.apply_rate:.0f} events/s < write {result.write_rate:.0f} events/s). "
        "Reduce the write load on the moving shards (or move fewer shards at once), then run `migrator catchup ID` again"
    )


def run_passes(
    config_or_zk: Config | zk_mod.ZK,
    migration_id: str,
    passes: int | None = None,
    *,
    credentials: Credentials | None = None,
    on_pass: Callable[[PassResult], None] | None = None,
    max_passes: int = 1000,
) -> list[PassResult]:
    """Passes until converged (or ``passes`` of them). One :class:`Tailer` serves all.
    Raises :class:`NotConverging` when the apply rate stays below the write rate."""
    sess = _Session(config_or_zk, credentials)
    tailer: Tailer | None = None
    results: list[PassResult] = []
    try:
        limit = passes if passes is not None else max_passes
        for _ in range(limit):
            if tailer is None:
                state, _ = sess.store.state(migration_id)
                _check_phase(state, migration_id)
                tailer = open_tailer(sess.zk, migration_id, credentials=sess.credentials)
            res = run_pass(sess.zk, migration_id, credentials=sess.credentials, tailer=tailer)
            results.append(res)
            if on_pass is not None:
                on_pass(res)
            if res.not_converging:
                k = sess.store.spec(migration_id).options.not_converging_passes
                raise NotConverging(not_converging_message(migration_id, res, k))
            if res.converged and passes is None:
                break
        return results
    finally:
        if tailer is not None:
            tailer.close()
        sess.close()


def drain_to(
    config_or_zk: Config | zk_mod.ZK,
    migration_id: str,
    target_gtid: GtidPos | str,
    timeout: float,
    *,
    credentials: Credentials | None = None,
    tailer: Tailer | None = None,
) -> dict[str, Any]:
    """Apply the source binlog up to and including ``target_gtid`` and return once
    it is committed on the target and checkpointed.

    For the cutover under its write fence: pass a ``tailer`` from
    :func:`open_tailer`, opened and warmed (:meth:`Tailer.warm`, or a pass)
    before the freeze, so no connection is opened inside the freeze budget. Raises
    :class:`DrainTimeout` after ``timeout`` seconds.
    """
    t0 = time.monotonic()
    own = tailer is None
    if tailer is None:
        tailer = open_tailer(config_or_zk, migration_id, credentials=credentials)
    try:
        stats = tailer.drain_to(target_gtid, timeout)
    finally:
        if own:
            tailer.close()
    return {
        "gtid": stats.end,
        "target_gtid": str(target_gtid),
        "events": stats.events,
        "transactions": stats.transactions,
        "statements": stats.statements,
        "batches": stats.batches,
        "duration_ms": round((time.monotonic() - t0) * 1000.0, 2),
        "apply_ms": round(stats.duration_s * 1000.0, 2),
    }


def status(config_or_zk: Config | zk_mod.ZK, migration_id: str, *,
           credentials: Credentials | None = None) -> dict[str, Any]:
    """The ``catchup`` node (checkpoint and pass table) of a migration."""
    sess = _Session(config_or_zk, credentials)
    try:
        sess.store.spec(migration_id)
        data, _ = sess.store.get_progress(migration_id, CHECKPOINT_KEY)
        return data or {}
    finally:
        sess.close()
