"""The parameters of the state-space and linear-attention hybrids, counted exactly as transformers builds them (read at
v5.25; `tests/core/plan/test_hybrid.py` checks each against ``AutoModelForCausalLM.from_config`` on the meta
device). Their blocks' activations are not modelled yet, so a config of them is refused with this count and that
reason (`core.plan.architecture.hf_config`), rather than estimated as if its blocks were attention.

- mamba2 (``models/mamba2/modeling_mamba2.py`` Mamba2Mixer): I = expand x h, conv_dim = I + 2 groups state;
  ``in_proj`` h -> I + conv_dim + heads, a depthwise ``conv1d`` over conv_dim (kernel, bias), ``dt_bias``, ``A_log``
  and ``D`` of one value per head, the gated RMSNorm (I), ``out_proj`` I -> h (biases with ``use_bias``); one
  RMSNorm per block, ``norm_f``, untied lm_head by default.
- nemotron_h (``models/nemotron_h/modeling_nemotron_h.py``): a block is one norm and one mixer, its kind from
  ``layers_block_type`` (or the legacy ``hybrid_override_pattern``: M Mamba2, * attention, - MLP, E MoE). The
  Mamba2 mixer as above with I = mamba_num_heads x mamba_head_dim; attention q/k/v/o (never biased); the MLP
  up/down (relu2, not gated); the MoE: a router [E, h], E experts up/down of ``moe_intermediate_size`` over h (or over
  ``moe_latent_size``, with h -> latent -> h projections) and a shared up/down of
  ``moe_shared_expert_intermediate_size``.
- jamba (``models/jamba/modeling_jamba.py``): attention on layers i % attn_layer_period == attn_layer_offset, a
  Mamba (1) mixer on the others: I = mamba_expand x h, ``in_proj`` h -> 2 I, ``conv1d`` I (kernel, bias),
  ``x_proj`` I -> dt_rank + 2 state, ``dt_proj`` dt_rank -> I with bias, ``A_log`` [I, state], ``D`` [I],
  ``out_proj`` I -> h, RMSNorms of dt_rank, state, state (dt_rank "auto": ceil(h / 16)); experts on layers
  i % expert_layer_period == expert_layer_offset (router [E, h], E SwiGLU experts), a dense SwiGLU elsewhere; two
  norms per block.
- qwen3_next (``models/qwen3_next/modeling_qwen3_next.py``): Gated DeltaNet on the ``linear_attention`` layers
  (every ``full_attention_interval``-th is full): ``in_proj_qkvz`` h -> 2 key_dim + 2 value_dim, ``in_proj_ba``
  h -> 2 v_heads, ``conv1d`` over 2 key_dim + value_dim (no bias), ``dt_bias`` and ``A_log`` per v head, a gated
  RMSNorm of the v head dim, ``out_proj``; full attention with a gated query (q_proj h -> 2 a d) and q/k norms;
  Qwen-MoE experts (``decoder_sparse_step``, ``mlp_only_layers``) with a gated shared expert.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

from vramplan.core.plan.architecture.hf_keys import ConfigKeys
from vramplan.core.plan.helpers.errors import PlanError, shown

# What each refused hybrid is, in words
HYBRIDS: dict[str, str] = {
    "mamba2": "a Mamba2 state-space model",
    "nemotron_h": "a hybrid of Mamba2, attention and MLP or MoE blocks",
    "jamba": "a hybrid of Mamba and attention blocks with experts",
    "qwen3_next": "a hybrid of Gated DeltaNet and gated attention blocks with experts",
}
_PATTERN = {"M": "linear_attention", "E": "moe", "*": "full_attention", "-": "mlp"}
_LEGACY = {"mamba": "linear_attention", "attention": "full_attention"}


class HybridCount(NamedTuple):
    """A hybrid's parameters and its blocks' kinds, in layer order."""

    total: int
    layers: tuple[str, ...]

    def kinds(self) -> str:
        """``"36 linear_attention, 12 full_attention"``."""
        seen: dict[str, int] = {}
        for kind in self.layers:
            seen[kind] = seen.get(kind, 0) + 1
        return ", ".join(f"{n} {kind}" for kind, n in seen.items())


def _ends(k: ConfigKeys, h: int, V: int) -> int:
    """Embedding, final norm and (untied) lm_head."""
    tied = k.flag("tie_word_embeddings", default=False)
    return V * h + h + (0 if tied else V * h)


def _mamba2_mixer(h: int, inner: int, heads: int, groups: int, state: int, kernel: int, bias: bool, cbias: bool) -> int:
    conv = inner + 2 * groups * state
    proj = inner + conv + heads
    return (
        h * proj
        + (proj if bias else 0)
        + conv * kernel
        + (conv if cbias else 0)
        + 3 * heads
        + inner
        + inner * h
        + (h if bias else 0)
    )


def _attention(h: int, a: int, kv: int, d: int, bias: bool, q_mult: int = 1) -> int:
    q, kvd = q_mult * a * d, kv * d
    return h * (q + 2 * kvd) + a * d * h + ((q + 2 * kvd + h) if bias else 0)


def _mamba2(k: ConfigKeys) -> HybridCount:
    h, V, L = k.count("hidden_size"), k.count("vocab_size"), k.count("num_hidden_layers")
    assert h and V and L
    inner = int(_number(k, "expand") * h)
    mixer = _mamba2_mixer(
        h, inner, _c(k, "num_heads"), _c(k, "n_groups"), _c(k, "state_size"), _c(k, "conv_kernel"),
        k.flag("use_bias"), k.flag("use_conv_bias"),
    )  # fmt: skip
    return HybridCount(_ends(k, h, V) + L * (mixer + h), ("linear_attention",) * L)


def _nemotron_h_layers(k: ConfigKeys) -> tuple[str, ...]:
    k.read.update(("layers_block_type", "layer_types", "hybrid_override_pattern", "num_hidden_layers"))
    types = k.raw.get("layers_block_type", k.raw.get("layer_types"))
    if types is None and "hybrid_override_pattern" in k.raw:
        pattern = k.raw["hybrid_override_pattern"]
        if not isinstance(pattern, str) or not pattern or any(ch not in _PATTERN for ch in pattern):
            raise PlanError(f"must be a string of M, *, - and E (got {shown(pattern)})", "hybrid_override_pattern")
        return tuple(_PATTERN[ch] for ch in pattern)
    if types is None:
        types = ["linear_attention", "moe", "full_attention", "mlp"]
    known = {*_PATTERN.values(), *_LEGACY}
    if not isinstance(types, list) or not types or not all(isinstance(t, str) and t in known for t in types):
        raise PlanError(f"must be a list of {', '.join(sorted(known))} (got {shown(types)})", "layers_block_type")
    return tuple(_LEGACY.get(t, t) for t in types)


def _nemotron_h(k: ConfigKeys) -> HybridCount:
    # one line per block kind: the kinds' sizes, each from its own keys (the config class's names, legacy ones first)
    h, V = _c(k, "hidden_size"), _c(k, "vocab_size")
    layers = _nemotron_h_layers(k)
    heads = _c(k, "mamba_num_heads")
    mamba = _mamba2_mixer(
        h, heads * _c(k, "mamba_head_dim"), heads, _c(k, "mamba_n_groups", "n_groups"), _c(k, "ssm_state_size"),
        _c(k, "mamba_d_conv", "conv_kernel"), k.flag("use_bias"), k.flag("mamba_conv_bias", "use_conv_bias"),
    )  # fmt: skip
    a, kv = _c(k, "num_attention_heads"), _c(k, "num_key_value_heads")
    k.read.add("attention_bias")  # NemotronHAttention builds q/k/v/o without biases whatever it says
    attention = _attention(h, a, kv, k.count("head_dim", default=None) or h // a, False)
    f, mb = _c(k, "intermediate_size"), k.flag("mlp_bias")
    mlp = 2 * h * f + ((f + h) if mb else 0)
    E, fe, fs = _c(k, "n_routed_experts"), _c(k, "moe_intermediate_size"), _c(k, "moe_shared_expert_intermediate_size")
    latent = k.count("moe_latent_size", default=None)
    width = latent or h
    moe = E * 2 * fe * width + E * h + 2 * h * fs + ((fs + h) if mb else 0)
    moe += (2 * h * latent + ((latent + h) if mb else 0)) if latent else 0
    per = {"linear_attention": mamba, "full_attention": attention, "mlp": mlp, "moe": moe}
    return HybridCount(_ends(k, h, V) + sum(per[t] + h for t in layers), layers)


def _jamba(k: ConfigKeys) -> HybridCount:
    h, V, L, f = _c(k, "hidden_size"), _c(k, "vocab_size"), _c(k, "num_hidden_layers"), _c(k, "intermediate_size")
    a, kv = _c(k, "num_attention_heads"), _c(k, "num_key_value_heads")
    inner, S, K = _c(k, "mamba_expand") * h, _c(k, "mamba_d_state"), _c(k, "mamba_d_conv")
    k.read.add("mamba_dt_rank")
    R = k.raw.get("mamba_dt_rank", "auto")
    R = math.ceil(h / 16) if R == "auto" or R is None else R
    if not isinstance(R, int) or isinstance(R, bool) or R < 1:
        raise PlanError(f'must be a positive integer or "auto" (got {shown(R)})', "mamba_dt_rank")
    pb, cb = k.flag("mamba_proj_bias"), k.flag("mamba_conv_bias")
    mamba = h * 2 * inner + (2 * inner if pb else 0) + inner * K + (inner if cb else 0) + inner * (R + 2 * S)
    mamba += R * inner + inner + inner * S + inner + inner * h + (h if pb else 0) + R + 2 * S
    attention = _attention(h, a, kv, h // a, False)
    E = _c(k, "num_experts")
    periods = (_c(k, "attn_layer_period"), _nonneg(k, "attn_layer_offset", 4), _c(k, "expert_layer_period"),
               _nonneg(k, "expert_layer_offset", 1))  # fmt: skip
    layers = tuple("full_attention" if i % periods[0] == periods[1] else "linear_attention" for i in range(L))
    total = _ends(k, h, V)
    for i, kind in enumerate(layers):
        ff = (E * h + E * 3 * h * f) if E > 1 and i % periods[2] == periods[3] else 3 * h * f
        total += (attention if kind == "full_attention" else mamba) + ff + 2 * h
    return HybridCount(total, layers)


def _qwen3_next(k: ConfigKeys) -> HybridCount:
    h, V, L, f = _c(k, "hidden_size"), _c(k, "vocab_size"), _c(k, "num_hidden_layers"), _c(k, "intermediate_size")
    a, kv, d = _c(k, "num_attention_heads"), _c(k, "num_key_value_heads"), _c(k, "head_dim")
    kh, kd, vh, vd = (_c(k, n) for n in ("linear_num_key_heads", "linear_key_head_dim", "linear_num_value_heads",
                                         "linear_value_head_dim"))  # fmt: skip
    key_dim, value_dim = kh * kd, vh * vd
    conv = 2 * key_dim + value_dim
    delta = h * (2 * key_dim + 2 * value_dim) + h * 2 * vh + conv * _c(k, "linear_conv_kernel_dim") + 2 * vh + vd
    delta += value_dim * h
    attention = _attention(h, a, kv, d, k.flag("attention_bias"), q_mult=2) + 2 * d
    E, fe, fs = _c(k, "num_experts"), _c(k, "moe_intermediate_size"), _c(k, "shared_expert_intermediate_size")
    step = _c(k, "decoder_sparse_step")
    k.read.update(("mlp_only_layers", "layer_types", "full_attention_interval"))
    only = k.raw.get("mlp_only_layers") or []
    types = k.raw.get("layer_types")
    if types is None:
        every = k.raw.get("full_attention_interval", 4)
        if not isinstance(every, int) or isinstance(every, bool) or every < 1:
            raise PlanError(f"must be a positive integer (got {shown(every)})", "full_attention_interval")
        types = ["linear_attention" if (i + 1) % every else "full_attention" for i in range(L)]
    if not isinstance(types, list) or not all(t in ("linear_attention", "full_attention") for t in types):
        raise PlanError(f"must be a list of linear_attention and full_attention (got {shown(types)})", "layer_types")
    if not isinstance(only, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in only):
        raise PlanError(f"must be a list of layer indices (got {shown(only)})", "mlp_only_layers")
    layers = tuple(types[:L])
    total = _ends(k, h, V)
    for i, kind in enumerate(layers):
        sparse = i not in only and E > 0 and (i + 1) % step == 0
        ff = E * h + E * 3 * h * fe + 3 * h * fs + h if sparse else 3 * h * f
        total += (attention if kind == "full_attention" else delta) + ff + 2 * h
    return HybridCount(total, layers)


def _c(k: ConfigKeys, *names: str) -> int:
    v = k.count(*names)
    assert v is not None
    return v


def _nonneg(k: ConfigKeys, name: str, default: int) -> int:
    """JambaConfig's layer offsets (attention 4, experts 1 by default)."""
    v = k.raw.get(name, default)
    k.read.add(name)
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise PlanError(f"must be a non-negative integer (got {shown(v)})", name)
    return v


def _number(k: ConfigKeys, name: str) -> float:
    k.read.add(name)
    v = k.raw.get(name, 2)
    if not isinstance(v, int | float) or isinstance(v, bool) or not 0 < v <= 64:
        raise PlanError(f"must be a positive number (got {shown(v)})", name)
    return float(v)


COUNTERS: dict[str, Callable[[ConfigKeys], HybridCount]] = {
    "mamba2": _mamba2,
    "nemotron_h": _nemotron_h,
    "jamba": _jamba,
    "qwen3_next": _qwen3_next,
}


def hybrid_params(raw: dict[str, Any]) -> HybridCount:
    """A hybrid config.json's parameter count (its ``model_type`` one of `HYBRIDS`); a `PlanError` names a bad key."""
    mt = raw["model_type"]
    return COUNTERS[mt](ConfigKeys(raw, mt))
