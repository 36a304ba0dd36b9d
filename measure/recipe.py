"""What the plan asks of the training step, in the terms of the stack that runs it here (HF transformers + PEFT +
torch.optim): the `Recipe` that `vramplan.measure.build` builds and `vramplan.measure.run` runs. Pure Python: the
list of what this machine cannot reproduce (`vramplan.measure.limitations`) and the tests read it without torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vramplan.core.plan.architecture.arch import lora_roles
from vramplan.core.plan.architecture.hf_config import parse_json, read_hf_config
from vramplan.core.plan.helpers.readfile import read_regular
from vramplan.core.plan.schema.plan import Plan
from vramplan.core.plan.schema.precision import regime, resolve_impl

# precision regime -> (dtype the weights are held in, autocast dtype or None)
WEIGHTS_AND_AUTOCAST: dict[str, tuple[str, str | None]] = {
    "fp32": ("fp32", None),
    "bf16-autocast": ("fp32", "bf16"),
    "fp16-autocast": ("fp32", "fp16"),
    "bf16-pure": ("bf16", None),
}
# plan LoRA roles -> PEFT target_modules names (a suffix of the module's name), by family; the default: LLaMA's
_LLAMA_NAMES = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "o_proj", "gate": "gate_proj", "up": "up_proj"}
LORA_MODULES: dict[str, dict[str, str]] = {
    "default": {**_LLAMA_NAMES, "down": "down_proj"},
    "phi3": {"qkv": "qkv_proj", "o": "o_proj", "gate_up": "gate_up_proj", "down": "down_proj"},
    "gpt2": {"qkv": "c_attn", "o": "attn.c_proj", "up": "c_fc", "down": "mlp.c_proj"},
    "bloom": {"qkv": "query_key_value", "o": "dense", "up": "dense_h_to_4h", "down": "dense_4h_to_h"},
    "gpt_neox": {"qkv": "query_key_value", "o": "dense", "up": "dense_h_to_4h", "down": "dense_4h_to_h"},
    "falcon": {"qkv": "query_key_value", "o": "dense", "up": "dense_h_to_4h", "down": "dense_4h_to_h"},
}
# plan [model] keys -> the family's transformers config argument, where the config class does not map the name
# itself (PretrainedConfig.attribute_map); None: the key has no argument (the family fixes it)
CONFIG_NAMES: dict[str, dict[str, str | None]] = {
    "gpt2": {
        "intermediate_size": "n_inner",
        "hidden_act": "activation_function",
        "num_key_value_heads": None,
        "max_position_embeddings": "n_positions",
    },
    "bloom": {"intermediate_size": None, "num_key_value_heads": None},
    "gpt_neox": {"num_key_value_heads": None, "partial_rotary_factor": "rotary_pct"},
    "falcon": {
        "num_key_value_heads": "num_kv_heads",
        "intermediate_size": "ffn_hidden_size",
        "use_parallel_residual": "parallel_attn",
        "attention_bias": "bias",
    },
    "mixtral": {"num_experts": "num_local_experts"},
    "gpt_oss": {"num_experts": "num_local_experts"},
    "deepseek_v3": {"num_experts": "n_routed_experts", "shared_expert_intermediate_size": None},
    "llama4_text": {
        "intermediate_size": "intermediate_size_mlp",
        "moe_intermediate_size": "intermediate_size",
        "num_experts": "num_local_experts",
        "shared_expert_intermediate_size": None,
    },
}
# plan keys that are vramplan's own (no config argument) or derived
NOT_CONFIG = ("preset", "hf_config", "model_type", "dense_layers", "sliding_layers", "mtp_layers", "vision_params")
# config.json keys not passed on: the class, remote code, the checkpoint's dtype and quantization, versions
FILE_ONLY = (
    "model_type",
    "architectures",
    "auto_map",
    "torch_dtype",
    "dtype",
    "quantization_config",
    "transformers_version",
    "_name_or_path",
)
# strategy.experts -> transformers' experts_implementation
EXPERTS = {"grouped": "grouped_mm", "loop": "eager", "batched": "batched_mm"}
OPTIMIZERS = ("adamw", "sgd", "sgd-momentum", "adafactor")


@dataclass(frozen=True)
class Recipe:
    """The step to run: the model (``config``: keyword arguments of ``AutoConfig.for_model``), precision (weights'
    dtype and autocast), method and adapters, checkpointing, attention, optimizer, batch. ``optimizer`` is one
    torch.optim knows (`OPTIMIZERS`), or the plan's when it is not (then listed as not reproducible)."""

    model_type: str
    config: dict[str, Any]
    hf_config_path: str | None
    expected_params: int
    weights_dtype: str  # fp32 | bf16
    autocast: str | None  # bf16 | fp16 | None
    method: str  # full | lora | qlora
    lora_rank: int
    lora_dropout: float
    lora_modules: tuple[str, ...]  # PEFT target_modules (("all-linear",) for every linear)
    lora_dtype: str
    checkpointing: bool
    reentrant: bool
    attention: str  # sdpa | eager
    experts: str | None
    optimizer: str
    optimizer_impl: str  # foreach | for-loop | fused
    learning_rate: float
    micro_batch_size: int
    seq_len: int
    grad_accum_steps: int
    vocab_size: int

    @property
    def tokens_per_step(self) -> int:
        return self.micro_batch_size * self.seq_len * self.grad_accum_steps


