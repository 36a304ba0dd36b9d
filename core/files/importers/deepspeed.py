"""DeepSpeed JSON -> plan keys (the keys of deepspeed/runtime/config.py, zero/config.py, precision_config.py and
activation_checkpointing/config.py, as `core.files.deepspeed_export` writes them; v0.19.6).

- ``train_batch_size = train_micro_batch_size_per_gpu x gradient_accumulation_steps x data-parallel size``
  (`_batch_assertion`): the sizes given resolve against the plan's data-parallel GPU count (`core.files.importers.
  apply`); ``"auto"`` (HF Trainer fills it) keeps the plan's value.
- ``fp16.enabled`` -> fp16-master, ``bf16.enabled`` -> bf16-master (bf16-pure with ``bf16_master_weights_and_grads``
  and ``bf16_optimizer_states``), ``torch_autocast`` -> bf16/fp16-autocast, none of them -> fp32 (DeepSpeed's
  default); ``fp16.loss_scale`` 0 -> dynamic, 1 -> none, other -> static.
- ``zero_optimization.stage`` (default 0), ``offload_optimizer``/``offload_param`` ``device``.
- an ``activation_checkpointing`` table -> full checkpointing (DeepSpeed checkpoints whole blocks); without one the
  plan's checkpointing is kept (the model's own ``gradient_checkpointing_enable`` is not in the JSON).
"""

from __future__ import annotations

from typing import Any

from vramplan.core.files.importers.config_values import AUTO, count, flag, number
from vramplan.core.files.importers.record import ImportLog, Section

AUTO_WHY = '"auto": HF Trainer / accelerate fill it from TrainingArguments; the plan\'s value is kept'
NOT_PRECISION = "not modelled (the precision regime is read from enabled)"
TUNING = "a DeepSpeed tuning knob the estimate does not model (it assumes DeepSpeed's defaults)"


def read(data: dict[str, Any], log: ImportLog) -> None:
    top = log.section(data)
    _batch(top, log)
    clip = top.get("gradient_clipping")
    if clip is not None:
        value = number(clip)
        if value is None:
            log.ignore("gradient_clipping", clip, AUTO_WHY if clip == AUTO else "not a number")
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
        if n is None:
            log.ignore(name, value, AUTO_WHY if value == AUTO else "not a whole number >= 1")
            continue
        setattr(log.batch, slot, n)
        log.batch.keys[slot] = name


def _precision(top: Section, log: ImportLog) -> None:
    fp16, bf16, autocast = top.sub("fp16"), top.sub("bf16"), top.sub("torch_autocast")
    on = {
        name: flag(sec.get("enabled")) for name, sec in (("fp16", fp16), ("bf16", bf16), ("torch_autocast", autocast))
    }
    for sec in (fp16, bf16, autocast):
        if sec.get("enabled") == AUTO:
            log.ignore(sec.key("enabled"), AUTO, AUTO_WHY)
        elif sec.has("enabled") and not on[sec.prefix]:
            log.used(sec.key("enabled"), sec.data["enabled"], "off")
    if on["fp16"]:
        log.set("fp16.enabled", True, "training.precision", "fp16-master", "fp16 weights and gradients, fp32 master")
        _loss_scale(fp16, log)
    elif on["bf16"]:
        pure = flag(bf16.get("bf16_master_weights_and_grads")) and flag(bf16.get("bf16_optimizer_states"))
        if pure:
            log.set(
                "bf16.bf16_master_weights_and_grads",
                True,
                "training.precision",
                "bf16-pure",
                "with bf16_optimizer_states: no fp32 copy",
            )
        else:
            log.set(
                "bf16.enabled", True, "training.precision", "bf16-master", "bf16 weights and gradients, fp32 master"
            )
    elif on["torch_autocast"]:
        dtype = str(autocast.get("dtype", "bfloat16")).lower()
        regime = "fp16-autocast" if dtype in ("float16", "fp16", "half", "torch.float16") else "bf16-autocast"
        log.set("torch_autocast.enabled", True, "training.precision", regime, f"dtype {dtype}")
    elif not any(sec.get("enabled") == AUTO for sec in (fp16, bf16)):
        log.set("(no fp16/bf16/torch_autocast enabled)", None, "training.precision", "fp32", "DeepSpeed's default")
    for sec in (fp16, bf16, autocast):
        sec.rest("a loss-scaling or dtype detail with no memory effect" if sec.prefix == "fp16" else NOT_PRECISION)


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
        if value is not None and value > 0:
            log.set(params.key("lr"), lr, "training.learning_rate", value)
        else:
            log.ignore(params.key("lr"), lr, AUTO_WHY if lr == AUTO else "not a positive number")
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
    if bucket is not None:
        n = number(bucket)
        if n is not None and n >= 0:
            log.set(zero.key("reduce_bucket_size"), bucket, "overhead.zero_bucket_elements", int(n))
        else:
            log.ignore(zero.key("reduce_bucket_size"), bucket, AUTO_WHY if bucket == AUTO else "not a number")
    zero.rest(TUNING)


def _checkpointing(top: Section, log: ImportLog) -> None:
    if not top.has("activation_checkpointing"):
        log.used(
            "(no activation_checkpointing)",
            None,
            "the plan's checkpointing is kept: the model's own gradient_checkpointing_enable() is not in the JSON",
        )
        return
    ac = top.sub("activation_checkpointing")
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
