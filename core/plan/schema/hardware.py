"""The plan's ``[hardware]`` table: the GPU preset, how many per node and nodes, and what the node offers for
offload and time (host memory, NVMe, links, CPU cores), each unset figure taken from the GPU preset's node."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, field_validator, model_validator

from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.catalogue.specs import MAX_GBS, MAX_NODE_GIB
from vramplan.core.plan.helpers.field_values import FROZEN_TABLE, count_value, strict_scalars

MAX_PRICE_PER_GPU_HOUR = 1e6


class HardwareConfig(BaseModel):
    model_config = FROZEN_TABLE

    gpu: str = "a100-80gb"
    gpus_per_node: int = Field(default=8, ge=1, le=1024)
    nodes: int = Field(default=1, ge=1, le=100_000)
    price_per_gpu_hour: float | None = Field(
        default=None,
        ge=0,
        le=MAX_PRICE_PER_GPU_HOUR,
        description="USD per GPU-hour (the costs vramplan shows are USD); overrides the preset's price",
    )
    host_memory_gib: float | None = Field(
        default=None,
        gt=0,
        le=MAX_NODE_GIB,
        description="host memory per node, the limit of offload; unset: this machine's (on its GPU), else the "
        "GPU preset's typical node",
    )
    nvme_gib: float | None = Field(
        default=None,
        gt=0,
        le=MAX_NODE_GIB,
        description="NVMe space per node for NVMe offload; unset: the GPU preset's typical node",
    )
    pcie_gbs: float | None = Field(
        default=None,
        ge=0.1,
        le=MAX_GBS,
        description="measured GPU-host bandwidth per GPU and direction, GB/s, used as is; unset: 80% of the GPU "
        "preset's host link",
    )
    nvme_gbs: float | None = Field(
        default=None,
        ge=0.1,
        le=MAX_GBS,
        description="measured NVMe read bandwidth per node, GB/s, used as is; unset: 80% of the preset node's "
        "drives, else of one drive of the host link's PCIe generation",
    )
    cpu_cores: int | None = Field(
        default=None,
        ge=1,
        le=1 << 20,
        description="CPU cores per node for CPU Adam; unset: the preset node's, else 8 per GPU",
    )

    @model_validator(mode="before")
    @classmethod
    def _strict(cls, data: Any) -> Any:
        return strict_scalars(cls, data, "hardware")

    @field_validator("gpus_per_node", "nodes", "cpu_cores", mode="before")
    @classmethod
    def _counts(cls, v: Any, info: Any) -> Any:
        return count_value(v, f"hardware.{info.field_name}")

    @field_validator("gpu")
    @classmethod
    def _known_gpu(cls, v: str) -> str:
        presets.gpu(v)  # raises PlanError (a ValueError) with close matches
        return v

    @property
    def total_gpus(self) -> int:
        return self.gpus_per_node * self.nodes