def config_kwargs(plan: Plan) -> dict[str, Any]:
    """The transformers config arguments of the plan's model: its config.json's keys when ``model.hf_config`` names
    one (less what would load code, weights or a quantization), with every plan key that differs from what the file
    says (a ``--set model.KEY``) as the family's config argument (`CONFIG_NAMES`)."""
    m = plan.model
    names = CONFIG_NAMES.get(m.model_type, {})
    out: dict[str, Any] = {}
    from_file: dict[str, Any] = {}
    if m.hf_config:
        hf = read_hf_config(m.hf_config)
        raw = parse_json(read_regular(str(hf.path)).decode("utf-8"), str(hf.path))
        if isinstance(raw.get("text_config"), dict) and m.vision_params:  # multimodal: its text model is run
            raw = {**raw["text_config"], "tie_word_embeddings": m.tie_word_embeddings}
        out = {k: v for k, v in raw.items() if k not in FILE_ONLY}
        from_file = hf.model
    for key, value in m.model_dump(exclude_none=True).items():
        if key in NOT_CONFIG or (key in from_file and from_file[key] == value):
            continue
        name = names.get(key, key)
        if name is not None:
            out[name] = value
    if m.model_type == "falcon" and not m.hf_config and not m.new_decoder_architecture:
        out["multi_query"] = m.num_key_value_heads == 1
    dense = m.dense_layers or 0
    if m.model_type in ("qwen2_moe", "qwen3_moe") and dense and "dense_layers" not in from_file:
        out["mlp_only_layers"] = list(range(dense))  # which layers is the config's; their number is the plan's
    if m.model_type == "llama4_text" and dense and "dense_layers" not in from_file:
        out["moe_layers"] = list(range(dense, m.num_hidden_layers))
    if m.model_type == "deepseek_v3" and not m.hf_config:
        out["first_k_dense_replace"] = dense
        shared, width = m.shared_expert_intermediate_size or 0, m.moe_intermediate_size or 1
        out["n_shared_experts"] = shared // width
    return out


def lora_modules(plan: Plan) -> tuple[str, ...]:
    """PEFT's target_modules for the plan's LoRA targets: the roles the estimate adapts
    (`core.plan.architecture.arch.lora_roles`) by their module names in this family, or PEFT's ``all-linear``."""
    t = plan.training
    if "all-linear" in t.lora_targets:
        return ("all-linear",)
    names = LORA_MODULES.get(plan.model.model_type, LORA_MODULES["default"])
    roles = lora_roles(plan.model.arch(), t.lora_targets)
    return tuple(dict.fromkeys(names[r] for r in roles if r in names))


def recipe(plan: Plan) -> Recipe:
    """The step the plan describes, resolved (the stack's defaults filled in: `Plan.stack_chosen`)."""
    t, s = plan.training, plan.strategy
    reg = t.regime
    weights, auto = WEIGHTS_AND_AUTOCAST.get(reg, ("bf16" if reg.startswith("bf16") else "fp32", None))
    impl = resolve_impl(t.optimizer_impl, regime(reg))
    return Recipe(
        model_type=plan.model.model_type,
        config=config_kwargs(plan),
        hf_config_path=plan.model.hf_config,
        expected_params=plan.model.arch().total_params - plan.model.arch().vision_params,  # the text model is run
        weights_dtype=weights,
        autocast=auto,
        method=t.method,
        lora_rank=t.lora_rank,
        lora_dropout=t.lora_dropout,
        lora_modules=lora_modules(plan) if t.method != "full" else (),
        lora_dtype=t.lora_dtype,
        checkpointing=s.gradient_checkpointing == "full",
        reentrant=s.checkpoint_impl == "reentrant",
        attention="eager" if s.attention == "eager" else "sdpa",
        experts=EXPERTS[s.experts] if plan.model.num_experts else None,
        optimizer=t.optimizer,
        optimizer_impl=impl,
        learning_rate=t.learning_rate or 1e-4,
        micro_batch_size=t.micro_batch_size,
        seq_len=t.seq_len,
        grad_accum_steps=t.grad_accum_steps,
        vocab_size=plan.model.vocab_size,
    )
