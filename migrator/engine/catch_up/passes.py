"""Catch-up passes: replay the source master's binlog onto the target until the
target is close enough behind for a cutover.

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
from an earlier position is harmless because apply is idempotent by key (the
contract is written out in :mod:`migrator.engine.catch_up.checkpoint`).

The tail itself is a :class:`~migrator.engine.catch_up.tailer.Tailer`; it keeps
source, target and schema mapping explicit, so the same code tails a new master
back into tombstone schemas for a rollback.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from migrator.engine.catch_up.checkpoint import CHECKPOINT_KEY, Checkpoint, Session, open_tailer
from migrator.engine.catch_up.statements import UnsafeStatement
from migrator.engine.catch_up.tailer import CatchUpError, Tailer, TailStats
from migrator.engine.migration import Options, Phase, State
from migrator.engine.records import CatchupPass
from migrator.errors import ExitCode
from migrator.fleet import zk as zk_mod
from migrator.fleet.config import Config, Credentials
from migrator.fleet.gtid import GtidPos, GtidState

log = logging.getLogger(__name__)

#: passes kept in the progress node (older ones are dropped)
PASS_HISTORY = 50
#: a pass shorter than this is not judged "not converging" (its rate is latency, not throughput)
THROUGHPUT_PASS_S = 5.0

#: phases in which catch-up may run, and the phase it leaves them in
_RUNNABLE = {Phase.COPYING, Phase.CATCHING_UP, Phase.CONVERGED, Phase.VERIFYING, Phase.CUTOVER}


class NotConverging(CatchUpError):
    """The apply rate stays below the source's write rate."""

    exit_code = ExitCode.NOT_CONVERGING


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
    #: the apply path of the pass (``row``, ``fast``, ``fast+row``: :attr:`TailStats.path`), and why the fast
    #: path stopped or was not taken (its table, GTID and error; None: it was not refused)
    path: str = "row"
    fast_failure: dict[str, Any] | None = None
    #: windows the target refused on the fast path and that were written again as SQL (:attr:`TailStats.fast_replays`)
    fast_replays: list[dict[str, Any]] = field(default_factory=list)


def judge(result: PassResult, previous: list[Any], opts: Options) -> tuple[bool, bool]:
    """(converged, not_converging) for a pass, given the earlier passes' rows.

    Converged: the pass's delta is at most ``converge_events`` and its lag
    under ``converge_lag_s``. Not converging: this pass and the
    ``not_converging_passes - 1`` before it all applied slower than the
    source wrote (and none of them converged), and this pass lasted at least
    :data:`THROUGHPUT_PASS_S`: a shorter pass is bound by the tail's latency
    (the reader's batching, a round's commit), not by its throughput, so its
    "apply rate" says nothing about keeping up (seen on a loaded box: 1 s
    passes of 1,200 events, "755 events/s", judged not converging while the
    tail kept pace).
    """
    converged = result.events <= opts.converge_events and result.lag_s < opts.converge_lag_s
    if converged or result.apply_rate >= result.write_rate or result.duration_s < THROUGHPUT_PASS_S:
        return converged, False
    k = opts.not_converging_passes
    recent = CatchupPass.parse_list(previous[-(k - 1):] if k > 1 else [])
    slow = len(recent) == k - 1 and all(not p.converged and p.apply_rate < p.write_rate for p in recent)
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


def measure_pass(stats: TailStats, *, number: int, started_at: float, head: str, head_at: float,
                 prev_head_at: float | None) -> PassResult:
    """The pass table row of one tail to ``head`` (read at ``head_at``): the source's write rate
    over the window since the previous pass read its head, the apply rate, the lag and the
    predicted freeze (the writes of one pass, applied at this pass's rate). Shared by the
    forward catch-up and the reverse passes of a rollback, so both are judged alike."""
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
    return PassResult(
        number=number, started_at=started_at, head=head, from_gtid=stats.start, to_gtid=stats.end,
        events=stats.events, transactions=stats.transactions, bytes=stats.bytes,
        statements=stats.statements, duration_s=round(stats.duration_s, 4),
        apply_rate=round(apply_rate, 1), write_rate=round(write_rate, 1), lag_s=round(lag_s, 4),
        predicted_freeze_ms=round(predicted_ms, 1), path=stats.path, fast_failure=stats.fast_failure,
        fast_replays=stats.fast_replays,
    )


