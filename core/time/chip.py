"""What the step-time model reads of a GPU: its dense peak for each dtype, usable memory bandwidth, SM count, the
fraction of the peak a large matmul reaches, and the overhead of one kernel, all from its preset
(`core.plan.catalogue.specs.GpuSpec`, each figure with its source), never from its name.

The usable share of a peak bandwidth: memory-bound elementwise kernels reach about 90% of HBM's (torchao
testing/training/roofline_utils.py uses 0.92 for H100; STREAM-like measurements on A100/H100 89-93%)."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.catalogue.specs import GpuSpec
from vramplan.core.plan.helpers.memo import memoised
from vramplan.core.plan.schema.precision import REGIMES

if TYPE_CHECKING:
    from vramplan.core.plan.schema.plan import Plan

MEMORY_EFFICIENCY = 0.9
MEMORY_EFFICIENCY_SRC = (
    "elementwise kernels reach about 90% of the HBM peak (pytorch/ao testing/training/roofline_utils.py: 0.92 of "
    "H100's; STREAM-like copies on A100/H100: 89-93%)"
)


class Chip(NamedTuple):
    """One GPU as the kernels see it (rates per second, bytes)."""

    name: str
    flops: float  # dense peak of the step's compute dtype (FLOP/s)
    fp32_flops: float  # FP32 (non-tensor) peak, FLOP/s
    fp8_flops: float  # 0: no fp8 tensor cores
    hbm: float  # usable memory bandwidth, bytes/s
    sms: int
    matmul_efficiency: float
    kernel_s: float  # GPU time one kernel costs beyond its work
    generation: str

    @property
    def per_sm(self) -> float:
        """One SM's share of the usable matmul rate (FLOP/s)."""
        return self.flops * self.matmul_efficiency / self.sms


def chip(gpu: GpuSpec, dtype: str) -> Chip:
    """The GPU for a step computing in ``dtype`` (bf16, fp16, fp32). A GPU without native bf16 runs bf16 at no
    better than its fp32 rate; fp32 matmuls run on the FP32 units (PyTorch leaves TF32 off by default:
    ``torch.backends.cuda.matmul.allow_tf32 = False``)."""
    tf = gpu.tflops(dtype)
    peak = (tf if tf > 0 else gpu.fp32_tflops) * 1e12
    return Chip(
        name=gpu.name,
        flops=peak,
        fp32_flops=gpu.fp32_tflops * 1e12,
        fp8_flops=(gpu.fp8_tflops or 0.0) * 1e12,
        hbm=gpu.memory_bandwidth_gbs * 1e9 * MEMORY_EFFICIENCY,
        sms=gpu.sm_count,
        matmul_efficiency=gpu.matmul_efficiency,
        kernel_s=gpu.kernel_overhead_us * 1e-6,
        generation=gpu.generation,
    )


def plan_chip(plan: Plan) -> Chip:
    """The plan's GPU, computing in its regime's dtype."""
    return _chip_of(plan.hardware.gpu, REGIMES[plan.training.regime].compute_dtype)


@memoised(64)  # emptied with the presets (`presets.reload` clears the estimate group too)
def _chip_of(gpu_id: str, dtype: str) -> Chip:
    return chip(presets.gpu(gpu_id), dtype)
