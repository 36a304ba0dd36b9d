"""Settings that axolotl and LLaMA-Factory pass to HF Trainer (TrainingArguments): ``optim``, ``bf16``/``fp16``,
``deepspeed`` (a path: named, not followed), ``fsdp`` (``full_shard auto_wrap offload``), ``max_grad_norm``; and
the whole-number settings every recipe has (batch size, accumulation, sequence length; torchtune's too), and
the LoRA rank and dropout they hand to PEFT."""

from __future__ import annotations

from typing import Any

from vramplan.core.files.importers.config_values import HF_OPTIMIZERS, count, flag, lora_targets, number
from vramplan.core.files.importers.record import ImportLog, Section


def optimizer(sec: Section, name: str, log: ImportLog) -> None:
    if not sec.has(name):
        return
    raw = sec.get(name)
    found = HF_OPTIMIZERS.get(str(raw).strip().lower())
    if found is None:
        log.ignore(sec.key(name), raw, "an optimizer the plan does not model; the plan's is kept")
        return
    log.set(sec.key(name), raw, "training.optimizer", found[0])
    if found[1] is not None:
        log.set(sec.key(name), raw, "training.optimizer_impl", found[1])


def precision(
    sec: Section, log: ImportLog, method: str, deepspeed: bool, pure_key: str | None = None, fsdp_zero3: bool = False
) -> None:
    """``bf16``/``fp16`` (true or auto) as HF Trainer runs them: with a DeepSpeed config, DeepSpeed's 16-bit
    weights and fp32 master; for LoRA/QLoRA, a bf16 base (bf16-pure); for full fine-tuning, autocast over fp32
    weights (``pure_key``: LLaMA-Factory's pure_bf16, the whole model in bf16)."""
    if pure_key and flag(sec.get(pure_key)):
        log.set(sec.key(pure_key), True, "training.precision", "bf16-pure", "the model and optimizer in bf16")
        sec.ignore("bf16", "pure_bf16 decides")
        sec.ignore("fp16", "pure_bf16 decides")
        return
    for half in ("bf16", "fp16"):
        raw = sec.get(half)
        value = flag(raw)
        if value or raw == "auto":
            note = "auto: bf16 where the GPU has it" if raw == "auto" else ""
            if deepspeed:
                regime, how = f"{half}-master", "DeepSpeed: 16-bit weights, fp32 master"
            elif fsdp_zero3 and half == "bf16" and method == "full":
                regime, how = "bf16-fsdp", "FSDP mixed precision over fp32 sharded parameters"
            elif method != "full":
                regime, how = ("bf16-pure" if half == "bf16" else "fp16-autocast"), "a 16-bit frozen base"
            else:
                regime, how = f"{half}-autocast", "HF Trainer AMP over fp32 weights"
            log.set(sec.key(half), raw, "training.precision", regime, "; ".join(x for x in (how, note) if x))
            sec.ignore("fp16" if half == "bf16" else "bf16", f"{half} decides")
            return
    if sec.has("bf16") or sec.has("fp16"):
        log.set(
            "bf16/fp16",
            False,
            "training.precision",
            "fp32" if method == "full" else "bf16-pure",
            "no mixed precision" if method == "full" else "the plan's default for adapters",
        )


def deepspeed_path(sec: Section, name: str, log: ImportLog) -> bool:
    """A ``deepspeed: path`` is named as NOT FOLLOWED; True when one is given (the run uses DeepSpeed)."""
    raw = sec.get(name)
    if not raw:
        if sec.has(name):
            sec.taken.add(name)
        return False
    log.ignore(
        sec.key(name),
        raw,
        f"NOT FOLLOWED: import {raw} with --from for its ZeRO stage, offload and batch sizes (the plan's are kept)",
    )
    return True


def fsdp_words(sec: Section, name: str, log: ImportLog) -> bool:
    """HF Trainer's ``fsdp`` (``full_shard auto_wrap offload`` or a list of them); True when FSDP is on."""
    raw: Any = sec.get(name)
    words = raw.split() if isinstance(raw, str) else [str(w) for w in raw] if isinstance(raw, list) else []
    words = [w.lower() for w in words]
    if not words or words == ["false"]:
        return False
    zero = 3 if "full_shard" in words or "hybrid_shard" in words else 2 if "shard_grad_op" in words else None
    if zero is None:
        log.ignore(sec.key(name), raw, "no sharding strategy in it (full_shard, shard_grad_op)")
        return False
    log.set(sec.key(name), raw, "strategy.zero_stage", zero)
    device = "cpu" if "offload" in words else "none"
    log.set(sec.key(name), raw, "strategy.offload_optimizer", device)
    log.set(sec.key(name), raw, "strategy.offload_parameters", device if zero == 3 else "none")
    return True


