"""DeepSpeed JSON -> plan keys (the keys of deepspeed/runtime/config.py, zero/config.py, precision_config.py and
activation_checkpointing/config.py, as `core.files.deepspeed_export` writes them; v0.19.6).

- ``train_batch_size = train_micro_batch_size_per_gpu x gradient_accumulation_steps x data-parallel size``
  (`_batch_assertion`): the sizes given resolve against the plan's data-parallel GPU count (`core.files.importers.
  apply`).
- ``"auto"`` is read as the HF Trainer fills it (transformers integrations/deepspeed.py
  ``HfTrainerDeepSpeedConfig.trainer_config_process`` and ``trainer_config_finalize``, `TRAINER_FILLS`): the plan
  stands for the Trainer's arguments, so ``bf16.enabled: "auto"`` is on when the plan computes in bf16 (the
  Trainer's ``--bf16``) and DeepSpeed then keeps bf16 weights with an fp32 master (bf16-master); the batch sizes,
  the learning rate and the clipping are the plan's; ``reduce_bucket_size`` is ``hidden_size x hidden_size``.
- ``fp16.enabled`` -> fp16-master, ``bf16.enabled`` -> bf16-master (bf16-pure with ``bf16_master_weights_and_grads``
  and ``bf16_optimizer_states``), ``torch_autocast`` -> bf16/fp16-autocast, none of them -> fp32 (DeepSpeed's
  default); ``fp16.loss_scale`` 0 -> dynamic, 1 -> none, other -> static.
- ``zero_optimization.stage`` (default 0), ``offload_optimizer``/``offload_param`` ``device``.
- an ``activation_checkpointing`` table -> full checkpointing (DeepSpeed checkpoints whole blocks); without one the
  plan's checkpointing is kept (the model's own ``gradient_checkpointing_enable`` is not in the JSON).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vramplan.core.files.importers.config_values import AUTO, count, flag, number
from vramplan.core.files.importers.record import ImportLog, Section
from vramplan.core.plan.schema.precision import REGIMES

if TYPE_CHECKING:
    from vramplan.core.plan.schema.plan import Plan

# What the HF Trainer fills each "auto" with: transformers integrations/deepspeed.py HfTrainerDeepSpeedConfig
# trainer_config_process (from TrainingArguments) and trainer_config_finalize (from the model and the step count)
TRAINER_FILLS: dict[str, str] = {
    "train_micro_batch_size_per_gpu": "per_device_train_batch_size",
    "gradient_accumulation_steps": "gradient_accumulation_steps",
    "train_batch_size": "world_size x per_device_train_batch_size x gradient_accumulation_steps",
    "gradient_clipping": "max_grad_norm",
    "optimizer.params.lr": "learning_rate",
    "optimizer.params.betas": "[adam_beta1, adam_beta2]",
    "optimizer.params.eps": "adam_epsilon",
    "optimizer.params.weight_decay": "weight_decay",
    "scheduler.params.warmup_min_lr": "0",
    "scheduler.params.warmup_max_lr": "learning_rate",
    "scheduler.params.warmup_num_steps": "the warmup steps",
    "scheduler.params.total_num_steps": "num_training_steps",
    "fp16.enabled": "--fp16 (amp backend)",
    "bf16.enabled": "--bf16",
    "amp.enabled": "--fp16 with the apex backend",
    "amp.opt_level": "fp16_opt_level",
    "zero_optimization.reduce_bucket_size": "hidden_size x hidden_size",
    "zero_optimization.stage3_prefetch_bucket_size": "0.9 x hidden_size x hidden_size",
    "zero_optimization.stage3_param_persistence_threshold": "10 x hidden_size",
}
NOT_PRECISION = "not modelled (the precision regime is read from enabled)"
TUNING = "a DeepSpeed tuning knob the estimate does not model (it assumes DeepSpeed's defaults)"


def read(data: dict[str, Any], log: ImportLog) -> None:
    top = log.section(data)
    _batch(top, log)
    clip = top.get("gradient_clipping")
    if clip is not None:
        value = number(clip)
        if clip == AUTO:
            log.auto("gradient_clipping", "training.grad_clip", _plans("gradient_clipping", "grad_clip"))
        elif value is None:
            log.ignore("gradient_clipping", clip, "not a number")
        else:
            log.set(
                "gradient_clipping",
                clip,
                "training.grad_clip",
                value if value > 0 else None,
                "" if value > 0 else "0 turns clipping off",
            )
    _precision(top, log)
    _optimizer(top, log)
    _zero(top, log)
    _checkpointing(top, log)
    tp = top.sub("tensor_parallel")
    size = count(tp.get("autotp_size"))
    if size is not None:
        log.set(tp.key("autotp_size"), size, "strategy.tensor_parallel", size)
    tp.rest(TUNING)
    top.ignore("_vramplan", "vramplan's own notes (written by vramplan export)")
    top.ignore("zero_allow_untested_optimizer", "a DeepSpeed sanity-check switch, no memory effect")
    top.ignore("zero_force_ds_cpu_optimizer", "a DeepSpeed sanity-check switch, no memory effect")
    top.rest()


def auto_why(key: str) -> str:
    """``"auto": the HF Trainer fills it with max_grad_norm``: what an ``"auto"`` the plan does not take becomes."""
    return f'"auto": the HF Trainer fills it with {TRAINER_FILLS.get(key, "a TrainingArguments value")}'


def _plans(key: str, name: str, unset: str = "") -> Any:
    """A resolver (`ImportLog.auto`) of an ``"auto"`` the HF Trainer fills from an argument the plan holds as
    ``training.<name>``: the plan's value, said."""

    def resolve(plan: Plan) -> tuple[Any, str]:
        value = getattr(plan.training, name)
        how = f"{auto_why(key)}: the plan's"
        return value, how + (f" (unset; {unset})" if value is None and unset else "")

    return resolve


