"""The time of one kernel on one GPU, by what bounds it (a roofline, Williams et al. 2009): its math at the rate the
GPU reaches for its shape, or the bytes it moves at the memory's usable bandwidth, whichever is longer, plus the
kernel's own overhead (`Chip.kernel_s`).

A matmul's rate: the GPU's measured best fraction of its peak (`Chip.matmul_efficiency`, the "maximum achievable
matmul FLOPS" of its best shape) times what its shape keeps of it. cuBLAS splits the output into tiles, one thread
block each; only as many blocks as there are SMs run at a time, so the work runs in waves and a partial last wave
costs as much as a full one, and a tile at the edge of the matrix costs a whole tile (NVIDIA, "Matrix
Multiplication Background User's Guide", DU-09799-001, §3.1 tile quantization and §3.2 wave quantization: blocks
``ceil(m/Tm)·ceil(n/Tn)``, waves ``ceil(blocks/SMs)``, "a wave costs the same whether it is full or not"). cuBLAS
picks among its tiles the one that wastes least; its large tiles are 256x128, 128x256 and 128x128 (§2.3: "larger
tiles have more data reuse"). A matmul whose output has fewer tiles than the GPU has SMs (a LoRA adapter's rank-16
side, a decode step's few tokens) is split along k instead (split-K, CUTLASS's ``GemmSplitKParallel`` and cuBLAS's
heuristics): each of ``splits`` blocks per tile takes k / splits, at least `SPLIT_K_MIN` deep, and the partial sums
in fp32 are written and read back once more."""

from __future__ import annotations

from typing import NamedTuple

from vramplan.core.plan.helpers.memo import memoised
from vramplan.core.time.chip import Chip

TILES = ((256, 128), (128, 256), (128, 128))
SPLIT_K_MIN = 256  # the shallowest k slice a split-K block takes (two 128-deep main-loop stages)
MATMUL_SRC = (
    "roofline: max(2·m·n·k / (peak x matmul_efficiency x tile and wave efficiency), (m·k + k·n + m·n) x bytes / "
    "usable HBM) + kernel overhead; tiles and waves: NVIDIA Matrix Multiplication Background User's Guide §3.1-3.2 "
    "(tiles 256x128, 128x256, 128x128; waves of SM-count blocks; split-K below one wave, CUTLASS "
    "GemmSplitKParallel); matmul_efficiency: the GPU preset's measured best fraction of peak"
)


class Work(NamedTuple):
    """What a group of kernels does and how long it takes on one GPU."""

    flops: float
    bytes: float
    kernels: int
    seconds: float

    def __add__(self, other: object) -> Work:
        if not isinstance(other, Work):
            return NotImplemented
        return Work(
            self.flops + other.flops,
            self.bytes + other.bytes,
            self.kernels + other.kernels,
            self.seconds + other.seconds,
        )

    def times(self, n: float) -> Work:
        """This work done ``n`` times."""
        return Work(self.flops * n, self.bytes * n, round(self.kernels * n), self.seconds * n)


NONE = Work(0.0, 0.0, 0, 0.0)


def split_k(m: int, n: int, k: int, sms: int, batch: int = 1) -> int:
    """How many k slices a matmul with fewer output tiles (of 128x128) than SMs is split into: enough to fill one
    wave, each slice at least `SPLIT_K_MIN` deep; 1 when its tiles fill the GPU."""
    blocks = -(-m // 128) * -(-n // 128) * batch
    if blocks >= sms:
        return 1
    return max(1, min(sms // blocks, k // SPLIT_K_MIN))


def wave_efficiency(m: int, n: int, sms: int, batch: int = 1, splits: int = 1) -> float:
    """The share of the scheduled tile work that is useful, with the least wasteful of `TILES` (``splits``: the
    blocks per tile of a split-K matmul, each a slice of k)."""
    best = 0.0
    for tm, tn in TILES:
        blocks = -(-m // tm) * -(-n // tn) * batch * splits
        waves = -(-blocks // sms)
        best = max(best, m * n * batch * splits / (waves * sms * tm * tn))
    return best


@memoised(4096)  # keyed on frozen inputs: a keystroke recomputes what it changed
def matmul(m: int, n: int, k: int, chip: Chip, elem: int, *, batch: int = 1, efficiency: float | None = None) -> Work:
    """``batch`` matmuls of [m, k] x [k, n] in ``elem``-byte operands. ``efficiency`` (the plan's
    ``training.mfu``) replaces the GPU's measured fraction and the shape's, when set."""
    if m <= 0 or n <= 0 or k <= 0 or batch <= 0:
        return NONE
    flops = 2.0 * m * n * k * batch
    rate = chip.flops * (efficiency if efficiency is not None else chip.matmul_efficiency)
    splits = split_k(m, n, k, chip.sms, batch)
    if efficiency is None:
        rate *= wave_efficiency(m, n, chip.sms, batch, splits)
    moved = float((m * k + k * n + m * n) * elem * batch)
    if splits > 1:  # the fp32 partial sums, written and read back by the reduction
        moved += 2.0 * m * n * 4 * splits * batch
    return Work(flops, moved, 1, max(flops / rate, moved / chip.hbm) + chip.kernel_s)


def memory(n_bytes: float, kernels: int, chip: Chip) -> Work:
    """Memory-bound kernels that move ``n_bytes`` in all (elementwise ops, norms, casts, copies)."""
    if n_bytes <= 0 and kernels <= 0:
        return NONE
    return Work(0.0, n_bytes, kernels, n_bytes / chip.hbm + kernels * chip.kernel_s)
