"""The model states resident through the step: the parameters and optimizer states at every moment, ZeRO-3's
gathered modules from the first forward to the end of backward (`core.memory.states`)."""

from __future__ import annotations

from collections.abc import Iterator

from vramplan.core.memory.step.moments import EVERY_MOMENT, OPTIMIZER_STEP, Contribution, Mechanism, StepView
from vramplan.core.memory.terms import Term


def live(v: StepView) -> Iterator[Contribution]:
    st = v.st
    for m in EVERY_MOMENT:
        yield m, "parameters", st.params
        yield m, "optimizer_states", st.optimizer
        if m != OPTIMIZER_STEP:
            yield m, "gathered_parameters", st.gathered


def headlines(v: StepView) -> tuple[Term, ...]:
    """The parameters', gradients', optimizer states' and gathered modules' formulas (`States.terms`)."""
    return v.st.terms


RESIDENT = Mechanism("resident model states", live, headlines)
