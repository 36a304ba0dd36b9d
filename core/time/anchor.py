"""A measured step time anchors the model: ``vramplan measure --save-calibration`` keeps the measured step's time
beside what the model gave for it, and a plan calibrated with that file (``overhead.step_time_factor``) scales the
terms the measurement covers, on the GPU and stack it was measured with only.

What a measurement covers: the GPU's own work and the host issuing it, the terms of the categories `COVERED`
(matmuls, attention, memory-bound ops, the loss, recomputation, dequantization, the optimizer step, kernel
launches). Communication, offload transfers and the pipeline bubble are link-bound and depend on the GPU count and
the nodes, which a measurement on one machine does not fix: they stay modelled. So

    factor = (measured step - modelled terms not covered) / modelled covered terms     (of the measured plan)

and a calibrated plan's covered terms are the model's x factor. On another GPU preset or stack the factor is not
applied and the step time says so (`anchor_note`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from vramplan.core.plan.schema.overhead import STEP_TIME_FACTOR_MAX, STEP_TIME_FACTOR_MIN
from vramplan.core.time.record import TimeTerm

if TYPE_CHECKING:
    from vramplan.core.plan.schema.plan import Plan

COVERED = ("compute", "memory", "host")  # record.CATEGORIES a one-machine measurement covers


class Anchor(NamedTuple):
    """What a measured step gives the time model."""

    factor: float
    measured_s: float
    modelled_s: float
    covered_s: float


def anchor_of(measured_s: float, terms: tuple[TimeTerm, ...]) -> Anchor | None:
    """The anchor a step measured at ``measured_s`` gives the model's ``terms`` of the same plan, or None when the
    model's uncovered terms alone take longer than the measurement or the factor is outside its bounds."""
    covered = sum(t.exposed for t in terms if t.category in COVERED)
    step = sum(t.exposed for t in terms)
    if covered <= 0:
        return None
    factor = (measured_s - (step - covered)) / covered
    if not STEP_TIME_FACTOR_MIN <= factor <= STEP_TIME_FACTOR_MAX:
        return None
    return Anchor(factor, measured_s, step, covered)


def anchor_applies(plan: Plan) -> bool:
    o = plan.overhead
    return (
        o.step_time_factor is not None
        and o.step_time_gpu == plan.hardware.gpu
        and o.step_time_framework == plan.stack.framework
    )


def anchored(plan: Plan, terms: list[TimeTerm]) -> list[TimeTerm]:
    """``terms`` with the covered ones scaled by the plan's ``overhead.step_time_factor`` when it applies (their
    formula says so); as they are otherwise."""
    if not anchor_applies(plan):
        return terms
    k = plan.overhead.step_time_factor
    assert k is not None
    where = plan.overhead.calibrated_from or "a measured step"
    return [
        t._replace(
            seconds=t.seconds * k,
            exposed=t.exposed * k,
            parts=(*t.parts, (" x {:.3g} (anchored to {})", (k, where))),
        )
        if t.category in COVERED
        else t
        for t in terms
    ]


def anchor_note(plan: Plan) -> str:
    """Whether a measured step time anchors this plan's: ``""`` when the plan has none."""
    o = plan.overhead
    if o.step_time_factor is None:
        return ""
    on = f"{o.step_time_gpu} with {o.step_time_framework}"
    if anchor_applies(plan):
        return f"anchored: GPU work x {o.step_time_factor:.3g}, measured on {on}; links modelled"
    return (
        f"not anchored: the calibration's step time was measured on {on}, this plan runs on "
        f"{plan.hardware.gpu} with {plan.stack.framework}"
    )
