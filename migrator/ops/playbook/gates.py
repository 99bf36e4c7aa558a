"""Gates: conditions a playbook step waits on before it runs.

A gate is ``approval`` (``migrator approve RUN STEP``) or a condition on a
metric of the migration's catch-up passes, such as ``"lag_s < 1 for 3
passes"`` or ``"predicted_freeze_ms < 300"``. The runner reads the metrics
from the migration record (:func:`gate_metrics`, through
``migrator.ops.command.status``) while the step waits, running its
``wait_with`` step (a catch-up pass) between looks.
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass
from typing import Any

from migrator.ops import command
from migrator.ops.watch import MigrationStatus

# -- gates -----------------------------------------------------------------------

#: gate metrics, read from the migration record by :func:`gate_metrics`, and what each is
GATE_METRIC_DOCS = {
    "lag_s": "seconds the last catch-up pass ended behind the source's head",
    "pass_events": "row changes the last catch-up pass applied (its delta)",
    "apply_rate": "row changes per second the last catch-up pass applied",
    "write_rate": "row changes per second the source wrote during the last catch-up pass",
    "predicted_freeze_ms": "the write freeze the migration predicts for its cutover (ms)",
    "verify_mismatches": "chunks the last verify found different",
    "passes": "catch-up passes run so far",
}
GATE_METRICS = set(GATE_METRIC_DOCS)
#: the metrics each catch-up pass records: the only ones a gate may require "for N passes"
PASS_METRICS = {"lag_s", "pass_events", "apply_rate", "write_rate", "predicted_freeze_ms"}
GATE_RE = re.compile(
    r"^\s*(?P<metric>[a-z_]+)\s*(?P<op><=|>=|<|>|==|!=)\s*(?P<value>\d+(?:\.\d+)?)\s*(?P<unit>ms|s)?"
    r"(?:\s+for\s+(?P<n>\d+)\s+passes?)?\s*$"
)
OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq,
       "!=": operator.ne}


@dataclass(frozen=True)
class Gate:
    text: str
    approval: bool = False
    metric: str = ""
    op: str = ""
    value: float = 0.0
    passes: int = 1

    @classmethod
    def parse(cls, raw: Any) -> Gate:
        if raw == "approval" or raw == {"approval": True}:
            return cls(text="approval", approval=True)
        if not isinstance(raw, str):
            raise ValueError(f"a gate is a condition string or 'approval', got {raw!r}")
        m = GATE_RE.match(raw)
        if not m:
            raise ValueError(f"cannot read gate {raw!r}: write e.g. 'lag_s < 1 for 3 passes'")
        metric = m.group("metric")
        if metric not in GATE_METRICS:
            raise ValueError(f"unknown gate metric {metric!r}; known: {', '.join(sorted(GATE_METRICS))}")
        value = float(m.group("value"))
        unit = m.group("unit")
        if unit == "ms" and metric.endswith("_s"):
            value /= 1000
        if unit == "s" and metric.endswith("_ms"):
            value *= 1000
        passes = int(m.group("n") or 1)
        if passes > 1 and metric not in PASS_METRICS:
            raise ValueError(f"{metric} is not recorded per pass: 'for N passes' takes one of "
                             f"{', '.join(sorted(PASS_METRICS))}")
        return cls(text=raw, metric=metric, op=m.group("op"), value=value, passes=passes)

    def holds(self, metrics: dict[str, Any], history: list[dict[str, Any]], approved: bool) -> bool:
        if self.approval:
            return approved
        if self.passes > 1:
            recent = history[-self.passes:]
            if len(recent) < self.passes:
                return False
            return all(r.get(self.metric) is not None and OPS[self.op](r[self.metric], self.value)
                       for r in recent)
        v = metrics.get(self.metric)
        return v is not None and OPS[self.op](v, self.value)


def gate_metrics(config: Any, migration_id: str | None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Current metrics and the catch-up pass table of a migration, for gates."""
    if not migration_id:
        return {}, []
    status = MigrationStatus.parse(command.status(config, migration_id))
    hist = [{"lag_s": p.lag_s, "pass_events": p.events, "apply_rate": p.apply_rate, "write_rate": p.write_rate,
             "predicted_freeze_ms": p.predicted_freeze_ms} for p in status.passes]
    of_last = ("lag_s", "pass_events", "apply_rate", "write_rate")
    metrics = {
        **{k: hist[-1][k] if hist else None for k in of_last},
        "predicted_freeze_ms": status.predicted_freeze_ms,
        "verify_mismatches": status.verify_mismatches,
        "passes": len(hist),
    }
    return metrics, hist
