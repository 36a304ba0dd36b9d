"""Architecture -> block structure and exact parameter counts.

Each supported Hugging Face ``model_type`` is a `Family`: which norm, which MLP, fused or separate q/k/v, which
linears carry a bias, whether there is a norm after the embedding. From a family and the config's sizes we build
the list of linear layers of one decoder block; parameter counts, LoRA counts, FLOPs and the activation model all
read that one list, so they cannot disagree.

Sources (the modules transformers builds, read at v5.24):
- llama / mistral: ``models/llama/modeling_llama.py`` (LlamaAttention q/k/v/o without bias, LlamaMLP
  gate/up/down, two LlamaRMSNorm per layer, untied lm_head by default).
- qwen2: ``models/qwen2/modeling_qwen2.py`` (as llama, plus biases on q/k/v: ``bias=True``).
- bloom: ``models/bloom/modeling_bloom.py`` (fused ``query_key_value`` 3h with bias, ``dense`` with bias, MLP
  h -> 4h -> h with biases and GELU, LayerNorm with bias, ``word_embeddings_layernorm``, tied lm_head).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Literal

Role = Literal["q", "k", "v", "o", "gate", "up", "down", "qkv"]
ALL_ROLES: tuple[str, ...] = ("q", "k", "v", "o", "gate", "up", "down", "qkv")


@dataclass(frozen=True, slots=True)
class Family:
    model_type: str
    label: str
    norm: Literal["rms", "layer"]
    gated_mlp: bool  # SwiGLU: gate, up, down (SiLU); else up, down (GELU)
    fused_qkv: bool
    qkv_bias: bool
    out_bias: bool  # o / dense projection
    mlp_bias: bool
    embed_norm: bool  # a norm right after the token embedding (BLOOM)
    positional: Literal["rope", "alibi"]
    fixed_mlp_ratio: int | None  # BLOOM's MLP is always 4h
    default_tied: bool
    source: str


FAMILIES: dict[str, Family] = {
    "llama": Family(
        "llama",
        "LLaMA",
        "rms",
        True,
        False,
        False,
        False,
        False,
        False,
        "rope",
        None,
        False,
        "transformers models/llama/modeling_llama.py",
    ),
    "mistral": Family(
        "mistral",
        "Mistral",
        "rms",
        True,
        False,
        False,
        False,
        False,
        False,
        "rope",
        None,
        False,
        "transformers models/mistral/modeling_mistral.py (llama block; sliding window does not change memory "
        "of a training step at seq_len <= window)",
    ),
    "qwen2": Family(
        "qwen2",
        "Qwen2",
        "rms",
        True,
        False,
        True,
        False,
        False,
        False,
        "rope",
        None,
        False,
        "transformers models/qwen2/modeling_qwen2.py (q/k/v with bias)",
    ),
    "bloom": Family(
        "bloom",
        "BLOOM",
        "layer",
        False,
        True,
        True,
        True,
        True,
        True,
        "alibi",
        4,
        True,
        "transformers models/bloom/modeling_bloom.py (fused query_key_value, LayerNorm, 4h GELU MLP, ALiBi)",
    ),
}


def family(model_type: str) -> Family:
    return FAMILIES[model_type]


@dataclass(frozen=True, slots=True)
class Linear:
    role: str
    d_in: int
    d_out: int
    bias: bool

    @property
    def weight_params(self) -> int:
        return self.d_in * self.d_out

    @property
    def params(self) -> int:
        return self.d_in * self.d_out + (self.d_out if self.bias else 0)


@dataclass(frozen=True, eq=False)
class Arch:
    """The sizes of one model, with the family's structure applied; derived sums are computed once.

    Instances are canonical (`build_arch` caches them), so identity is equality and hashing is cheap."""

    fam: Family
    V: int  # vocab_size
    h: int  # hidden_size
    f: int  # intermediate_size
    L: int  # num_hidden_layers
    a: int  # num_attention_heads
    kv: int  # num_key_value_heads
    d: int  # head_dim
    tied: bool
    linears: tuple[Linear, ...]
    # derived (set in __post_init__)
    h_q: int = field(init=False)
    h_kv: int = field(init=False)
    norm_params: int = field(init=False)  # one norm: RMSNorm a weight, LayerNorm a weight and a bias
    layer_weight_params: int = field(init=False)  # the block's linear weights
    layer_bias_params: int = field(init=False)
    layer_norm_params: int = field(init=False)
    layer_params: int = field(init=False)
    embed_params: int = field(init=False)  # token embedding (+ BLOOM's word_embeddings_layernorm)
    head_params: int = field(init=False)  # final norm + an untied lm_head (a tied head reuses the embedding)
    total_params: int = field(init=False)
    max_linear_weight: int = field(init=False)
    by_role: dict[str, Linear] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        put = object.__setattr__
        norm = self.h if self.fam.norm == "rms" else 2 * self.h
        weights = sum(lin.weight_params for lin in self.linears)
        biases = sum(lin.params - lin.weight_params for lin in self.linears)
        layer = weights + biases + 2 * norm
        embed = self.V * self.h + (norm if self.fam.embed_norm else 0)
        head = norm + (0 if self.tied else self.V * self.h)
        for name, value in (
            ("h_q", self.a * self.d),
            ("h_kv", self.kv * self.d),
            ("norm_params", norm),
            ("layer_weight_params", weights),
            ("layer_bias_params", biases),
            ("layer_norm_params", 2 * norm),
            ("layer_params", layer),
            ("embed_params", embed),
            ("head_params", head),
            ("total_params", embed + self.L * layer + head),
            ("max_linear_weight", max(lin.weight_params for lin in self.linears)),
            ("by_role", {lin.role: lin for lin in self.linears}),
        ):
            put(self, name, value)

    @property
    def matmul_weight_params(self) -> int:
        """Weights that feed a matmul (decoder linears and the lm_head; not the embedding lookup or norms)."""
        return self.L * self.layer_weight_params + self.V * self.h

    def linear(self, role: str) -> Linear:
        return self.by_role[role]

    def roles(self) -> tuple[str, ...]:
        return tuple(self.by_role)


def block_linears(fam: Family, h: int, f: int, a: int, kv: int, d: int) -> tuple[Linear, ...]:
    """The linear layers of one decoder block, in forward order."""
    h_q, h_kv = a * d, kv * d
    if fam.fused_qkv:
        attn = [Linear("qkv", h, h_q + 2 * h_kv, fam.qkv_bias)]
    else:
        attn = [
            Linear("q", h, h_q, fam.qkv_bias),
            Linear("k", h, h_kv, fam.qkv_bias),
            Linear("v", h, h_kv, fam.qkv_bias),
        ]
    attn.append(Linear("o", h_q, h, fam.out_bias))
    if fam.gated_mlp:
        mlp = [Linear("gate", h, f, fam.mlp_bias), Linear("up", h, f, fam.mlp_bias), Linear("down", f, h, fam.mlp_bias)]
    else:
        mlp = [Linear("up", h, f, fam.mlp_bias), Linear("down", f, h, fam.mlp_bias)]
    return (*attn, *mlp)


@cache
def build_arch(
    model_type: str,
    vocab_size: int,
    hidden_size: int,
    intermediate_size: int,
    num_hidden_layers: int,
    num_attention_heads: int,
    num_key_value_heads: int,
    tie_word_embeddings: bool,
    head_dim: int | None = None,
) -> Arch:
    fam = FAMILIES[model_type]
    d = head_dim or hidden_size // num_attention_heads
    linears = block_linears(fam, hidden_size, intermediate_size, num_attention_heads, num_key_value_heads, d)
    return Arch(
        fam,
        vocab_size,
        hidden_size,
        intermediate_size,
        num_hidden_layers,
        num_attention_heads,
        num_key_value_heads,
        d,
        tie_word_embeddings,
        linears,
    )


def lora_roles(arch: Arch, targets: tuple[str, ...]) -> tuple[str, ...]:
    """The block's linear roles that LoRA adapts. ``all-linear`` is peft's: every linear in the blocks, not the
    output layer (peft ``tuners_utils._maybe_include_all_linear_layers`` excludes the lm_head)."""
    if "all-linear" in targets:
        return arch.roles()
    return tuple(role for role in arch.roles() if role in targets)


def lora_params_per_layer(arch: Arch, roles: tuple[str, ...], rank: int) -> int:
    """LoRA adds A (r x d_in) and B (d_out x r) per adapted linear: r * (d_in + d_out) (Hu et al. 2021, §4)."""
    return sum(rank * (lin.d_in + lin.d_out) for lin in arch.linears if lin.role in roles)
