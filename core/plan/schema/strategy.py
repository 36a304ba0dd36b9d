"""The plan's ``[strategy]`` table: how the step runs on the GPUs: activation checkpointing and its implementation,
the attention kernel, compilation, the optimizer step's placement, activation offload and compression, the loss's
chunks, ZeRO/FSDP sharding (and the FSDP version) with CPU/NVMe offload, and tensor, pipeline, sequence and
expert parallelism."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from vramplan.core.plan.helpers.field_values import FROZEN_TABLE, caseless_choices, count_value, strict_scalars

Checkpointing = Literal["none", "selective", "op", "full"]
Attention = Literal["eager", "flash"]
Offload = Literal["none", "cpu", "nvme"]


class StrategyConfig(BaseModel):
    model_config = FROZEN_TABLE
    TABLE: ClassVar[str] = "strategy"

    gradient_checkpointing: Checkpointing = Field(
        default="none", description="selective: the attention core (Megatron); op: torchtitan's per-op policy"
    )
    checkpoint_impl: Literal["reentrant", "non-reentrant"] | None = Field(
        default=None,
        description="full checkpointing through torch.utils.checkpoint's reentrant autograd.Function or its "
        "saved-tensor hooks; unset: the stack's",
    )
    checkpoint_every: int = Field(default=1, ge=1, le=100_000, description="checkpoint every k-th block only")
    compile: bool = Field(default=False, description="torch.compile of each block (inductor fuses and recomputes)")
    optimizer_in_backward: bool = Field(
        default=False, description="the optimizer step runs in backward, per parameter (torchtune optimizer_in_bwd)"
    )
    activation_offload: Literal["none", "cpu"] = Field(
        default="none", description="saved activations to pinned host memory (torchtune OffloadActivations)"
    )
    loss_chunks: int = Field(
        default=1,
        ge=1,
        le=65_536,
        description="chunked cross-entropy (torchtune), 1: off; replaces fused_cross_entropy when > 1",
    )
    loss_path: Literal["upcast", "upcast-shifted", "model-upcast", "model-upcast-kept", "model-dtype"] | None = Field(
        default=None,
        description="the unfused loss's logits: upcast: the loss upcasts the 16-bit logits to fp32 (transformers "
        ">= 4.49, torchtitan); upcast-shifted: and copies the shifted fp32 logits (4.46-4.48); model-upcast: the "
        "model returns fp32 logits and the loss copies them shifted (before 4.46); model-upcast-kept: and the loop "
        "keeps that output through backward; model-dtype: cross-entropy on the 16-bit logits; unset: the stack's",
    )
    float8: bool = Field(default=False, description="torchao Float8 linears (fp8 tensor cores)")
    attention: Attention = "flash"
    activation_compression: Literal["none", "int8"] = "none"
    fused_cross_entropy: bool = False
    zero_stage: int = Field(default=0, ge=0, le=3)
    offload_optimizer: Offload = "none"
    offload_parameters: Offload = "none"
    tensor_parallel: int = Field(default=1, ge=1, le=1024)
    pipeline_parallel: int = Field(default=1, ge=1, le=1024)
    sequence_parallel: bool = False
    experts: Literal["grouped", "loop", "batched"] = Field(
        default="grouped",
        description="mixture of experts: grouped: transformers >= 5's grouped_mm (its default); loop: the "
        "per-expert Python loop (experts_implementation = eager; transformers 4.x's only path); batched: "
        "batched_mm, which copies each token's expert weights",
    )
    fsdp_version: int | None = Field(
        default=None,
        ge=1,
        le=2,
        description="under zero_stage 2/3: 1: FullyShardedDataParallel (one padded FlatParameter per wrapped unit); "
        "2: fully_shard (each parameter its own shard, as vramplan's custom stack and DeepSpeed); unset: the stack's",
    )
    fsdp_adapter_wrap: Literal["block", "own"] | None = Field(
        default=None,
        description="FSDP1 LoRA: block: the adapters share their block's FlatParameter (use_orig_params=True, "
        "Lightning's FSDPStrategy), so its gradient covers the whole block; own: units of their own (PEFT's "
        "fsdp_auto_wrap_policy); unset: the stack's",
    )
    fsdp_grad_sync: Literal["each", "last"] | None = Field(
        default=None,
        description="FSDP with gradient accumulation: each: gradients reduce-scattered every micro-batch and "
        "accumulated as shards; last: no_sync / set_requires_gradient_sync(False) until the last micro-batch, so "
        "every unit's unsharded gradient is held between micro-batches (HF Trainer, Lightning Fabric); unset: "
        "the stack's",
    )
    expert_parallel: int = Field(
        default=1,
        ge=1,
        le=1024,
        description="mixture of experts: routed experts sharded over this many data-parallel ranks (as set: the "
        "estimate never picks it); tokens reach their experts by all-to-all",
    )

    @model_validator(mode="before")
    @classmethod
    def _caseless(cls, data: Any) -> Any:
        return caseless_choices(cls, strict_scalars(cls, data, cls.TABLE))

    @field_validator("fsdp_version", mode="before")
    @classmethod
    def _fsdp_version(cls, v: Any) -> Any:
        if v is not None and (isinstance(v, bool) or v not in (1, 2) or not isinstance(v, int)):
            raise ValueError("the FSDP version is 1 or 2")
        return v

    @field_validator("checkpoint_every", "loss_chunks", "tensor_parallel", "pipeline_parallel", mode="before")
    @classmethod
    def _counts(cls, v: Any, info: Any) -> Any:
        return count_value(v, f"strategy.{info.field_name}")
