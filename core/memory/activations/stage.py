"""Activation bytes of one micro-batch on one pipeline stage, per tensor-parallel rank (`stage_acts`): the
saved tensors of its blocks (`core.memory.activations.block`), with checkpointing, int8 compression, ZeRO-3's
re-gathered weights, sequence parallelism, the embedding and the head, and the backward's transients. `core.memory.peak`
places them in the moments of the step."""

from __future__ import annotations

from operator import attrgetter
from typing import TYPE_CHECKING, NamedTuple

from vramplan.core.memory.activations.block import (
    checkpointed_layer,
    closure_bytes,
    embed_saved,
    head_saved,
    layer_saved,
    once_bytes,
    op_cached,
)
from vramplan.core.memory.activations.context import ActCtx, Layout, Saved, int8_bytes
from vramplan.core.memory.activations.loss import gathered_head_input, loss_bytes, loss_parallel_on
from vramplan.core.memory.states.stages import Stage
from vramplan.core.plan.helpers.memo import memoised
from vramplan.core.plan.resolved import fsdp_sharded
from vramplan.core.plan.stack.defaults import STACK_KEYS

if TYPE_CHECKING:
    from vramplan.core.plan.schema.plan import Plan


_STACK_READERS = tuple((key, attrgetter(key)) for key in STACK_KEYS)


def plan_layout(plan: Plan) -> Layout:
    """The strategy settings the activation and phase model read from a plan (`Layout`)."""
    t, s = plan.training, plan.strategy
    tp = s.tensor_parallel
    return Layout(
        tp=tp,
        sp=s.sequence_parallel,
        dp=plan.data_parallel,
        zero=s.zero_stage,
        int8=s.activation_compression == "int8",
        fused_ce=s.fused_cross_entropy and s.loss_chunks == 1,  # a chunked loss replaces the fused one
        accum=t.grad_accum_steps > 1,
        loss_chunks=s.loss_chunks,
        checkpoint_every=s.checkpoint_every,
        offload=s.activation_offload == "cpu",
        opt_in_bwd=s.optimizer_in_backward,
        unsynced=t.grad_accum_steps > 1 and s.fsdp_grad_sync == "last" and fsdp_sharded(plan),
        loss_parallel=loss_parallel_on(tp, plan.stack.framework),
        dtensor_tp=tp > 1 and plan.stack.framework == "torchtitan",  # parallelize apply_tp: DTensor TP
        fused_ce_set=s.fused_cross_entropy,
        stack_keys=tuple((key, read(plan)) for key, read in _STACK_READERS),
    )


class StageActs(NamedTuple):
    """Activation bytes of one micro-batch on one stage, per TP rank."""

    layers: int  # saved by all blocks of the stage
    first_layer: int  # saved by the stage's first block (LoRA: block 0 saves less)
    embed: int
    head: int
    rope: int
    logsm: int  # saved fp32 log-softmax
    loss_grads: int  # the loss's two fp32 gradients at backward start
    logits_fwd: int  # lm_head output (+ fp32 upcast) while the loss is computed
    logits_kept: int  # logits held from the loss to the end of backward (`core.memory.activations.loss`)
    logits_freed: int  # 16-bit logits freed before the loss's backward (their block stays reserved)
    copies: int  # saved 16-bit weight copies at the start of backward
    copies_fwd: int  # weight copies alive at the end of forward (autocast cache)
    head_copies: int
    closure: int  # checkpoint closures
    layer_work: int  # largest backward transient of a block (incl. recompute)
    dy: int  # gradient of the hidden states flowing between blocks
    offloaded: int = 0  # saved bytes moved to pinned host memory per micro-batch (activation offloading)
    head_work: int = 0  # the lm_head's own transient at the loss (a 4-bit head's dequantized weight)

    @property
    def saved(self) -> int:
        return self.layers + self.embed + self.head + self.rope


