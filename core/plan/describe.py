"""The words that describe a plan, written once for every front end and export: the model's name (its preset's, its
config.json's, ``(modified)``, or ``custom llama``), the GPU's name, the method, the parallel layout and the
plan's title, and how to load the model so that it runs as planned."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vramplan.core.plan.architecture.config import ModelConfig
from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.resolved import fsdp_sharded, plan_rl_settings
from vramplan.core.plan.schema.plan import Plan
from vramplan.core.plan.schema.training import TrainingConfig

if TYPE_CHECKING:
    from vramplan.core.plan.architecture.hf_config import HFModel

_VENDOR_PREFIXES = ("NVIDIA ", "AMD Instinct ", "AMD ", "GeForce ", "Tesla ")


def model_base(model: ModelConfig) -> tuple[str, dict[str, Any]] | None:
    """The name and keys a model starts from: its preset's, or its config.json's (None: a custom model, or a
    config.json that can no longer be read)."""
    try:
        if model.preset is not None:
            mp = presets.model_preset(model.preset)
            keys = dict(mp.config)
            if isinstance(keys.get("hf_config"), str):  # a user preset made of a config.json
                keys = {**_read_hf_config(keys["hf_config"]).model, **keys}
            return mp.name, keys
        if model.hf_config is not None:
            hf = _read_hf_config(model.hf_config)
            return hf.name, hf.model
    except PlanError:
        return None
    return None


def _read_hf_config(path: str) -> HFModel:
    """`hfconfig.read_hf_config`, imported when a model has a config.json: not at start-up."""
    from vramplan.core.plan.architecture.hf_config import read_hf_config

    return read_hf_config(path)


def modified_keys(model: ModelConfig, base: tuple[str, dict[str, Any]] | None = None) -> list[str]:
    """Model keys that differ from the model's preset or config.json (a custom model built from one); `base`:
    `model_base(model)` when the caller has it."""
    base = base or model_base(model)
    if base is None:
        return []
    keys = base[1]
    dumped = model.model_dump(exclude_none=True)
    skip = ("preset", "hf_config")
    return [k for k, v in dumped.items() if k not in skip and k in keys and keys[k] != v] + [
        k for k in dumped if k not in keys and k not in skip
    ]


def model_name(model: ModelConfig) -> str:
    """``LLaMA-7B``, ``tiiuae/falcon-7b (modified)``, ``custom llama``: the model as the planner and exports name it."""
    base = model_base(model)
    if base is None:
        return f"custom {model.model_type}"
    return f"{base[0]} (modified)" if modified_keys(model, base) else base[0]


def gpu_name(plan: Plan) -> str:
    """``NVIDIA A100 80GB SXM4``: the plan's GPU as its preset names it."""
    return presets.gpu(plan.hardware.gpu).name


def short_gpu_name(name: str) -> str:
    """``H100 80GB SXM5`` for ``NVIDIA H100 80GB SXM5``: lists and the palette have little room."""
    for prefix in _VENDOR_PREFIXES:
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


def method_label(training: TrainingConfig, *, compact: bool = False) -> str:
    """``full fine-tuning`` (``pretraining`` from scratch), ``LoRA r=8``, ``QLoRA r=16``; compact: ``full``
    (``pretrain``), ``LoRA r8``."""
    r = training.lora_rank
    if training.objective_spec.from_scratch:  # every weight, from random ones (the plan allows no adapters)
        return "pretrain" if compact else "pretraining"
    if compact:
        return {"full": "full", "lora": f"LoRA r{r}", "qlora": f"QLoRA r{r}"}[training.method]
    return {"full": "full fine-tuning", "lora": f"LoRA r={r}", "qlora": f"QLoRA r={r}"}[training.method]


