"""The safety margin the advice keeps: no suggestion proposes a plan at 0% free.

A plan that "fits" by the estimate can still run out of memory: the caching allocator fragments (GMLake, Guo et al.
ASPLOS 2024: 15% on average; `FRAGMENTATION_RISK`, 10%, is what the checklist warns under) and the estimate itself
errs (`core.memory.accuracy`: on the published runs nearest to a plan it was up to ``worst_under_pct`` under). So the
fit advisor, its largest micro-batch and sequence length, its fewest GPUs and the checklist's memory fix all keep a
margin free, in this order:

1. ``advice.headroom_percent`` when the plan sets it (``vramplan fit --headroom``, ``check --headroom``);
2. else the estimate's expected-error band, each plan its own: with the estimate ``w`` under (worst similar run),
   the measured peak is predicted / (1 - w), which fits when predicted <= capacity x (1 - w), i.e. a margin of
   ``w`` of the GPU (`ExpectedError.under_margin_bytes` is the same margin in bytes above the prediction);
3. never less than `FRAGMENTATION_RISK` (10%) by default, the documented value when there are no similar runs.
"""

from __future__ import annotations

from typing import NamedTuple

from vramplan.core.memory.record import FRAGMENTATION_RISK, Estimate
from vramplan.core.plan.schema.plan import Plan

SET_SOURCE = "advice.headroom_percent"
KINDS = ("set", "expected error", "fragmentation")


class Margin(NamedTuple):
    """The share of the GPU's memory a suggestion leaves free, and where it comes from."""

    fraction: float  # of the GPU's memory, for the plan it was taken from
    kind: str  # one of KINDS: the user's setting, the estimate's error band, fragmentation's default
    reason: str  # ``advice.headroom_percent = 15``, ``the estimate was up to 25% under on 8 similar published runs``

    @property
    def explicit(self) -> bool:
        """Set by the user: the same for every changed plan (else each plan keeps its own band)."""
        return self.kind == "set"

    def text(self) -> str:
        """``25% free (the estimate was up to 25% under on 8 similar published runs)``."""
        return f"{self.fraction:.0%} free ({self.reason})"

    def for_estimate(self, est: Estimate) -> float:
        """The margin a changed plan must leave: the user's, else that plan's own (`safety_margin`)."""
        return self.fraction if self.explicit else safety_margin(est).fraction

    def keeps(self, est: Estimate) -> bool:
        """Fits with the margin free on the GPU, and what it offloads fits the node's host memory and NVMe."""
        on_gpu_limit = est.gpu_capacity * (1 - self.for_estimate(est))
        return est.on_gpu <= on_gpu_limit and est.host_fits and est.nvme_fits


def fixed_margin(fraction: float, reason: str = SET_SOURCE) -> Margin:
    """The same margin for every plan (``0.0``: fits at all)."""
    return Margin(fraction, "set", reason)


def error_margin(est: Estimate) -> float:
    """The estimate's worst under-prediction on the published runs nearest to its plan, as a share of the GPU
    (0 when none was under or there are no such runs)."""
    ee = est.expected_error
    return min(ee.worst_under_pct, 90.0) / 100 if ee.n_cases else 0.0


def safety_margin(est: Estimate, plan: Plan | None = None) -> Margin:
    """The margin for ``est``'s plan (or ``plan``'s setting, when given): see the module docstring."""
    percent = (plan or est.plan).advice.headroom_percent
    if percent is not None:
        return fixed_margin(percent / 100, f"{SET_SOURCE} = {percent:g}")
    band = error_margin(est)
    if band > FRAGMENTATION_RISK:
        ee = est.expected_error
        reason = f"the estimate was up to {ee.worst_under_pct:.0f}% under on {ee.n_cases} similar published runs"
        return Margin(band, "expected error", reason)
    return Margin(FRAGMENTATION_RISK, "fragmentation", f"fragmentation's {FRAGMENTATION_RISK:.0%}")