def run_pass(
    config_or_zk: Config | zk_mod.ZK,
    migration_id: str,
    *,
    credentials: Credentials | None = None,
    tailer: Tailer | None = None,
    timeout_s: float = 3600.0,
) -> PassResult:
    """One catch-up pass: from the checkpoint to the source head seen at its start."""
    sess = Session(config_or_zk, credentials)
    own_tailer = tailer is None
    try:
        store = sess.store
        spec = store.spec(migration_id)
        state, _ = store.state(migration_id)
        _check_phase(state, migration_id)
        if tailer is None:
            tailer = open_tailer(sess.zk, migration_id, credentials=sess.credentials)
        ckpt: Checkpoint = tailer.checkpoint_node  # type: ignore[attr-defined]
        if state.phase == Phase.COPYING:
            store.set_phase(migration_id, Phase.CATCHING_UP)
        opts = spec.options
        started_at = time.time()
        head = tailer.source_head()
        head_at = time.time()
        try:
            stats = tailer.apply_until(GtidState.of(head), timeout_s=timeout_s)
        except UnsafeStatement as exc:
            store.set_phase(migration_id, Phase.FAILED, error=exc.message)
            raise CatchUpError(exc.message, phase="catch_up") from None
        if not stats.reached:
            raise CatchUpError(
                f"pass did not reach the source head {head} within {timeout_s:.0f}s (at {stats.end}); "
                "it resumes from the checkpoint when run again"
            )
        passes = list(ckpt.record.passes)
        result = measure_pass(stats, number=(passes[-1].number or 0) + 1 if passes else 1, started_at=started_at,
                              head=str(head), head_at=head_at, prev_head_at=ckpt.record.head_at)
        result.converged, result.not_converging = judge(result, passes, opts)
        passes.append(CatchupPass.parse(asdict(result)))
        verdict: dict[str, Any] = {"converged": result.converged, "not_converging": None}
        if result.not_converging:
            verdict["not_converging"] = {"apply_rate": result.apply_rate, "write_rate": result.write_rate,
                                         "passes": opts.not_converging_passes}
        ckpt.save(passes=[p.dump() for p in passes[-PASS_HISTORY:]], head_at=head_at, gtid=str(tailer.applied),
                  state=str(tailer.applied_state), **verdict)

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
        "Reduce the write load on the moving shards (or move fewer shards at once), "
        "then run `migrator catchup ID` again"
    )


def run_passes(
    config_or_zk: Config | zk_mod.ZK,
    migration_id: str,
    passes: int | None = None,
    *,
    credentials: Credentials | None = None,
    on_pass: Callable[[PassResult], None] | None = None,
    max_passes: int = 1000,
    slice_s: float | None = None,
) -> list[PassResult]:
    """Passes until converged (or ``passes`` of them, or for ``slice_s`` seconds). One
    :class:`Tailer` serves all of them: its reader process keeps reading ahead between
    passes, so a pass costs the rows it applies, not a new binlog connection. Stops
    early, between passes, when the migration is paused. Raises :class:`NotConverging`
    when the apply rate stays below the write rate."""
    sess = Session(config_or_zk, credentials)
    tailer: Tailer | None = None
    results: list[PassResult] = []
    deadline = None if slice_s is None else time.monotonic() + slice_s
    try:
        limit = passes if passes is not None else max_passes
        for _ in range(limit):
            state, _ = sess.store.state(migration_id)
            if results and state.paused:
                break
            if tailer is None:
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
            if deadline is not None and time.monotonic() >= deadline:
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
        "batches": stats.rounds,  # the record's key for the rounds committed
        "duration_ms": round((time.monotonic() - t0) * 1000.0, 2),
        "apply_ms": round(stats.duration_s * 1000.0, 2),
        "path": stats.path,
        "fast_failure": stats.fast_failure,
        "fast_replays": stats.fast_replays,
    }


def status(config_or_zk: Config | zk_mod.ZK, migration_id: str, *,
           credentials: Credentials | None = None) -> dict[str, Any]:
    """The ``catchup`` node (checkpoint and pass table) of a migration."""
    sess = Session(config_or_zk, credentials)
    try:
        sess.store.spec(migration_id)
        data, _ = sess.store.get_progress(migration_id, CHECKPOINT_KEY)
        return data or {}
    finally:
        sess.close()
