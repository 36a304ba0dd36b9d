"""The attention core's time: FlashAttention's published throughput by sequence length, head dimension and mask,
or eager attention's matmuls and its s x s traffic.

FLOPs are counted as FlashAttention's benchmarks count them (Dao 2023, FlashAttention-2 §4.1;
benchmarks/benchmark_flash_attention.py ``flops``): forward 4·s²·d·a per sequence, halved with a causal mask
(the kernel skips the masked blocks), backward 2.5 x forward. Their published forward + backward TFLOP/s
(README figures flash2_a100_fwd_bwd_benchmark.png and flash2_h100_fwd_bwd_benchmark.png = the paper's Figs. 4 and 8;
batch x sequence = 16k tokens, hidden 2048, bf16/fp16) are taken as a fraction of the GPU's dense peak, which the
kernel keeps on another GPU of its kind: A100's fractions for Volta, Turing, Ampere, Ada and AMD, H100's for Hopper
and Blackwell. PyTorch's SDPA runs FlashAttention-2's kernels (its flash backend); between the published lengths the
fraction is interpolated in log2(s), beyond them it is the nearest one's, and a head dimension is read from the
nearest published (64 or 128)."""

from __future__ import annotations

import math

from vramplan.core.time.chip import Chip
from vramplan.core.time.kernels import NONE, Work, matmul, memory

FA2_SRC = (
    "FlashAttention-2 forward + backward TFLOP/s by sequence length, head dim and mask (Dao 2023, Figs. 4 and 8; "
    "Dao-AILab/flash-attention README flash2_a100/h100_fwd_bwd_benchmark.png), as a fraction of that GPU's dense "
    "peak; FLOPs 4·s²·d·a forward, / 2 causal, backward 2.5 x (benchmarks/benchmark_flash_attention.py flops)"
)
SEQ_LENS = (512, 1024, 2048, 4096, 8192, 16384)
# Published forward + backward TFLOP/s (the A100 table's non-causal 1k/2k values hidden behind the legend were read
# off the bar heights: ~153, ~151, ~173, marked approximate in the notes)
FA2_TFLOPS: dict[tuple[str, bool, int], tuple[float, ...]] = {
    ("a100", False, 64): (132, 153, 162, 171, 175, 176),
    ("a100", False, 128): (151, 173, 187, 196, 201, 203),
    ("a100", True, 64): (88, 119, 140, 156, 165, 171),
    ("a100", True, 128): (99, 133, 155, 173, 182, 189),
    ("h100", False, 64): (215, 254, 274, 288, 294, 296),
    ("h100", False, 128): (248, 294, 320, 326, 335, 338),
    ("h100", True, 64): (141, 192, 232, 257, 273, 284),
    ("h100", True, 128): (163, 221, 265, 294, 308, 328),
}
TABLE_PEAK = {"a100": 312.0, "h100": 989.4}  # the dense bf16 peak of the GPUs the tables were measured on
HOPPER_LIKE = ("hopper", "blackwell")


def flash_fraction(chip: Chip, s: int, head_dim: int, causal: bool) -> float:
    """The share of the GPU's dense peak FlashAttention-2 reaches at sequence length ``s``."""
    table = "h100" if chip.generation in HOPPER_LIKE else "a100"
    row = FA2_TFLOPS[(table, causal, 64 if head_dim <= 96 else 128)]
    x = math.log2(max(s, 1))
    lo, hi = math.log2(SEQ_LENS[0]), math.log2(SEQ_LENS[-1])
    if x <= lo:
        tflops = row[0] * max(0.25, 1 - (lo - x) * (1 - row[0] / row[1]))  # the first step's slope, floored
    elif x >= hi:
        tflops = row[-1]
    else:
        i = int(x - lo)
        t = x - lo - i
        tflops = row[i] + (row[i + 1] - row[i]) * t
    return tflops / TABLE_PEAK[table]


def flash_forward_flops(b: int, s: int, heads: int, head_dim: int, causal: bool) -> float:
    """FlashAttention's forward FLOPs: 4·b·s²·d·a, halved under a causal mask."""
    return 4.0 * b * s * s * head_dim * heads / (2 if causal else 1)


def flash(b: int, s: int, heads: int, head_dim: int, chip: Chip, *, causal: bool = True) -> tuple[Work, Work]:
    """(forward, backward) of FlashAttention over ``heads`` query heads (one TP rank's)."""
    if heads <= 0 or s <= 0:
        return NONE, NONE
    fwd = flash_forward_flops(b, s, heads, head_dim, causal)
    rate = chip.flops * flash_fraction(chip, s, head_dim, causal)
    return Work(fwd, 0.0, 1, fwd / rate + chip.kernel_s), Work(2.5 * fwd, 0.0, 2, 2.5 * fwd / rate + 2 * chip.kernel_s)


def eager(b: int, s: int, heads: int, head_dim: int, elem: int, chip: Chip) -> tuple[Work, Work]:
    """(forward, backward) of eager attention: QKᵀ and PV as batched matmuls over b·heads, the scores' softmax (an
    fp32 softmax and its cast: 4 passes over b·a·s² in forward), and in backward the two matmuls' gradients (4)
    and the softmax's (reading P and dP, writing dS: 8 passes): Dao et al. 2022 §2.2 (standard attention's Θ(s²)
    HBM traffic)."""
    n = b * heads
    if n <= 0:
        return NONE, NONE
    scores = float(n) * s * s * elem
    fwd = matmul(s, s, head_dim, chip, elem, batch=n) + matmul(s, head_dim, s, chip, elem, batch=n)
    fwd = fwd + memory(4 * scores, 4, chip)
    bwd = matmul(s, s, head_dim, chip, elem, batch=2 * n) + matmul(s, head_dim, s, chip, elem, batch=2 * n)
    return fwd, bwd + memory(8 * scores, 6, chip)
