"""The candidate moments of a steady-state step on one pipeline stage, and how mechanisms fill them.

Not every kind of memory is alive at once, so the peak is the largest of a few moments of the step (measured in
../shared/oracle, README "What the runs show"):

- **forward** (end of the last micro-batch's forward, at the loss): everything saved so far, autocast's cached
  weight copies, and the lm_head output (plus its fp32 upcast) next to the saved fp32 log-softmax.
- **backward start** (the loss's backward): everything the forward kept plus two fp32 [b*s, V] gradients
  (``nll_loss_backward``, ``_log_softmax_backward_data``), before any parameter gradient exists.
- **backward** through the blocks: activations are freed block by block while gradients appear; memory is
  linear in the block index, so the top and bottom blocks bound it; plus each block's transient.
- **end of backward**: every gradient, the embedding's being accumulated.
- **optimizer step**: weights + gradients + optimizer state + the step's temporaries.

A mechanism is a function of the `StepView` that yields ``(moment, kind, bytes)``: what it keeps live at that
moment. `compose` sums them per moment; a moment the step does not have (no blocks on this stage, the optimizer
step run in backward) takes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple

from vramplan.core.memory.activations.context import ActCtx, Layout
from vramplan.core.memory.activations.stage import StageActs
from vramplan.core.memory.kinds import STEP_KINDS
from vramplan.core.memory.record import Phase
from vramplan.core.memory.states.record import StateCtx, States
from vramplan.core.memory.states.stages import Stage
from vramplan.core.memory.terms import Term


class Moment(NamedTuple):
    name: str  # forward | backward | optimizer
    text: str  # what happens at that moment, in words


FORWARD_END, BACKWARD_START, LAST_BLOCK, FIRST_BLOCK, BACKWARD_END, OPTIMIZER_STEP = range(6)
MOMENTS: tuple[Moment, ...] = (
    Moment("forward", "end of forward of the last micro-batch: the loss is computed from the lm_head output"),
    Moment("backward", "start of backward: everything the forward kept plus the loss's two fp32 [b*s, V] gradients"),
    Moment("backward", "backward of the last block: its transients on top of all other blocks' activations"),
    Moment(
        "backward", "backward of the first block: every other block's gradients exist, little activation memory is left"
    ),
    Moment("backward", "end of backward: all gradients, the embedding's gradient being accumulated"),
    Moment("optimizer", "optimizer step: weights, gradients, optimizer state and the step's temporaries"),
)
BLOCK_MOMENTS = (LAST_BLOCK, FIRST_BLOCK)
EVERY_MOMENT = range(len(MOMENTS))


class StepView(NamedTuple):
    """What the mechanisms read: the plan's activation context and layout, its state settings, the stage, the
    stage's model states and one micro-batch's activations."""

    ctx: ActCtx
    lay: Layout
    sc: StateCtx
    stage: Stage
    st: States
    a: StageActs


Contribution = tuple[int, str, int]


class Mechanism(NamedTuple):
    """One mechanism of the step: what it keeps live at each moment, and the headline terms of the kinds it owns."""

    name: str
    live: Callable[[StepView], Iterable[Contribution]]
    headlines: Callable[[StepView], tuple[Term, ...]]


def present(v: StepView) -> tuple[int, ...]:
    """The moments this stage's step has: the blocks' moments only with blocks, the optimizer step only after
    backward (not when it runs in backward, per parameter)."""
    out = [FORWARD_END, BACKWARD_START]
    if v.stage.layers:
        out += BLOCK_MOMENTS
    out.append(BACKWARD_END)
    if not v.lay.opt_in_bwd:
        out.append(OPTIMIZER_STEP)
    return tuple(out)


def compose(v: StepView, mechanisms: tuple[Mechanism, ...]) -> tuple[Phase, ...]:
    """The step's moments, each with the bytes every mechanism keeps live then, by kind (in the gauges' order)."""
    live: dict[int, dict[str, int]] = {m: {} for m in present(v)}
    for mechanism in mechanisms:
        for moment, kind, n_bytes in mechanism.live(v):
            at = live.get(moment)
            if at is not None:
                at[kind] = at.get(kind, 0) + n_bytes
    return tuple(
        Phase(MOMENTS[m].name, MOMENTS[m].text, {k: at[k] for k in STEP_KINDS if k in at}) for m, at in live.items()
    )