@memoised(1024)
def stage_acts(ctx: ActCtx, stage: Stage, lay: Layout) -> StageActs:
    tp, sp, int8 = lay.tp, lay.sp, lay.int8
    arch, T = ctx.arch, ctx.T
    n = stage.layers
    recompute = ctx.gc or ctx.op
    rest = layer_saved(ctx, True)
    first = rest if (ctx.full or recompute) else layer_saved(ctx, False)

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
    # checkpoint_every = k: blocks k, 2k, ... are checkpointed, the others save everything (torchtitan
    # parallelisms/parallelize_llama.py: ``if not ac_freq or _count % ac_freq == 0``)
    n_ck = (n // lay.checkpoint_every) if recompute else 0
    n_plain = n - n_ck
    ck, work = _checkpoint_and_work(ctx, lay, rest, rest_b)
    plain_first = stage.first and n_plain == n  # block 1 is checkpointed only when every block is
    layers = n_ck * ck + (first_b + (n_plain - 1) * rest_b if plain_first and n_plain else n_plain * rest_b)
    first_layer = first_b if (n_plain and plain_first) else (ck if n_ck else first_b)
    layer_copies = (
        ((first.copies if plain_first else rest.copies) + (n_plain - 1) * rest.copies) // tp if n_plain else 0
    )
    # bitsandbytes <= 0.43.1 keeps each 4-bit linear's input outside the saved tensors; non-reentrant
    # checkpointing cannot drop it, reentrant checkpointing runs the forward without autograd
    held = n_plain * rest.held // tp
    if n_ck and not ctx.reentrant:
        held += n_ck * rest.held_gc // tp
    layers += held
    if ctx.quantized and ctx.quantized_roles:
        largest_q = max(arch.linear(r).weight_params for r in arch.roles() if r in ctx.quantized_roles)
        work += ctx.dequant_bytes * largest_q // tp  # a 4-bit linear's dequantized weight in its backward
    # autocast caches every trained weight's 16-bit copy through the forward, checkpointed blocks too
    cache = ((first.cache if stage.first else rest.cache) + (n - 1) * rest.cache) // tp if n else 0
    # frozen weights' saved copies (not in autocast's cache); checkpointed blocks save none
    frozen = (
        ((first.frozen_copies if plain_first else rest.frozen_copies) + (n_plain - 1) * rest.frozen_copies) // tp
        if n_plain
        else 0
    )
    embed = embed_saved(ctx, ctx.full or recompute).local(tp, sp) if stage.first else 0
    hd = _head(ctx, lay) if stage.last else Head(0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    frozen += hd.frozen_copies
    layers, offloaded = _offload(ctx, lay, layers, rest_b, n_ck)
    copies = layer_copies + hd.copies
    return StageActs(
        layers=layers,
        first_layer=first_layer,
        embed=embed,
        head=hd.saved,
        rope=0 if (recompute and not n_plain) else once_bytes(ctx),
        logsm=hd.logsm,
        loss_grads=hd.loss_grads,
        logits_fwd=hd.logits_fwd,
        logits_kept=hd.logits_kept,
        logits_freed=hd.logits_freed,
        copies=copies,
        copies_fwd=max(copies, cache + hd.cache + frozen),
        head_copies=hd.copies,
        closure=closure_bytes(ctx),
        layer_work=work,
        dy=ctx.reg.resid_bytes * T * arch.h // (tp if sp else 1),
        offloaded=offloaded,
        head_work=hd.work,
    )


class Head(NamedTuple):
    """The last stage's final norm, lm_head and loss, on one TP rank (bytes)."""

    saved: int  # what they save (the loss's chunked lm_head inputs included)
    logsm: int
    logits_fwd: int
    loss_grads: int
    logits_kept: int
    logits_freed: int
    copies: int  # autocast's saved 16-bit lm_head weight copy
    cache: int  # and its cached copy through the forward (a trained head)
    frozen_copies: int  # a frozen head's saved copy
    work: int  # a 4-bit lm_head's dequantized weight at the loss


def _checkpoint_and_work(ctx: ActCtx, lay: Layout, rest: Saved, rest_b: int) -> tuple[int, int]:
    """What one checkpointed block keeps (0 without recomputation) and a block's backward working set: with
    recomputation, backward recomputes one block (its saved tensors; an fp32 block input is the checkpoint itself,
    not a copy), re-casts its weights under autocast, then runs its backward."""
    tp, sp, int8 = lay.tp, lay.sp, lay.int8
    if not (ctx.gc or ctx.op):
        return 0, rest.work // tp + (rest.local(tp, sp) if int8 else 0)  # int8: one block decompressed
    if ctx.op:
        ck = op_cached(ctx).local(tp, sp)
    else:
        ck = checkpointed_layer(ctx) // (tp if sp else 1)
        ck = int8_bytes(ck // ctx.reg.resid_bytes) if int8 else ck
    own_input = ctx.arch.fam.norm == "layer" or ctx.reg.resid_bytes == 4  # RMSNorm saves an fp32 version
    shared = ck if own_input and not int8 and not ctx.op else 0
    work = max(rest_b - shared, 0) + rest.cache // tp + rest.work // tp
    if ctx.reentrant and ctx.bnb_legacy:
        work += rest.held_gc // tp  # reentrant recompute: one block's 4-bit inputs held during its backward
    return ck, work


def _head(ctx: ActCtx, lay: Layout) -> Head:
    tp, sp = lay.tp, lay.sp
    hs = head_saved(ctx)
    saved = hs.local(tp, sp)
    if lay.dtensor_tp and sp and ctx.full:
        saved += gathered_head_input(ctx, tp)
    copied = lay.zero != 3  # ZeRO-3 re-gathers the head's weight instead
    lb = loss_bytes(ctx, lay)
    quantized = "lm_head" in ctx.quantized_roles
    return Head(
        saved=saved + lb.copies,
        logsm=lb.saved,
        logits_fwd=lb.fwd,
        loss_grads=lb.bwd,
        logits_kept=lb.kept,
        logits_freed=lb.freed,
        copies=hs.copies // tp if copied else 0,
        cache=hs.cache // tp if copied else 0,
        frozen_copies=hs.frozen_copies // tp if copied else 0,
        work=ctx.dequant_bytes * ctx.arch.V * ctx.arch.h // tp if quantized else 0,
    )


def _offload(ctx: ActCtx, lay: Layout, layers: int, block_bytes: int, n_ck: int) -> tuple[int, int]:
    """The stage's saved bytes left on the GPU and those offloaded, under torchtune's activation offloading.

    torchtune training/_activation_offloading.py: every saved tensor of >= 1 KiB outside the output head goes to
    pinned host memory; with checkpointing those are the checkpoints' inputs (saved through _NoopSaveInputs,
    outside the checkpoint's own hooks; per-op checkpointing's cache bypasses the hooks); the forward stash keeps
    the last 5 on the GPU (max_fwd_stash_size)."""
    if not lay.offload:
        return layers, 0
    if ctx.gc or ctx.op:
        ck = checkpointed_layer(ctx) // (lay.tp if lay.sp else 1)
        offloaded, kept = n_ck * ck, min(n_ck, 5) * ck
    else:
        offloaded, kept = layers, min(layers, block_bytes)
    return layers - offloaded + kept, offloaded - kept


def _without_copies(x: Saved) -> Saved:
    """``x`` without its weight copies (ZeRO-3 / FSDP re-gather the weights): the activations it saves, its
    backward transient, and what it keeps outside the saved tensors (bitsandbytes <= 0.43.1's inputs), stay."""
    return Saved(
        rep=x.rep, split=x.split, elems=x.elems, work=x.work, held=x.held, held_gc=x.held_gc, op_cache=x.op_cache
    )
