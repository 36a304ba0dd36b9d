"""TRL's DPO and GRPO YAML (``trl dpo --config FILE``, ``trl grpo --config FILE``, the alignment-handbook and
open-r1 recipes): one flat table of ``ModelConfig`` + ``DPOConfig`` / ``GRPOConfig`` (trl/trainer/model_config.py,
dpo_config.py, grpo_config.py) -> plan keys.

Objective: GRPO when a GRPO-only key is present (``num_generations``, ``max_completion_length``, ``use_vllm``,
``vllm_*``, ``reward_funcs``, ...), else DPO. Model: ``model_name_or_path``, ``attn_implementation``,
``torch_dtype``/``dtype`` (bfloat16 weights: bf16-pure), ``use_peft`` with ``lora_r``/``lora_dropout``/
``lora_target_modules`` and ``load_in_4bit`` (QLoRA, ``bnb_4bit_quant_type``) or ``load_in_8bit``. Trainer:
``per_device_train_batch_size`` (DPO: pairs; GRPO: completions), ``gradient_accumulation_steps``,
``gradient_checkpointing`` (TRL's configs default it to true), ``bf16``/``fp16`` (TRL defaults bf16 to true),
``optim``, ``learning_rate``, ``max_grad_norm``, ``deepspeed`` (named, not followed), ``fsdp``; with neither, the
run is DDP (`trainer.plain_ddp`: plain ``accelerate launch``). DPO: ``beta``, ``max_length``,
``precompute_ref_log_probs``. GRPO: ``beta``, ``num_generations``, ``num_iterations``, ``max_prompt_length``,
``max_completion_length``, ``use_vllm`` + ``vllm_mode`` (colocate by default in TRL 1.x; the older
``vllm_device`` put vLLM on a GPU of its own: the server mode), ``vllm_gpu_memory_utilization``,
``vllm_tensor_parallel_size``, ``vllm_enable_sleep_mode``.
"""

from __future__ import annotations

from typing import Any

from vramplan.core.files.importers import trainer
from vramplan.core.files.importers.config_values import count, flag, number
from vramplan.core.files.importers.models import read_model
from vramplan.core.files.importers.record import ImportLog, Section

GRPO_KEYS = frozenset(
    {
        "num_generations",
        "max_completion_length",
        "use_vllm",
        "vllm_mode",
        "vllm_gpu_memory_utilization",
        "vllm_device",
        "vllm_tensor_parallel_size",
        "vllm_enable_sleep_mode",
        "reward_funcs",
        "reward_weights",
        "num_iterations",
        "epsilon_high",
        "scale_rewards",
    }
)
DPO_KEYS = frozenset({"precompute_ref_log_probs", "rpo_alpha", "ref_model_init_kwargs", "f_divergence_type"})
DATA = "data, logging, evaluation or saving: not a memory or step-time setting"
NOT_MODELLED = {
    "temperature": "sampling, no memory effect",
    "top_p": "sampling, no memory effect",
    "loss_type": "the loss's formula, no memory effect",
    "lora_alpha": "a scale, no memory effect",
    "use_liger_kernel": "TRL's own fused lm-head already scores without [b, s, V] logits",
    "model_revision": DATA,
}


def is_trl(keys: set[str]) -> bool:
    """A TRL DPO/GRPO config: a GRPO- or DPO-only key, or ``beta`` beside ``model_name_or_path``, and none of
    LLaMA-Factory's own keys (``stage``, ``finetuning_type``, ``cutoff_len``)."""
    if keys & {"stage", "finetuning_type", "cutoff_len"}:
        return False
    return bool(keys & (GRPO_KEYS | DPO_KEYS)) or {"beta", "model_name_or_path"} <= keys


def read(data: dict[str, Any], log: ImportLog) -> None:
    top = log.section(data)
    grpo = bool(set(data) & GRPO_KEYS)
    objective = "grpo" if grpo else "dpo"
    log.set("(GRPO-only keys)" if grpo else "(no GRPO-only keys)", None, "training.objective", objective)
    read_model(log, "model_name_or_path", top.get("model_name_or_path"))
    method = _peft(top, log)
    trainer.counts(
        top,
        log,
        (
            ("per_device_train_batch_size", "training.micro_batch_size"),
            ("gradient_accumulation_steps", "training.grad_accum_steps"),
        ),
    )
    on = flag(top.get("gradient_checkpointing", True))
    key = "gradient_checkpointing" if top.has("gradient_checkpointing") else "(no gradient_checkpointing)"
    note = "" if top.has("gradient_checkpointing") else "TRL's DPOConfig/GRPOConfig default it to true"
    log.set(key, on, "strategy.gradient_checkpointing", "none" if on is False else "full", note)
    top.ignore("gradient_checkpointing_kwargs", "use_reentrant or not, the same checkpoints are kept")
    uses_ds = trainer.trainer_arguments(top, log, "optim")
    if not trainer.fsdp_words(top, "fsdp", log) and not uses_ds:
        trainer.plain_ddp(log, "trl")
    _precision(top, log, method, uses_ds)
    if top.has("attn_implementation"):
        raw = str(top.get("attn_implementation")).lower()
        log.set("attn_implementation", raw, "strategy.attention", "eager" if raw == "eager" else "flash")
    if grpo:
        _grpo(top, log)
    else:
        _dpo(top, log)
    for name, why in NOT_MODELLED.items():
        top.ignore(name, why)
    top.rest(DATA)