def _batch_size(slot: str) -> Any:
    """The resolver of an ``"auto"`` batch size: the plan's (the total: data-parallel x micro x accumulation)."""
    key = {"micro": "train_micro_batch_size_per_gpu", "accum": "gradient_accumulation_steps"}.get(
        slot, "train_batch_size"
    )

    def resolve(plan: Plan) -> tuple[Any, str]:
        t = plan.training
        if slot == "micro":
            return t.micro_batch_size, f"{auto_why(key)}: the plan's"
        if slot == "accum":
            return t.grad_accum_steps, f"{auto_why(key)}: the plan's"
        dp, m, g = plan.data_parallel, t.micro_batch_size, t.grad_accum_steps
        return None, f"{auto_why(key)} = {dp} x {m} x {g} = {dp * m * g}"

    return resolve


def _batch(top: Section, log: ImportLog) -> None:
    for name, slot in (
        ("train_micro_batch_size_per_gpu", "micro"),
        ("gradient_accumulation_steps", "accum"),
        ("train_batch_size", "total"),
    ):
        if not top.has(name):
            continue
        value = top.get(name)
        n = count(value)
        if value == AUTO:
            log.batch.auto.add(slot)
            plan_key = {"micro": "training.micro_batch_size", "accum": "training.grad_accum_steps"}.get(slot, "")
            log.auto(name, plan_key, _batch_size(slot))
            continue
        if n is None:
            log.ignore(name, value, "not a whole number >= 1")
            continue
        setattr(log.batch, slot, n)
        log.batch.keys[slot] = name


def _regime(fp16: bool, bf16: bool, pure: bool) -> tuple[str, str]:
    """The regime DeepSpeed runs with these switches on (fp16 first, as DeepSpeed's engine checks it), and how."""
    if fp16:
        return "fp16-master", "fp16 weights and gradients, fp32 master"
    if bf16 and pure:
        return "bf16-pure", "bf16_master_weights_and_grads with bf16_optimizer_states: no fp32 copy"
    if bf16:
        return "bf16-master", "bf16 weights and gradients, fp32 master"
    return "fp32", "DeepSpeed's default: neither fp16 nor bf16 enabled"


