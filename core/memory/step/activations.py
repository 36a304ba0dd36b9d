"""The activations through the step (`core.memory.activations` computes what one micro-batch saves): all of them
at the loss, freed block by block in backward (the top block's backward holds every other block's, the first
block's almost none), autocast's cached weight copies through the forward; with pipeline parallelism the other
micro-batches in flight on this stage (1F1B) keep theirs."""

from __future__ import annotations

from collections.abc import Iterator

from vramplan.core.memory.step.moments import (
    BACKWARD_END,
    BACKWARD_START,
    FIRST_BLOCK,
    FORWARD_END,
    LAST_BLOCK,
    Contribution,
    Mechanism,
    StepView,
)
from vramplan.core.memory.terms import Term, headline

ACTIVATIONS_SRC = (
    "tensors autograd saves for backward, op by op (core/memory/activations/block.py; Korthikanti et al. 2022 §4 for "
    "the structure, checked tensor by tensor against measured PyTorch runs in tests/data)"
)
AUTOCAST_CACHE = headline(
    "autocast_cache",
    "bf16 copies of trained weights cached while the forward runs: 2 B x matmul weights",
    source="aten/src/ATen/autocast_mode.cpp cached_cast: casts of leaf tensors that require grad are cached "
    "until autocast exits; with checkpointing they are not saved, but alive at the end of the forward",
)


def live(v: StepView) -> Iterator[Contribution]:
    a, n = v.a, v.stage.layers
    others = (v.stage.in_flight - 1) * (a.saved + a.copies)  # the other micro-batches in flight (1F1B)
    yield FORWARD_END, "activations", others + a.saved + a.copies
    yield FORWARD_END, "autocast_cache", a.copies_fwd - a.copies
    yield BACKWARD_START, "activations", others + a.saved + a.copies
    copies_layers = a.copies - a.head_copies  # the blocks' saved weight copies (the head's freed at the loss)
    yield LAST_BLOCK, "activations", others + a.saved - a.head + copies_layers
    per_layer_copies = copies_layers // n if n else 0
    yield FIRST_BLOCK, "activations", others + a.embed + a.first_layer + a.rope + per_layer_copies
    yield BACKWARD_END, "activations", others + a.embed


def headlines(v: StepView) -> tuple[Term, ...]:
    ctx, lay = v.ctx, v.lay
    arch, reg = ctx.arch, ctx.reg
    if ctx.gc:
        text = "checkpoints: {} blocks x b*s*h x {} B (b={}, s={}, h={})"
        args: tuple[object, ...] = (arch.L, reg.resid_bytes, ctx.b, ctx.s, arch.h)
    else:
        text = "saved tensors of {} blocks (b={}, s={}, h={}, f={}, {} attention)"
        args = (arch.L, ctx.b, ctx.s, arch.h, arch.f, "eager" if ctx.eager else "flash")
    if reg.compute == "autocast":
        text += " + autocast's bf16 weight copies"
    if lay.int8:
        text += ", int8-compressed"
    return headline("activations", text, *args, source=ACTIVATIONS_SRC), AUTOCAST_CACHE


ACTIVATIONS = Mechanism("activations", live, headlines)