def batch_label(plan: Plan, *, grouped: bool = False) -> str:
    """``micro-batch 1 x 2048 tokens, accumulation 4`` (``grouped``: ``2,048``); a DPO/GRPO/PPO plan by its own
    sequences (``GRPO: 8 completions/GPU of 512 + 1024 tokens, 8 per prompt, ..., accumulation 4``), never the SFT
    ``seq_len`` it does not train on."""
    t = plan.training
    if not t.objective_spec.post_training:
        seq = f"{t.seq_len:,}" if grouped else str(t.seq_len)
        return f"micro-batch {t.micro_batch_size} x {seq} tokens, accumulation {t.grad_accum_steps}"
    return f"{plan_rl_settings(plan).summary(t.micro_batch_size)}, accumulation {t.grad_accum_steps}"


def sharding_label(plan: Plan) -> str:
    """``ZeRO-3``; a plan that shards with FSDP (`fsdp_sharded`: bf16/fp32 regimes, not DeepSpeed's master-weight
    ones) in FSDP's words with the stage its key names, ``FSDP2 full shard (ZeRO-3)``, so that a report never says
    ZeRO-3 and then fsdp_version 2 of the same plan."""
    s = plan.strategy
    if not fsdp_sharded(plan):
        return f"ZeRO-{s.zero_stage}"
    how = "full shard" if s.zero_stage == 3 else "shard grad + optimizer"  # FULL_SHARD / SHARD_GRAD_OP
    return f"FSDP{s.fsdp_version} {how} (ZeRO-{s.zero_stage})"


def parallel_summary(
    plan: Plan, *, offload: bool = False, data_parallel: bool = True, framework_words: bool = False
) -> str:
    """``DP 4, TP 2+SP, ZeRO-1``; with `offload`, where the optimizer and parameters are offloaded to; without
    `data_parallel`, no DP (the GPU guide varies the GPU count); with `framework_words`, FSDP sharding in FSDP's
    words (`sharding_label`). One data-parallel rank has nothing to shard: no ZeRO stage is named then, unless it
    offloads (DeepSpeed offloads through its ZeRO stage)."""
    s = plan.strategy
    parts = [f"DP {plan.data_parallel}"] if data_parallel else []
    if s.tensor_parallel > 1:
        parts.append(f"TP {s.tensor_parallel}" + ("+SP" if s.sequence_parallel else ""))
    if s.pipeline_parallel > 1:
        parts.append(f"PP {s.pipeline_parallel}")
    if s.expert_parallel > 1:
        parts.append(f"EP {s.expert_parallel}")
    offloads = (s.offload_optimizer, s.offload_parameters) != ("none", "none")
    if s.zero_stage and (plan.data_parallel > 1 or not data_parallel or offloads):
        parts.append(sharding_label(plan) if framework_words else f"ZeRO-{s.zero_stage}")
    if offload and s.offload_optimizer != "none":
        parts.append(f"optimizer->{s.offload_optimizer}")
    if offload and s.offload_parameters != "none":
        parts.append(f"params->{s.offload_parameters}")
    return ", ".join(parts)


def plan_title(plan: Plan) -> str:
    """``LLaMA-7B on 8 x NVIDIA A100 80GB SXM4``: the headline of a plan."""
    return f"{model_name(plan.model)} on {plan.hardware.total_gpus} x {gpu_name(plan)}"


EXPERTS_IMPLEMENTATION = {"grouped": "grouped_mm", "loop": "eager", "batched": "batched_mm"}  # transformers' names


def loading_settings(plan: Plan) -> str:
    """``attn_implementation = sdpa`` (and for a mixture of experts ``experts_implementation = grouped_mm``): the
    ``from_pretrained`` keywords that make the model run as the plan says."""
    s = plan.strategy
    attn = "flash_attention_2 or sdpa" if s.attention == "flash" else "eager"
    out = f"attn_implementation = {attn}"
    if plan.model.arch().moe is not None:
        out += f", experts_implementation = {EXPERTS_IMPLEMENTATION[s.experts]}"
    return out