def _precision(top: Section, log: ImportLog) -> None:
    fp16, bf16, autocast = top.sub("fp16"), top.sub("bf16"), top.sub("torch_autocast")
    raw = {sec.prefix: sec.get("enabled") for sec in (fp16, bf16, autocast)}
    on = {name: bool(flag(value)) for name, value in raw.items()}
    autos = tuple(name for name in ("fp16", "bf16") if raw[name] == AUTO)
    pure = bool(flag(bf16.get("bf16_master_weights_and_grads")) and flag(bf16.get("bf16_optimizer_states")))
    if raw["torch_autocast"] == AUTO:
        log.ignore("torch_autocast.enabled", AUTO, "the HF Trainer fills only fp16.enabled and bf16.enabled")
    for sec in (fp16, bf16, autocast):
        if sec.has("enabled") and raw[sec.prefix] != AUTO and not on[sec.prefix]:
            log.used(sec.key("enabled"), sec.data["enabled"], "off")
    if autos and not (on["fp16"] or on["bf16"]):
        log.auto(
            " + ".join(f"{name}.enabled" for name in autos),
            "training.precision",
            _trainer_precision(autos, on, pure),
            sets=True,
        )
    elif on["fp16"]:
        log.set("fp16.enabled", True, "training.precision", *_regime(True, False, pure))
        _loss_scale(fp16, log)
    elif on["bf16"]:
        key = "bf16.bf16_master_weights_and_grads" if pure else "bf16.enabled"
        log.set(key, True, "training.precision", *_regime(False, True, pure))
    elif on["torch_autocast"]:
        dtype = str(autocast.get("dtype", "bfloat16")).lower()
        regime = "fp16-autocast" if dtype in ("float16", "fp16", "half", "torch.float16") else "bf16-autocast"
        log.set("torch_autocast.enabled", True, "training.precision", regime, f"dtype {dtype}")
    else:
        log.set("(no fp16/bf16/torch_autocast enabled)", None, "training.precision", *_regime(False, False, False))
    for sec in (fp16, bf16, autocast):
        sec.rest("a loss-scaling or dtype detail with no memory effect" if sec.prefix == "fp16" else NOT_PRECISION)


def _trainer_precision(autos: tuple[str, ...], on: dict[str, bool], pure: bool) -> Any:
    """The resolver of ``fp16.enabled``/``bf16.enabled: "auto"``: the HF Trainer sets them from its ``--fp16`` and
    ``--bf16`` (``fill_match("bf16.enabled", args.bf16 or args.bf16_full_eval)``), which the plan's compute dtype
    stands for; DeepSpeed's engine then keeps 16-bit weights with an fp32 master."""

    def resolve(plan: Plan) -> tuple[Any, str]:
        half = REGIMES[plan.training.regime].half
        fp16 = half == "fp16" if "fp16" in autos else on["fp16"]
        bf16 = half == "bf16" if "bf16" in autos else on["bf16"]
        regime, how = _regime(fp16, bf16, pure)
        trainer = f"--{half}" if half else "neither --bf16 nor --fp16"
        filled = ", ".join(
            f"{name}.enabled {'true' if {'fp16': fp16, 'bf16': bf16}[name] else 'false'}" for name in autos
        )
        return regime, f'"auto": the HF Trainer\'s {trainer} (the plan computes in {half or "fp32"}): {filled}; {how}'

    return resolve


def _loss_scale(fp16: Section, log: ImportLog) -> None:
    if not fp16.has("loss_scale"):
        return
    raw = fp16.get("loss_scale")
    scale = number(raw)
    if scale is None:
        log.ignore(fp16.key("loss_scale"), raw, "not a number")
        return
    mode = "dynamic" if scale == 0 else "none" if scale == 1 else "static"
    log.set(fp16.key("loss_scale"), raw, "training.loss_scaling", mode)


def _optimizer(top: Section, log: ImportLog) -> None:
    if not top.has("optimizer"):
        return
    opt = top.sub("optimizer")
    params = opt.sub("params")
    kind = str(opt.get("type", "")).strip()
    name = kind.lower()
    key = opt.key("type")
    if name in ("adam", "adamw", "fusedadam", "cpuadam", "deepspeedcpuadam"):
        note = "Adam's L2 weight decay differs from AdamW's, not its memory" if name == "adam" else ""
        log.set(key, kind, "training.optimizer", "adamw", note)
        torch_adam = flag(params.get("torch_adam"))
        if torch_adam:
            impl = "for-loop" if flag(params.get("foreach")) is False else "foreach"
            log.set(params.key("torch_adam"), True, "training.optimizer_impl", impl, "torch.optim.AdamW")
        elif params.has("torch_adam") or name in ("fusedadam", "adam", "adamw"):
            log.set(key, kind, "training.optimizer_impl", "fused", "DeepSpeed's FusedAdam (or CPU Adam offloaded)")
    elif name == "lion":
        log.set(key, kind, "training.optimizer", "lion")
    elif name == "sgd":
        momentum = number(params.get("momentum"))
        log.set(key, kind, "training.optimizer", "sgd-momentum" if momentum else "sgd")
        for impl_key, impl in (("foreach", "foreach"), ("fused", "fused")):
            if flag(params.get(impl_key)):
                log.set(params.key(impl_key), True, "training.optimizer_impl", impl)
        if flag(params.get("foreach")) is False:
            log.set(params.key("foreach"), False, "training.optimizer_impl", "for-loop")
    elif name == "adafactor":
        log.set(key, kind, "training.optimizer", "adafactor")
    else:
        log.ignore(key, kind, "not an optimizer the plan knows (adamw, lion, sgd, adafactor); the plan's is kept")
    lr = params.get("lr")
    if lr is not None:
        value = number(lr)
        if lr == AUTO:
            log.auto(params.key("lr"), "training.learning_rate", _plans(params.key("lr"), "learning_rate"))
        elif value is not None and value > 0:
            log.set(params.key("lr"), lr, "training.learning_rate", value)
        else:
            log.ignore(params.key("lr"), lr, "not a positive number")
    params.rest("an optimizer hyperparameter with no memory effect")
    opt.rest()


