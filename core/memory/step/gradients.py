"""Gradients through the step. With ``set_to_none`` they are absent from the first micro-batch's forward; from
micro-batch 2 on (gradient accumulation) they are all there (oracle ``llama_ga2``), and under FSDP's no_sync
(`Layout.unsynced`) every unit's unsharded gradient is held until the last micro-batch's reduce-scatter. In
backward they appear block by block (ZeRO-2/3 keep only their shard); with the optimizer step in backward
(torchtune training/memory.py register_optim_in_bwd_hooks: a post-accumulate-grad hook steps and frees each
parameter's gradient) at most the largest one exists. Liger's fused cross-entropy computes the lm_head's gradient
in the loss's forward."""

from __future__ import annotations

from collections.abc import Iterator

from vramplan.core.memory.step.moments import (
    BACKWARD_END,
    BACKWARD_START,
    FIRST_BLOCK,
    FORWARD_END,
    LAST_BLOCK,
    OPTIMIZER_STEP,
    Contribution,
    Mechanism,
    StepView,
)
from vramplan.core.memory.terms import Term


def live(v: StepView) -> Iterator[Contribution]:
    st, lay = v.st, v.lay
    z, accum, G = lay.zero, lay.accum, st.grads
    held = st.grads_whole if (lay.unsynced and G) else G  # what earlier micro-batches accumulated
    before = (held if accum else 0) + (st.head_grad if lay.fused_ce and not accum else 0)

    def made(done: int) -> int:
        """Gradient bytes present after `done` bytes were produced in this backward."""
        if accum:
            return held
        got = min(G, done // lay.dp if z >= 2 else done)
        return min(got, st.largest_grad) if lay.opt_in_bwd else got

    yield FORWARD_END, "gradients", before
    yield BACKWARD_START, "gradients", before
    n, head_g = v.stage.layers, st.head_grad
    yield LAST_BLOCK, "gradients", made(0 if z >= 2 else head_g)
    yield FIRST_BLOCK, "gradients", made(head_g + (n - 1) * st.layer_grad)
    yield BACKWARD_END, "gradients", min(G, st.largest_grad) if lay.opt_in_bwd else (held if accum else G)
    yield OPTIMIZER_STEP, "gradients", G


def headlines(v: StepView) -> tuple[Term, ...]:
    return ()  # the gradients' formula is the states' (`core.memory.states.sharding`)


GRADIENTS = Mechanism("gradients", live, headlines)
