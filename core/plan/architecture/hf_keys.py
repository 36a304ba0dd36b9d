"""Typed access to the keys of a config.json, with the defaults of each family's transformers config class.

A size the file leaves out takes the default of the family's ``PretrainedConfig`` subclass (read at v5.24 with
``AutoConfig.for_model(model_type).to_dict()``), as ``AutoModelForCausalLM.from_config`` would build it. Keys no
mapper reads and that do not change the parameters or the saved tensors are listed by `ignored_keys` so the plan
can say it ignored them.
"""

from __future__ import annotations

from typing import Any

from vramplan.core.plan.architecture.arch import ACTIVATIONS
from vramplan.core.plan.helpers.errors import PlanError, shown

MISSING = object()

# the sizes each transformers config class defaults (AutoConfig.for_model(mt).to_dict(), transformers 5.24)
_SIZES = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
DEFAULTS: dict[str, dict[str, Any]] = {
    "llama": dict(zip(_SIZES, (32000, 4096, 11008, 32, 32), strict=True)),
    "mistral": {**dict(zip(_SIZES, (32000, 4096, 14336, 32, 32), strict=True)), "num_key_value_heads": 8},
    "qwen2": {**dict(zip(_SIZES, (151936, 4096, 22016, 32, 32), strict=True)), "num_key_value_heads": 32},
    "gemma": {**dict(zip(_SIZES, (256000, 3072, 24576, 28, 16), strict=True)), "num_key_value_heads": 16},
    "phi3": dict(zip(_SIZES, (32064, 3072, 8192, 32, 32), strict=True)),
    "bloom": {"vocab_size": 250880, "hidden_size": 64, "n_layer": 2, "n_head": 8},
    "gpt2": {"vocab_size": 50257, "n_embd": 768, "n_layer": 12, "n_head": 12},
    "gpt_neox": dict(zip(_SIZES, (50432, 6144, 24576, 44, 64), strict=True)),
    "falcon": {"vocab_size": 65024, "hidden_size": 4544, "num_hidden_layers": 32, "num_attention_heads": 71},
    "qwen3": {**dict(zip(_SIZES, (151936, 4096, 22016, 32, 32), strict=True)), "num_key_value_heads": 32},
    "qwen3_moe": {
        **dict(zip(_SIZES, (151936, 2048, 6144, 24, 32), strict=True)),
        "num_key_value_heads": 4,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "moe_intermediate_size": 768,
    },
    "qwen2_moe": {
        **dict(zip(_SIZES, (151936, 2048, 5632, 24, 16), strict=True)),
        "num_key_value_heads": 16,
        "num_experts": 60,
        "num_experts_per_tok": 4,
        "moe_intermediate_size": 1408,
        "shared_expert_intermediate_size": 5632,
    },
    "mixtral": {
        **dict(zip(_SIZES, (32000, 4096, 14336, 32, 32), strict=True)),
        "num_key_value_heads": 8,
        "num_local_experts": 8,
        "num_experts_per_tok": 2,
    },
    "gemma2": {**dict(zip(_SIZES, (256000, 2304, 9216, 26, 8), strict=True)), "num_key_value_heads": 4},
    "gemma3_text": {**dict(zip(_SIZES, (262208, 2304, 9216, 26, 8), strict=True)), "num_key_value_heads": 4},
    "olmo2": dict(zip(_SIZES, (50304, 4096, 11008, 32, 32), strict=True)),
    "phi": dict(zip(_SIZES, (51200, 2048, 8192, 24, 32), strict=True)),
    "deepseek_v3": {
        **dict(zip(_SIZES, (129280, 7168, 18432, 61, 128), strict=True)),
        "num_key_value_heads": 128,
        "n_routed_experts": 256,
        "num_experts_per_tok": 8,
        "moe_intermediate_size": 2048,
    },
    "llama4_text": {
        **dict(zip(_SIZES, (202048, 5120, 8192, 48, 40), strict=True)),
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size_mlp": 16384,
        "num_local_experts": 16,
        "num_experts_per_tok": 1,
    },
    "gpt_oss": {
        **dict(zip(_SIZES, (201088, 2880, 2880, 36, 64), strict=True)),
        "num_key_value_heads": 8,
        "num_local_experts": 128,
        "num_experts_per_tok": 4,
    },
    # the hybrids whose parameters are counted (core.plan.architecture.hybrid), not yet estimated
    "mamba2": {
        "vocab_size": 32768,
        "hidden_size": 4096,
        "num_hidden_layers": 64,
        "num_heads": 128,
        "n_groups": 8,
        "state_size": 128,
        "conv_kernel": 4,
        "use_bias": False,
        "use_conv_bias": True,
        "tie_word_embeddings": False,
    },
    "nemotron_h": {
        "vocab_size": 131072,
        "hidden_size": 4096,
        "mamba_num_heads": 128,
        "mamba_head_dim": 64,
        "n_groups": 8,
        "ssm_state_size": 128,
        "conv_kernel": 4,
        "use_bias": False,
        "use_conv_bias": True,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "attention_bias": False,
        "intermediate_size": 21504,
        "mlp_bias": False,
        "n_routed_experts": 8,
        "moe_intermediate_size": 7688,
        "moe_shared_expert_intermediate_size": 7688,
        "tie_word_embeddings": False,
    },
    "jamba": {
        "vocab_size": 65536,
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "mamba_expand": 2,
        "mamba_d_state": 16,
        "mamba_d_conv": 4,
        "mamba_proj_bias": False,
        "mamba_conv_bias": True,
        "num_experts": 16,
        "attn_layer_period": 8,
        "expert_layer_period": 2,
        "tie_word_embeddings": False,
    },
    "qwen3_next": {
        "vocab_size": 151936,
        "hidden_size": 2048,
        "num_hidden_layers": 48,
        "intermediate_size": 5632,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "linear_num_key_heads": 16,
        "linear_key_head_dim": 128,
        "linear_num_value_heads": 32,
        "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4,
        "attention_bias": False,
        "num_experts": 512,
        "moe_intermediate_size": 512,
        "shared_expert_intermediate_size": 512,
        "decoder_sparse_step": 1,
        "tie_word_embeddings": False,
    },
}

