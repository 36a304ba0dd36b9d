"""Every key a plan takes, with its type, its default (the default plan's) and what it means: what
``vramplan keys`` lists, built from the `Plan` model itself so that a new field is listed without touching this."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, get_args, get_origin

from vramplan.core.plan.helpers.field_values import literal_values
from vramplan.core.plan.schema.plan import DEFAULT_PLAN_DATA, TABLES, Plan
from vramplan.core.plan.stack.config import StackConfig
from vramplan.core.plan.stack.defaults import STACK_KEYS, stack_choice

# What a key means, for the fields whose pydantic Field carries no description.
MEANINGS: dict[str, str] = {
    "model.preset": "a model preset (vramplan presets models) that fills every model key not given",
    "model.hf_config": "a local config.json or checkpoint directory that fills every model key not given",
    "model.model_type": "the Hugging Face model_type (the architecture family)",
    "model.vocab_size": "vocabulary size",
    "model.hidden_size": "model width",
    "model.intermediate_size": "MLP width",
    "model.num_hidden_layers": "transformer blocks",
    "model.num_attention_heads": "query heads",
    "model.num_key_value_heads": "key/value heads (GQA; = heads for MHA)",
    "model.tie_word_embeddings": "lm_head shares the embedding matrix",
    "model.head_dim": "head size when heads x head_dim != hidden_size",
    "model.attention_bias": "biases in the attention projections",
    "model.mlp_bias": "biases in the MLP projections",
    "model.hidden_act": "the MLP activation",
    "model.alibi": "ALiBi positions (Falcon)",
    "model.new_decoder_architecture": "Falcon's new decoder architecture",
    "model.num_experts": "routed experts per MoE layer (mixture of experts)",
    "model.num_experts_per_tok": "experts each token is routed to (top-k)",
    "model.moe_intermediate_size": "each routed expert's MLP width",
    "model.shared_expert_intermediate_size": "the shared experts' MLP width (Qwen2-MoE, DeepSeek-V3)",
    "model.dense_layers": "leading blocks with a dense MLP instead of experts (DeepSeek-V3's first 3)",
    "model.q_lora_rank": "DeepSeek latent attention: the query's low-rank width",
    "model.kv_lora_rank": "DeepSeek latent attention: the key/value latent width",
    "model.qk_nope_head_dim": "DeepSeek latent attention: per-head q/k width without RoPE",
    "model.qk_rope_head_dim": "DeepSeek latent attention: per-head q/k width with RoPE",
    "model.v_head_dim": "DeepSeek latent attention: per-head value width",
    "model.mtp_layers": "DeepSeek-V3's multi-token-prediction blocks (counted apart: parameters.mtp)",
    "model.qk_layernorm": "LayerNorms on the queries and keys (Phi)",
    "model.sliding_window": "the sliding attention window in tokens (Mistral, Gemma 2/3, gpt-oss)",
    "model.sliding_layers": "how many blocks use the sliding window",
    "hardware.gpu": "a GPU preset (vramplan presets hardware); --gpu takes nvidia-smi names too",
    "hardware.gpus_per_node": "GPUs per node (--gpus N)",
    "hardware.nodes": "nodes (--nodes N)",
    "training.micro_batch_size": "sequences per GPU per forward/backward",
    "training.seq_len": "tokens per sequence (4k = 4096)",
    "training.grad_accum_steps": "micro-batches accumulated per optimizer step",
    "training.optimizer": "the optimizer (its states per parameter)",
    "training.optimizer_impl": "how the optimizer step runs (its temporaries)",
    "training.method": "full fine-tuning, LoRA or QLoRA",
    "training.lora_rank": "LoRA rank",
    "training.lora_targets": "the linears LoRA adapts (q,v or a list)",
    "training.double_quantization": "QLoRA's double quantization of the scales",
    "training.learning_rate": "the learning rate (checklist, exports)",
    "training.grad_clip": "gradient clipping norm (checklist, DeepSpeed export)",
    "training.loss_scaling": "fp16 loss scaling",
    "strategy.attention": "the attention kernel (flash: no s x s scores kept)",
    "strategy.activation_compression": "int8 saved activations",
    "strategy.fused_cross_entropy": "a fused cross-entropy (no fp32 logits copy)",
    "strategy.zero_stage": "ZeRO stage: 0 DDP, 1 optimizer, 2 + gradients, 3 + parameters (FSDP FULL_SHARD)",
    "strategy.offload_optimizer": "optimizer states to CPU or NVMe (ZeRO-Offload/Infinity)",
    "strategy.offload_parameters": "parameters to CPU or NVMe (ZeRO-3)",
    "strategy.tensor_parallel": "tensor-parallel degree (Megatron)",
    "strategy.pipeline_parallel": "pipeline stages",
    "strategy.sequence_parallel": "Megatron sequence parallelism (needs tensor_parallel > 1)",
}


@dataclass(frozen=True)
class KeyInfo:
    """One settable key: ``training.seq_len``, ``int``, ``2048``, what it means."""

    key: str
    type: str
    default: str
    meaning: str


def type_text(annotation: Any) -> str:
    """``int``, ``float or unset``, ``none|cpu|nvme``, ``list of words``."""
    choices = literal_values(annotation)
    args = get_args(annotation)
    optional = type(None) in args
    if choices:
        text = "|".join(choices)
    elif annotation is tuple or (args and getattr(annotation, "__origin__", None) is tuple):
        text = "list of words"
    else:
        kinds = [a for a in (args or (annotation,)) if a is not type(None)]
        kinds = [get_args(k)[0] if get_origin(k) is Annotated else k for k in kinds]  # PositiveInt -> int
        text = " or ".join(getattr(k, "__name__", str(k)) for k in kinds)
    return text + (", unset" if optional else "")


def _default(table: str, name: str, default: Any) -> str:
    if f"{table}.{name}" in STACK_KEYS:  # filled by the stack when unset (core.plan.stack.config)
        row = stack_choice(f"{table}.{name}", StackConfig(), lambda key: None)
        return f"the stack's (custom: {_default('', '', row.value)})"
    stated = DEFAULT_PLAN_DATA.get(table, {})
    if name in stated:
        default = stated[name]
    elif table == "model" and name not in ("preset", "hf_config"):
        return "from the preset"
    if default is None:
        return "unset"
    if isinstance(default, bool):
        return "true" if default else "false"
    if isinstance(default, tuple):
        return ",".join(str(v) for v in default)
    return str(default)


def settable_keys() -> tuple[KeyInfo, ...]:
    """Every ``table.key`` of a plan file and ``--set``, in the plan's order."""
    out: list[KeyInfo] = []
    for table in TABLES:
        section = Plan.model_fields[table].annotation
        for name, field in getattr(section, "model_fields", {}).items():
            key = f"{table}.{name}"
            meaning = field.description or MEANINGS.get(key, "")
            out.append(KeyInfo(key, type_text(field.annotation), _default(table, name, field.default), meaning))
    return tuple(out)
