"""Mixture-of-experts and the structure beyond a plain block: the parameters a block's per-token linears do not show.

A decoder block's `Linear` list (`core.plan.architecture.arch`) describes the path one token takes: attention, then for
a mixture-of-experts layer the ``top_k`` routed experts (and the shared expert) as one gated MLP of width ``top_k *
moe_intermediate_size + shared``. FLOPs and saved activations read that path. The weights a token does not pass through
(the other ``E - top_k`` experts), the routers, the expert biases, per-head q/k norms, attention sinks and the
multi-head latent attention's low-rank projections are counted here, exactly, against the modules transformers builds
(read at v5.24; checked by tests/core/plan/test_model_types.py against ``AutoModelForCausalLM.from_config`` on the meta
device):

- mixtral ``MixtralSparseMoeBlock``: router ``gate`` Linear(h, E, bias=False), E SwiGLU experts of width
  ``intermediate_size``, no shared expert.
- qwen3_moe ``Qwen3MoeSparseMoeBlock``: router Linear(h, E), experts of width ``moe_intermediate_size``; a layer is
  sparse unless listed in ``mlp_only_layers`` or off the ``decoder_sparse_step``; dense layers use
  ``intermediate_size``.
- qwen2_moe ``Qwen2MoeSparseMoeBlock``: as qwen3_moe plus ``shared_expert`` (width
  ``shared_expert_intermediate_size``) and ``shared_expert_gate`` Linear(h, 1, bias=False).
- deepseek_v3 ``DeepseekV3MoE``: router weight [E, h] (its ``e_score_correction_bias`` is a buffer), shared experts
  of width ``n_shared_experts * moe_intermediate_size``; the first ``first_k_dense_replace`` layers are dense.
  ``DeepseekV3Attention`` (MLA): q_a_proj h -> q_lora, q_a_layernorm, q_b_proj q_lora -> a (nope + rope),
  kv_a_proj_with_mqa h -> kv_lora + rope, kv_a_layernorm, kv_b_proj kv_lora -> a (nope + v), o_proj a v -> h.
  The multi-token-prediction module (``num_nextn_predict_layers``) is not built by transformers; its size is given
  separately (DeepSeek-V3 README_WEIGHTS.md: block + enorm + hnorm + eh_proj 2h -> h + shared_head.norm).
- gpt_oss ``GptOssMLP``: router Linear(h, E) with bias, experts ``gate_up_proj`` [E, h, 2f] + bias [E, 2f] and
  ``down_proj`` [E, f, h] + bias [E, h]; ``GptOssAttention.sinks`` [a] per layer.
"""

from __future__ import annotations

from typing import NamedTuple


class Moe(NamedTuple):
    """The routed experts of a mixture-of-experts model (every MoE layer alike)."""

    n_experts: int  # E, routed experts per MoE layer
    top_k: int  # experts each token is routed to
    expert_f: int  # one expert's intermediate width
    shared_f: int  # shared expert(s) width summed (0: none)
    moe_layers: int  # layers with routed experts (the others are dense)
    expert_bias: bool = False  # gpt-oss: biases on the experts' projections
    router_bias: bool = False  # gpt-oss
    shared_gate: bool = False  # qwen2_moe: a sigmoid gate h -> 1 on the shared expert
    dense_f: int = 0  # intermediate_size of the layers that stay dense (DeepSeek-V3's first_k_dense_replace)

    @property
    def active_f(self) -> int:
        """Width of the gated MLP a token passes through in an MoE layer: top_k experts and the shared ones."""
        return self.top_k * self.expert_f + self.shared_f

    def expert_weight_params(self, h: int) -> int:
        """One routed expert's weights: gate, up (h -> f) and down (f -> h)."""
        return 3 * h * self.expert_f

    def expert_bias_params(self, h: int) -> int:
        return 2 * self.expert_f + h if self.expert_bias else 0

    def router_params(self, h: int) -> int:
        """Router (and the shared expert's gate) of one MoE layer."""
        return self.n_experts * h + (self.n_experts if self.router_bias else 0) + (h if self.shared_gate else 0)

    def active_extra_per_layer(self, h: int) -> int:
        """What a token passes through in one MoE layer beyond the active-path linears: router, top_k experts'
        biases."""
        return self.router_params(h) + self.top_k * self.expert_bias_params(h)

    def inactive_per_layer(self, h: int) -> int:
        """The E - top_k experts a token does not pass through, in one MoE layer."""
        return (self.n_experts - self.top_k) * (self.expert_weight_params(h) + self.expert_bias_params(h))

    def expert_params(self, h: int) -> int:
        """All routed experts' parameters, every MoE layer: what expert parallelism shards."""
        return self.moe_layers * self.n_experts * (self.expert_weight_params(h) + self.expert_bias_params(h))


class Mla(NamedTuple):
    """DeepSeek's multi-head latent attention sizes (``q_lora`` 0: a plain q_proj)."""

    q_lora: int
    kv_lora: int
    nope: int  # qk_nope_head_dim
    rope: int  # qk_rope_head_dim
    v: int  # v_head_dim

    @property
    def qk_head(self) -> int:
        return self.nope + self.rope

    def params(self, h: int, a: int) -> int:
        """One layer's MLA parameters (no biases: DeepSeek-V3's attention_bias is false)."""
        q = h * a * self.qk_head if not self.q_lora else h * self.q_lora + self.q_lora + self.q_lora * a * self.qk_head
        kv = h * (self.kv_lora + self.rope) + self.kv_lora + self.kv_lora * a * (self.nope + self.v)
        return q + kv + a * self.v * h


def mtp_params(layer_params: int, h: int, n_layers: int) -> int:
    """DeepSeek-V3's multi-token-prediction module(s), beyond the shared embedding and head: a full MoE block,
    enorm and hnorm (h each), eh_proj (2h -> h, no bias) and shared_head.norm (h) per module."""
    return n_layers * (layer_params + 3 * h + 2 * h * h)