def _zero(top: Section, log: ImportLog) -> None:
    zero = top.sub("zero_optimization")
    stage_raw = zero.get("stage", 0)
    stage = stage_raw if isinstance(stage_raw, int) and not isinstance(stage_raw, bool) else None
    if stage is None or not 0 <= stage <= 3:
        log.ignore(zero.key("stage"), stage_raw, "not a ZeRO stage (0-3); the plan's is kept")
    else:
        key = zero.key("stage") if zero.has("stage") else "(no zero_optimization.stage)"
        log.set(
            key,
            stage_raw if zero.has("stage") else None,
            "strategy.zero_stage",
            stage,
            "" if zero.has("stage") else "DeepSpeed's default",
        )
    for name, plan_key in (
        ("offload_optimizer", "strategy.offload_optimizer"),
        ("offload_param", "strategy.offload_parameters"),
    ):
        off = zero.sub(name)
        device = str(off.get("device", "none")).lower() if zero.has(name) else "none"
        if device in ("none", "cpu", "nvme"):
            log.set(
                off.key("device") if zero.has(name) else f"(no {zero.key(name)})",
                device if zero.has(name) else None,
                plan_key,
                device,
                "" if zero.has(name) else "not offloaded",
            )
        else:
            log.ignore(off.key("device"), device, "not an offload device (none, cpu, nvme)")
        off.rest("where and how it offloads, not how much")
    bucket = zero.get("reduce_bucket_size")
    if bucket == AUTO:
        log.auto(zero.key("reduce_bucket_size"), "overhead.zero_bucket_elements", _hidden_squared, sets=True)
    elif bucket is not None:
        n = number(bucket)
        if n is not None and n >= 0:
            log.set(zero.key("reduce_bucket_size"), bucket, "overhead.zero_bucket_elements", int(n))
        else:
            log.ignore(zero.key("reduce_bucket_size"), bucket, "not a number")
    zero.rest(TUNING)


def _hidden_squared(plan: Plan) -> tuple[Any, str]:
    """``reduce_bucket_size: "auto"``: ``hidden_size x hidden_size`` (trainer_config_finalize), which is also the
    plan's default (``overhead.zero_bucket_elements`` unset)."""
    h = plan.model.hidden_size
    return None, f"{auto_why('zero_optimization.reduce_bucket_size')} = {h:,} x {h:,} = {h * h:,} elements"


def _checkpointing(top: Section, log: ImportLog) -> None:
    if not top.has("activation_checkpointing"):
        log.used(
            "(no activation_checkpointing)",
            None,
            "the plan's checkpointing is kept: the model's own gradient_checkpointing_enable() is not in the JSON",
        )
        return
    ac = top.sub("activation_checkpointing")
    if not ac.data:  # empty or not a table: named as ignored by `sub`, the plan's checkpointing kept
        return
    how = "partition_activations" if flag(ac.get("partition_activations")) else ""
    key = ac.key(how) if how else "activation_checkpointing"
    log.set(
        key,
        True if how else "{...}",
        "strategy.gradient_checkpointing",
        "full",
        "DeepSpeed checkpoints whole blocks" + ("; partitioned across model-parallel ranks" if how else ""),
    )
    ac.rest(
        "how checkpoints are kept, not whether (partitioning splits them over tensor-parallel ranks only; "
        "cpu_checkpointing moves deepspeed.checkpointing's checkpoints only)"
    )
