"""The plan: one frozen pydantic model with the tables of a plan file.

``[model]`` (HF config.json key names, optionally from a preset), ``[hardware]``, ``[training]``, ``[strategy]``,
the optional ``[overhead]`` (the GPU-only terms PyTorch's tensors do not see) and ``[checklist]`` (which of the
troubleshooting checklist's by-hand items the user has ticked). Every change goes through
`Plan.with_changes`, which re-validates; a bad value is a `PlanError` naming its dotted key.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from vramplan.core.plan import presets
from vramplan.core.plan.arch import ALL_ROLES, FAMILIES
from vramplan.core.plan.errors import PlanError, pydantic_error, suggest
from vramplan.core.plan.model import ModelConfig
from vramplan.core.plan.units import parse_number

Precision = Literal["fp32", "bf16-autocast", "fp16-autocast", "bf16-master", "fp16-master", "bf16-pure"]
Optimizer = Literal["adamw", "adamw-8bit", "sgd", "sgd-momentum", "adafactor", "lion"]
OptimizerImpl = Literal["auto", "foreach", "for-loop", "fused"]
Method = Literal["full", "lora", "qlora"]
Quantization = Literal["none", "int8", "nf4", "fp4"]
Checkpointing = Literal["none", "selective", "full"]
Attention = Literal["eager", "flash"]
Offload = Literal["none", "cpu", "nvme"]

PRECISIONS: tuple[str, ...] = Precision.__args__  # type: ignore[attr-defined]
OPTIMIZERS: tuple[str, ...] = Optimizer.__args__  # type: ignore[attr-defined]
METHODS: tuple[str, ...] = Method.__args__  # type: ignore[attr-defined]
TABLES = ("model", "hardware", "training", "strategy", "overhead", "checklist")
# The checklist items vramplan cannot judge (core/checklist.py): the user ticks them when checked.
MANUAL_CHECKS: tuple[str, ...] = ("oom.other_processes", "nan.learning_rate", "nan.data", "slow.data_loading")

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class HardwareConfig(BaseModel):
    model_config = _FROZEN

    gpu: str = "a100-80gb"
    gpus_per_node: int = Field(default=8, ge=1, le=1024)
    nodes: int = Field(default=1, ge=1, le=100_000)
    price_per_gpu_hour: float | None = Field(default=None, ge=0, description="overrides the preset's price")

    @field_validator("gpu")
    @classmethod
    def _known_gpu(cls, v: str) -> str:
        presets.gpu(v)  # raises PlanError (a ValueError) with close matches
        return v

    @property
    def total_gpus(self) -> int:
        return self.gpus_per_node * self.nodes


class TrainingConfig(BaseModel):
    model_config = _FROZEN

    micro_batch_size: int = Field(default=1, ge=1, le=1_000_000)
    seq_len: int = Field(default=2048, ge=1, le=100_000_000)
    grad_accum_steps: int = Field(default=1, ge=1, le=1_000_000)
    precision: Precision = "bf16-autocast"
    optimizer: Optimizer = "adamw"
    optimizer_impl: OptimizerImpl = "auto"
    method: Method = "full"
    lora_rank: int = Field(default=8, ge=1, le=65_536)
    lora_targets: tuple[str, ...] = ("q", "v")
    quantization: Quantization | None = Field(default=None, description="base weights for lora/qlora")
    double_quantization: bool = True
    learning_rate: float | None = Field(default=None, gt=0)
    grad_clip: float | None = Field(default=None, ge=0)
    loss_scaling: Literal["dynamic", "static", "none"] = "dynamic"
    tokens: int | None = Field(default=None, ge=1, description="token budget for time-to-train")
    mfu: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="fraction of the dense peak the math reaches; unset: 0.45 (core.time.step)",
    )

    @field_validator("tokens", "mfu", mode="before")
    @classmethod
    def _suffixed(cls, v: Any, info: Any) -> Any:
        """``tokens = "2T"`` / ``"300B"``, ``mfu = "45%"``: what the planner's fields take, in files and ``--set``."""
        if not isinstance(v, str):
            return v
        return parse_number(v, integer=info.field_name == "tokens")

    @field_validator("lora_targets", mode="before")
    @classmethod
    def _targets_tuple(cls, v: Any) -> Any:
        return (v,) if isinstance(v, str) else v

    @field_validator("lora_targets")
    @classmethod
    def _known_targets(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        if not v:
            raise ValueError("at least one target (q k v o gate up down, qkv, gate_up, or all-linear)")
        for t in v:
            if t not in (*ALL_ROLES, "all-linear"):
                raise ValueError(
                    f"unknown target {t!r}; use q k v o gate up down, qkv or gate_up (fused), or all-linear"
                )
        return tuple(dict.fromkeys(v))

    @property
    def base_quantization(self) -> str:
        """The base weights' format: ``nf4`` by default for QLoRA, none otherwise."""
        if self.quantization is not None:
            return self.quantization
        return "nf4" if self.method == "qlora" else "none"


class StrategyConfig(BaseModel):
    model_config = _FROZEN

    gradient_checkpointing: Checkpointing = "none"
    attention: Attention = "flash"
    activation_compression: Literal["none", "int8"] = "none"
    fused_cross_entropy: bool = False
    zero_stage: int = Field(default=0, ge=0, le=3)
    offload_optimizer: Offload = "none"
    offload_parameters: Offload = "none"
    tensor_parallel: int = Field(default=1, ge=1, le=1024)
    pipeline_parallel: int = Field(default=1, ge=1, le=1024)
    sequence_parallel: bool = False


class OverheadConfig(BaseModel):
    """GPU-only memory outside the tensors of a training step; each term is named and adjustable."""

    model_config = _FROZEN

    cuda_context_mib: int = Field(default=512, ge=0, description="CUDA context, kernels, cuBLAS handles")
    allocator_reserve_percent: float = Field(default=5.0, ge=0, le=100, description="caching-allocator slack")
    nccl_mib_per_group: int = Field(default=768, ge=0, description="NCCL buffers per process group in use")
    zero_bucket_elements: int | None = Field(
        default=None, ge=0, description="DeepSpeed reduce_bucket_size; unset: hidden_size^2 (HF Trainer's 'auto')"
    )
    ddp_gradient_as_bucket_view: bool = Field(default=False, description="DDP's default keeps a bucket copy")


class ChecklistConfig(BaseModel):
    """The by-hand items of the troubleshooting checklist that have been checked (``vramplan check``)."""

    model_config = _FROZEN

    ticked: tuple[str, ...] = Field(default=(), description="ids of checked by-hand items, e.g. slow.data_loading")

    @field_validator("ticked", mode="before")
    @classmethod
    def _ticked_tuple(cls, v: Any) -> Any:
        return (v,) if isinstance(v, str) else v

    @field_validator("ticked")
    @classmethod
    def _known_items(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for item in v:
            if item not in MANUAL_CHECKS:
                hint = suggest(item, MANUAL_CHECKS) or f" (one of {', '.join(MANUAL_CHECKS)})"
                raise ValueError(f"not a by-hand checklist item: {item!r}{hint}")
        return tuple(sorted(set(v)))  # a set: ticking in another order gives the same plan


class Plan(BaseModel):
    model_config = _FROZEN

    model: ModelConfig
    hardware: HardwareConfig = HardwareConfig()
    training: TrainingConfig = TrainingConfig()
    strategy: StrategyConfig = StrategyConfig()
    overhead: OverheadConfig = OverheadConfig()
    checklist: ChecklistConfig = ChecklistConfig()

    @model_validator(mode="before")
    @classmethod
    def _resolve_model(cls, data: Any) -> Any:
        """The ``[model]`` table with its preset's or config.json's keys merged in (`presets.resolve_model`)."""
        if isinstance(data, dict) and isinstance(data.get("model"), dict):
            data = {**data, "model": presets.resolve_model(data["model"])}
        return data

    @model_validator(mode="after")
    def _combinations(self) -> Plan:
        _check_combinations(self)
        return self

    # -- derived sizes ----------------------------------------------------------------------------------------
    @property
    def data_parallel(self) -> int:
        s = self.strategy
        return self.hardware.total_gpus // (s.tensor_parallel * s.pipeline_parallel)

    def dump(self) -> dict[str, Any]:
        """The normalized plan as plain data (TOML/JSON ready; None omitted, TOML has no null)."""
        return self.model_dump(mode="json", exclude_none=True)

    def with_changes(self, changes: dict[str, Any]) -> Plan:
        """A new, validated plan with dotted-key changes (``{"strategy.zero_stage": 3}``).

        Choosing a new ``model.preset`` or ``model.hf_config`` replaces every model key not also given in ``changes``.
        """
        raw = self.dump()
        for key in ("model.preset", "model.hf_config"):
            if key in changes and changes[key] != getattr(self.model, key.partition(".")[2]):
                raw["model"] = {}  # a new model: drop every key of the old one
        for key, value in changes.items():
            table, _, field = key.partition(".")
            if table not in TABLES or not field or "." in field:
                raise PlanError(f"not a plan key (use table.key with a table of {', '.join(TABLES)})", key)
            if value is None:
                raw.setdefault(table, {}).pop(field, None)
            else:
                raw.setdefault(table, {})[field] = value
        return plan_from_dict(raw)


def _check_combinations(p: Plan) -> None:
    t, s, m = p.training, p.strategy, p.model
    fam = FAMILIES[m.model_type]
    quant = t.base_quantization
    if t.method == "qlora" and quant not in ("nf4", "fp4"):
        raise PlanError(
            'qlora needs a 4-bit base (nf4 or fp4); use method = "lora" for an int8 or 16-bit base',
            "training.quantization",
        )
    if t.method == "full" and quant != "none":
        raise PlanError(
            "full fine-tuning trains every weight and cannot keep a quantized base; use lora or qlora",
            "training.quantization",
        )
    if t.method != "full":
        roles = m.arch().roles()
        for target in t.lora_targets:
            if target == "all-linear" or target in roles:
                continue
            if target in ("q", "k", "v") and fam.fused_qkv:
                why = 'one fused query/key/value projection: target "qkv"'
            elif target == "qkv":
                why = "separate q, k, v projections: target them"
            elif target in ("gate", "up") and fam.mlp == "gated_fused":
                why = 'one fused gate/up projection: target "gate_up"'
            elif target == "gate_up":
                why = "no fused gate_up projection"
            else:
                why = f"no {target} projection (its MLP is up -> {m.arch().act} -> down)"
            raise PlanError(
                f"{m.model_type} has {why} (its block: {', '.join(roles)}, or all-linear)", "training.lora_targets"
            )
    positions = m.arch().positions
    if positions and t.seq_len > positions:
        raise PlanError(
            f"{m.model_type} has {positions} learned positions (max_position_embeddings): "
            f"seq_len {t.seq_len} does not fit",
            "training.seq_len",
        )
    if t.optimizer_impl == "fused" and t.optimizer not in ("adamw", "sgd", "sgd-momentum"):
        raise PlanError(f"PyTorch has no fused {t.optimizer}; use auto, foreach or for-loop", "training.optimizer_impl")
    tp, pp = s.tensor_parallel, s.pipeline_parallel
    total = p.hardware.total_gpus
    if total % (tp * pp):
        raise PlanError(
            f"{total} GPUs are not divisible by tensor_parallel x pipeline_parallel = {tp * pp}",
            "strategy.tensor_parallel" if tp > 1 else "strategy.pipeline_parallel",
        )
    if tp > 1 and (m.num_attention_heads % tp or m.num_key_value_heads % tp):
        raise PlanError(
            f"tensor_parallel={tp} must divide num_attention_heads={m.num_attention_heads} and "
            f"num_key_value_heads={m.num_key_value_heads} (Megatron splits heads across ranks)",
            "strategy.tensor_parallel",
        )
    if pp > m.num_hidden_layers:
        raise PlanError(
            f"pipeline_parallel={pp} exceeds num_hidden_layers={m.num_hidden_layers}", "strategy.pipeline_parallel"
        )
    if s.sequence_parallel and tp == 1:
        raise PlanError(
            "sequence parallelism splits along the tensor-parallel group: set tensor_parallel > 1",
            "strategy.sequence_parallel",
        )
    if s.zero_stage >= 2 and pp > 1:
        raise PlanError(
            "ZeRO-2/3 cannot be combined with pipeline parallelism (DeepSpeed's PipelineEngine supports ZeRO-1 only)",
            "strategy.zero_stage",
        )
    if s.offload_parameters != "none" and s.zero_stage != 3:
        raise PlanError("offload_parameters needs ZeRO-3 (zero_stage = 3)", "strategy.offload_parameters")
    if s.offload_optimizer == "cpu" and s.zero_stage == 0:
        raise PlanError(
            "offload_optimizer needs ZeRO (zero_stage >= 1; DeepSpeed ZeRO-Offload)", "strategy.offload_optimizer"
        )
    if s.offload_optimizer == "nvme" and s.zero_stage != 3:
        raise PlanError("NVMe offload needs ZeRO-3 (ZeRO-Infinity)", "strategy.offload_optimizer")
    if s.offload_parameters != "none" and s.offload_optimizer == "none":
        raise PlanError(
            "offloading parameters without the optimizer is not a DeepSpeed configuration; set offload_optimizer too",
            "strategy.offload_parameters",
        )


def _known_keys(parent: list[str]) -> list[str]:
    if not parent:
        return list(TABLES)
    section = Plan.model_fields.get(parent[0])
    if section is None or len(parent) != 1:
        return []
    ann = section.annotation
    return list(getattr(ann, "model_fields", {}))


def plan_from_dict(raw: dict[str, Any]) -> Plan:
    """Validate plain data (a parsed TOML file) into a `Plan`; errors become one `PlanError` line."""
    if "model" not in raw:
        raise PlanError('missing [model] table (give at least preset = "...")', "model")
    try:
        return Plan.model_validate(raw)
    except ValidationError as exc:
        raise pydantic_error(exc, _known_keys) from None


DEFAULT_PLAN_DATA: dict[str, Any] = {
    "model": {"preset": "llama-7b"},
    "hardware": {"gpu": "a100-80gb", "gpus_per_node": 8, "nodes": 1},
    "training": {
        "micro_batch_size": 1,
        "seq_len": 2048,
        "grad_accum_steps": 1,
        "precision": "bf16-autocast",
        "optimizer": "adamw",
        "method": "full",
    },
    "strategy": {"gradient_checkpointing": "full", "attention": "flash", "zero_stage": 3},
}


def default_plan() -> Plan:
    """The plan `vramplan` and `vramplan estimate` start from: full fine-tuning of LLaMA-7B on one 8 x A100-80GB
    node with ZeRO-3, full activation checkpointing and flash attention."""
    return plan_from_dict(DEFAULT_PLAN_DATA)
