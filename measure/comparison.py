"""The measurement beside the estimate: one `ComparisonRow` per figure of `vramplan measure`'s report, with the
estimate's prediction, the measured value, the error and whether this machine reproduced the plan for that row
(`vramplan.measure.limitations`). Pure Python: the estimate is core's, the report a record."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vramplan.core.memory.record import Estimate
from vramplan.core.time.record import StepTime
from vramplan.measure.limitations import Limitation
from vramplan.measure.records import MeasureReport, RankFigures

# row name, unit, the estimate's figure (per_gpu key or a time attribute), the measured RankFigures field
ROWS: tuple[tuple[str, str, str], ...] = (
    ("parameters", "bytes", "params_bytes"),
    ("gradients", "bytes", "grads_bytes"),
    ("optimizer_states", "bytes", "optimizer_bytes"),
    ("activations", "bytes", "layer_activation_bytes"),
    ("max_allocated", "bytes", "max_allocated_bytes"),
    ("max_reserved", "bytes", "max_reserved_bytes"),
    ("process", "bytes", "process_bytes"),
    ("step_time", "s", "step_time_s"),
    ("tokens_per_s", "tokens/s", "tokens_per_s"),
)
UNIT_KEYS = {"bytes": "bytes", "s": "s", "tokens/s": "tokens_per_s"}


@dataclass(frozen=True)
class ComparisonRow:
    """One figure: predicted and measured (in `unit`), the relative error (predicted - measured) / measured, and
    whether the measurement reproduced what the plan asks for this figure."""

    name: str
    unit: str  # bytes | s | tokens/s
    predicted: float | None
    measured: float | None
    error: float | None
    reproducible: bool

    def to_json(self) -> dict[str, Any]:
        u = UNIT_KEYS[self.unit]
        return {
            "name": self.name,
            f"predicted_{u}": self.predicted,
            f"measured_{u}": self.measured,
            "error_pct": None if self.error is None else round(100 * self.error, 3),
            "reproducible": self.reproducible,
        }


def predicted(est: Estimate, st: StepTime) -> dict[str, float]:
    """The estimate's figure for each row: tensors by kind at their largest (activations: what the forward saves
    but the logits-like tensors, compared with `RankFigures.layer_activation_bytes`), the allocator's peak and
    reserve, the process, the step's time."""
    g = est.per_gpu()
    return {
        "parameters": g.get("parameters", 0),
        "gradients": g.get("gradients", 0),
        "optimizer_states": g.get("optimizer_states", 0),
        "activations": g.get("activations", 0),
        "max_allocated": est.allocated,
        "max_reserved": est.reserved,
        "process": est.total,
        "step_time": st.step_seconds,
        "tokens_per_s": st.tokens_per_second_per_gpu,
    }


def error(pred: float | None, meas: float | None) -> float | None:
    """(predicted - measured) / measured: negative when the estimate is under the measurement, as in every
    accuracy figure of vramplan (the published check, `expected_error`)."""
    if pred is None or meas is None or meas == 0:
        return None
    return (pred - meas) / meas


def comparison_rows(
    est: Estimate, st: StepTime, report: MeasureReport, limits: tuple[Limitation, ...], rank: RankFigures | None = None
) -> tuple[ComparisonRow, ...]:
    """The rows of `rank` (default: the report's worst rank) against the estimate; rows a limitation names are
    marked not reproducible."""
    fig = rank or report.worst
    pred = predicted(est, st)
    marked = {row for lim in limits for row in lim.rows}
    out = []
    for name, unit, field_name in ROWS:
        meas = getattr(fig, field_name) if fig is not None else None
        meas = float(meas) if meas is not None else None
        p = float(pred[name])
        out.append(ComparisonRow(name, unit, p, meas, error(p, meas), name not in marked))
    return tuple(out)
