"""LLaMA-Factory YAML (examples/train_*/*.yaml: ``llamafactory-cli train FILE``) -> plan keys.

``model_name_or_path`` (a preset where one matches), ``finetuning_type`` (full, lora; freeze is not modelled),
``lora_rank``/``lora_dropout``/``lora_target`` (``all`` = every linear), ``quantization_bit`` 4 (QLoRA, bitsandbytes
``quantization_type`` nf4/fp4, ``double_quantization``) or 8 (LLM.int8); ``per_device_train_batch_size``,
``gradient_accumulation_steps``, ``cutoff_len``; ``bf16``/``fp16``/``pure_bf16``, ``optim``, ``flash_attn``,
``enable_liger_kernel``, ``max_grad_norm``; gradient checkpointing is on unless ``disable_gradient_checkpointing``
(LLaMA-Factory's model loader enables it by default), reentrant unless ``use_reentrant_gc: false``; ``deepspeed`` (a
path: named, not followed), without it DDP (`trainer.plain_ddp`).
"""

from __future__ import annotations

from typing import Any

from vramplan.core.files.importers import trainer
from vramplan.core.files.importers.config_values import count, flag
from vramplan.core.files.importers.models import read_model
from vramplan.core.files.importers.record import ImportLog, Section

DATA = "data, logging, evaluation or saving: not a memory or step-time setting"


def read(data: dict[str, Any], log: ImportLog) -> None:
    top = log.section(data)
    read_model(log, "model_name_or_path", top.get("model_name_or_path"))
    stage = str(top.get("stage", "sft")).lower()
    if stage in ("dpo", "kto", "ppo", "rm"):
        log.ignore(
            "stage",
            stage,
            f"{stage} keeps a reference or reward model (or pairs of sequences) the estimate "
            "does not count: the estimate is of the policy's supervised step",
        )
    method = _method(top, log)
    trainer.counts(
        top,
        log,
        (
            ("per_device_train_batch_size", "training.micro_batch_size"),
            ("gradient_accumulation_steps", "training.grad_accum_steps"),
            ("cutoff_len", "training.seq_len"),
        ),
    )
    off = flag(top.get("disable_gradient_checkpointing", False))
    key = (
        "disable_gradient_checkpointing"
        if top.has("disable_gradient_checkpointing")
        else "(no disable_gradient_checkpointing)"
    )
    log.set(
        key,
        bool(off),
        "strategy.gradient_checkpointing",
        "none" if off else "full",
        "" if top.has("disable_gradient_checkpointing") else "LLaMA-Factory checkpoints by default",
    )
    if top.has("use_reentrant_gc"):  # model_args.use_reentrant_gc (default true) -> gradient_checkpointing_kwargs
        on = flag(top.get("use_reentrant_gc"))
        if on is None:
            log.ignore("use_reentrant_gc", top.get("use_reentrant_gc"), "expected true or false")
        else:
            impl = "reentrant" if on else "non-reentrant"
            log.set("use_reentrant_gc", on, "strategy.checkpoint_impl", impl, "torch.utils.checkpoint's use_reentrant")
    uses_ds = trainer.trainer_arguments(top, log, "optim")
    if not uses_ds:
        trainer.plain_ddp(log, "llamafactory")
    trainer.precision(top, log, method, uses_ds, pure_key="pure_bf16")
    if top.has("flash_attn"):
        raw = str(top.get("flash_attn")).lower()
        log.set("flash_attn", raw, "strategy.attention", "eager" if raw in ("disabled", "eager") else "flash")
    if flag(top.get("enable_liger_kernel")):
        log.set("enable_liger_kernel", True, "strategy.fused_cross_entropy", True, "Liger's fused linear cross-entropy")
    top.ignore("use_unsloth", "Unsloth's kernels are not modelled")
    top.ignore("template", DATA)
    top.rest(DATA)


def _method(top: Section, log: ImportLog) -> str:
    kind = str(top.get("finetuning_type", "lora")).lower()
    key = "finetuning_type" if top.has("finetuning_type") else "(no finetuning_type)"
    bits = count(top.get("quantization_bit"))
    if kind not in ("lora", "full"):
        log.ignore(key, kind, "not modelled (full, lora): the plan's method is kept")
        top.rest("finetuning_type is not modelled")
        return "full"
    if kind == "full":
        log.set(key, kind, "training.method", "full")
        for name in ("lora_rank", "lora_alpha", "lora_dropout", "lora_target", "quantization_bit"):
            top.ignore(name, "full fine-tuning")
        return "full"
    method_q = str(top.get("quantization_method", "bitsandbytes")).lower()
    qkey = "quantization_bit" + (" + quantization_method" if top.has("quantization_method") else "")
    if bits is not None and method_q not in ("bnb", "bitsandbytes"):
        log.ignore(qkey, f"{bits}, {method_q}", "only bitsandbytes quantization is modelled; a 16-bit base assumed")
        bits = None
    method = "qlora" if bits == 4 else "lora"
    log.set(key, kind, "training.method", method, "LLaMA-Factory's default" if key.startswith("(") else "")
    if bits == 4:
        qtype = str(top.get("quantization_type", "nf4")).lower()
        log.set(qkey, f"4, {method_q}", "training.quantization", qtype if qtype in ("nf4", "fp4") else "nf4")
        if top.has("double_quantization"):
            log.set(
                "double_quantization",
                top.get("double_quantization"),
                "training.double_quantization",
                bool(flag(top.get("double_quantization"))),
            )
    elif bits == 8:
        log.set(qkey, f"8, {method_q}", "training.quantization", "int8", "bitsandbytes LLM.int8 base")
    elif top.has("quantization_bit") and method_q in ("bnb", "bitsandbytes"):
        log.ignore("quantization_bit", top.get("quantization_bit"), "only 4 and 8 bits (bitsandbytes) are modelled")
    trainer.lora_rank_and_dropout(top, log, "lora_rank")
    trainer.lora_target_modules(top, log, "lora_target")
    top.ignore("lora_alpha", "a scale, no memory effect")
    return method