def _peft(top: Section, log: ImportLog) -> str:
    """ModelConfig's PEFT keys (trl/trainer/model_config.py): the plan's method."""
    if not flag(top.get("use_peft")):
        for name in ("lora_r", "lora_dropout", "lora_target_modules", "load_in_4bit", "load_in_8bit"):
            top.ignore(name, "use_peft is not true: full fine-tuning")
        log.set(
            "use_peft" if top.has("use_peft") else "(no use_peft)", top.data.get("use_peft"), "training.method", "full"
        )
        return "full"
    method = "qlora" if flag(top.get("load_in_4bit")) else "lora"
    log.set("use_peft", True, "training.method", method)
    if method == "qlora":
        qtype = str(top.get("bnb_4bit_quant_type", "nf4")).lower()
        log.set("load_in_4bit", True, "training.quantization", qtype if qtype in ("nf4", "fp4") else "nf4")
    elif flag(top.get("load_in_8bit")):
        log.set("load_in_8bit", True, "training.quantization", "int8", "bitsandbytes LLM.int8 base")
    trainer.lora_rank_and_dropout(top, log, "lora_r")
    trainer.lora_target_modules(top, log, "lora_target_modules")
    return method


def _precision(top: Section, log: ImportLog, method: str, uses_ds: bool) -> None:
    """bfloat16 weights (``torch_dtype``/``dtype``) train as bf16; else HF Trainer's bf16/fp16 (TRL: bf16 on
    unless fp16 is set)."""
    dtype_key = "dtype" if top.has("dtype") else "torch_dtype"
    dtype = str(top.get(dtype_key, "")).lower()
    if dtype in ("bfloat16", "bf16") and not uses_ds:
        log.set(dtype_key, dtype, "training.precision", "bf16-pure", "the model is loaded in bf16")
        top.ignore("bf16", "the weights' dtype decides")
        top.ignore("fp16", "the weights' dtype decides")
        return
    if not (top.has("bf16") or top.has("fp16")):
        regime = "bf16-master" if uses_ds else "bf16-autocast" if method == "full" else "bf16-pure"
        log.set("(no bf16)", True, "training.precision", regime, "TRL's DPOConfig/GRPOConfig default bf16 to true")
        return
    trainer.precision(top, log, method, uses_ds)


def _dpo(top: Section, log: ImportLog) -> None:
    _number(top, log, "beta", "rl.beta")
    _count(top, log, "max_length", "rl.max_length")
    top.ignore("max_prompt_length", "DPO truncates the prompt within max_length, which sets the length planned")
    if flag(top.get("precompute_ref_log_probs")):
        log.set("precompute_ref_log_probs", True, "rl.reference", "precomputed")
    if top.has("padding_free"):
        log.set("padding_free", top.get("padding_free"), "rl.padding_free", bool(flag(top.get("padding_free"))))


def _grpo(top: Section, log: ImportLog) -> None:
    _number(top, log, "beta", "rl.beta")
    for name in ("num_generations", "num_iterations", "max_prompt_length", "max_completion_length"):
        _count(top, log, name, f"rl.{name}")
    if not flag(top.get("use_vllm")):
        log.set("use_vllm" if top.has("use_vllm") else "(no use_vllm)", False, "rl.generation", "hf")
        for name in ("vllm_mode", "vllm_device", *(k for k in GRPO_KEYS if k.startswith("vllm_"))):
            top.ignore(name, "use_vllm is not true: generation runs in the training process")
        return
    if top.has("vllm_device"):
        mode, note = "vllm-server", f"vllm_device={top.get('vllm_device')}: TRL < 0.16 put vLLM on a GPU of its own"
    else:
        raw = str(top.get("vllm_mode", "colocate")).lower()
        mode, note = (
            ("vllm-server" if raw == "server" else "vllm-colocate"),
            "" if top.has("vllm_mode") else "TRL's default",
        )
    extra = " + vllm_device" if top.has("vllm_device") else " + vllm_mode" if top.has("vllm_mode") else ""
    log.set("use_vllm" + extra, True, "rl.generation", mode, note)
    _number(top, log, "vllm_gpu_memory_utilization", "rl.vllm_gpu_memory_utilization")
    _count(top, log, "vllm_tensor_parallel_size", "rl.vllm_tensor_parallel_size")
    if top.has("vllm_enable_sleep_mode"):
        if mode == "vllm-colocate":
            log.set(
                "vllm_enable_sleep_mode",
                top.get("vllm_enable_sleep_mode"),
                "rl.vllm_enable_sleep_mode",
                bool(flag(top.get("vllm_enable_sleep_mode"))),
            )
        else:
            top.ignore("vllm_enable_sleep_mode", "sleep mode applies to the colocated engine only")


def _number(top: Section, log: ImportLog, name: str, plan_key: str) -> None:
    if top.has(name):
        value = number(top.get(name))
        if value is None or value < 0:
            log.ignore(name, top.data[name], "not a number >= 0")
        else:
            log.set(name, top.data[name], plan_key, value)


def _count(top: Section, log: ImportLog, name: str, plan_key: str) -> None:
    if top.has(name):
        value = count(top.get(name))
        if value is None:
            log.ignore(name, top.data[name], "not a whole number >= 1")
        else:
            log.set(name, top.data[name], plan_key, value)
