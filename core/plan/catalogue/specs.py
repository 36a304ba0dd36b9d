"""The schemas of the preset files: one accelerator (`GpuSpec`, ``presets/hardware/*.toml``) and one model
(`ModelPreset`, ``presets/models/*.toml``), with the bounds their figures are checked against. Loading them and
looking them up by id is `core.plan.catalogue.presets`."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from vramplan.core.plan.architecture.hub_cache import is_repo_id
from vramplan.core.plan.helpers.errors import printable, shown
from vramplan.core.plan.helpers.field_values import strict_scalars
from vramplan.core.plan.helpers.units import MiB

Generation = Literal["volta", "turing", "ampere", "ada", "hopper", "blackwell", "cdna2", "cdna3", "cdna4"]
SPEC = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
MAX_TFLOPS = 1e6  # 1 EFLOP/s on one chip
MIN_TFLOPS = 0.01
MAX_GBS = 1e6  # 1 PB/s
MAX_NODE_GIB = 1 << 30  # 1 EiB of host memory or NVMe in one node: past any machine


MEMORY_TYPE = re.compile(r"\b(HBM\d?[eE]?|GDDR\d?X?)\b")  # HBM2e, HBM3e, GDDR6, GDDR6X as datasheets name them


def shown_safely(data: Any) -> Any:
    """A preset file's texts (its id, name, source, notes, nvidia-smi names) as every front end shows them: control
    characters escaped (`printable`), so a user's preset never sends an escape sequence to the terminal."""
    if not isinstance(data, dict):
        return data
    out = dict(data)
    for key, value in data.items():
        if isinstance(value, str):
            out[key] = printable(value)
        elif isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
            out[key] = [printable(v) for v in value]
    return out


