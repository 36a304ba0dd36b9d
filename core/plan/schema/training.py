"""The plan's ``[training]`` table: what is trained (full, LoRA, QLoRA on a quantized base), in which precision,
with which optimizer, batch and sequence, and the figures for time to train (token budget, MFU)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from vramplan.core.plan.architecture.arch import ALL_ROLES
from vramplan.core.plan.helpers.errors import shown
from vramplan.core.plan.helpers.field_values import (
    FROZEN_TABLE,
    caseless_choices,
    count_value,
    strict_scalars,
    word_list,
)
from vramplan.core.plan.helpers.units import parse_number
from vramplan.core.plan.schema.objectives import OBJECTIVES, Objective, ObjectiveName

Precision = Literal["fp32", "bf16-autocast", "fp16-autocast", "bf16-master", "fp16-master", "bf16-pure", "bf16-fsdp"]
Optimizer = Literal[
    "adamw", "adamw-8bit", "paged-adamw", "paged-adamw-8bit", "sgd", "sgd-momentum", "adafactor", "lion"
]
OptimizerImpl = Literal["auto", "foreach", "for-loop", "fused"]
Method = Literal["full", "lora", "qlora"]
Quantization = Literal["none", "int8", "nf4", "fp4"]

PRECISIONS: tuple[str, ...] = Precision.__args__  # type: ignore[attr-defined]
OPTIMIZERS: tuple[str, ...] = Optimizer.__args__  # type: ignore[attr-defined]
METHODS: tuple[str, ...] = Method.__args__  # type: ignore[attr-defined]
MIN_MFU = 0.001  # 0.1% of the dense peak: below it step times are nonsense (and 5e-324 makes them NaN)


class TrainingConfig(BaseModel):
    model_config = FROZEN_TABLE
    TABLE: ClassVar[str] = "training"

    objective: ObjectiveName = Field(
        default="sft",
        description="pretrain (next-token loss from random weights), sft (next-token loss), dpo (preference "
        "pairs), grpo, ppo (RL with generation); [rl] holds the keys of dpo/grpo/ppo",
    )
    micro_batch_size: int = Field(default=1, ge=1, le=1_000_000)
    seq_len: int = Field(default=2048, ge=1, le=100_000_000)
    grad_accum_steps: int = Field(default=1, ge=1, le=1_000_000)
    precision: Precision | None = Field(
        default=None,
        description="unset: bf16-autocast for full fine-tuning, bf16-pure (a 16-bit frozen base) for LoRA/QLoRA",
    )
    optimizer: Optimizer = "adamw"
    optimizer_impl: OptimizerImpl = "auto"
    method: Method = "full"
    lora_rank: int = Field(default=8, ge=1, le=65_536)
    lora_targets: tuple[str, ...] = ("q", "v")
    quantization: Quantization | None = Field(default=None, description="base weights for lora/qlora")
    double_quantization: bool = True
    lora_dtype: Literal["fp32", "bf16"] = Field(
        default="fp32", description="adapters, their gradients and optimizer states: fp32 (PEFT) or 16-bit (torchtune)"
    )
    lora_dropout: float = Field(default=0.0, ge=0, lt=1, description="LoRA dropout probability (PEFT default 0)")
    bnb_generation: Literal["current", "legacy"] = Field(
        default="current",
        description="bitsandbytes >= 0.43.2 (current) or <= 0.43.1 (each 4-bit linear keeps its input)",
    )
    kbit_prepare: bool = Field(
        default=False, description="PEFT prepare_model_for_kbit_training: non-quantized weights and activations fp32"
    )
    quantized_modules: Literal["block-linears", "all-linears", "adapted"] = Field(
        default="block-linears",
        description="which linears a quantized base quantizes: transformers (block), Lightning/litgpt (+ lm_head), "
        "torchtune (only the LoRA-adapted ones)",
    )
    quant_compute_dtype: Literal["bf16", "fp16", "fp32"] | None = Field(
        default=None, description="bnb_4bit_compute_dtype; unset: the precision's 16-bit type"
    )
    vision_tower: Literal["frozen", "trained"] | None = Field(
        default=None,
        description="a multimodal model's vision tower and projector (model.vision_params): unset, frozen (held in "
        "the weights' dtype, no gradients), or trained with the text model (full fine-tuning)",
    )
    learning_rate: float | None = Field(default=None, gt=0, le=100)
    grad_clip: float | None = Field(default=None, ge=0, le=1e9)
    loss_scaling: Literal["dynamic", "static", "none"] = "dynamic"
    tokens: int | None = Field(default=None, ge=1, le=10**18, description="token budget for time-to-train")
    mfu: float | None = Field(
        default=None,
        ge=MIN_MFU,
        le=1,
        description="the fraction of the GPU's dense peak every matmul runs at (your stack's, measured); unset: each "
        "matmul's from the GPU's measured best fraction and its shape's tiles and waves (core.time.kernels)",
    )

    @field_validator("tokens", "mfu", mode="before")
    @classmethod
    def _suffixed(cls, v: Any, info: Any) -> Any:
        """``tokens = "2T"`` / ``"300B"``, ``mfu = "45%"``: what the planner's fields take, in files and ``--set``."""
        if not isinstance(v, str):
            return v
        return parse_number(v, integer=info.field_name == "tokens")

    @field_validator("micro_batch_size", "seq_len", "grad_accum_steps", "lora_rank", mode="before")
    @classmethod
    def _counts(cls, v: Any, info: Any) -> Any:
        return count_value(v, f"training.{info.field_name}")

    @model_validator(mode="before")
    @classmethod
    def _caseless(cls, data: Any) -> Any:
        return caseless_choices(cls, strict_scalars(cls, data, cls.TABLE))

    @field_validator("lora_targets", mode="before")
    @classmethod
    def _targets_tuple(cls, v: Any) -> Any:
        """``"q,v"``, ``"q v"`` (as the planner's field and ``--set training.lora_targets=q,v`` take them) or a
        list."""
        return word_list(v, lower=True)

    @field_validator("lora_targets")
    @classmethod
    def _known_targets(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if not v:
            raise ValueError("at least one target (q k v o gate up down, qkv, gate_up, or all-linear)")
        for t in v:
            if t not in (*ALL_ROLES, "all-linear"):
                raise ValueError(
                    f"unknown target {shown(t)}; use q k v o gate up down, qkv or gate_up (fused), or all-linear"
                )
        return tuple(dict.fromkeys(v))

    @property
    def regime(self) -> str:
        """The precision regime in effect: the one set, else bf16-autocast for full fine-tuning and bf16-pure (the
        frozen base in 16 bit, as torchtune, litgpt and HF + PEFT with ``torch_dtype=bfloat16`` load it) for LoRA
        and QLoRA; PEFT's ``prepare_model_for_kbit_training`` makes every non-quantized weight and so every
        activation fp32."""
        if self.kbit_prepare and self.method != "full":
            return "fp32"
        if self.precision is not None:
            return self.precision
        return "bf16-autocast" if self.method == "full" else "bf16-pure"

    @property
    def objective_spec(self) -> Objective:
        """The objective's record: what it trains on, generates and holds (`core.plan.schema.objectives`)."""
        return OBJECTIVES[self.objective]

    @property
    def base_quantization(self) -> str:
        """The base weights' format: ``nf4`` by default for QLoRA, none otherwise."""
        if self.quantization is not None:
            return self.quantization
        return "nf4" if self.method == "qlora" else "none"
