"""The work of one training step: FLOPs per token, and the bytes that memory-bound kernels move.

One function per term, each with its formula and source. Names read like the papers: ``N`` is the number of weights
that feed a matmul (every decoder linear plus the lm_head: `Arch.matmul_weight_params`; the embedding lookup is
not a matmul), ``s`` the sequence length, ``L`` layers, ``h_q = a * d`` the width of all query heads.

Model FLOPs (what MFU counts) are what the method needs without recomputation; hardware FLOPs add what
activation checkpointing recomputes (Korthikanti et al. 2022, §5 and App. A: model vs hardware FLOPs).
"""

from __future__ import annotations

from typing import NamedTuple

from vramplan.core.plan.architecture.arch import Arch, lora_params_per_layer
from vramplan.core.plan.schema.precision import OPTIMIZERS

MATMUL_SRC = (
    "Kaplan et al. 2020 §2.1 (forward 2N per token, backward 4N); Narayanan et al. 2021 §5.1 and "
    "Korthikanti et al. 2022 App. A (72·B·s·L·h²·(1 + s/6h + V/12hL) = 6N + attention per token)"
)
ATTENTION_SRC = (
    "PaLM (Chowdhery et al. 2022) App. B: 6N + 12·L·H·Q·T per token for forward + backward; the full s x s "
    "score matrix is counted (causal kernels skip about half; MFU conventions count it all)"
)
LORA_SRC = (
    "frozen weights need the input gradient (dX = dY·Wᵀ) but no weight gradient: backward 2N instead of 4N "
    "(Hu et al. 2021 §4.2: about 25% faster than full fine-tuning); adapters A, B cost 6·r·(d_in + d_out) per token"
)
RECOMPUTE_SRC = (
    "Korthikanti et al. 2022 §5 and App. A: full recomputation runs each checkpointed block's forward again in its "
    "backward (+1/3 of the block's 3x forward-backward FLOPs; the embedding and the lm_head/loss sit outside the "
    "checkpointed blocks and are not re-run); selective recomputation re-runs only the attention core (QKᵀ, "
    "softmax, dropout, AV: §4.2.1); per-op checkpointing the matmuls torchtitan's policy does not save; "
    "checkpoint_every = k: blocks k, 2k, ... only (torchtitan ac_freq). The recomputed ops are timed as the "
    "forward's own kernels (core/time/compute.py); Korthikanti et al. Tables 4-5 measure +30-40% step time for "
    "full recomputation against none on the same model and GPUs"
)


def forward_matmul_flops(arch: Arch) -> int:
    """Forward FLOPs per token of every matmul: 2·N (one multiply and one add per weight).

    N = L·(block linear weights) + V·h: the lm_head is a matmul even when tied to the embedding. Source: Kaplan
    et al. 2020 §2.1 (C_forward ≈ 2N); norms, biases and activations are O(h) per token and left out."""
    return 2 * arch.matmul_weight_params


def head_forward_flops(arch: Arch) -> int:
    """Forward FLOPs per token of the lm_head: 2·V·h (part of `forward_matmul_flops`; outside the decoder blocks,
    so activation checkpointing never re-runs it: torch utils/checkpoint.py wraps each block, HF
    ``GradientCheckpointingLayer``, torchtitan ``apply_ac`` per ``TransformerBlock``)."""
    return 2 * arch.V * arch.h


def attention_forward_flops(arch: Arch, s: int) -> int:
    """Forward FLOPs per token of the attention core: QKᵀ and AV, 2·s·h_q each per layer: 4·L·s·h_q.

    PaLM App. B counts 12·L·H·Q·T for forward + backward (3 x this; H·Q = h_q, all query heads, so GQA does not
    reduce it)."""
    return 4 * arch.L * s * arch.h_q


def lora_forward_flops(arch: Arch, roles: tuple[str, ...], rank: int) -> int:
    """Forward FLOPs per token of the LoRA adapters: x·A then ·B, 2·r·(d_in + d_out) per adapted linear, L layers
    (Hu et al. 2021 §4: the adapter adds r·(d_in + d_out) weights)."""
    return 2 * arch.L * lora_params_per_layer(arch, roles, rank)


class TokenFlops(NamedTuple):
    """FLOPs per token of one training step, by pass."""

    forward: int
    backward: int
    recompute: int  # forward work re-run in backward by activation checkpointing

    @property
    def model(self) -> int:
        """What the method needs (MFU's numerator): forward + backward, no recomputation."""
        return self.forward + self.backward

    @property
    def hardware(self) -> int:
        """What the GPU executes: model FLOPs plus recomputation."""
        return self.forward + self.backward + self.recompute


def op_recompute_flops(arch: Arch, roles: tuple[str, ...], rank: int) -> int:
    """Forward FLOPs per token that per-op selective checkpointing recomputes: every second matmul of each block
    (torchtitan's policy saves the 1st, 3rd, ... ``aten.mm`` output; `core.memory.activations.block.op_cached`),
    2 FLOPs per weight; SDPA is saved, pointwise ops are negligible FLOPs."""
    weights: list[int] = []
    for role in arch.roles():
        lin = arch.linear(role)
        weights.append(lin.weight_params)
        if role in roles:
            weights += [rank * lin.d_in, rank * lin.d_out]
    return 2 * arch.L * sum(weights[1::2])


