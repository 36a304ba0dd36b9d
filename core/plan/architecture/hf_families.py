"""config.json -> plan keys for the 2024-2025 families: Qwen3 (dense and MoE), Qwen2-MoE, Mixtral, Gemma 2/3,
OLMo 2, Phi-1.5/2, DeepSeek-V3 and gpt-oss (transformers' config classes read at v5.24; defaults in
`core.plan.architecture.hf_keys.DEFAULTS`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from vramplan.core.plan.architecture.hf_keys import ConfigKeys
from vramplan.core.plan.helpers.errors import PlanError, shown


def _sizes(k: ConfigKeys, *, kv_default: int | None = None) -> dict[str, Any]:
    a = k.count("num_attention_heads")
    return {
        "vocab_size": k.count("vocab_size"),
        "hidden_size": k.count("hidden_size"),
        "intermediate_size": k.count("intermediate_size"),
        "num_hidden_layers": k.count("num_hidden_layers"),
        "num_attention_heads": a,
        "num_key_value_heads": k.count("num_key_value_heads", default=kv_default or a),
    }


def window_keys(k: ConfigKeys, n_layers: int, default: int | None, every: int) -> dict[str, Any]:
    """``sliding_window`` and how many layers use it: from ``layer_types`` when given, else the family's pattern
    (Gemma 2: every other layer from the first, ``(i + 1) % 2``; Gemma 3: all but every ``every``-th; Mistral and
    gpt-oss: ``every`` = 0, all layers)."""
    k.read.update(("sliding_window", "layer_types", "sliding_window_pattern"))
    w = k.raw.get("sliding_window", default)
    if w is None or w == 0:
        return {}
    if not isinstance(w, int) or isinstance(w, bool) or w < 1:
        raise PlanError(f"must be a positive integer or null (got {shown(w)})", "sliding_window")
    types = k.raw.get("layer_types")
    if isinstance(types, list) and types:
        n = sum(1 for t in types[:n_layers] if t == "sliding_attention")
    else:
        pattern = k.raw.get("sliding_window_pattern", every)
        every = pattern if isinstance(pattern, int) and not isinstance(pattern, bool) and pattern > 0 else every
        n = n_layers - (n_layers // every if every else 0)
    return {"sliding_window": w, "sliding_layers": n}


def _qwen3(k: ConfigKeys) -> dict[str, Any]:
    """Qwen3Config: head_dim 128 (not h / a), untied unless the file ties (the small ones do)."""
    return {
        **_sizes(k),
        "head_dim": k.count("head_dim", default=128),
        "tie_word_embeddings": k.flag("tie_word_embeddings", default=False),
        "attention_bias": k.flag("attention_bias", default=False),
    }


def _dense_layers(k: ConfigKeys, n_layers: int) -> int:
    """Qwen MoE: layer i has experts unless it is in ``mlp_only_layers`` or (i + 1) % decoder_sparse_step != 0."""
    step = k.count("decoder_sparse_step", default=1) or 1
    only = k.raw.get("mlp_only_layers") or []
    k.read.add("mlp_only_layers")
    if not isinstance(only, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in only):
        raise PlanError(f"must be a list of layer indices (got {shown(only)})", "mlp_only_layers")
    return sum(1 for i in range(n_layers) if i in only or (i + 1) % step)


def _qwen3_moe(k: ConfigKeys) -> dict[str, Any]:
    """Qwen3MoeConfig: head_dim h / a unless given, 128 experts top-8 of width 768 by default."""
    out = {**_sizes(k), "tie_word_embeddings": k.flag("tie_word_embeddings", default=False)}
    d = k.count("head_dim", default=None)
    if d is not None:
        out["head_dim"] = d
    out["attention_bias"] = k.flag("attention_bias", default=False)
    out["num_experts"] = k.count("num_experts", "num_local_experts")
    out["num_experts_per_tok"] = k.count("num_experts_per_tok")
    out["moe_intermediate_size"] = k.count("moe_intermediate_size")
    out["dense_layers"] = _dense_layers(k, out["num_hidden_layers"])
    return out


def _qwen2_moe(k: ConfigKeys) -> dict[str, Any]:
    out = {**_sizes(k), "tie_word_embeddings": k.flag("tie_word_embeddings", default=False)}
    out["num_experts"] = k.count("num_experts")
    out["num_experts_per_tok"] = k.count("num_experts_per_tok")
    out["moe_intermediate_size"] = k.count("moe_intermediate_size")
    out["shared_expert_intermediate_size"] = k.count("shared_expert_intermediate_size")
    out["dense_layers"] = _dense_layers(k, out["num_hidden_layers"])
    return out


def _mixtral(k: ConfigKeys) -> dict[str, Any]:
    """MixtralConfig: 8 experts of width intermediate_size, top-2; head_dim h / a unless given."""
    out = {**_sizes(k), "tie_word_embeddings": k.flag("tie_word_embeddings", default=False)}
    d = k.count("head_dim", default=None)
    if d is not None:
        out["head_dim"] = d
    out["num_experts"] = k.count("num_local_experts")
    out["num_experts_per_tok"] = k.count("num_experts_per_tok")
    return out


def _gemma2(k: ConfigKeys) -> dict[str, Any]:
    """Gemma2Config / Gemma3TextConfig: head_dim 256, tied, GELU-tanh (``hidden_activation``)."""
    out = {**_sizes(k), "head_dim": k.count("head_dim", default=256)}
    out["tie_word_embeddings"] = k.flag("tie_word_embeddings", default=True)
    out["attention_bias"] = k.flag("attention_bias", default=False)
    out["hidden_act"] = k.act("hidden_activation", "hidden_act", default="gelu_pytorch_tanh")
    every = 2 if k.mt == "gemma2" else 6
    return out | window_keys(k, out["num_hidden_layers"], 4096, every)


def _olmo2(k: ConfigKeys) -> dict[str, Any]:
    return {
        **_sizes(k),
        "tie_word_embeddings": k.flag("tie_word_embeddings", default=False),
        "attention_bias": k.flag("attention_bias", default=False),
    }


def _phi(k: ConfigKeys) -> dict[str, Any]:
    """PhiConfig: parallel block under one LayerNorm, partial RoPE 0.5, gelu_new, biased lm_head."""
    return {
        **_sizes(k),
        "tie_word_embeddings": k.flag("tie_word_embeddings", default=False),
        "partial_rotary_factor": k.rotary("partial_rotary_factor", default=0.5),
        "hidden_act": k.act("hidden_act", default="gelu_new"),
        "qk_layernorm": k.flag("qk_layernorm", default=False),
    }


def _deepseek_v3(k: ConfigKeys) -> dict[str, Any]:
    """DeepseekV3Config: MLA (q_lora 1536, kv_lora 512, nope 128 + rope 64, v 128), 256 experts top-8 of width
    2048, one shared expert, the first 3 layers dense; ``num_nextn_predict_layers`` MTP module(s) stated apart."""
    out = {**_sizes(k), "tie_word_embeddings": k.flag("tie_word_embeddings", default=False)}
    if k.flag("attention_bias", default=False):
        raise PlanError("a biased latent attention is not modelled", "attention_bias")
    moe_f = k.count("moe_intermediate_size")
    out["num_experts"] = k.count("n_routed_experts")
    out["num_experts_per_tok"] = k.count("num_experts_per_tok")
    out["moe_intermediate_size"] = moe_f
    out["shared_expert_intermediate_size"] = (k.count("n_shared_experts", default=1) or 0) * moe_f  # type: ignore[operator]
    out["dense_layers"] = min(_nonneg(k, "first_k_dense_replace", 3), out["num_hidden_layers"])
    out["q_lora_rank"] = _nonneg(k, "q_lora_rank", 1536)
    out["kv_lora_rank"] = k.count("kv_lora_rank", default=512)
    out["qk_nope_head_dim"] = k.count("qk_nope_head_dim", default=128)
    out["qk_rope_head_dim"] = k.count("qk_rope_head_dim", default=64)
    out["v_head_dim"] = k.count("v_head_dim", default=128)
    out["mtp_layers"] = _nonneg(k, "num_nextn_predict_layers", 1)
    return out


def _nonneg(k: ConfigKeys, name: str, default: int) -> int:
    k.read.add(name)
    v = k.raw.get(name, default)
    v = default if v is None and name != "q_lora_rank" else (v or 0)
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise PlanError(f"must be a non-negative integer (got {shown(v)})", name)
    return v


def _gpt_oss(k: ConfigKeys) -> dict[str, Any]:
    """GptOssConfig: 64 heads of 64, 8 key/value heads, biased attention with sinks, experts of width
    intermediate_size with biases, top-4 (``experts_per_token`` is the original name)."""
    out = {**_sizes(k), "head_dim": k.count("head_dim", default=64)}
    out["tie_word_embeddings"] = k.flag("tie_word_embeddings", default=False)
    out["attention_bias"] = k.flag("attention_bias", default=True)
    out["num_experts"] = k.count("num_local_experts")
    out["num_experts_per_tok"] = k.count("num_experts_per_tok", "experts_per_token")
    return out | window_keys(k, out["num_hidden_layers"], 128, 2)


def _llama4_text(k: ConfigKeys) -> dict[str, Any]:
    """Llama4TextConfig: experts and the shared expert of width ``intermediate_size``, dense layers of width
    ``intermediate_size_mlp``; the MoE layers are ``moe_layers``, else every ``interleave_moe_layer_step``-th from
    step - 1 (its ``__post_init__``); head_dim 128; untied."""
    sizes = _sizes(k)
    n_layers = sizes["num_hidden_layers"]
    expert_f = sizes["intermediate_size"]
    out = {**sizes, "intermediate_size": k.count("intermediate_size_mlp"), "head_dim": k.count("head_dim")}
    out["tie_word_embeddings"] = k.flag("tie_word_embeddings", default=False)
    out["attention_bias"] = k.flag("attention_bias", default=False)
    out["num_experts"] = k.count("num_local_experts")
    out["num_experts_per_tok"] = k.count("num_experts_per_tok")
    out["moe_intermediate_size"] = expert_f
    out["shared_expert_intermediate_size"] = expert_f
    k.read.update(("moe_layers", "interleave_moe_layer_step"))
    moe = k.raw.get("moe_layers")
    if moe is None:
        step = k.count("interleave_moe_layer_step", default=1) or 1
        moe = list(range(step - 1, n_layers, step))
    if not isinstance(moe, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in moe):
        raise PlanError(f"must be a list of layer indices (got {shown(moe)})", "moe_layers")
    out["dense_layers"] = n_layers - len({i for i in moe if 0 <= i < n_layers})
    return out


NEW_MAPPERS: dict[str, Callable[[ConfigKeys], dict[str, Any]]] = {
    "qwen3": _qwen3,
    "qwen3_moe": _qwen3_moe,
    "qwen2_moe": _qwen2_moe,
    "mixtral": _mixtral,
    "gemma2": _gemma2,
    "gemma3_text": _gemma2,
    "olmo2": _olmo2,
    "phi": _phi,
    "deepseek_v3": _deepseek_v3,
    "gpt_oss": _gpt_oss,
    "llama4_text": _llama4_text,
}
