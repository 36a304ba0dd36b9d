"""The plan's ``[overhead]`` table: what one machine adds beyond the model: the GPU memory outside a step's
tensors, each term named and adjustable (`core.memory.overhead` computes them), and the anchor a measured step time
sets for the time model (`core.time.anchor`); a calibration file fills both (`core.files.calibration`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, model_validator

from vramplan.core.plan.helpers.field_values import FROZEN_TABLE, strict_scalars

STEP_TIME_FACTOR_MIN, STEP_TIME_FACTOR_MAX = 0.01, 100.0  # a measured step 100x off the model is a mistake


class OverheadConfig(BaseModel):
    """GPU-only memory outside the tensors of a training step; each term is named and adjustable."""

    model_config = FROZEN_TABLE

    @model_validator(mode="before")
    @classmethod
    def _strict(cls, data: Any) -> Any:
        return strict_scalars(cls, data, "overhead")

    cuda_context_mib: int = Field(
        default=512, ge=0, le=1024 * 1024, description="CUDA context, kernels, cuBLAS handles"
    )
    allocator_reserve_percent: float | None = Field(
        default=None,
        ge=0,
        le=100,
        description="caching-allocator reserve as % of the tensor peak; unset: the allocator's rules",
    )
    nccl_mib_per_group: int = Field(
        default=768, ge=0, le=1024 * 1024, description="NCCL buffers per process group in use"
    )
    zero_bucket_elements: int | None = Field(
        default=None,
        ge=0,
        le=10**13,
        description="DeepSpeed reduce_bucket_size; unset: hidden_size^2 (HF Trainer's 'auto')",
    )
    ddp_gradient_as_bucket_view: bool = Field(default=False, description="DDP's default keeps a bucket copy")
    expandable_segments: bool = Field(
        default=False, description="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (one growing segment per stream)"
    )
    calibrated_from: str | None = Field(
        default=None,
        max_length=300,
        description="where this table's terms were measured (set by --calibration FILE: the file, GPU, machine, "
        "date); provenance only, the estimate says it is calibrated",
    )
    step_time_factor: float | None = Field(
        default=None,
        ge=STEP_TIME_FACTOR_MIN,
        le=STEP_TIME_FACTOR_MAX,
        description="measured / modelled GPU work of a step measured on step_time_gpu with step_time_framework "
        "(set by --calibration FILE); scales the time model's compute, memory-bound and host terms on that GPU and "
        "stack only",
    )
    step_time_gpu: str | None = Field(
        default=None, max_length=100, description="the GPU preset the step_time_factor was measured on"
    )
    step_time_framework: str | None = Field(
        default=None, max_length=100, description="the stack framework the step_time_factor was measured with"
    )
