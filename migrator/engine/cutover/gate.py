"""The gate before the freeze: does the predicted write freeze fit its budget?

Runs in the cutover process after the run is prepared (fence connections
open, sentinels in place) and before anything is frozen. The prediction is
the last catch-up pass's (``State.predicted_freeze_ms``), else a timed drain to
the source head plus the fixed cost of a freeze. A migration that does not
pass is left converged and serving from the source.
"""

from __future__ import annotations

import time

from migrator.engine.cutover.errors import FreezeBudgetExceeded
from migrator.engine.cutover.run import CutoverRun
from migrator.fleet.mysql import binlog_pos
from migrator.fleet.mysql import connect as mysql_connect

#: what a freeze costs besides the drain (two CAS, lock, sentinel, compare), for the prediction
FIXED_FREEZE_MS = 60.0


def predict_freeze_ms(run: CutoverRun) -> float:
    """Time a drain to the current source head and add the fixed cost of a freeze.

    The drainer is warmed first: starting its reader process is not part of a freeze."""
    warm = getattr(run.drainer, "warm", None)
    if warm is not None:
        warm()
    conn = mysql_connect(run.source, run.creds)
    try:
        head = binlog_pos(conn)
    finally:
        conn.close()
    t0 = time.monotonic()
    run.drainer.drain_to(head, 30)
    return (time.monotonic() - t0) * 1000 + FIXED_FREEZE_MS


def check_budget(run: CutoverRun, predicted: float | None) -> float:
    """The predicted freeze (``predicted``, else timed now); raises
    :class:`FreezeBudgetExceeded` when it exceeds the migration's budget."""
    budget = run.spec.options.freeze_budget_ms
    if predicted is None:
        predicted = predict_freeze_ms(run)
    if predicted > budget:
        raise FreezeBudgetExceeded(
            f"predicted freeze {predicted:.0f} ms exceeds the budget of {budget} ms: let catch-up converge "
            "further (lower write load) or raise freeze_budget_ms", phase="cutover")
    return predicted
