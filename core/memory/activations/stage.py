"""Activation bytes of one micro-batch on one pipeline stage, per tensor-parallel rank (`stage_acts`): the
saved tensors of its blocks (`core.memory.activations.block`), with checkpointing, int8 compression, ZeRO-3's
re-gathered weights, sequence parallelism, the embedding and the head, and the backward's transients. `core.memory.peak`
places them in the moments of the step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from vramplan.core.memory.activations.block import (
    checkpointed_layer,
    closure_bytes,
    embed_saved,
    head_saved,
    layer_saved,
    logsoftmax_bytes,
    once_bytes,
)
from vramplan.core.memory.activations.context import ActCtx, Saved, int8_bytes
from vramplan.core.memory.states import Stage
from vramplan.core.plan.arch import Arch
from vramplan.core.plan.memo import memoised


class Layout(NamedTuple):
    """The strategy settings the activation and phase model read (hashable: results are cached on it; a
    NamedTuple, built per estimate, is four times faster to build than a frozen dataclass)."""

    tp: int
    sp: bool
    dp: int
    zero: int
    int8: bool
    fused_ce: bool
    accum: bool  # more than one micro-batch per optimizer step


@dataclass(frozen=True, slots=True)
class StageActs:
    """Activation bytes of one micro-batch on one stage, per TP rank."""

    layers: int  # saved by all blocks of the stage
    first_layer: int  # saved by the stage's first block (LoRA: block 0 saves less)
    embed: int
    head: int
    rope: int
    logsm: int  # saved fp32 log-softmax
    loss_grads: int  # the loss's two fp32 gradients at backward start
    logits_fwd: int  # lm_head output (+ fp32 upcast) while the loss is computed
    copies: int  # saved 16-bit weight copies at the start of backward
    copies_fwd: int  # weight copies alive at the end of forward (autocast cache)
    head_copies: int
    closure: int  # checkpoint closures
    layer_work: int  # largest backward transient of a block (incl. recompute)
    dy: int  # gradient of the hidden states flowing between blocks

    @property
    def saved(self) -> int:
        return self.layers + self.embed + self.head + self.rope


@memoised(1024)
def stage_acts(ctx: ActCtx, stage: Stage, lay: Layout) -> StageActs:
    tp, sp, int8 = lay.tp, lay.sp, lay.int8
    arch, T = ctx.arch, ctx.T
    n = stage.layers
    rest = layer_saved(ctx, True)
    first = rest if (ctx.full or ctx.gc) else layer_saved(ctx, False)

    def local(x: Saved) -> int:
        b = x.local(tp, sp)
        if int8 and (x.rep + x.split):
            return b * int8_bytes(x.elems) // (x.rep + x.split)
        return b

    if lay.zero == 3:
        # ZeRO-3 / FSDP gather each module's 16-bit weights for use and free them after: autograd's saved weights
        # are re-gathered in backward (the gathered_parameters term), no whole-model 16-bit copy persists.
        first, rest = _without_copies(first), _without_copies(rest)
    rest_b = local(rest)
    first_b = local(first) if stage.first else rest_b
    if ctx.gc:
        ck = checkpointed_layer(ctx) // (tp if sp else 1)
        ck = int8_bytes(ck // ctx.reg.resid_bytes) if int8 else ck
        layers, first_layer = n * ck, ck
        layer_copies = 0
        # backward recomputes one block (its saved tensors; an fp32 block input is the checkpoint itself, not a
        # copy), re-casts its weights under autocast, then runs its backward
        own_input = ctx.arch.fam.norm == "layer" or ctx.reg.resid_bytes == 4  # RMSNorm saves an fp32 version
        shared = ck if own_input and not int8 else 0
        work = rest_b - shared + rest.cache // tp + rest.work // tp
    else:
        layers = first_b + (n - 1) * rest_b
        first_layer = first_b
        layer_copies = ((first.copies if stage.first else rest.copies) + (n - 1) * rest.copies) // tp
        work = rest.work // tp + (rest.local(tp, sp) if int8 else 0)  # int8: one block decompressed
    cache = ((first.cache if stage.first else rest.cache) + (n - 1) * rest.cache) // tp
    # frozen weights' saved copies (not in autocast's cache); checkpointed blocks save none
    frozen = (
        0
        if ctx.gc
        else ((first.frozen_copies if stage.first else rest.frozen_copies) + (n - 1) * rest.frozen_copies) // tp
    )
    embed = embed_saved(ctx, ctx.full or ctx.gc).local(tp, sp) if stage.first else 0
    head = logsm = loss_grads = logits_fwd = head_copies = head_cache = 0
    if stage.last:
        hs = head_saved(ctx)
        head = hs.local(tp, sp)
        if lay.zero != 3:
            head_copies = hs.copies // tp
            head_cache = hs.cache // tp
            frozen += hs.frozen_copies // tp
        C = ctx.reg.act_bytes
        if lay.fused_ce:
            chunk = _fused_ce_chunk(T, arch)
            loss_grads = chunk * arch.V * (8 + C) // tp
            logits_fwd = loss_grads
        else:
            logsm = logsoftmax_bytes(ctx) // tp
            loss_grads = 2 * logsm
            logits_fwd = (C * T * arch.V + (4 * T * arch.V if C != 4 else 0)) // tp
    copies = layer_copies + head_copies
    copies_fwd = max(copies, cache + head_cache + frozen)
    rope = 0 if ctx.gc else once_bytes(ctx)
    dy = ctx.reg.resid_bytes * T * arch.h // (tp if sp else 1)
    return StageActs(
        layers=layers,
        first_layer=first_layer,
        embed=embed,
        head=head,
        rope=rope,
        logsm=logsm,
        loss_grads=loss_grads,
        logits_fwd=logits_fwd,
        copies=copies,
        copies_fwd=copies_fwd,
        head_copies=head_copies,
        closure=closure_bytes(ctx),
        layer_work=work,
        dy=dy,
    )


def _without_copies(x: Saved) -> Saved:
    return Saved(rep=x.rep, split=x.split, elems=x.elems, work=x.work)


def _fused_ce_chunk(T: int, arch: Arch) -> int:
    """Liger's fused linear cross-entropy processes ``next_pow2(ceil(T / ceil(V/h)))`` tokens at a time
    (liger_kernel/ops/fused_linear_cross_entropy.py), so a chunk of logits is about the size of the hidden
    states; Cut Cross-Entropy needs even less."""
    inc = -(-arch.V // arch.h)
    chunk = -(-T // inc)
    return min(T, 1 << max(chunk - 1, 0).bit_length())
