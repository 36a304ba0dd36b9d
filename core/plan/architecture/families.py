"""The supported Hugging Face ``model_type``s as `Family` records: norm, MLP, fused or separate q/k/v, default
biases, positions, tying, and the structure beyond a plain block (see `core.plan.architecture.arch` for the sources and
how a family and a config's sizes become an `Arch`)."""

from __future__ import annotations

from typing import Literal, NamedTuple


class Family(NamedTuple):
    model_type: str
    label: str
    norm: Literal["rms", "rms_offset", "layer"]  # rms_offset: Gemma's RMSNorm, x * (1 + w) in fp32
    mlp: Literal["gated", "gated_fused", "plain"]  # gate/up/down; fused gate_up/down (Phi-3); up -> act -> down
    fused_qkv: bool
    qkv_bias: bool  # defaults; `attention_bias` / `mlp_bias` change them where `options` allows
    out_bias: bool  # o / dense projection
    mlp_bias: bool
    positional: Literal["rope", "alibi", "learned"]
    act: str
    default_tied: bool
    source: str
    gqa: bool = True  # may have fewer key/value heads than query heads
    embed_norm: bool = False  # a norm right after the token embedding (BLOOM)
    fixed_mlp_ratio: int | None = None  # BLOOM's MLP is always 4h
    parallel: bool = False  # attention and MLP both read the block input (GPT-NeoX, Falcon)
    norms_in_parallel: int = 2  # LayerNorms of a parallel block (Falcon's old architecture shares one)
    rotary_factor: float = 1.0  # fraction of head_dim that RoPE rotates (GPT-NeoX rotary_pct)
    max_positions: int = 0  # learned position embeddings: rows by default (GPT-2 n_positions)
    options: frozenset[str] = frozenset()  # OPTION_KEYS this family's config may set
    block_norms: int = 2  # norms per sequential block (Gemma 2/3: input, post-attention, pre- and post-MLP)
    qk_norm: Literal["", "head", "full", "head_layer"] = ""  # RMSNorm of q and k: per head (Qwen3, Gemma 3),
    # over the whole projection (OLMo 2), per-head LayerNorm with bias (Phi's qk_layernorm)
    lm_head_bias: bool = False  # Phi-1.5/2
    sinks: bool = False  # gpt-oss: one learned attention-sink logit per head and layer
    softcap: bool = False  # Gemma 2: attention logits soft-capped, cap * tanh(scores / cap)
    moe: bool = False  # routed experts (see core.plan.architecture.moe)
    mla: bool = False  # DeepSeek multi-head latent attention
    local_rope: bool = False  # Gemma 3: sliding layers use their own RoPE base (a second cos/sin pair)
    half_rope_table: bool = False  # gpt-oss: cos/sin hold d/2 frequencies, not duplicated to d
    router_softmax_topk: bool = False  # gpt-oss: top-k of the logits first, then a softmax over those k
    clamped_swiglu: bool = False  # gpt-oss: clamp(gate), clamp(up), gate * sigmoid(alpha gate) * (up + 1)
    all_experts: bool = False  # Llama 4: every routed expert runs on every token (sigmoid scores, 0 off the top-k)

    @property
    def gated(self) -> bool:
        return self.mlp != "plain"


