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

from dataclasses import dataclass
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


@dataclass(frozen=True, slots=True)
class Arch:
    """The sizes of one model, with the family's structure applied. Built once per plan."""

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

    @property
    def h_q(self) -> int:
        return self.a * self.d

    @property
    def h_kv(self) -> int:
        return self.kv * self.d

    @property
    def norm_params(self) -> int:
        """One norm's parameters: RMSNorm has a weight, LayerNorm a weight and a bias."""
        return self.h if self.fam.norm == "rms" else 2 * self.h

    @property
    def layer_norm_params(self) -> int:
        return 2 * self.norm_params

    @property
    def layer_linear_params(self) -> int:
        return sum(lin.params for lin in self.linears)

    @property
    def layer_params(self) -> int:
        return self.layer_linear_params + self.layer_norm_params

    @property
    def embed_params(self) -> int:
        """Token embedding, plus BLOOM's word_embeddings_layernorm."""
        return self.V * self.h + (self.norm_params if self.fam.embed_norm else 0)

    @property
    def head_params(self) -> int:
        """Final norm plus an untied lm_head (a tied head reuses the embedding)."""
        return self.norm_params + (0 if self.tied else self.V * self.h)

    @property
    def total_params(self) -> int:
        return self.embed_params + self.L * self.layer_params + self.head_params

    @property
    def matmul_weight_params(self) -> int:
        """Weights that feed a matmul (decoder linears and the lm_head; not the embedding lookup or norms)."""
        return self.L * sum(lin.weight_params for lin in self.linears) + self.V * self.h

    def linear(self, role: str) -> Linear:
        for lin in self.linears:
            if lin.role == role:
                return lin
        raise KeyError(role)

    def roles(self) -> tuple[str, ...]:
        return tuple(lin.role for lin in self.linears)


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
