"""The plan's ``[model]`` table: the architecture, with Hugging Face ``config.json`` key names.

``preset`` (a model preset) or ``hf_config`` (a local config.json, `core.plan.architecture.hf_config`) fills every key
not given (`core.plan.catalogue.presets.resolve_model` merges them in before validation); the structural keys beyond the
sizes (biases, parallel residual, activation, partial RoPE, learned positions, Falcon's architecture flags) default to
the family's and may only be set where the family's config has them."""

from __future__ import annotations

from functools import cached_property
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from vramplan.core.plan.architecture.arch import ACTIVATIONS, OPTION_KEYS, Arch, build_arch
from vramplan.core.plan.architecture.families import FAMILIES, Family
from vramplan.core.plan.helpers.errors import PlanError, shown
from vramplan.core.plan.helpers.field_values import strict_scalars

_FROZEN = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
MOE_PLAN_KEYS: tuple[str, ...] = (
    "num_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "shared_expert_intermediate_size",
    "dense_layers",
)
OTHER_PLAN_KEYS: tuple[str, ...] = ("qk_layernorm", "sliding_window", "sliding_layers")
MLA_PLAN_KEYS: tuple[str, ...] = (
    "q_lora_rank",
    "kv_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
    "mtp_layers",
)


class ModelConfig(BaseModel):
    """Architecture, with Hugging Face ``config.json`` key names. ``preset`` or ``hf_config`` (a local config.json
    or a checkpoint directory holding one) fills every key not given."""

    model_config = _FROZEN

    preset: str | None = None
    hf_config: str | None = None
    model_type: str
    vocab_size: int = Field(ge=1, le=10**8)
    hidden_size: int = Field(ge=1, le=2**20)
    intermediate_size: int = Field(ge=1, le=2**24)
    num_hidden_layers: int = Field(ge=1, le=100_000)
    num_attention_heads: int = Field(ge=1, le=2**16)
    num_key_value_heads: int = Field(ge=1, le=2**16)
    tie_word_embeddings: bool
    head_dim: int | None = Field(default=None, ge=1, le=2**16)
    # structure beyond the sizes (None: the family's default; see core.plan.architecture.arch.FAMILIES)
    attention_bias: bool | None = None
    mlp_bias: bool | None = None
    use_parallel_residual: bool | None = Field(default=None, description="GPT-NeoX; Falcon's parallel_attn")
    num_ln_in_parallel_attn: int | None = Field(default=None, ge=1, le=2, description="Falcon: 1 or 2 LayerNorms")
    hidden_act: str | None = None
    partial_rotary_factor: float | None = Field(default=None, gt=0, le=1, description="GPT-NeoX rotary_pct")
    max_position_embeddings: int | None = Field(default=None, ge=1, le=10**9, description="GPT-2 n_positions")
    alibi: bool | None = None
    new_decoder_architecture: bool | None = None
    # mixture of experts (core.plan.architecture.moe): routed experts per MoE layer, top-k, one expert's width, the
    # shared experts' summed width, and how many layers are dense (DeepSeek first_k_dense_replace, Qwen mlp_only_layers)
    num_experts: int | None = Field(default=None, ge=1, le=2**16)
    num_experts_per_tok: int | None = Field(default=None, ge=1, le=2**16)
    moe_intermediate_size: int | None = Field(default=None, ge=1, le=2**24)
    shared_expert_intermediate_size: int | None = Field(default=None, ge=0, le=2**24)
    dense_layers: int | None = Field(default=None, ge=0, le=100_000)
    # DeepSeek multi-head latent attention and multi-token prediction; Phi's q/k LayerNorm
    q_lora_rank: int | None = Field(default=None, ge=0, le=2**20)
    kv_lora_rank: int | None = Field(default=None, ge=1, le=2**20)
    qk_nope_head_dim: int | None = Field(default=None, ge=1, le=2**16)
    qk_rope_head_dim: int | None = Field(default=None, ge=1, le=2**16)
    v_head_dim: int | None = Field(default=None, ge=1, le=2**16)
    mtp_layers: int | None = Field(default=None, ge=0, le=1000)
    qk_layernorm: bool | None = None
    # sliding-window attention (Mistral, Gemma 2/3, gpt-oss): the window and how many layers use it
    sliding_window: int | None = Field(default=None, ge=1, le=10**9)
    sliding_layers: int | None = Field(default=None, ge=0, le=100_000)
    # dropout in training (core.memory.activations.dropout): on the attention probabilities (GPT-2 attn_pdrop), on
    # each sublayer's output before the residual add (GPT-2 resid_pdrop, GPT-NeoX hidden_dropout), on the embedding
    # output (GPT-2 embd_pdrop, GPT-NeoX hidden_dropout); None or 0: off
    attention_dropout: float | None = Field(
        default=None, ge=0, lt=1, description="dropout on the attention probabilities in training (GPT-2 attn_pdrop)"
    )
    hidden_dropout: float | None = Field(
        default=None,
        ge=0,
        lt=1,
        description="dropout on each sublayer's output before the residual add (GPT-2 resid_pdrop)",
    )
    embedding_dropout: float | None = Field(
        default=None, ge=0, lt=1, description="dropout on the embedding output (GPT-2 embd_pdrop)"
    )
    # a multimodal config.json's vision side (core.plan.architecture.vision)
    vision_params: int | None = Field(
        default=None,
        ge=0,
        le=10**13,
        description="a multimodal model's vision tower and projector, parameters (from its config.json's "
        "vision_config; frozen unless training.vision_tower = trained)",
    )

    @model_validator(mode="before")
    @classmethod
    def _family_defaults(cls, data: Any) -> Any:
        """Keys transformers defaults: multi-head attention, and the family's tying of embedding and lm_head.
        (A preset's or config.json's keys are merged in before: `vramplan.core.plan.catalogue.presets.resolve_model`.)
        """
        data = strict_scalars(cls, data, "model")
        if isinstance(data, dict) and "num_key_value_heads" not in data and "num_attention_heads" in data:
            data = {**data, "num_key_value_heads": data["num_attention_heads"]}  # HF default: MHA
        if (
            isinstance(data, dict)
            and "tie_word_embeddings" not in data
            and isinstance(data.get("model_type"), str)
            and data["model_type"] in FAMILIES
        ):
            data = {**data, "tie_word_embeddings": FAMILIES[data["model_type"]].default_tied}
        return data

    @field_validator("model_type")
    @classmethod
    def _known_family(cls, v: str) -> str:
        if v not in FAMILIES:
            raise ValueError(f"unsupported model_type {shown(v)}; supported: {', '.join(FAMILIES)}")
        return v

    @field_validator("hidden_act")
    @classmethod
    def _known_act(cls, v: str | None) -> str | None:
        if v is not None and v not in ACTIVATIONS:
            raise ValueError(f"activation {shown(v)} is not modelled; supported: {', '.join(ACTIVATIONS)}")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> ModelConfig:
        fam = FAMILIES[self.model_type]
        for key in OPTION_KEYS:
            value = getattr(self, key)
            if value is not None and key not in fam.options and value != _family_default(fam, key):
                fixed = _family_default(fam, key)
                what = f"fixed at {fixed}" if fixed is not None else "not configurable"
                raise PlanError(f"{what} for model_type {self.model_type!r}", f"model.{key}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise PlanError(
                f"num_key_value_heads={self.num_key_value_heads} must divide "
                f"num_attention_heads={self.num_attention_heads}",
                "model.num_key_value_heads",
            )
        fixed_d = fam.fused_qkv and fam.model_type != "phi3"  # their modules compute hidden_size // heads
        if self.head_dim is not None and fixed_d and self.head_dim * self.num_attention_heads != self.hidden_size:
            raise PlanError(
                f"{self.model_type} heads are hidden_size / num_attention_heads = "
                f"{self.hidden_size / self.num_attention_heads:g} wide (remove head_dim)",
                "model.head_dim",
            )
        if self.head_dim is None and self.hidden_size % self.num_attention_heads:
            raise PlanError(
                f"hidden_size={self.hidden_size} is not divisible by num_attention_heads={self.num_attention_heads}"
                " (set head_dim)",
                "model.num_attention_heads",
            )
        if fam.fixed_mlp_ratio and self.intermediate_size != fam.fixed_mlp_ratio * self.hidden_size:
            raise PlanError(
                f"must be {fam.fixed_mlp_ratio} x hidden_size = "
                f"{fam.fixed_mlp_ratio * self.hidden_size} for {self.model_type} (its MLP is fixed)",
                "model.intermediate_size",
            )
        if not fam.gqa and self.num_key_value_heads != self.num_attention_heads:
            raise PlanError(
                f"{self.model_type} has no grouped-query attention: must equal num_attention_heads",
                "model.num_key_value_heads",
            )
        if self.model_type == "falcon":
            _check_falcon(self)
        for key in MOE_PLAN_KEYS if not fam.moe else ():
            if getattr(self, key) is not None:
                raise PlanError(f"{self.model_type} has no routed experts", f"model.{key}")
        for key in MLA_PLAN_KEYS if not fam.mla else ():
            if getattr(self, key) is not None:
                raise PlanError(f"only deepseek_v3 has latent attention / MTP (not {self.model_type})", f"model.{key}")
        if fam.moe and self.num_experts is None:
            raise PlanError(f"{self.model_type} needs num_experts (routed experts per layer)", "model.num_experts")
        if self.num_experts and self.num_experts_per_tok and self.num_experts_per_tok > self.num_experts:
            raise PlanError(
                f"num_experts_per_tok={self.num_experts_per_tok} exceeds num_experts={self.num_experts}",
                "model.num_experts_per_tok",
            )
        for key in ("dense_layers", "sliding_layers"):  # a count of the model's layers: never more than it has
            count = getattr(self, key)
            if count is not None and count > self.num_hidden_layers:
                raise PlanError(f"{count} layers, more than num_hidden_layers={self.num_hidden_layers}", f"model.{key}")
        if self.qk_layernorm is not None and self.model_type != "phi":
            raise PlanError("only phi has qk_layernorm", "model.qk_layernorm")
        return self

    def arch(self) -> Arch:
        return self._arch

    @cached_property
    def _arch(self) -> Arch:
        """Built once per (frozen) model config: an estimate asks for it several times."""
        return build_arch(
            self.model_type,
            self.vocab_size,
            self.hidden_size,
            self.intermediate_size,
            self.num_hidden_layers,
            self.num_attention_heads,
            self.num_key_value_heads,
            self.tie_word_embeddings,
            self.head_dim,
            **{
                key: getattr(self, key)
                for key in (
                    *OPTION_KEYS,
                    *MOE_PLAN_KEYS,
                    *MLA_PLAN_KEYS,
                    "qk_layernorm",
                    "sliding_window",
                    "sliding_layers",
                    "vision_params",
                )
            },
        )


