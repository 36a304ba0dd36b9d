"""axolotl YAML -> plan keys (axolotl's examples/*.yml; the keys of axolotl's config schema, handed to HF Trainer
and PEFT).

``base_model`` (a preset where one matches), ``adapter`` (lora/qlora) with ``load_in_4bit`` (NF4 via
bitsandbytes) or ``load_in_8bit``, ``lora_r``, ``lora_dropout``, ``lora_target_modules``/``lora_target_linear``;
``micro_batch_size``, ``gradient_accumulation_steps``, ``sequence_len``, ``gradient_checkpointing`` (with
``gradient_checkpointing_kwargs.use_reentrant``), ``activation_offloading``, ``optimizer`` (HF Trainer names),
``bf16``/``fp16``, ``flash_attention``/``sdp_attention``/``xformers_attention``/``attention``, ``torch_compile``,
``max_grad_norm``, Liger's fused cross-entropy; ``fsdp`` / ``fsdp_config`` (both key spellings, with or without
``fsdp_``) and ``deepspeed`` (a path: named, not followed).
"""

from __future__ import annotations

from typing import Any

from vramplan.core.files.importers import trainer
from vramplan.core.files.importers.config_values import flag
from vramplan.core.files.importers.models import read_model
from vramplan.core.files.importers.record import ImportLog, Section

# axolotl/utils/schemas/config.py: gradient_checkpointing: Literal["offload", "offload_disk"] | bool | None
OFFLOADED_CHECKPOINTING = ("offload", "offload_disk")

DATA = "data, logging or saving: not a memory or step-time setting"


def read(data: dict[str, Any], log: ImportLog) -> None:
    top = log.section(data)
    read_model(log, "base_model", top.get("base_model"))
    method = _adapter(top, log)
    trainer.counts(
        top,
        log,
        (
            ("micro_batch_size", "training.micro_batch_size"),
            ("gradient_accumulation_steps", "training.grad_accum_steps"),
            ("sequence_len", "training.seq_len"),
        ),
    )
    if top.has("gradient_checkpointing"):
        on = flag(top.get("gradient_checkpointing"))
        raw = top.get("gradient_checkpointing")
        if isinstance(raw, str) and raw.strip().lower() in OFFLOADED_CHECKPOINTING:  # checkpoints kept on the host
            log.set("gradient_checkpointing", raw, "strategy.gradient_checkpointing", "full", "checkpointed blocks")
        elif on is None and raw is not None:  # "maybe" was read as full
            log.ignore("gradient_checkpointing", raw, "not a value axolotl takes (true, false, offload, offload_disk)")
        else:
            log.set("gradient_checkpointing", raw, "strategy.gradient_checkpointing", "full" if on else "none")
    _checkpoint_kwargs(top, log)
    if top.has("activation_offloading"):
        on = flag(top.get("activation_offloading"))
        log.set(
            "activation_offloading",
            top.get("activation_offloading"),
            "strategy.activation_offload",
            "cpu" if on or on is None else "none",
        )
    uses_ds = trainer.trainer_arguments(top, log, "optimizer")
    _fsdp(top, log)
    zero3 = log.changes.get("strategy.zero_stage") == 3 and not uses_ds
    trainer.precision(top, log, method, uses_ds, fsdp_zero3=zero3)
    top.ignore("tf32", "TF32 matmuls change speed, not memory (fp32 runs only)")
    _attention(top, log)
    if top.has("torch_compile"):
        on = flag(top.get("torch_compile"))
        log.set("torch_compile", top.get("torch_compile"), "strategy.compile", bool(on) or on is None)
    for name in ("liger_fused_linear_cross_entropy", "cut_cross_entropy"):
        if flag(top.get(name)):
            log.set(name, True, "strategy.fused_cross_entropy", True, "no full-vocabulary logits kept")
    for name in ("model_type", "tokenizer_type", "base_model_config", "trust_remote_code"):
        top.ignore(name, "how the model is loaded; the architecture comes from the model preset")
    top.ignore("sample_packing", "packing fills each sequence to sequence_len: the estimate assumes full sequences")
    top.ignore("pad_to_sequence_len", "the estimate assumes full sequences of sequence_len")
    top.rest(DATA)


