"""The kernels outside the decoder blocks for one micro-batch on one GPU: the embedding lookup and its gradient, the
lm_head's matmuls, and the loss over the vocabulary.

The loss (transformers ``ForCausalLMLoss``, torchtitan ``cross_entropy(pred.float())``): the 16-bit logits are upcast
to fp32, ``log_softmax`` reads them and writes its output, ``nll_loss`` reads it; backward writes the nll gradient,
``_log_softmax_backward_data`` reads it and the saved output and writes the logits' gradient, cast back to 16 bit:
about 40 bytes per logit (2 + 4 read and write of the upcast, 4 + 4 of log_softmax, 4 of nll; 4 + 8 + 4 and 4 + 2
backward), in 8 kernels. Liger's fused linear cross-entropy computes each chunk's logits, their loss and gradient in
place in the forward (liger_kernel/ops/fused_linear_cross_entropy.py): one 16-bit write and two reads per logit, and
the head's gradient matmuls there too. torchtune's chunked loss upcasts chunk by chunk: the same bytes as one loss.
"""

from __future__ import annotations

from typing import NamedTuple

from vramplan.core.plan.architecture.arch import Arch
from vramplan.core.plan.helpers.memo import memoised
from vramplan.core.time.chip import Chip
from vramplan.core.time.kernels import NONE, Work, matmul, memory

LOSS_BYTES_PER_LOGIT = 40  # the unfused loss, forward and backward (module docstring)
LOSS_KERNELS = 8
FUSED_LOSS_BYTES_PER_LOGIT = 6  # Liger: one 16-bit write, two reads of each chunk's logits


class HeadSetup(NamedTuple):
    arch: Arch
    T: int  # tokens of the micro-batch
    tp: int
    elem: int
    resid: int
    full: bool  # the embedding and lm_head train
    fused_loss: bool  # Liger's fused linear cross-entropy
    first: bool  # this stage holds the embedding
    last: bool  # and this one the lm_head and loss
    matmul_efficiency: float | None
    grad_bytes: int  # bytes of a gradient element (the embedding's dense gradient)


class HeadTime(NamedTuple):
    embedding: tuple[Work, Work]
    lm_head: tuple[Work, Work]
    loss: tuple[Work, Work]


@memoised(256)  # keyed on frozen inputs: a keystroke recomputes what it changed
def head_time(x: HeadSetup, chip: Chip) -> HeadTime:
    arch, T = x.arch, x.T
    V = arch.V // x.tp  # a vocabulary-parallel head and loss split the vocabulary
    emb = NONE, NONE
    if x.first:
        lookup = memory(2 * T * arch.h * x.resid, 1, chip)
        # backward: a dense [V, h] gradient zeroed, then the tokens' rows added into it (embedding_dense_backward)
        grad = memory(V * arch.h * x.grad_bytes + 2 * T * arch.h * x.resid, 2, chip) if x.full else NONE
        emb = lookup, grad
    head = loss = (NONE, NONE)
    if x.last:
        eff = x.matmul_efficiency
        fwd = matmul(T, V, arch.h, chip, x.elem, efficiency=eff)
        bwd = matmul(T, arch.h, V, chip, x.elem, efficiency=eff)
        if x.full:
            bwd = bwd + matmul(arch.h, V, T, chip, x.elem, efficiency=eff)
        if x.fused_loss:  # the chunks' matmuls and loss run in the forward (their gradient with them)
            head = fwd + bwd, NONE
            loss = memory(FUSED_LOSS_BYTES_PER_LOGIT * T * V, 4, chip), NONE
        else:
            head = fwd, bwd
            half = LOSS_BYTES_PER_LOGIT * T * V / 2
            loss = memory(half, LOSS_KERNELS // 2, chip), memory(half, LOSS_KERNELS // 2, chip)
    return HeadTime(emb, head, loss)
