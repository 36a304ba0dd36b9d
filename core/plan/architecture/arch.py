"""Architecture -> block structure and exact parameter counts.

Each supported Hugging Face ``model_type`` is a `Family`: which norm, which MLP, fused or separate q/k/v, which
linears carry a bias by default, how positions are encoded, and which config keys may change that structure. From
a family, the config's sizes and those keys we build the list of linear layers of one decoder block; parameter
counts, LoRA counts, FLOPs and the activation model all read that one list, so they cannot disagree.

Sources (the modules transformers builds, read at v5.24; every count is checked against
``AutoModelForCausalLM.from_config`` on the meta device by bench/measure/check_params.py):
- llama / mistral: ``models/llama/modeling_llama.py`` (q/k/v/o, bias when ``attention_bias``; gate/up/down, bias
  when ``mlp_bias``; two LlamaRMSNorm per layer; untied lm_head by default).
- qwen2: ``models/qwen2/modeling_qwen2.py`` (as llama, q/k/v always with bias, o without).
- gemma: ``models/gemma/modeling_gemma.py`` (as llama, GELU-tanh gate, RMSNorm ``x * (1 + w)`` in fp32, embedding
  scaled by sqrt(h), tied lm_head, ``head_dim`` 256 independent of hidden_size).
- phi3: ``models/phi3/modeling_phi3.py`` (fused ``qkv_proj`` (a + 2 kv) d, fused ``gate_up_proj`` 2f, no biases).
- bloom: ``models/bloom/modeling_bloom.py`` (fused ``query_key_value`` 3h with bias, ``dense`` with bias, MLP
  h -> 4h -> h with biases and GELU, LayerNorm with bias, ``word_embeddings_layernorm``, tied lm_head, ALiBi).
- gpt2: ``models/gpt2/modeling_gpt2.py`` (Conv1D ``c_attn`` 3h, ``c_proj``, ``c_fc`` h -> n_inner, all with bias;
  LayerNorm ``ln_1``/``ln_2``; learned position embeddings ``wpe`` [n_positions, h]; tied lm_head; gelu_new).
- gpt_neox: ``models/gpt_neox/modeling_gpt_neox.py`` (fused ``query_key_value`` 3h and ``dense``, bias when
  ``attention_bias``; MLP with biases; two LayerNorms, parallel residual by default; partial RoPE ``rotary_pct``).
- falcon: ``models/falcon/modeling_falcon.py`` (fused ``query_key_value``: h + 2d with ``multi_query``, 3h without,
  (a + 2 kv) d with ``new_decoder_architecture``; ``dense``; MLP h -> ffn_hidden_size -> h; biases when ``bias``;
  parallel attention with one LayerNorm, two with ``num_ln_in_parallel_attn`` = 2 (the new architecture's
  default), two sequential ones without ``parallel_attn``; RoPE or ALiBi; tied lm_head).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal, NamedTuple

from vramplan.core.plan.architecture.families import FAMILIES, Family
from vramplan.core.plan.architecture.moe import Mla, Moe, mtp_params
from vramplan.core.plan.helpers.memo import memoised

Role = Literal["q", "k", "v", "o", "gate", "up", "down", "qkv", "gate_up"]
ALL_ROLES: tuple[str, ...] = ("q", "k", "v", "o", "gate", "up", "down", "qkv", "gate_up")

# MLP activations (HF ``hidden_act`` names) and the tensors each saves for backward, per element of its input
ACTIVATIONS: dict[str, str] = {
    "silu": "SiLU (saves its input)",
    "gelu": "GELU (saves its input)",
    "gelu_pytorch_tanh": "GELU, tanh approximation, one op (saves its input)",
    "gelu_new": "GELU, tanh approximation in Python ops (saves its input, tanh, 1 + tanh and x/2)",
    "relu": "ReLU (saves its output)",
}

# Model-table keys that change a block's structure beyond the sizes (None: the family's default)
OPTION_KEYS: tuple[str, ...] = (
    "attention_bias",
    "mlp_bias",
    "use_parallel_residual",
    "num_ln_in_parallel_attn",
    "hidden_act",
    "partial_rotary_factor",
    "max_position_embeddings",
    "alibi",
    "new_decoder_architecture",
)


class Linear(NamedTuple):
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
    parallel: bool = False  # attention and MLP read the block input; their outputs are added to it
    n_norms: int = 2  # norms per block
    act: str = "silu"
    rotary_dim: int = 0  # RoPE: the rotated part of a head (0: no RoPE)
    alibi: bool = False
    positions: int = 0  # learned position embeddings (GPT-2 wpe rows)
    kv_expanded: bool = False  # Falcon's new architecture: k and v broadcast to every query head before attention
    attn_math: bool = False  # Falcon multi-query: k/v with one head, SDPA falls back to its math kernel
    mask_per_layer: bool = False  # Falcon + RoPE + SDPA: the materialised bool mask is converted in every layer
    index_bytes: int = 0  # Falcon's k/v list indexing saves two int64 indices per block
    moe: Moe | None = None  # routed experts; `linears` then hold the path of one token (core.plan.architecture.moe)
    mla: Mla | None = None  # DeepSeek's latent attention; `linears` hold an equivalent q/k/v/o for the FLOPs
    extra_params: int = 0  # signed, whole model: what the linears and norms do not show (q/k norms, sinks,
    # MLA's low-rank projections, the dense layers of an MoE model, Phi's lm_head bias)
    mtp_params: int = 0  # DeepSeek's multi-token-prediction module(s): not built by transformers, not in the total
    window: int = 0  # sliding-window attention: the window (0: none)
    window_layers: int = 0  # layers with a window (Gemma 2 every other one, Gemma 3 five in six)
    vision_params: int = 0  # a multimodal model's vision tower and projector (core.plan.architecture.vision)
    # derived (set in __post_init__)
    h_q: int = field(init=False)
    h_kv: int = field(init=False)
    norm_params: int = field(init=False)  # one norm: RMSNorm a weight, LayerNorm a weight and a bias
    layer_weight_params: int = field(init=False)  # the block's linear weights
    layer_bias_params: int = field(init=False)
    layer_norm_params: int = field(init=False)
    layer_params: int = field(init=False)
    embed_extra_params: int = field(init=False)  # besides the token embedding: BLOOM's norm, GPT-2's positions
    embed_params: int = field(init=False)  # token embedding + embed_extra_params
    head_params: int = field(init=False)  # final norm + an untied lm_head (a tied head reuses the embedding)
    total_params: int = field(init=False)  # the vision tower included
    active_params: int = field(init=False)  # what one text token passes through (embedding and lm_head included)
    expert_params: int = field(init=False)  # routed experts, all layers (0: dense)
    max_linear_weight: int = field(init=False)
    by_role: dict[str, Linear] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        put = object.__setattr__
        norm = 2 * self.h if self.fam.norm == "layer" else self.h
        weights = sum(lin.weight_params for lin in self.linears)
        biases = sum(lin.params - lin.weight_params for lin in self.linears)
        layer = weights + biases + self.n_norms * norm
        extra = (norm if self.fam.embed_norm else 0) + self.positions * self.h
        embed = self.V * self.h + extra
        head = norm + (0 if self.tied else self.V * self.h)
        moe = self.moe
        n_moe = moe.moe_layers if moe else 0
        active = embed + self.L * layer + head + self.extra_params
        active += n_moe * moe.active_extra_per_layer(self.h) if moe else 0
        inactive = n_moe * moe.inactive_per_layer(self.h) if moe else 0
        for name, value in (
            ("h_q", self.a * self.d),
            ("h_kv", self.kv * self.d),
            ("norm_params", norm),
            ("layer_weight_params", weights),
            ("layer_bias_params", biases),
            ("layer_norm_params", self.n_norms * norm),
            ("layer_params", layer),
            ("embed_extra_params", extra),
            ("embed_params", embed),
            ("head_params", head),
            ("total_params", active + inactive + self.vision_params),
            ("active_params", active),
            ("expert_params", moe.expert_params(self.h) if moe else 0),
            ("max_linear_weight", max(lin.weight_params for lin in self.linears)),
            ("by_role", {lin.role: lin for lin in self.linears}),
        ):
            put(self, name, value)

    @property
    def matmul_weight_params(self) -> int:
        """Weights that feed a matmul (decoder linears and the lm_head; not the embedding lookup or norms)."""
        return self.L * self.layer_weight_params + self.V * self.h

    def layer_extra_params(self, ep: int = 1) -> int:
        """Parameters per block (averaged over the blocks) beyond the block's linears and norms: the experts a
        token does not pass through, routers, q/k norms, sinks, MLA's low-rank projections. With expert
        parallelism ``ep`` a rank holds 1/ep of the routed experts (the top-k ones in the linears included)."""
        text = self.total_params - self.vision_params
        beyond = (text - self.embed_params - self.head_params) // self.L - self.layer_params
        if ep > 1 and self.expert_params:
            beyond -= self.expert_params // self.L - self.expert_params // (self.L * ep)
        return beyond

    def linear(self, role: str) -> Linear:
        return self.by_role[role]

    def roles(self) -> tuple[str, ...]:
        return tuple(self.by_role)


def block_linears(
    fam: Family,
    h: int,
    f: int,
    a: int,
    kv: int,
    d: int,
    qkv_bias: bool | None = None,
    out_bias: bool | None = None,
    mlp_bias: bool | None = None,
) -> tuple[Linear, ...]:
    """The linear layers of one decoder block, in forward order (biases: the family's unless given)."""
    qb = fam.qkv_bias if qkv_bias is None else qkv_bias
    ob = fam.out_bias if out_bias is None else out_bias
    mb = fam.mlp_bias if mlp_bias is None else mlp_bias
    h_q, h_kv = a * d, kv * d
    if fam.fused_qkv:
        attn = [Linear("qkv", h, h_q + 2 * h_kv, qb)]
    else:
        attn = [Linear("q", h, h_q, qb), Linear("k", h, h_kv, qb), Linear("v", h, h_kv, qb)]
    attn.append(Linear("o", h_q, h, ob))
    if fam.mlp == "gated":
        mlp = [Linear("gate", h, f, mb), Linear("up", h, f, mb), Linear("down", f, h, mb)]
    elif fam.mlp == "gated_fused":
        mlp = [Linear("gate_up", h, 2 * f, mb), Linear("down", f, h, mb)]
    else:
        mlp = [Linear("up", h, f, mb), Linear("down", f, h, mb)]
    return (*attn, *mlp)


@memoised(None)
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
    *,
    attention_bias: bool | None = None,
    mlp_bias: bool | None = None,
    use_parallel_residual: bool | None = None,
    num_ln_in_parallel_attn: int | None = None,
    hidden_act: str | None = None,
    partial_rotary_factor: float | None = None,
    max_position_embeddings: int | None = None,
    alibi: bool | None = None,
    new_decoder_architecture: bool | None = None,
    num_experts: int | None = None,
    num_experts_per_tok: int | None = None,
    moe_intermediate_size: int | None = None,
    shared_expert_intermediate_size: int | None = None,
    dense_layers: int | None = None,
    q_lora_rank: int | None = None,
    kv_lora_rank: int | None = None,
    qk_nope_head_dim: int | None = None,
    qk_rope_head_dim: int | None = None,
    v_head_dim: int | None = None,
    qk_layernorm: bool | None = None,
    mtp_layers: int | None = None,
    sliding_window: int | None = None,
    sliding_layers: int | None = None,
    vision_params: int | None = None,
) -> Arch:
    """An `Arch` from model-table keys (HF config.json names; None: the family's default)."""
    # Long: one keyword per [model] key (35 of them, as config.json names them) and one line each to resolve it
    # against the family; the body past the signature is under 70 lines.
    fam = FAMILIES[model_type]
    h, a, kv = hidden_size, num_attention_heads, num_key_value_heads
    d = head_dim or h // a
    moe = _moe(fam, intermediate_size, num_hidden_layers, num_experts, num_experts_per_tok, moe_intermediate_size,
               shared_expert_intermediate_size, dense_layers)  # fmt: skip
    f = moe.active_f if moe else intermediate_size
    mla = (
        Mla(q_lora_rank or 0, kv_lora_rank or 512, qk_nope_head_dim or 128, qk_rope_head_dim or 64, v_head_dim or 128)
        if fam.mla
        else None
    )
    if mla:
        d = mla.qk_head
    linears = block_linears(fam, h, f, a, kv, d, attention_bias, attention_bias, mlp_bias)
    if mla:  # the q/k/v/o a token's FLOPs see: heads of qk_head for q and k, v_head for v and o
        linears = (Linear("q", h, a * d, False), Linear("k", h, a * d, False), Linear("v", h, a * mla.v, False),
                   Linear("o", a * mla.v, h, False), *linears[4:])  # fmt: skip
    attn = sum(lin.params for lin in linears if lin.role in ("q", "k", "v", "o", "qkv"))
    qk_norm = "" if fam.qk_norm == "head_layer" and not qk_layernorm else fam.qk_norm
    per_layer = {"": 0, "head": 2 * d, "full": (a + kv) * d, "head_layer": 4 * d}[qk_norm]
    per_layer += a if fam.sinks else 0
    per_layer += mla.params(h, a) - attn if mla else 0
    dense = moe and num_hidden_layers - moe.moe_layers
    extra = num_hidden_layers * per_layer + (vocab_size if fam.lm_head_bias else 0)
    extra += dense * 3 * h * (intermediate_size - f) if moe and dense else 0
    norm = 2 * h if fam.norm == "layer" else h
    mtp = 0
    if moe and mtp_layers:  # one MoE block of the model, plus the MTP module's own norms and projection
        block = sum(lin.params for lin in linears) + per_layer + 2 * norm
        mtp = mtp_params(block + moe.active_extra_per_layer(h) + moe.inactive_per_layer(h), h, mtp_layers)
    parallel = fam.parallel if use_parallel_residual is None else use_parallel_residual
    n_ln = fam.norms_in_parallel if num_ln_in_parallel_attn is None else num_ln_in_parallel_attn
    if new_decoder_architecture and num_ln_in_parallel_attn is None:
        n_ln = 2  # FalconDecoderLayer: the new architecture's default
    use_alibi = fam.positional == "alibi" or bool(alibi)
    rotary = 0 if (use_alibi or fam.positional != "rope") else int(d * (partial_rotary_factor or fam.rotary_factor))
    rotary = mla.rope if mla else rotary
    falcon = model_type == "falcon"
    new_arch = falcon and bool(new_decoder_architecture)
    multi_query = falcon and not new_arch and kv < a
    return Arch(
        fam,
        vocab_size,
        h,
        f,
        num_hidden_layers,
        a,
        kv,
        d,
        tie_word_embeddings,
        linears,
        parallel=parallel,
        n_norms=n_ln if parallel else fam.block_norms,
        act=hidden_act or fam.act,
        rotary_dim=rotary,
        alibi=use_alibi,
        positions=(max_position_embeddings or fam.max_positions) if fam.positional == "learned" else 0,
        kv_expanded=new_arch,
        attn_math=multi_query,
        mask_per_layer=falcon and not use_alibi and not multi_query,
        index_bytes=16 if (new_arch or multi_query) else 0,
        moe=moe,
        mla=mla,
        extra_params=extra,
        mtp_params=mtp,
        window=sliding_window or 0,
        window_layers=min(sliding_layers if sliding_layers is not None else num_hidden_layers, num_hidden_layers)
        if sliding_window
        else 0,
        vision_params=vision_params or 0,
    )