def _adapter(top: Section, log: ImportLog) -> str:
    adapter = str(top.get("adapter") or "").lower()
    four, eight = flag(top.get("load_in_4bit")), flag(top.get("load_in_8bit"))
    if adapter not in ("", "lora", "qlora"):
        log.ignore("adapter", adapter, "an adapter the plan does not model (lora, qlora); full fine-tuning assumed")
        adapter = ""
    if not adapter:
        log.set("(no adapter)", None, "training.method", "full")
        for name in (
            "lora_r",
            "lora_alpha",
            "lora_dropout",
            "lora_target_modules",
            "lora_target_linear",
            "lora_model_dir",
        ):
            top.ignore(name, "no adapter: full fine-tuning")
        return "full"
    method = "qlora" if adapter == "qlora" or four else "lora"
    log.set("adapter", adapter, "training.method", method)
    if method == "qlora":
        log.set(
            "load_in_4bit" if four else "adapter",
            True if four else adapter,
            "training.quantization",
            "nf4",
            "bitsandbytes NF4 (axolotl's bnb_4bit_quant_type default)",
        )
        top.ignore("load_in_8bit", "load_in_4bit decides")
    elif eight:
        log.set("load_in_8bit", True, "training.quantization", "int8", "bitsandbytes LLM.int8 base")
        top.ignore("load_in_4bit", "load_in_8bit decides")
    else:
        log.set("(no load_in_4bit/8bit)", None, "training.quantization", "none", "a 16-bit base")
        top.taken.update(("load_in_4bit", "load_in_8bit"))
    trainer.lora_rank_and_dropout(top, log, "lora_r")
    if flag(top.get("lora_target_linear")):
        log.set("lora_target_linear", True, "training.lora_targets", ["all-linear"])
        top.ignore("lora_target_modules", "lora_target_linear decides")
    elif top.get("lora_target_modules"):
        trainer.lora_target_modules(top, log, "lora_target_modules")
    top.ignore("lora_alpha", "a scale, no memory effect")
    top.ignore("lora_model_dir", "where adapters are loaded from")
    return method


def _checkpoint_kwargs(top: Section, log: ImportLog) -> None:
    """``gradient_checkpointing_kwargs.use_reentrant``: axolotl hands it to transformers'
    ``gradient_checkpointing_enable(gradient_checkpointing_kwargs=...)``, which passes it to
    torch.utils.checkpoint.checkpoint (reentrant: a torch.autograd.Function; not: saved-tensor hooks)."""
    kwargs = top.sub("gradient_checkpointing_kwargs")
    if kwargs.has("use_reentrant"):
        raw = kwargs.get("use_reentrant")
        on = flag(raw)
        if on is None:
            log.ignore(kwargs.key("use_reentrant"), raw, "expected true or false; the stack's default is kept")
        else:
            impl = "reentrant" if on else "non-reentrant"
            log.set(kwargs.key("use_reentrant"), raw, "strategy.checkpoint_impl", impl, "torch.utils.checkpoint")
    kwargs.rest("a checkpointing option that does not change what is kept")


def _fsdp(top: Section, log: ImportLog) -> None:
    on = trainer.fsdp_words(top, "fsdp", log)
    cfg = top.sub("fsdp_config")
    version = top.get("fsdp_version") or cfg.get("fsdp_version") or cfg.get("version")
    if version is not None:
        log.ignore("fsdp_version", version, "FSDP1 and FSDP2 shard alike (the plan's ZeRO stage)")
    if not cfg.data:
        return
    get = {str(k).removeprefix("fsdp_"): str(k) for k in cfg.data}
    if not on and version is not None:  # axolotl's FSDP2 form: fsdp_version + fsdp_config, no fsdp words
        reshard = flag(cfg.get(get.get("reshard_after_forward", "reshard_after_forward"), True))
        zero = 2 if reshard is False else 3
        log.set(
            cfg.key(get.get("reshard_after_forward", "reshard_after_forward")), reshard, "strategy.zero_stage", zero
        )
        on = True
    if not on:
        cfg.rest("fsdp is off")
        return
    if "offload_params" in get:
        off = flag(cfg.get(get["offload_params"]))
        device = "cpu" if off else "none"
        zero = log.changes.get("strategy.zero_stage", 3)
        log.set(cfg.key(get["offload_params"]), off, "strategy.offload_optimizer", device)
        log.set(cfg.key(get["offload_params"]), off, "strategy.offload_parameters", device if zero == 3 else "none")
    if "activation_checkpointing" in get:
        ac = flag(cfg.get(get["activation_checkpointing"]))
        log.set(
            cfg.key(get["activation_checkpointing"]),
            ac,
            "strategy.gradient_checkpointing",
            "full" if ac else log.changes.get("strategy.gradient_checkpointing", "none"),
        )
    cfg.rest("how modules are wrapped, loaded or saved; the estimate assumes one FSDP unit per block")


def _attention(top: Section, log: ImportLog) -> None:
    for name in ("flash_attention", "sdp_attention", "xformers_attention", "flex_attention"):
        if flag(top.get(name)):
            log.set(name, True, "strategy.attention", "flash", "no seq x seq score matrix kept")
            return
    raw = top.get("attention")
    if raw is not None:
        eager = str(raw).lower() == "eager"
        log.set("attention", raw, "strategy.attention", "eager" if eager else "flash")
    for name in ("flash_attention", "sdp_attention", "xformers_attention", "flex_attention"):
        top.ignore(name, "off")
