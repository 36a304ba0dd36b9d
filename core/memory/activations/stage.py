"""Activation bytes of one micro-batch on one pipeline stage, per tensor-parallel rank (`stage_acts`): the
saved tensors of its blocks (`core.memory.activations.block`), with checkpointing, int8 compression, ZeRO-3's
re-gathered weights, sequence parallelism, the embedding and the head, and the backward's transients. `core.memory.peak`
places them in the moments of the step."""

from __future__ import annotations

from typing import NamedTuple

from vramplan.core.memory.activations.block import (
    checkpointed_layer,
    closure_bytes,
    embed_saved,
    head_saved,
    layer_saved,
    once_bytes,
    op_cached,
)
from vramplan.core.memory.activations.context import ActCtx, Saved, int8_bytes
from vramplan.core.memory.states import Stage
from vramplan.core.plan.architecture.arch import Arch
from vramplan.core.plan.helpers.memo import memoised


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
    loss_chunks: int = 1  # torchtune's chunked cross-entropy (1: one [tokens, V] loss)
    checkpoint_every: int = 1  # checkpoint blocks k, 2k, ... only
    offload: bool = False  # torchtune's activation offloading to pinned host memory
    opt_in_bwd: bool = False  # the optimizer step runs in backward, per parameter
    unsynced: bool = False  # FSDP no_sync until the last micro-batch: unsharded gradients held (`States.grads_whole`)
    loss_parallel: bool = False  # DTensor loss_parallel over vocab-sharded logits (torchtitan with TP: `loss_parallel`)
    dtensor_tp: bool = False  # DTensor tensor parallelism (torchtitan): `gathered_head_input`


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
    if recompute:
        if ctx.op:
            ck = op_cached(ctx).local(tp, sp)
        else:
            ck = checkpointed_layer(ctx) // (tp if sp else 1)
            ck = int8_bytes(ck // ctx.reg.resid_bytes) if int8 else ck
        # backward recomputes one block (its saved tensors; an fp32 block input is the checkpoint itself, not a
        # copy), re-casts its weights under autocast, then runs its backward
        own_input = ctx.arch.fam.norm == "layer" or ctx.reg.resid_bytes == 4  # RMSNorm saves an fp32 version
        shared = ck if own_input and not int8 and not ctx.op else 0
        work = max(rest_b - shared, 0) + rest.cache // tp + rest.work // tp
        if ctx.reentrant and ctx.bnb_legacy:
            work += rest.held_gc // tp  # reentrant recompute: one block's 4-bit inputs held during its backward
    else:
        ck = 0
        work = rest.work // tp + (rest.local(tp, sp) if int8 else 0)  # int8: one block decompressed
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
    head = logsm = loss_grads = logits_fwd = head_copies = head_cache = head_work = 0
    if stage.last:
        hs = head_saved(ctx)
        head = hs.local(tp, sp)
        if lay.dtensor_tp and sp and ctx.full:
            head += gathered_head_input(ctx, tp)
        if lay.zero != 3:
            head_copies = hs.copies // tp
            head_cache = hs.cache // tp
            frozen += hs.frozen_copies // tp
        logsm, logits_fwd, loss_grads, chunk_copies = loss_bytes(ctx, lay)
        head += chunk_copies
        if "lm_head" in ctx.quantized_roles:
            head_work = ctx.dequant_bytes * arch.V * arch.h // tp
    offloaded = 0
    if lay.offload:
        # torchtune training/_activation_offloading.py: every saved tensor of >= 1 KiB outside the output head
        # goes to pinned host memory; with checkpointing those are the checkpoints' inputs (saved through
        # _NoopSaveInputs, outside the checkpoint's own hooks; per-op checkpointing's cache bypasses the hooks);
        # the forward stash keeps the last 5 on the GPU (max_fwd_stash_size)
        if recompute:
            offloaded = n_ck * checkpointed_layer(ctx) // (tp if sp else 1)
            kept = min(n_ck, 5) * checkpointed_layer(ctx) // (tp if sp else 1)
        else:
            offloaded, kept = layers, min(layers, rest_b)
        layers = layers - offloaded + kept
        offloaded -= kept
    copies = layer_copies + head_copies
    copies_fwd = max(copies, cache + head_cache + frozen)
    rope = 0 if (recompute and not n_plain) else once_bytes(ctx)
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
        offloaded=offloaded,
        head_work=head_work,
    )