class GpuSpec(BaseModel):
    """One accelerator. Throughputs are dense (no 2:4 sparsity); link bandwidths are per direction. Figures have
    physical bounds: a near-zero bandwidth or throughput would make every step time infinite."""

    model_config = SPEC

    @model_validator(mode="before")
    @classmethod
    def _strict(cls, data: Any) -> Any:
        return shown_safely(strict_scalars(cls, data, ""))

    id: str
    name: str
    generation: Generation = Field(
        description="the chip's architecture (NVIDIA/AMD whitepapers); the step-time model reads what the "
        "generation can do from it, never from the name",
    )
    vendor: str = "nvidia"
    memory_mib: int = Field(ge=1, le=2**24, description="usable device memory, as nvidia-smi reports memory.total")
    bf16: bool = Field(description="native BF16 tensor math")
    bf16_tflops: float = Field(ge=0, le=MAX_TFLOPS, description="dense BF16 tensor TFLOP/s with FP32 accumulate")
    fp16_tflops: float = Field(ge=0, le=MAX_TFLOPS, description="dense FP16 tensor TFLOP/s with FP32 accumulate")
    fp32_tflops: float = Field(ge=MIN_TFLOPS, le=MAX_TFLOPS, description="FP32 (non-tensor) TFLOP/s")
    fp8_tflops: float | None = Field(
        default=None,
        ge=0,
        le=MAX_TFLOPS,
        description="dense FP8 tensor TFLOP/s with FP32 accumulate; unset: no fp8 tensor cores",
    )
    tf32_tflops: float | None = Field(default=None, ge=0, le=MAX_TFLOPS)
    memory_bandwidth_gbs: float = Field(ge=1, le=MAX_GBS)
    gpu_link: str
    gpu_link_gbs: float = Field(ge=0.1, le=MAX_GBS, description="GPU-GPU bandwidth inside a node, GB/s per direction")
    host_link: str
    host_link_gbs: float = Field(ge=0.1, le=MAX_GBS, description="GPU-host bandwidth, GB/s per direction")
    internode_gbs: float = Field(
        ge=0.01, le=MAX_GBS, description="network bandwidth per GPU between nodes, GB/s per direction"
    )
    flash_attention: bool = Field(description="FlashAttention-2 kernels available (Ampere and newer)")
    sm_count: int = Field(
        ge=1, le=100_000, description="streaming multiprocessors (AMD: compute units): a matmul's tiles run in waves"
    )
    matmul_efficiency: float = Field(
        gt=0.05,
        le=1,
        description="the fraction of the dense 16-bit peak a large, well-shaped matmul reaches (its best measured "
        "shape: 'maximum achievable matmul FLOPS')",
    )
    kernel_overhead_us: float = Field(
        ge=0,
        le=1000,
        description="GPU time a kernel costs beyond its work (launch latency, a short kernel's ramp), microseconds",
    )
    time_source: str = Field(
        min_length=1, description="where sm_count, matmul_efficiency and kernel_overhead_us come from"
    )
    match: tuple[str, ...] = ()
    price_per_gpu_hour: float | None = Field(default=None, ge=0, le=1e6)
    source: str
    note: str = ""
    # The typical node this GPU comes in (`core.plan.node`): its host memory and local NVMe for offload, in GiB,
    # for `node_gpus` GPUs, with where the figures come from. Unset: the documented rule of `core.plan.node`.
    node_host_memory_gib: float | None = Field(default=None, gt=0, le=MAX_NODE_GIB)
    node_nvme_gib: float | None = Field(default=None, gt=0, le=MAX_NODE_GIB)
    node_nvme_gbs: float | None = Field(
        default=None, ge=0.1, le=MAX_GBS, description="rated sequential read of the node's NVMe drives together, GB/s"
    )
    node_cpu_cores: int | None = Field(default=None, ge=1, le=1 << 20, description="CPU cores of the node")
    node_gpus: int = Field(default=8, ge=1, le=1024, description="GPUs of the node the node_* figures are for")
    node_source: str = ""

    @field_validator("bf16_tflops", "fp16_tflops", "fp8_tflops", "tf32_tflops")
    @classmethod
    def _zero_or_real(cls, v: float | None) -> float | None:
        """0 means "no such tensor cores"; anything else is a real throughput (a tiny one makes times infinite)."""
        if v is not None and 0 < v < MIN_TFLOPS:
            raise ValueError(f"must be 0 (none) or at least {MIN_TFLOPS} TFLOP/s (got {v:g})")
        return v

    @property
    def memory_bytes(self) -> int:
        return self.memory_mib * MiB

    @property
    def memory_type(self) -> str:
        """``HBM3``, ``GDDR6``: the device memory's kind as the preset's datasheet ``source`` names it (the most
        specific name, then the one named most); ``""`` when the source names none (a user preset). An RTX A6000 is
        GDDR6, not HBM: words about memory reads say which (`memory_label`)."""
        found: list[str] = MEMORY_TYPE.findall(self.source)
        if not found:
            return ""
        return max(found, key=lambda m: (len(m), found.count(m)))

    @property
    def memory_label(self) -> str:
        """The device memory as a report names it: its type (``GDDR6``), else ``device memory``."""
        return self.memory_type or "device memory"

    def tflops(self, dtype: str) -> float:
        """Dense peak for the compute dtype of a regime: bf16, fp16 or fp32."""
        return {"bf16": self.bf16_tflops, "fp16": self.fp16_tflops, "fp32": self.fp32_tflops}[dtype]


class ModelPreset(BaseModel):
    model_config = SPEC

    @model_validator(mode="before")
    @classmethod
    def _shown_safely(cls, data: Any) -> Any:
        return shown_safely(data)

    id: str
    name: str
    order: int = Field(default=1000, ge=-(10**9), le=10**9)
    params: int | None = Field(default=None, ge=1, le=10**15, description="published total parameter count")
    context: int | None = Field(
        default=None, ge=1, le=10**9, description="trained context in tokens (config.json max_position_embeddings)"
    )
    source: str
    hub_ids: tuple[str, ...] = Field(
        default=(),
        description="the Hugging Face model ids this preset stands for (ORG/NAME): `--model ORG/NAME` and the "
        "importers take the preset for them when the Hub cache does not hold the repo",
    )
    config: dict[str, Any]

    @field_validator("hub_ids")
    @classmethod
    def _repo_ids(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        bad = next((i for i in v if not is_repo_id(i)), None)
        if bad is not None:
            raise ValueError(f"{shown(bad)} is not a Hugging Face model id ORG/NAME")
        return v