# keys that change neither the parameters nor what a training step saves (tokens, init, inference, rope values,
# norm epsilons, dropout probabilities at 0, bookkeeping)
HARMLESS: frozenset[str] = frozenset(
    {
        "_name_or_path", "_source", "architectures", "auto_map", "bos_token_id", "eos_token_id", "pad_token_id",
        "sep_token_id", "decoder_start_token_id", "initializer_range", "init_std", "initializer_factor",
        "use_cache", "torch_dtype", "dtype", "transformers_version", "model_type", "rms_norm_eps",
        "layer_norm_eps", "layer_norm_epsilon", "norm_eps", "rope_theta", "rope_scaling", "rope_parameters",
        "max_position_embeddings", "original_max_position_embeddings", "attention_dropout", "hidden_dropout",
        "embd_pdrop", "resid_pdrop", "attn_pdrop", "summary_type", "summary_use_proj", "summary_activation",
        "summary_proj_to_labels", "summary_first_dropout", "quantization_config", "output_router_logits",
        "router_aux_loss_coef", "router_z_loss_coef", "norm_topk_prob", "scoring_func", "topk_method",
        "routed_scaling_factor", "n_group", "topk_group", "ep_size", "use_sliding_window", "max_window_layers",
        "sliding_window", "layer_types", "sliding_window_pattern", "query_pre_attn_scalar",
        "attn_logit_softcapping", "final_logit_softcapping", "swiglu_limit", "initial_context_length",
        "moe_layer_freq", "rope_local_base_freq", "use_bidirectional_attention", "pretraining_tp",
        "hidden_activation", "hidden_act", "attention_probs_dropout_prob", "hidden_dropout_prob",
        "router_jitter_noise", "mlp_only_layers", "decoder_sparse_step", "first_k_dense_replace",
        "num_nextn_predict_layers", "head_dim", "tie_word_embeddings", "experts_per_token",
        "_attn_implementation", "attn_implementation", "cache_implementation", "sliding_window_size",
        "interleave_moe_layer_step", "moe_layers", "intermediate_size_mlp", "no_rope_layers",
        "no_rope_layer_interval", "attn_temperature_tuning", "floor_scale", "attn_scale", "for_llm_compressor",
    }
)  # fmt: skip


def ignored_keys(raw: dict[str, Any], read: set[str]) -> tuple[str, ...]:
    """Keys of a config.json that no mapper read and that are not known to be harmless: ignored, with a note."""
    return tuple(sorted(k for k in raw if k not in read and k not in HARMLESS))


class ConfigKeys:
    """Typed access to config.json keys; errors name the key (and the family's other names for it)."""

    def __init__(self, raw: dict[str, Any], model_type: str) -> None:
        self.raw, self.mt = raw, model_type
        self.read: set[str] = set()  # keys asked for, present or not

    def _get(self, names: tuple[str, ...], default: Any) -> tuple[str, Any]:
        self.read.update(names)
        for n in names:
            if n in self.raw and self.raw[n] is not None:
                return n, self.raw[n]
        for n in names:  # the transformers config class's default
            if n in DEFAULTS.get(self.mt, {}):
                return n, DEFAULTS[self.mt][n]
        if default is MISSING:
            alt = f" (or {', '.join(repr(n) for n in names[1:])})" if len(names) > 1 else ""
            raise PlanError(f"missing key {names[0]!r}{alt}, needed for model_type {self.mt!r}")
        return names[0], default

    def count(self, *names: str, default: Any = MISSING) -> int | None:
        key, v = self._get(names, default)
        if v is None:
            return None
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise PlanError(f"must be a positive integer (got {shown(v)})", key)
        return v

    def flag(self, *names: str, default: Any = MISSING) -> bool:
        key, v = self._get(names, default)
        if not isinstance(v, bool):
            raise PlanError(f"must be true or false (got {shown(v)})", key)
        return v

    def fraction(self, *names: str, default: Any = MISSING) -> float:
        key, v = self._get(names, default)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not 0 < v <= 1:
            raise PlanError(f"must be a number in (0, 1] (got {shown(v)})", key)
        return float(v)

    def act(self, *names: str, default: str) -> str:
        key, v = self._get(names, default)
        if not isinstance(v, str) or v not in ACTIVATIONS:
            raise PlanError(f"activation {shown(v)} is not modelled; supported: {', '.join(ACTIVATIONS)}", key)
        return str(v)

    def rotary(self, *names: str, default: float) -> float:
        """A partial-rotary fraction: a top-level key, or ``partial_rotary_factor`` inside rope_parameters."""
        for n in names:
            if n in self.raw and self.raw[n] is not None:
                return self.fraction(n)
        for nested in ("rope_parameters", "rope_scaling"):
            sub = self.raw.get(nested)
            if isinstance(sub, dict) and sub.get("partial_rotary_factor") is not None:
                return ConfigKeys(sub, self.mt).fraction("partial_rotary_factor")
        return default