_LLAMA_SRC = "transformers models/llama/modeling_llama.py"
FAMILIES: dict[str, Family] = {
    f.model_type: f
    for f in (
        Family(
            "llama", "LLaMA", "rms", "gated", False, False, False, False, "rope", "silu", False, _LLAMA_SRC,
            options=frozenset({"attention_bias", "mlp_bias", "partial_rotary_factor"}),
        ),
        Family(
            "mistral", "Mistral", "rms", "gated", False, False, False, False, "rope", "silu", False,
            "transformers models/mistral/modeling_mistral.py (llama block; sliding window does not change memory "
            "of a training step at seq_len <= window)",
        ),
        Family(
            "qwen2", "Qwen2", "rms", "gated", False, True, False, False, "rope", "silu", False,
            "transformers models/qwen2/modeling_qwen2.py (q/k/v with bias)",
        ),
        Family(
            "gemma", "Gemma", "rms_offset", "gated", False, False, False, False, "rope", "gelu_pytorch_tanh", True,
            "transformers models/gemma/modeling_gemma.py (GeGLU MLP, RMSNorm x * (1 + w) in fp32, tied embeddings)",
            options=frozenset({"attention_bias", "hidden_act"}),
        ),
        Family(
            "phi3", "Phi-3", "rms", "gated_fused", True, False, False, False, "rope", "silu", False,
            "transformers models/phi3/modeling_phi3.py (fused qkv_proj and gate_up_proj, no biases)",
            options=frozenset({"partial_rotary_factor"}),
        ),
        Family(
            "bloom", "BLOOM", "layer", "plain", True, True, True, True, "alibi", "gelu", True,
            "transformers models/bloom/modeling_bloom.py (fused query_key_value, LayerNorm, 4h GELU MLP, ALiBi)",
            gqa=False, embed_norm=True, fixed_mlp_ratio=4,
        ),
        Family(
            "gpt2", "GPT-2", "layer", "plain", True, True, True, True, "learned", "gelu_new", True,
            "transformers models/gpt2/modeling_gpt2.py (Conv1D c_attn/c_proj/c_fc with biases, learned positions)",
            gqa=False, max_positions=1024, options=frozenset({"hidden_act", "max_position_embeddings"}),
        ),
        Family(
            "gpt_neox", "GPT-NeoX", "layer", "plain", True, True, True, True, "rope", "gelu", False,
            "transformers models/gpt_neox/modeling_gpt_neox.py (fused query_key_value, parallel residual, "
            "partial RoPE)",
            gqa=False, parallel=True, rotary_factor=0.25,
            options=frozenset({"attention_bias", "use_parallel_residual", "hidden_act", "partial_rotary_factor"}),
        ),
        Family(
            "falcon", "Falcon", "layer", "plain", True, False, False, False, "rope", "gelu", True,
            "transformers models/falcon/modeling_falcon.py (fused query_key_value with multi-query or grouped "
            "heads, parallel attention, one shared LayerNorm)",
            parallel=True, norms_in_parallel=1,
            options=frozenset(
                {
                    "attention_bias",
                    "mlp_bias",
                    "use_parallel_residual",
                    "num_ln_in_parallel_attn",
                    "hidden_act",
                    "alibi",
                    "new_decoder_architecture",
                }
            ),
        ),
        Family(
            "qwen3", "Qwen3", "rms", "gated", False, False, False, False, "rope", "silu", False,
            "transformers models/qwen3/modeling_qwen3.py (llama block, per-head q_norm/k_norm, head_dim 128)",
            qk_norm="head", options=frozenset({"attention_bias"}),
        ),
        Family(
            "qwen3_moe", "Qwen3-MoE", "rms", "gated", False, False, False, False, "rope", "silu", False,
            "transformers models/qwen3_moe/modeling_qwen3_moe.py (Qwen3 attention, routed SwiGLU experts)",
            qk_norm="head", moe=True, options=frozenset({"attention_bias"}),
        ),
        Family(
            "qwen2_moe", "Qwen2-MoE", "rms", "gated", False, True, False, False, "rope", "silu", False,
            "transformers models/qwen2_moe/modeling_qwen2_moe.py (Qwen2 attention, routed experts, gated shared "
            "expert)",
            moe=True,
        ),
        Family(
            "mixtral", "Mixtral", "rms", "gated", False, False, False, False, "rope", "silu", False,
            "transformers models/mixtral/modeling_mixtral.py (Mistral attention, 8 SwiGLU experts, top-2)",
            moe=True,
        ),
        Family(
            "gemma2", "Gemma 2", "rms_offset", "gated", False, False, False, False, "rope", "gelu_pytorch_tanh", True,
            "transformers models/gemma2/modeling_gemma2.py (four RMSNorms per block, local/global attention, "
            "attention and final logit soft-capping)",
            block_norms=4, softcap=True, options=frozenset({"attention_bias", "hidden_act"}),
        ),
        Family(
            "gemma3_text", "Gemma 3", "rms_offset", "gated", False, False, False, False, "rope", "gelu_pytorch_tanh",
            True,
            "transformers models/gemma3/modeling_gemma3.py Gemma3ForCausalLM (Gemma 2 block, per-head q/k norms, "
            "five local layers per global one)",
            block_norms=4, qk_norm="head", local_rope=True, options=frozenset({"attention_bias", "hidden_act"}),
        ),
        Family(
            "olmo2", "OLMo 2", "rms", "gated", False, False, False, False, "rope", "silu", False,
            "transformers models/olmo2/modeling_olmo2.py (post-norms after attention and MLP, q/k RMSNorm over the "
            "whole projection)",
            qk_norm="full", options=frozenset({"attention_bias"}),
        ),
        Family(
            "phi", "Phi", "layer", "plain", False, True, True, True, "rope", "gelu_new", False,
            "transformers models/phi/modeling_phi.py (parallel attention and MLP under one LayerNorm, partial "
            "RoPE 0.5, biased linears and lm_head)",
            parallel=True, norms_in_parallel=1, rotary_factor=0.5, lm_head_bias=True, qk_norm="head_layer",
            options=frozenset({"hidden_act", "partial_rotary_factor"}),
        ),
        Family(
            "deepseek_v3", "DeepSeek-V3", "rms", "gated", False, False, False, False, "rope", "silu", False,
            "transformers models/deepseek_v3/modeling_deepseek_v3.py (multi-head latent attention, 256 routed "
            "experts top-8 + a shared expert, first 3 layers dense)",
            moe=True, mla=True,
        ),
        Family(
            "gpt_oss", "gpt-oss", "rms", "gated", False, True, True, False, "rope", "silu", False,
            "transformers models/gpt_oss/modeling_gpt_oss.py (biased attention with sinks, alternating "
            "sliding-window layers, routed experts with biases and clamped SwiGLU)",
            sinks=True, moe=True, half_rope_table=True, router_softmax_topk=True, clamped_swiglu=True,
        ),
        Family(
            "llama4_text", "Llama 4", "rms", "gated", False, False, False, False, "rope", "silu", False,
            "transformers models/llama4/modeling_llama4.py Llama4TextModel (llama attention, weightless q/k norm; "
            "MoE layers: a sigmoid top-k router, 3-D experts run on every token, a shared expert; dense layers of "
            "intermediate_size_mlp)",
            moe=True, all_experts=True, options=frozenset({"attention_bias"}),
        ),
    )
}  # fmt: skip


def family(model_type: str) -> Family:
    return FAMILIES[model_type]
