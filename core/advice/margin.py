"""The safety margin: one rule for every place that says a plan fits "with room to spare".

A plan that fits by the estimate can still run out of memory: the estimate errs (`core.memory.accuracy`: on the
published runs nearest to a plan it was some percent under) and the caching allocator fragments (GMLake, Guo et al.
ASPLOS 2024: 15% on average). So `fit` (its suggestions, largest micro-batch and sequence length, fewest GPUs),
`gpus` and the planner's GPU guide, the checklist's memory item and the planner's headline all keep the same share of
the GPU free, the margin of `safety_margin`:

1. ``advice.headroom_percent`` when the plan sets it (``vramplan fit --headroom``, ``check --headroom``);
2. else the 90th percentile of the estimate's under-prediction on its similar published runs
   (`ExpectedError.p90_under_pct`: robust to the one odd run a worst case would follow), when it is more than
3. `FLOOR`, fragmentation's 10% (the checklist's `FRAGMENTATION_RISK`), the margin when the runs are close or absent.

With the estimate ``u`` under, the measured peak is predicted / (1 - u), which fits when predicted <= capacity x
(1 - u): so a margin ``m`` is a share of the GPU, and the headline's "may need up to" is predicted / (1 - m)
(`Margin.need_bytes`), which fits the GPU exactly when the margin is kept. A changed plan keeps its own margin
(another method has other similar runs) unless the user set one. docs/advice.md ("The safety margin") states it.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from vramplan.core.memory.record import FRAGMENTATION_RISK, Estimate
from vramplan.core.plan.schema.plan import Plan

SET_SOURCE = "advice.headroom_percent"
KINDS = ("set", "expected error", "fragmentation")
FLOOR = FRAGMENTATION_RISK  # the least margin kept when the user sets none
MAX_ERROR_MARGIN = 0.9  # errors are predicted / measured - 1 > -1: cap the margin at 10x


class Margin(NamedTuple):
    """The share of the GPU's memory a plan leaves free, and where it comes from."""

    fraction: float  # of the GPU's memory, for the plan it was taken from
    kind: str  # one of KINDS: the user's setting, the estimate's error, fragmentation's floor
    reason: str  # ``advice.headroom_percent = 15``, ``the estimate's 90th percentile on 8 similar ... runs: 25% under``

    @property
    def explicit(self) -> bool:
        """Set by the user: the same for every changed plan (else each plan keeps its own)."""
        return self.kind == "set"

    def text(self) -> str:
        """``25% free (the estimate's 90th percentile on 8 similar published runs: 25% under)``."""
        return f"{self.fraction:.0%} free ({self.reason})"

    def for_estimate(self, est: Estimate) -> float:
        """The margin a changed plan must leave: the user's, else that plan's own (`safety_margin`)."""
        return self.fraction if self.explicit else safety_margin(est).fraction

    def keeps(self, est: Estimate) -> bool:
        """Fits with the margin free on the GPU, and what it offloads fits the node's host memory and NVMe."""
        on_gpu_limit = est.gpu_capacity * (1 - self.for_estimate(est))
        return est.on_gpu <= on_gpu_limit and est.host_fits and est.nvme_fits

    def need_bytes(self, est: Estimate) -> int:
        """What ``est``'s plan may need on the GPU with its margin: on-GPU peak / (1 - margin); at most the GPU's
        memory exactly when the margin is kept (see the module docstring)."""
        return math.ceil(est.on_gpu / (1 - min(self.for_estimate(est), MAX_ERROR_MARGIN)))


def fixed_margin(fraction: float, reason: str = SET_SOURCE) -> Margin:
    """The same margin for every plan (``0.0``: fits at all)."""
    return Margin(fraction, "set", reason)


def error_margin(est: Estimate) -> float:
    """The 90th percentile of the estimate's under-prediction on the published runs nearest to its plan, as a share
    of the GPU (0 when none was under or there are no such runs)."""
    ee = est.expected_error
    return min(ee.p90_under_pct / 100, MAX_ERROR_MARGIN) if ee.n_cases else 0.0


def safety_margin(est: Estimate, plan: Plan | None = None) -> Margin:
    """The margin for ``est``'s plan (or ``plan``'s setting, when given): see the module docstring."""
    percent = (plan or est.plan).advice.headroom_percent
    if percent is not None:
        return fixed_margin(percent / 100, f"{SET_SOURCE} = {percent:g}")
    band = error_margin(est)
    if band > FLOOR:
        ee = est.expected_error
        reason = f"the estimate's 90th percentile on {ee.n_cases} similar published runs: {ee.p90_under_pct:.0f}% under"
        return Margin(band, "expected error", reason)
    return Margin(FLOOR, "fragmentation", f"fragmentation's {FLOOR:.0%}")


def need_bytes(est: Estimate) -> int:
    """What ``est``'s plan may need on the GPU with its own margin (`safety_margin`, `Margin.need_bytes`)."""
    return safety_margin(est).need_bytes(est)
