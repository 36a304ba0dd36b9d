"""The loss's tensors on one tensor-parallel rank: the logits and their fp32 upcast, the saved log-softmax, the
loss's gradients, for each loss path (one HF/torchtitan loss, DTensor's ``loss_parallel``, torchtune's chunked loss,
Liger's fused linear cross-entropy), the logits a loop keeps through backward and those freed before it, the lm_head
input DTensor tensor parallelism gathers, and the headline formula of the ``logits`` kind. The loss path is this
module: `core.memory.step.loss` places its bytes in the step's moments."""

from __future__ import annotations

from typing import NamedTuple

from vramplan.core.memory.activations.context import ActCtx, Layout
from vramplan.core.memory.terms import Term, headline
from vramplan.core.plan.architecture.arch import Arch


class LossBytes(NamedTuple):
    """The loss's bytes on one TP rank."""

    saved: int  # what the loss saves for backward (the log-softmax)
    fwd: int  # forward transients while the loss is computed (the logits, their upcast)
    bwd: int  # the loss's gradients at the start of backward
    copies: int  # a chunked loss's saved lm_head inputs
    kept: int = 0  # logits the step holds from the loss to the end of backward
    freed: int = 0  # 16-bit logits freed before the loss's backward, whose block fp32 requests cannot reuse


def loss_bytes(ctx: ActCtx, lay: Layout) -> LossBytes:
    """The loss on one TP rank (`LossBytes`).

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
        chunk = fused_ce_chunk(T, arch)
        grads = chunk * arch.V * (8 + C) // tp
        return LossBytes(0, grads, grads, 0)
    N = lay.loss_chunks
    if N == 1:
        logsm = 4 * TV // tp
        # Gemma 2's final logit soft-capping (modeling_gemma2.py Gemma2ForCausalLM.forward: logits / cap, tanh,
        # * cap): tanh saves its [T, V] output in the logits' dtype until the loss's backward
        capped = C * TV // tp if arch.fam.softcap else 0
        fwd, bwd = (C * TV + (4 * TV if C != 4 else 0)) // tp, 2 * logsm
        if lay.loss_parallel:
            fwd, bwd = loss_parallel(fwd, logsm)
        return LossBytes(logsm + capped, fwd, bwd, 0, freed=upcast_freed(ctx, lay))
    copies = C * T * arch.h if ctx.b > 1 else 0
    if ctx.compiled:  # in backward each chunk's gradient appears as its saved chunk is released
        return LossBytes(C * TV // tp, 0, C * TV // N // tp, copies)
    return LossBytes(4 * TV // tp, (C * TV + 4 * TV // N) // tp, 8 * TV // N // tp, copies)


def upcast_freed(ctx: ActCtx, lay: Layout) -> int:
    """The 16-bit logits freed before the loss's backward (HF, torchtitan: upcast to fp32 for the loss): the
    caching allocator keeps their block, which the fp32 gradients are too large to reuse, so it stays reserved when
    the peak is that backward's start. None with fp32 logits or a fused or chunked loss."""
    if lay.fused_ce_set or lay.loss_chunks != 1 or ctx.reg.act_bytes == 4:
        return 0
    return ctx.reg.act_bytes * ctx.T * ctx.arch.V // lay.tp


def loss_headline(ctx: ActCtx, lay: Layout) -> Term:
    """The headline term of the ``logits`` kind: the loss path's tensors in words, with their source."""
    arch, tp = ctx.arch, lay.tp
    if lay.fused_ce_set:
        return headline(
            "logits",
            "fused cross-entropy: logits exist only a chunk of tokens at a time",
            source="Liger fused_linear_cross_entropy / Cut Cross-Entropy (Wijmans et al. 2025)",
        )
    if lay.loss_parallel:
        return headline(
            "logits",
            "4 x 4 B x b*s*V / {} (fp32 log-softmax + loss_parallel's 3 backward temporaries), V={:,}",
            tp,
            arch.V,
            source="torch/distributed/tensor/parallel/loss.py _nll_loss_and_log_softmax_backward (torchtitan with "
            "TP): zeros_like(x), exp(x), their sum and its product with the gradient beside the saved log-softmax",
        )
    shard = f" / {tp} (vocab-parallel)" if tp > 1 else ""
    return headline(
        "logits",
        "3 x 4 B x b*s*V{} (fp32 log-softmax + 2 gradients), V={:,}",
        shard,
        arch.V,
        source="transformers ForCausalLMLoss upcasts logits to fp32; at the start of backward the saved "
        "log-softmax and the nll_loss and log_softmax gradients are live (measured in ../shared/oracle)",
    )


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


def fused_ce_chunk(T: int, arch: Arch) -> int:
    """Liger's fused linear cross-entropy processes ``next_pow2(ceil(T / ceil(V/h)))`` tokens at a time
    (liger_kernel/ops/fused_linear_cross_entropy.py), so a chunk of logits is about the size of the hidden
    states; Cut Cross-Entropy needs even less."""
    inc = -(-arch.V // arch.h)
    chunk = -(-T // inc)
    return min(T, 1 << max(chunk - 1, 0).bit_length())