def _moe(
    fam: Family,
    f: int,
    n_layers: int,
    experts: int | None,
    top_k: int | None,
    expert_f: int | None,
    shared_f: int | None,
    dense_layers: int | None,
) -> Moe | None:
    """The family's routed experts, with transformers' config defaults where a key is not given."""
    if not fam.moe or not experts:
        return None
    if top_k is None or top_k > experts:
        top_k = min(experts, top_k or 2)
    return Moe(
        n_experts=experts,
        top_k=top_k,
        expert_f=expert_f or f,
        shared_f=shared_f or 0,
        moe_layers=n_layers - min(dense_layers or 0, n_layers),
        expert_bias=fam.model_type == "gpt_oss",
        router_bias=fam.model_type == "gpt_oss",
        shared_gate=fam.model_type == "qwen2_moe" and bool(shared_f),
        dense_f=f,
    )


@memoised(64)
def dense_layer_arch(arch: Arch) -> Arch:
    """The same model as a dense block of width ``intermediate_size``: what the layers an MoE model keeps dense
    (DeepSeek-V3's first ``first_k_dense_replace``) run; ``arch`` itself describes its MoE layers."""
    assert arch.moe is not None
    f = arch.moe.dense_f
    linears = tuple(
        lin._replace(d_out=f) if lin.role in ("gate", "up") else lin._replace(d_in=f) if lin.role == "down" else lin
        for lin in arch.linears
    )
    return replace(arch, f=f, linears=linears, moe=None)


def lora_roles(arch: Arch, targets: tuple[str, ...]) -> tuple[str, ...]:
    """The block's linear roles that LoRA adapts. ``all-linear`` is peft's: every linear in the blocks, not the
    output layer (peft ``tuners_utils._maybe_include_all_linear_layers`` excludes the lm_head). A mixture-of-experts
    block's experts are fused 3-D parameters in transformers 5 (``*Experts.gate_up_proj``), which peft's LoRA does
    not wrap: only the attention projections are adapted (the router and shared-expert linears are not counted)."""
    roles = arch.roles()
    if arch.moe is not None:  # routed experts are 3-D parameters (transformers 5), not nn.Linear: peft skips them
        roles = tuple(r for r in roles if r not in ("gate", "up", "down", "gate_up"))
    if "all-linear" in targets:
        return roles
    return tuple(role for role in roles if role in targets)


def lora_params_per_layer(arch: Arch, roles: tuple[str, ...], rank: int) -> int:
    """LoRA adds A (r x d_in) and B (d_out x r) per adapted linear: r * (d_in + d_out) (Hu et al. 2021, §4)."""
    return sum(rank * (lin.d_in + lin.d_out) for lin in arch.linears if lin.role in roles)