def upper_bound(key: str) -> float | None:
    """The largest value the ``[model]`` key takes (its physical bound), or None."""
    info = ModelConfig.model_fields.get(key)
    limits = [getattr(m, "le", None) for m in info.metadata] if info is not None else []
    return next((lim for lim in limits if lim is not None), None)


def _family_default(fam: Family, key: str) -> Any:
    """The value a family's modules hard-code for an option key (None: no single value, e.g. Qwen2's biased
    q/k/v and unbiased o)."""
    return {
        "attention_bias": fam.qkv_bias if fam.qkv_bias == fam.out_bias else None,
        "mlp_bias": fam.mlp_bias,
        "use_parallel_residual": fam.parallel,
        "num_ln_in_parallel_attn": fam.norms_in_parallel if fam.parallel else None,
        "hidden_act": fam.act,
        "partial_rotary_factor": fam.rotary_factor if fam.positional == "rope" else None,
        "max_position_embeddings": fam.max_positions or None,
        "alibi": fam.positional == "alibi",
        "new_decoder_architecture": False,
    }[key]


def _check_falcon(m: ModelConfig) -> None:
    """FalconAttention: the old architecture has one key/value head (multi_query) or all of them; the new one
    always runs attention and MLP in parallel (FalconDecoderLayer builds no post-attention norm for it)."""
    if m.new_decoder_architecture:
        if m.use_parallel_residual is False:
            raise PlanError(
                "falcon's new_decoder_architecture always runs attention in parallel", "model.use_parallel_residual"
            )
    elif m.num_key_value_heads not in (1, m.num_attention_heads):
        raise PlanError(
            "falcon without new_decoder_architecture has 1 key/value head (multi_query) or num_attention_heads",
            "model.num_key_value_heads",
        )