# Launched without a DeepSpeed or FSDP config, each of these runs one process per GPU under DDP: transformers
# trainer.py Trainer._wrap_model wraps the model in nn.parallel.DistributedDataParallel when neither is set
LAUNCHERS = {
    "trl": "accelerate launch without a DeepSpeed or FSDP config",
    "axolotl": "axolotl train (accelerate launch)",
    "llamafactory": "llamafactory-cli train (torchrun)",
}


def plain_ddp(log: ImportLog, tool: str) -> None:
    """No ``deepspeed`` and no ``fsdp`` in the file: the HF Trainer runs DDP, every GPU holding the whole model and
    its optimizer (said as the default assumed: an accelerate config given on the command line would change it)."""
    key, how = "(no deepspeed or fsdp)", f"DDP under {LAUNCHERS[tool]}: every GPU holds the whole model"
    log.set(key, None, "strategy.zero_stage", 0, how)
    log.set(key, None, "strategy.offload_optimizer", "none", "DDP does not offload")
    log.set(key, None, "strategy.offload_parameters", "none", "DDP does not offload")


def grad_clip(sec: Section, name: str, log: ImportLog) -> None:
    if sec.has(name):
        value = number(sec.get(name))
        if value is None:
            log.ignore(sec.key(name), sec.get(name), "not a number")
        else:
            log.set(sec.key(name), sec.get(name), "training.grad_clip", value if value > 0 else None)


def counts(sec: Section, log: ImportLog, pairs: tuple[tuple[str, str], ...]) -> None:
    """Whole-number settings (batch size, accumulation, sequence length): each read into its plan key, or named as
    ignored when it is not a whole number >= 1."""
    for name, plan_key in pairs:
        if sec.has(name):
            n = count(sec.get(name))
            if n is None:
                log.ignore(name, sec.get(name), "not a whole number >= 1")
            else:
                log.set(name, sec.get(name), plan_key, n)


def trainer_arguments(sec: Section, log: ImportLog, optim_key: str) -> bool:
    """What axolotl and LLaMA-Factory pass on to HF Trainer alike: the optimizer (under `optim_key`), its learning
    rate, ``max_grad_norm`` and a ``deepspeed`` config path (named, not followed); returns whether that path is set."""
    optimizer(sec, optim_key, log)
    lr = number(sec.get("learning_rate"))
    if lr is not None and lr > 0:
        log.set("learning_rate", sec.data["learning_rate"], "training.learning_rate", lr)
    grad_clip(sec, "max_grad_norm", log)
    return deepspeed_path(sec, "deepspeed", log)


def lora_target_modules(sec: Section, log: ImportLog, key: str) -> None:
    """PEFT's ``LoraConfig.target_modules`` under the tool's own name ``key`` (axolotl and TRL
    ``lora_target_modules``, LLaMA-Factory ``lora_target``): the projections the plan adapts; a name it does not
    adapt is said, never dropped silently."""
    if not sec.has(key):
        return
    targets, unknown = lora_targets(sec.get(key))
    if targets:
        log.set(key, sec.data[key], "training.lora_targets", list(targets))
    for name in unknown:  # the entry, not the key: the key itself was read
        log.ignore(f"{key}[{name}]", name, "not a projection the plan adapts")


def lora_rank_and_dropout(sec: Section, log: ImportLog, rank_key: str) -> None:
    """PEFT's ``LoraConfig`` rank (``r``, under the tool's own name ``rank_key``) and ``lora_dropout``, as axolotl
    and LLaMA-Factory pass them on."""
    rank = count(sec.get(rank_key))
    if rank is not None:
        log.set(rank_key, rank, "training.lora_rank", rank)
    dropout = number(sec.get("lora_dropout"))
    if dropout is not None:
        log.set("lora_dropout", dropout, "training.lora_dropout", dropout)
