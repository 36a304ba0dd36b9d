"""Gradients waiting in backward for their reduction or their sum, beyond the ones kept.

- ZeRO-2/3: a block's gradients wait unsharded while their reduce-scatter overlaps the next block's backward
  (FSDP2 frees its input at the next reduce-scatter), the lm_head's before the last block; FSDP2 bf16-fsdp copies
  them into an fp32 reduce-scatter input (`States.reduce_extra`).
- FSDP2's root unit (`States.head_held`, `States.root_reduce`): the lm_head's unsharded gradient waits for the end
  of backward, when the root unit reduces its gradients.
- A tied embedding/lm_head weight: autograd buffers the lm_head's gradient until the embedding's backward, then
  sums both out of place (InputBuffer: old + new) before AccumulateGrad (oracle README; measured). Under autocast
  the embedding's gradient is a fresh fp32 cast and the sum happens in place (measured: llama tied fp32 vs BLOOM
  tied bf16-autocast). Without a tie, the embedding's dense [V, h] gradient is produced whole before ZeRO-2/3's
  reduce-scatter, or added in place into an existing one.

A block's own weight gradients are made op by op as its backward frees its saved tensors; its worst transient comes
first, when only the down projection's gradient exists: a block's moment counts the gradients of the blocks behind
it, not its own (measured, tests/data/moe_truth.json: mixtral_base's backward within 0.01%)."""

from __future__ import annotations

from collections.abc import Iterator

from vramplan.core.memory.step.moments import (
    BACKWARD_END,
    FIRST_BLOCK,
    LAST_BLOCK,
    Contribution,
    Mechanism,
    StepView,
)
from vramplan.core.memory.terms import Term


def live(v: StepView) -> Iterator[Contribution]:
    ctx, st, lay, stage = v.ctx, v.st, v.lay, v.stage
    z, accum, arch = lay.zero, lay.accum, ctx.arch
    vocab_g = arch.V * arch.h * st.grad_bytes // lay.tp if ctx.full else 0
    tied = vocab_g if (arch.tied and stage.first and stage.last) else 0
    buffered = tied if (accum or z >= 2) else 0  # (otherwise it is the gradient the gradients already count)
    pending = st.layer_grad + st.reduce_extra if z >= 2 else 0
    head_fresh = (st.head_held or st.head_grad) if z >= 2 else 0
    yield LAST_BLOCK, "temporaries", max(head_fresh, buffered)
    yield FIRST_BLOCK, "temporaries", (pending + st.head_held if stage.layers > 1 else head_fresh) + buffered
    tail = 0
    if tied:
        tail = tied + (tied if ctx.reg.compute != "autocast" else 0) + buffered
    elif stage.first and (accum or z >= 2):
        tail = vocab_g
    yield BACKWARD_END, "temporaries", max(tail, st.root_reduce)  # FSDP2's root unit reduces only now


def headlines(v: StepView) -> tuple[Term, ...]:
    return ()  # part of the step's transients (`core.memory.step.transients`)


PENDING = Mechanism("pending gradients", live, headlines)
