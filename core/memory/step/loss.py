"""The loss's vocabulary-sized tensors through the step (`core.memory.activations.loss` computes them and their
headline): at the loss, the logits and their fp32 upcast beside the saved log-softmax; at the start of backward the
loss's gradients; logits a loop keeps until the end of backward; with torchtune's compiled chunked loss, each
chunk's partial lm_head gradient."""

from __future__ import annotations

from collections.abc import Iterator

from vramplan.core.memory.activations.loss import loss_headline
from vramplan.core.memory.step.moments import (
    BACKWARD_END,
    BACKWARD_START,
    BLOCK_MOMENTS,
    FORWARD_END,
    Contribution,
    Mechanism,
    StepView,
)
from vramplan.core.memory.terms import Term


def live(v: StepView) -> Iterator[Contribution]:
    a, lay = v.a, v.lay
    yield FORWARD_END, "logits", a.logsm + a.logits_fwd
    yield BACKWARD_START, "logits", a.logsm + a.loss_grads + a.logits_kept
    if a.logits_kept:
        for moment in (*BLOCK_MOMENTS, BACKWARD_END):
            yield moment, "logits", a.logits_kept
    if v.stage.last and lay.loss_chunks > 1 and v.ctx.compiled:
        # compiled chunked loss: each chunk's lm_head backward makes a partial [V, h] weight gradient; up to three
        # are alive while autograd's InputBuffer sums them (measured on the CPU, tests/data/chunked_ce.json)
        yield BACKWARD_START, "temporaries", 2 * v.st.head_grad


def headlines(v: StepView) -> tuple[Term, ...]:
    return (loss_headline(v.ctx, v.lay),)


LOSS = Mechanism("loss", live, headlines)
