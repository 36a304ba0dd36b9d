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
      Gemma 2's final soft-capping keeps tanh's [T, V] output too. Where the upcast happens and what copies the
      logits is ``strategy.loss_path`` (`path_bytes`).
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
        if lay.loss_parallel:  # torchtitan: the upcast path over vocab-sharded logits
            fwd, bwd = loss_parallel((C * TV + (4 * TV if C != 4 else 0)) // tp, logsm)
            return LossBytes(logsm + capped, fwd, bwd, 0, freed=upcast_freed(ctx, lay))
        path = path_bytes(lay.setting("strategy.loss_path"), C, TV, tp)
        freed = 0 if lay.setting("strategy.loss_path") == "model-dtype" else upcast_freed(ctx, lay)
        return path._replace(saved=path.saved + capped, freed=freed)
    copies = C * T * arch.h if ctx.b > 1 else 0
    if ctx.compiled:  # in backward each chunk's gradient appears as its saved chunk is released
        return LossBytes(C * TV // tp, 0, C * TV // N // tp, copies)
    return LossBytes(4 * TV // tp, (C * TV + 4 * TV // N) // tp, 8 * TV // N // tp, copies)


def path_bytes(path: str, C: int, TV: int, tp: int) -> LossBytes:
    """One unfused loss over [T, V] logits of ``C`` bytes, by ``strategy.loss_path`` (measured on the CPU,
    tests/data/stacks/loss_paths.json, each variant the lines of its transformers version):

    - ``upcast`` (transformers >= 4.49 ``ForCausalLMLoss``, torchtitan): the model's 16-bit logits live beside
      their fp32 upcast while ``log_softmax`` saves its fp32 output: forward C·TV + 4TV beside the saved 4TV;
    - ``upcast-shifted`` (4.46-4.48): and ``logits[..., :-1, :].contiguous()`` copies the fp32 logits: forward
      C·TV + 4TV + 4TV;
    - ``model-upcast`` (before 4.46, ``LlamaForCausalLM.forward``): ``logits = logits.float()`` frees the 16-bit
      output, the shifted copy joins the fp32 logits: forward 8TV;
    - ``model-upcast-kept``: and the loop keeps the output, its fp32 logits, until the backward ends (+4TV through
      backward; Answer.AI's fsdp_qlora train.py sets ``output = None`` only after ``loss.backward()``);
    - ``model-dtype``: ``F.cross_entropy`` on the 16-bit logits: ``log_softmax`` keeps the input's dtype (ATen's
      ``log_softmax`` kernels), so its output and both gradients are C·TV each.

    At the start of backward every fp32 path holds the saved log-softmax and two fp32 gradients (``nll_loss``'s and
    ``log_softmax``'s): 12TV with the 4-byte unit of TV (the slice's backward after them holds two)."""
    up = 4 * TV if C != 4 else 0  # .float() of fp32 logits returns them: no copy
    if path == "model-dtype":
        return LossBytes(C * TV // tp, C * TV // tp, 2 * C * TV // tp, 0)
    logsm = 4 * TV // tp
    if path in ("model-upcast", "model-upcast-kept"):
        kept = 4 * TV // tp if path == "model-upcast-kept" else 0
        return LossBytes(logsm, 8 * TV // tp, 2 * logsm, 0, kept=kept)
    shifted = 4 * TV if path == "upcast-shifted" else 0
    return LossBytes(logsm, (C * TV + up + shifted) // tp, 2 * logsm, 0)


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
    path = lay.setting("strategy.loss_path") if lay.loss_chunks == 1 else "upcast"
    if path == "model-dtype":
        return headline(
            "logits",
            "3 x {} B x b*s*V{} (log-softmax + 2 gradients in the logits' dtype), V={:,}",
            ctx.reg.act_bytes,
            shard,
            arch.V,
            source="torch.nn.functional.cross_entropy on 16-bit logits: ATen's log_softmax returns the input's dtype "
            "(measured on the CPU, tests/data/stacks/loss_paths.json)",
        )
    if path == "model-upcast-kept":
        return headline(
            "logits",
            "4 x 4 B x b*s*V{} (fp32 log-softmax + 2 gradients + the fp32 logits the loop keeps), V={:,}",
            shard,
            arch.V,
            source="transformers LlamaForCausalLM.forward before 4.46 returns logits.float(); a loop that keeps its "
            "output through backward (fsdp_qlora train.py) holds them (measured on the CPU, loss_paths.json)",
        )
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
