"""The plan's ``[model]`` table: the architecture, with Hugging Face ``config.json`` key names.

``preset`` (a model preset) or ``hf_config`` (a local config.json, `core.hfconfig`) fills every key not given; the
structural keys beyond the sizes (biases, parallel residual, activation, partial RoPE, learned positions, Falcon's
architecture flags) default to the family's and may only be set where the family's config has them.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, field_validator, model_validator

from core import presets
from core.arch import ACTIVATIONS, FAMILIES, OPTION_KEYS, Arch, Family, build_arch
from core.errors import PlanError
from core.paths import user_path

_FROZEN = ConfigDict(frozen=True, extra="forbid")


class ModelConfig(BaseModel):
    """Architecture, with Hugging Face ``config.json`` key names. ``preset`` or ``hf_config`` (a local config.json
    or a checkpoint directory holding one) fills every key not given."""

    model_config = _FROZEN

    preset: str | None = None
    hf_config: str | None = None
    model_type: str
    vocab_size: PositiveInt
    hidden_size: PositiveInt
    intermediate_size: PositiveInt
    num_hidden_layers: PositiveInt
    num_attention_heads: PositiveInt
    num_key_value_heads: PositiveInt
    tie_word_embeddings: bool
    head_dim: PositiveInt | None = None
    # structure beyond the sizes (None: the family's default; see core.arch.FAMILIES)
    attention_bias: bool | None = None
    mlp_bias: bool | None = None
    use_parallel_residual: bool | None = Field(default=None, description="GPT-NeoX; Falcon's parallel_attn")
    num_ln_in_parallel_attn: int | None = Field(default=None, ge=1, le=2, description="Falcon: 1 or 2 LayerNorms")
    hidden_act: str | None = None
    partial_rotary_factor: float | None = Field(default=None, gt=0, le=1, description="GPT-NeoX rotary_pct")
    max_position_embeddings: PositiveInt | None = Field(default=None, description="GPT-2 n_positions")
    alibi: bool | None = None
    new_decoder_architecture: bool | None = None

    @model_validator(mode="before")
    @classmethod
    def _fill_from_preset(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("preset"), str):
            base = presets.model_preset(data["preset"]).config
            if data.get("hf_config") is not None and data["hf_config"] != base.get("hf_config"):
                raise PlanError("give preset or hf_config, not both", "model.hf_config")
            data = {**base, **data}
        if isinstance(data, dict) and isinstance(data.get("hf_config"), str):
            from core.hfconfig import read_hf_config

            path = str(user_path(data["hf_config"]).absolute())  # relative: to the working directory
            try:
                base = read_hf_config(path).model
            except PlanError as exc:
                raise PlanError(exc.line(), "model.hf_config") from None
            data = {**base, **data, "hf_config": path}
        if isinstance(data, dict) and "num_key_value_heads" not in data and "num_attention_heads" in data:
            data = {**data, "num_key_value_heads": data["num_attention_heads"]}  # HF default: MHA
        if isinstance(data, dict) and "tie_word_embeddings" not in data and data.get("model_type") in FAMILIES:
            data = {**data, "tie_word_embeddings": FAMILIES[data["model_type"]].default_tied}
        return data

    @field_validator("model_type")
    @classmethod
    def _known_family(cls, v: str) -> str:
        if v not in FAMILIES:
            raise ValueError(f"unsupported model_type {v!r}; supported: {', '.join(FAMILIES)}")
        return v

    @field_validator("hidden_act")
    @classmethod
    def _known_act(cls, v: str | None) -> str | None:
        if v is not None and v not in ACTIVATIONS:
            raise ValueError(f"activation {v!r} is not modelled; supported: {', '.join(ACTIVATIONS)}")
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
        return self

    def arch(self) -> Arch:
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
            **{key: getattr(self, key) for key in OPTION_KEYS},
        )


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


def model_base(model: ModelConfig) -> tuple[str, dict[str, Any]] | None:
    """The name and keys a model starts from: its preset's, or its config.json's (None: a custom model, or a
    config.json that can no longer be read)."""
    from core.hfconfig import read_hf_config

    try:
        if model.preset is not None:
            mp = presets.model_preset(model.preset)
            keys = dict(mp.config)
            if isinstance(keys.get("hf_config"), str):  # a user preset made of a config.json
                keys = {**read_hf_config(keys["hf_config"]).model, **keys}
            return mp.name, keys
        if model.hf_config is not None:
            hf = read_hf_config(model.hf_config)
            return hf.name, hf.model
    except PlanError:
        return None
    return None


def modified_keys(model: ModelConfig, base: tuple[str, dict[str, Any]] | None = None) -> list[str]:
    """Model keys that differ from the model's preset or config.json (a custom model built from one); `base`:
    `model_base(model)` when the caller has it."""
    base = base or model_base(model)
    if base is None:
        return []
    keys = base[1]
    dumped = model.model_dump(exclude_none=True)
    skip = ("preset", "hf_config")
    return [k for k, v in dumped.items() if k not in skip and k in keys and keys[k] != v] + [
        k for k in dumped if k not in keys and k not in skip
    ]


def model_name(model: ModelConfig) -> str:
    """``LLaMA-7B``, ``tiiuae/falcon-7b (modified)``, ``custom llama``: the model as the planner and exports name it."""
    base = model_base(model)
    if base is None:
        return f"custom {model.model_type}"
    return f"{base[0]} (modified)" if modified_keys(model, base) else base[0]