def loss_bytes(ctx: ActCtx, lay: Layout) -> tuple[int, int, int, int]:
    """The loss on one TP rank: (saved bytes, forward transient, backward transient, chunked lm_head inputs).

    - Liger's fused linear cross-entropy: chunks of about the hidden states' size (`_fused_ce_chunk`).
    - One loss (HF ``ForCausalLMLoss``, torchtitan ``cross_entropy(pred.float())``): the 16-bit logits and their
      fp32 upcast while ``log_softmax`` saves its fp32 output; two fp32 [T, V] gradients at backward start;
      Gemma 2's final soft-capping keeps tanh's [T, V] output too.
    - torchtune ``CEWithChunkedOutputLoss`` (modules/loss/ce_chunked_output_loss.py) with N chunks: the lm_head
      runs per chunk (16-bit chunks kept in a list), each chunk is upcast and its fp32 log-softmax saved, so eager
      it still saves 4TV, and only the transients shrink (forward 16-bit logits + one fp32 chunk; backward two
      fp32 chunk gradients). With ``compile`` torchtune compiles ``compute_cross_entropy``: only the 16-bit
      chunks are saved and no fp32 [T, V] exists. Measured on the CPU (tests/data/chunked_ce.json). ``h.chunk``
      of a [b, s, h] tensor with b > 1 is not contiguous: each chunk's lm_head input is a saved copy."""
    arch, T, tp = ctx.arch, ctx.T, lay.tp
    C = ctx.reg.act_bytes
    TV = T * arch.V
    if lay.fused_ce:
        chunk = _fused_ce_chunk(T, arch)
        grads = chunk * arch.V * (8 + C) // tp
        return 0, grads, grads, 0
    N = lay.loss_chunks
    if N == 1:
        logsm = 4 * TV // tp
        # Gemma 2's final logit soft-capping (modeling_gemma2.py Gemma2ForCausalLM.forward: logits / cap, tanh,
        # * cap): tanh saves its [T, V] output in the logits' dtype until the loss's backward
        capped = C * TV // tp if arch.fam.softcap else 0
        fwd, bwd = (C * TV + (4 * TV if C != 4 else 0)) // tp, 2 * logsm
        if lay.loss_parallel:
            fwd, bwd = loss_parallel(fwd, logsm)
        return logsm + capped, fwd, bwd, 0
    copies = C * T * arch.h if ctx.b > 1 else 0
    if ctx.compiled:  # in backward each chunk's gradient appears as its saved chunk is released
        return C * TV // tp, 0, C * TV // N // tp, copies
    return 4 * TV // tp, (C * TV + 4 * TV // N) // tp, 8 * TV // N // tp, copies


def gathered_head_input(ctx: ActCtx, tp: int) -> int:
    """Bytes the lm_head saves beyond its sequence-sharded input under DTensor tensor parallelism: torchtitan's
    plan (parallelize apply_tp) makes the output ``ColwiseParallel(input_layouts=Shard(1))``, whose input hook
    (torch/distributed/tensor/parallel/style.py ColwiseParallel._prepare_input_fn: ``redistribute`` to
    ``Replicate()``) all-gathers the final norm's [T, h] output, and the matmul saves that gathered tensor, where
    Megatron's sequence parallelism saves the shard and gathers again in backward. The input is in the final
    norm's output dtype (`block.head_saved`'s "lm_head input"), 1 / tp of it already counted."""
    elem = 2 if ctx.reg.compute == "autocast" else ctx.reg.resid_bytes
    full = elem * ctx.T * ctx.arch.h
    return full - full // tp


def loss_parallel_on(tp: int, framework: str) -> bool:
    """Whether the loss runs under DTensor's ``loss_parallel``: torchtitan's train.py enters it when tensor
    parallelism is on (parallel_dims.py ``loss_parallel_enabled``: ``tp > 1 and enable_loss_parallel``, on unless
    ``training.disable_loss_parallel``), its lm_head then output vocab-sharded DTensors (parallelize ColwiseParallel
    ``output_layouts=Shard(-1)``, ``use_local_output=False``)."""
    return tp > 1 and framework == "torchtitan"


def loss_parallel(fwd: int, logsm: int) -> tuple[int, int]:
    """Forward and backward transients of the loss under DTensor's ``loss_parallel`` (vocab-sharded logits: what
    torchtitan runs when tensor parallelism is on, ParallelDims.loss_parallel_enabled = tp > 1 and not
    disable_loss_parallel), from ``fwd`` (16-bit logits + fp32 upcast) and ``logsm`` (one fp32 [T, V / tp]).

    torch/distributed/tensor/parallel/loss.py ``_log_softmax`` (the decomposition with all-reduces): ``shifted =
    x - x_max`` and ``torch.exp(shifted)`` are [T, V / tp] tensors beside the upcast input, then ``result =
    shifted - logsumexp``: one more fp32 [T, V / tp] than ATen's fused kernel in forward.
    ``_nll_loss_and_log_softmax_backward`` fuses both backwards: ``grad_input = zeros_like(x)``, then
    ``(grad_input + torch.exp(x)) * grad_output`` holds ``grad_input``, the exp (or the sum) and the product with
    the saved log-softmax: three fp32 [T, V / tp] beside it where ATen's two backwards hold two."""
    return fwd + logsm, 3 * logsm


def _without_copies(x: Saved) -> Saved:
    """``x`` without its weight copies (ZeRO-3 / FSDP re-gather the weights): the activations it saves, its
    backward transient, and what it keeps outside the saved tensors (bitsandbytes <= 0.43.1's inputs), stay."""
    return Saved(
        rep=x.rep, split=x.split, elems=x.elems, work=x.work, held=x.held, held_gc=x.held_gc, op_cache=x.op_cache
    )


def _fused_ce_chunk(T: int, arch: Arch) -> int:
    """Liger's fused linear cross-entropy processes ``next_pow2(ceil(T / ceil(V/h)))`` tokens at a time
    (liger_kernel/ops/fused_linear_cross_entropy.py), so a chunk of logits is about the size of the hidden
    states; Cut Cross-Entropy needs even less."""
    inc = -(-arch.V // arch.h)
    chunk = -(-T // inc)
    return min(T, 1 << max(chunk - 1, 0).bit_length())
