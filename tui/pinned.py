"""The pinned plan: a plan kept aside (``P``) so the gauges and the compare view (``d``) show the edited plan beside
it."""

from __future__ import annotations

from typing import NamedTuple

from vramplan.core.memory.record import Estimate
from vramplan.core.plan.helpers.units import fmt_seconds, gib_text
from vramplan.core.plan.schema.plan import Plan
from vramplan.core.time.record import StepTime


class Pinned(NamedTuple):
    """The plan pinned for comparison, with its estimate and step time (computed once, when pinned)."""

    plan: Plan
    estimate: Estimate
    timing: StepTime


def pinned_line(pinned: Pinned, est: Estimate, st: StepTime) -> str:
    """What the gauges show above the pinned plan's bar, within their 34 columns: its per-GPU total and step time,
    and the edited plan's change from them."""
    # the compare view's words (and the advice modules under them) load when a plan is pinned, not at start-up
    from vramplan.core.advice.plandiff import relative_text, signed_gib

    pe, pst = pinned.estimate, pinned.timing
    over = "" if pe.fits else ", over"
    head = f"◆ pinned {gib_text(pe.total)} GiB{over} · {fmt_seconds(pst.step_seconds)}"
    if pinned.plan == est.plan:
        return f"{head}\n  now: the same plan"
    rel = relative_text(st.step_seconds / pst.step_seconds).replace(" time", "")
    return f"{head}\n  now {signed_gib(est.total - pe.total)} GiB, {rel}"
