"""The time model's assumptions where a plan or a preset does not say: the default MFU (a small table from
published runs) and the host's memory and NVMe bandwidth, each with where the figure comes from."""

from __future__ import annotations

from typing import NamedTuple

from vramplan.core.plan import presets

# MFU in PaLM's sense (Chowdhery et al. 2022, App. B): model FLOPs (6N + 12·L·s·h_q per token, recomputation not
# counted) per second over the GPU's dense 16-bit peak. The default when `training.mfu` is unset:
#     m0[generation][checkpointing] / (1 + k[generation] · a),   a = 12·L·s·h_q / (6N + 12·L·s·h_q)
# m0: median of published bf16 runs of >= 1B-parameter models, each converted to this definition; k: median over
# llm-foundry's sequence-length sweeps (same model and checkpointing, two lengths) of how MFU falls with the
# attention share a. Rows: A100 42 without / 47 with full recomputation, H100 50 / 30.
MFU_TABLE: dict[str, tuple[float, float, float]] = {  # generation -> (m0 none/selective, m0 full, k)
    "ampere": (0.59, 0.53, 0.21),
    "hopper": (0.45, 0.42, 0.58),
}
MFU_ROWS = {"ampere": "42 / 47", "hopper": "50 / 30"}
MFU_SOURCE = (
    "published MFU in PaLM's sense (model FLOPs, recomputation not counted; Chowdhery et al. 2022 App. B, the "
    "definition of torchtitan components/metrics.py, Megatron-LM num_floating_point_operations, llm-foundry "
    "collect_results.py, fms-fsdp): llm-foundry benchmark tables (MPT 1B-70B, A100-40/80 and H100, 2k-32k tokens), "
    "Megatron-LM's A100 (Korthikanti et al. 2022 Table 5) and H100 (Megatron-Core r0.8.0 model table) runs, "
    "fms-fsdp's Llama 2 7B-70B runs and torchtitan's Llama 3 8B H100 runs; set training.mfu for your stack "
    "(short single-GPU fine-tuning runs below these)"
)


class DefaultMfu(NamedTuple):
    """The MFU a plan gets when `training.mfu` is unset, and why."""

    value: float
    generation: str  # "ampere" | "hopper" | "other" (Hopper's row used)
    m0: float
    k: float
    attention_share: float
    column: str  # "none/selective" | "full"
    recompute_factor: float  # per-op checkpointing's recomputed matmuls: model / (model + recomputed)

    def text(self) -> str:
        gen = {"ampere": "A100", "hopper": "H100-class"}.get(
            self.generation, "no published bf16 MFU for this GPU: Hopper's row"
        )
        rows = MFU_ROWS.get(self.generation, MFU_ROWS["hopper"])
        tail = (
            f" x {self.recompute_factor:.3f} (per-op checkpointing recomputes every second matmul)"
            if self.recompute_factor < 1
            else ""
        )
        return (
            f"training.mfu not set: {self.value:.3f} = {self.m0:g} ({gen}, {self.column} recomputation; median of "
            f"published runs, {rows} rows) / (1 + {self.k:g} x {self.attention_share:.3f} attention share){tail}"
        )


def gpu_generation(gpu_id: str, gpu_name: str) -> str:
    """Which published MFU row a GPU preset reads: Ampere datacenter (A100) or Hopper (H100, H200); others use
    Hopper's row, marked as such."""
    key = f"{gpu_id} {gpu_name}".lower()
    if "a100" in key:
        return "ampere"
    if "h100" in key or "h200" in key or "gh200" in key:
        return "hopper"
    return "other"


def default_mfu(generation: str, full_recompute: bool, attention_share: float, recompute_factor: float) -> DefaultMfu:
    """The default MFU (see MFU_TABLE)."""
    m0_none, m0_full, k = MFU_TABLE.get(generation, MFU_TABLE["hopper"])
    m0 = m0_full if full_recompute else m0_none
    value = m0 / (1 + k * attention_share) * recompute_factor
    column = "full" if full_recompute else "none/selective"
    return DefaultMfu(value, generation, m0, k, attention_share, column, recompute_factor)


HOST_MEMORY_GBS_PER_NODE = 100.0
HOST_MEMORY_SRC = (
    "assumed 100 GB/s of host memory bandwidth per node for CPU Adam, shared by the node's ranks (one 8-channel "
    "DDR4-3200 socket peaks at 204.8 GB/s; CPU Adam streams ~30 B per element: ZeRO-Offload §5.1). Reports: "
    "Qwen-72B ZeRO-3 offload on 4 x 8 A100, ~10 s per step (DeepSpeed issue #6834); Qwen2.5-3B on 2 A100, "
    "2.4-3.1 s per step (DeepSpeed PR #7474)"
)
NVME_GBS_PER_NODE = 25.0
NVME_SRC = "assumed 25 GB/s of NVMe bandwidth per node (a RAID-0 of a few PCIe Gen4 drives), shared by its ranks"


def assumed_gpu_figures(gpu_id: str) -> str:
    """A line saying the step time rests on placeholder GPU figures, when the GPU is one nvidia-smi reported and
    no preset knows (its TFLOP/s and bandwidths are unknown: `core.plan.detect.custom_spec`); "" otherwise."""
    reg = presets.registry()
    if reg.origin.get(f"hardware/{gpu_id}") != "detected":
        return ""
    g = presets.gpu(gpu_id)
    return (
        f"assumed: {g.name} has no preset, so its {g.bf16_tflops:g} TFLOP/s and {g.memory_bandwidth_gbs:g} GB/s are "
        f"placeholders and the step time is a guess; add {presets.user_config_dir()}/hardware/{gpu_id}.toml "
        "(the schema of presets/hardware/*.toml) to time it"
    )
