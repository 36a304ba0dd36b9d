"""The time model's assumptions where a plan or a preset does not say: the default MFU (a small table from
published runs) and the host's memory bandwidth, each with where the figure comes from (the PCIe and NVMe
bandwidths and CPU Adam's rate: `core.time.offload`)."""

from __future__ import annotations

from typing import NamedTuple

from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.catalogue.specs import GpuSpec


# MFU in PaLM's sense (Chowdhery et al. 2022, App. B): model FLOPs (6N + 12·L·s·h_q per token, recomputation not
# counted) per second over the GPU's dense 16-bit peak. The default when `training.mfu` is unset is one *math* MFU
# per GPU generation, the same whatever the plan recomputes; the recomputed FLOPs run at that rate
# (`core.time.flops.token_flops`), so the plan's MFU is
#     m0[generation] / (1 + k[generation] · a) x model / hardware FLOPs,   a = 12·L·s·h_q / (6N + 12·L·s·h_q)
# m0: the median of published bf16 runs of >= 1B-parameter models that recompute nothing (or only the attention
# core, which re-runs nothing as a -> 0), converted to this definition: their MFU is the math's rate. Runs with full
# recomputation are not pooled in: their median (A100 0.53 over 47 runs, H100 0.42 over 30) x 4/3 (hardware /
# model FLOPs) would put the math at 0.71 / 0.56, because those runs are mostly larger models (llm-foundry's
# 30B-70B, Megatron's) whose wider matmuls run faster, not because recomputing is free. k: median over
# llm-foundry's sequence-length sweeps (same model and checkpointing, two lengths) of how MFU falls with the
# attention share a.
class MathMfu(NamedTuple):
    """One GPU generation's math MFU (model FLOPs, PaLM's definition) and the runs it is the median of."""

    m0: float  # median MFU of runs without recomputation (or with selective), extrapolated to a = 0
    runs: int
    k: float  # how MFU falls with the attention share: / (1 + k·a)


MATH_MFU: dict[str, MathMfu] = {
    "ampere": MathMfu(0.59, 42, 0.21),
    "hopper": MathMfu(0.45, 50, 0.58),
}
MFU_SOURCE = (
    "published MFU in PaLM's sense (model FLOPs, recomputation not counted; Chowdhery et al. 2022 App. B, the "
    "definition of torchtitan components/metrics.py, Megatron-LM num_floating_point_operations, llm-foundry "
    "collect_results.py, fms-fsdp) of runs without full recomputation: llm-foundry benchmark tables (MPT 1B-70B, "
    "A100-40/80 and H100, 2k-32k tokens), Megatron-LM's A100 (Korthikanti et al. 2022 Table 5) and H100 "
    "(Megatron-Core r0.8.0 model table) runs, fms-fsdp's Llama 2 7B-70B runs and torchtitan's Llama 3 8B H100 "
    "runs; recomputation's FLOPs at the same rate (Korthikanti et al. 2022 Tables 4-5: +30-40% step time for full "
    "recomputation); set training.mfu for your stack (short single-GPU fine-tuning runs below these)"
)


class DefaultMfu(NamedTuple):
    """The MFU a plan gets when `training.mfu` is unset, and why."""

    value: float
    generation: str  # "ampere" | "hopper" | "other" (Hopper's row used)
    m0: float  # the math MFU (`MATH_MFU`)
    k: float
    attention_share: float
    recompute_factor: float  # model / hardware FLOPs: the time the plan's recomputation takes from the math

    def text(self) -> str:
        gen = {"ampere": "Ampere (A100)", "hopper": "Hopper (H100-class)"}.get(
            self.generation, "no published bf16 MFU for this GPU: Hopper's row"
        )
        row = MATH_MFU.get(self.generation, MATH_MFU["hopper"])
        tail = (
            f" x {self.recompute_factor:.3f} (model / hardware FLOPs: the recomputed FLOPs run at the same rate)"
            if self.recompute_factor < 1
            else ""
        )
        return (
            f"training.mfu not set: {self.value:.3f} = {self.m0:g} ({gen} math MFU: median of {row.runs} published "
            f"runs without full recomputation) / (1 + {self.k:g} x {self.attention_share:.3f} attention share){tail}"
        )


def gpu_generation(gpu: GpuSpec) -> str:
    """Which published MFU row a GPU reads: its preset's generation (`GpuSpec.generation`) when `MATH_MFU` has a
    row for it, else "other" (Hopper's row, marked as such)."""
    return gpu.generation if gpu.generation in MATH_MFU else "other"


def default_mfu(generation: str, attention_share: float, recompute_factor: float) -> DefaultMfu:
    """The default MFU: the generation's math MFU, lowered by the attention share and by the time the plan's
    recomputation takes (`recompute_factor` = model / hardware FLOPs; 1 without recomputation)."""
    row = MATH_MFU.get(generation, MATH_MFU["hopper"])
    value = row.m0 / (1 + row.k * attention_share) * recompute_factor
    return DefaultMfu(value, generation, row.m0, row.k, attention_share, recompute_factor)


HOST_MEMORY_GBS_PER_NODE = 100.0
HOST_MEMORY_SRC = (
    "assumed 100 GB/s of host memory bandwidth per node for CPU Adam, shared by the node's ranks (one 8-channel "
    "DDR4-3200 socket peaks at 204.8 GB/s; CPU Adam streams ~30 B per element: ZeRO-Offload §5.1). Reports: "
    "Qwen-72B ZeRO-3 offload on 4 x 8 A100, ~10 s per step (DeepSpeed issue #6834); Qwen2.5-3B on 2 A100, "
    "2.4-3.1 s per step (DeepSpeed PR #7474)"
)


def assumed_gpu_figures(gpu_id: str) -> str:
    """A line saying the step time rests on placeholder GPU figures, when the GPU is one nvidia-smi reported and
    no preset knows (its TFLOP/s and bandwidths are unknown: `core.plan.catalogue.gpu_match.custom_spec`); "" otherwise.
    """
    reg = presets.registry()
    if reg.origin.get(f"hardware/{gpu_id}") != "detected":
        return ""
    g = presets.gpu(gpu_id)
    return (
        f"assumed: {g.name} has no preset, so its {g.bf16_tflops:g} TFLOP/s and {g.memory_bandwidth_gbs:g} GB/s are "
        f"placeholders and the step time is a guess; add {presets.user_config_dir()}/hardware/{gpu_id}.toml "
        "(the schema of presets/hardware/*.toml) to time it"
    )