def recomputed_blocks(L: int, checkpointing: str, checkpoint_every: int = 1) -> int:
    """How many decoder blocks re-run forward work in their backward: none 0; selective every block (its attention
    core); full and op ``L // k`` with ``checkpoint_every`` = k (blocks k, 2k, ...: torchtitan
    ``apply_ac``'s ``_count % ac_freq == 0``, as `core.memory.activations.stage` counts them)."""
    if checkpointing == "none":
        return 0
    return L if checkpointing == "selective" else L // checkpoint_every


def block_recompute_flops(
    arch: Arch, s: int, checkpointing: str, *, full: bool, roles: tuple[str, ...], rank: int
) -> int:
    """Forward FLOPs per token that one checkpointed block re-runs in its backward.

    full: the block's whole forward, 2·(block linear weights) + 4·s·h_q (+ its LoRA adapters; the frozen base's
    matmuls are re-run too): Korthikanti et al. 2022 §5; selective: the attention core alone, 4·s·h_q (QKᵀ and AV,
    counted as `attention_forward_flops` counts them: the full s x s matrix; softmax and dropout are O(s²) pointwise,
    not matmul FLOPs): §4.2.1; op: the matmuls torchtitan's policy does not save (`op_recompute_flops`)."""
    L = arch.L
    if checkpointing == "full":
        fwd = forward_matmul_flops(arch) - head_forward_flops(arch) + attention_forward_flops(arch, s)
        return (fwd + (0 if full else lora_forward_flops(arch, roles, rank))) // L
    if checkpointing == "op":
        return op_recompute_flops(arch, roles, rank) // L
    return attention_forward_flops(arch, s) // L if checkpointing == "selective" else 0


def token_flops(
    arch: Arch,
    s: int,
    *,
    full: bool,
    roles: tuple[str, ...],
    rank: int,
    checkpointing: str,
    checkpoint_every: int = 1,
) -> TokenFlops:
    """FLOPs per token of forward, backward and recomputation.

    Full training: forward 2N + A, backward 4N + 2A (A = attention core forward; the backward of a matmul is two
    matmuls of the same size: dX and dW), so model FLOPs = 6N + 12·L·s·h_q (PaLM App. B).
    LoRA / QLoRA: frozen weights get only dX, so backward = 2N + 2A + 2·adapters: model FLOPs ≈ 4N + 12·L·s·h_q.
    Recomputation: `recomputed_blocks` x `block_recompute_flops` (full checkpointing of every block: the forward
    less the lm_head's 2·V·h, about 8N in total for full training)."""
    mm = forward_matmul_flops(arch)
    att = attention_forward_flops(arch, s)
    if full:
        fwd, bwd = mm + att, 2 * mm + 2 * att
    else:
        ad = lora_forward_flops(arch, roles, rank)
        fwd, bwd = mm + att + ad, mm + 2 * att + 2 * ad
    blocks = recomputed_blocks(arch.L, checkpointing, checkpoint_every)
    per_block = block_recompute_flops(arch, s, checkpointing, full=full, roles=roles, rank=rank)
    return TokenFlops(fwd, bwd, blocks * per_block)


# -- bytes moved by memory-bound kernels ----------------------------------------------------------------------------


INT8_SRC = (
    "int8 activation compression's HBM traffic 2·(saved + packed) bytes per micro-batch, memory-bound "
    "(ActNN, Chen et al. 2021; GACT, Liu et al. 2022)"
)


def int8_compression_bytes(saved_bytes: int, packed_bytes: int) -> int:
    """HBM traffic of int8 activation compression for one micro-batch: each saved activation is read and written
    as int8 plus its scales when autograd saves it (``saved + packed``), and read back and written in its own
    dtype when the backward needs it (``packed + saved``): 2·(saved + packed). The (de)quantization kernels are
    elementwise and memory-bound; this is the overhead ActNN (Chen et al. 2021) and GACT (Liu et al. 2022)
    measure for compressed activations, less their bit-packing."""
    return 2 * (saved_bytes + packed_bytes)


def optimizer_bytes_per_element(optimizer: str, weight: int, grad: int, state: int, master: int) -> int:
    """Bytes an optimizer step reads and writes per trainable element (it is memory-bound on the GPU and the CPU).

    Read weight and gradient, write the weight; read and write each state tensor (AdamW: 2, SGD with momentum and
    Lion: 1, 8-bit AdamW: 2 of 1 byte, Adafactor: the factored statistics are O(rows + columns), counted as 0) and
    an fp32 master copy; write the 16-bit weight copy when there is a master (ZeRO-Offload §5.1 Algorithm 1 reads
    p32, g, m, v and writes p32, m, v and p16). AdamW with fp32 everything: 4+4+4 + 2·2·4 = 28 B."""
    spec = OPTIMIZERS[optimizer]
    states = 0 if spec.factored else spec.dense_states
    elem = 1 if spec.int8_states else (4 if spec.fp32_states else state)
    if master:  # read and write the fp32 master, write the 16-bit copy the model computes with
        return 2 * master + weight + grad + 2 * states * elem
    return 2 * weight + grad + 2 * states * elem
