"""accelerate config YAML (``accelerate config`` / ``accelerate launch --config_file``) -> plan keys.

Keys as accelerate's own ``ClusterConfig`` (src/accelerate/commands/config/config_args.py) and its FSDP plugin read
them: ``distributed_type`` (NO, MULTI_GPU = DDP, FSDP, DEEPSPEED), ``mixed_precision`` (no, fp16, bf16, fp8),
``num_processes`` (every process, over all machines) and ``num_machines``; ``fsdp_config``: ``fsdp_version`` (1
default, 2 = ``fully_shard``), ``fsdp_sharding_strategy`` (FULL_SHARD = ZeRO-3, SHARD_GRAD_OP = ZeRO-2, NO_SHARD =
DDP) or ``fsdp_reshard_after_forward`` (true = ZeRO-3, false = ZeRO-2), ``fsdp_offload_params`` (CPUOffload moves
parameters, gradients and the optimizer step to the host), ``fsdp_activation_checkpointing``; ``deepspeed_config``
(zero_stage, offload_*_device, gradient_accumulation_steps, gradient_clipping); ``dynamo_config.dynamo_backend``.

FSDP with bf16 mixed precision and full sharding is the ``bf16-fsdp`` regime (fp32 sharded parameters, gradients
and optimizer, bf16 gathered weights and compute); without full sharding, bf16/fp16 is autocast over fp32 weights.
"""

from __future__ import annotations

from typing import Any

from vramplan.core.files.importers.config_values import count, flag, number
from vramplan.core.files.importers.record import ImportLog, Section

STRATEGIES = {
    "FULL_SHARD": 3,
    "SHARD_GRAD_OP": 2,
    "NO_SHARD": 0,
    "HYBRID_SHARD": 3,
    "HYBRID_SHARD_ZERO2": 2,
    "1": 3,
    "2": 2,
    "3": 0,
    "4": 3,
    "5": 2,
}
LAUNCH = "how the processes are launched, not what each one holds"
WRAP = "how modules are wrapped or checkpoints saved; the estimate assumes one FSDP unit per block"


def read(data: dict[str, Any], log: ImportLog) -> None:
    top = log.section(data)
    kind = str(top.get("distributed_type", "NO")).upper()
    if top.has("distributed_type"):
        log.used("distributed_type", top.data["distributed_type"], "how the sections below are read")
    _hardware(top, log, kind)
    zero = 0
    if kind == "FSDP":
        zero = _fsdp(top.sub("fsdp_config"), log)
    elif kind == "DEEPSPEED":
        zero = _deepspeed(top.sub("deepspeed_config"), log)
    elif kind in ("MULTI_GPU", "NO"):
        what = "DDP: every GPU holds the whole model" if kind == "MULTI_GPU" else "one process"
        # the key as the file has it, or that it has none (accelerate's default, NO)
        key = "distributed_type" if top.has("distributed_type") else "(no distributed_type)"
        log.set(key, kind, "strategy.zero_stage", 0, what)
        log.set(key, kind, "strategy.offload_optimizer", "none")
        log.set(key, kind, "strategy.offload_parameters", "none")
    else:
        log.ignore(
            "distributed_type", kind, "not a GPU data-parallel type the plan models (NO, MULTI_GPU, FSDP, DEEPSPEED)"
        )
    for section in ("fsdp_config", "deepspeed_config"):
        if section.split("_")[0].upper() != kind:
            top.ignore(section, f"distributed_type is {kind}: accelerate does not use it")
    _precision(top, log, kind, zero)
    dynamo = top.sub("dynamo_config")
    backend = str(dynamo.get("dynamo_backend", "NO")).upper()
    compiled = backend not in ("NO", "NONE", "")
    log.set(
        dynamo.key("dynamo_backend") if dynamo.has("dynamo_backend") else "(no dynamo_config)",
        backend if dynamo.has("dynamo_backend") else None,
        "strategy.compile",
        compiled,
        "torch.compile of the whole model" if compiled else "accelerate's default: no torch.compile",
    )
    dynamo.rest("a torch.compile option; the estimate models compile on or off")
    for name in (
        "machine_rank",
        "main_process_ip",
        "main_process_port",
        "rdzv_backend",
        "same_network",
        "gpu_ids",
        "main_training_function",
        "enable_cpu_affinity",
        "compute_environment",
        "debug",
        "mpirun_config",
    ):
        top.ignore(name, LAUNCH)
    top.ignore("downcast_bf16", "a TPU setting")
    top.ignore("use_cpu", "CPU training: the plan is for GPUs")
    top.rest()


def _hardware(top: Section, log: ImportLog, kind: str) -> None:
    machines_raw = top.get("num_machines", 1)
    machines = count(machines_raw)
    procs_raw = top.get("num_processes")
    procs = count(procs_raw)
    if kind == "NO" and procs is None and procs_raw is None:
        procs = 1
    problem = ""
    if machines is None:
        problem = "num_machines is not a machine count"
    elif procs is None:
        problem = "num_processes is not a process count (-1: left to the launcher)"
    elif procs % machines:
        problem = f"{procs} processes do not divide over {machines} machines"
    if problem or machines is None or procs is None:
        for name in ("num_processes", "num_machines"):
            top.ignore(name, f"{problem}; the plan's GPU count is kept")
        return
    log.set(
        "num_processes" if top.has("num_processes") else "(no num_processes)",
        procs_raw,
        "hardware.gpus_per_node",
        procs // machines,
        f"{procs} processes over {machines} machine{'s' if machines > 1 else ''}",
    )
    if top.has("num_machines"):
        log.set("num_machines", machines_raw, "hardware.nodes", machines)
    else:
        log.set("(no num_machines)", None, "hardware.nodes", 1, "accelerate's default: one machine")


def _precision(top: Section, log: ImportLog, kind: str, zero: int) -> None:
    mp = str(top.get("mixed_precision", "no")).lower()
    key = "mixed_precision" if top.has("mixed_precision") else "(no mixed_precision)"
    if mp in ("no", "none", "fp32"):
        log.set(key, mp, "training.precision", "fp32", "fp32 weights, gradients and compute")
    elif mp in ("bf16", "fp16"):
        if kind == "DEEPSPEED":
            log.set(key, mp, "training.precision", f"{mp}-master", "DeepSpeed: 16-bit weights, fp32 master")
        elif kind == "FSDP" and zero == 3 and mp == "bf16":
            log.set(key, mp, "training.precision", "bf16-fsdp", "FSDP mixed precision over fp32 sharded parameters")
        else:
            log.set(key, mp, "training.precision", f"{mp}-autocast", "torch.autocast over fp32 weights")
    else:
        log.ignore(key, mp, "fp8 or another mode the plan does not model; the plan's precision is kept")


def _fsdp(fsdp: Section, log: ImportLog) -> int:
    version = count(fsdp.get("fsdp_version", 1)) or 1
    fsdp.ignore(
        "fsdp_version",
        f"FSDP{version}: both shard as its ZeRO stage (below); FSDP2's bf16 mixed precision is the bf16-fsdp regime",
    )
    zero = 3
    key = "(no fsdp_sharding_strategy)"
    shown_value: Any = None
    name = next((n for n in ("fsdp_reshard_after_forward", "fsdp_sharding_strategy") if fsdp.has(n)), None)
    if name is not None:
        raw = fsdp.get(name)
        as_flag = flag(raw) if name == "fsdp_reshard_after_forward" else None
        read = (3 if as_flag else 2) if as_flag is not None else STRATEGIES.get(str(raw).upper())
        if read is None:  # accelerate refuses it; was read as FULL_SHARD without a word
            log.ignore(
                fsdp.key(name),
                raw,
                f"not a sharding strategy ({', '.join(s for s in STRATEGIES if not s.isdigit())}, 1-5"
                + (", true or false" if name == "fsdp_reshard_after_forward" else "")
                + "); FULL_SHARD, accelerate's default, is assumed",
            )
        else:
            key, shown_value, zero = fsdp.key(name), raw, read
    if fsdp.has("fsdp_reshard_after_forward"):
        fsdp.ignore("fsdp_sharding_strategy", "fsdp_reshard_after_forward decides the sharding")
    note = {3: "parameters, gradients and optimizer sharded", 2: "gradients and optimizer sharded", 0: "replicated"}
    if "HYBRID" in str(shown_value).upper():
        note[zero] += "; HYBRID: within a node only, replicated across nodes (the estimate shards over all GPUs)"
    log.set(key, shown_value, "strategy.zero_stage", zero, note[zero])
    offload = flag(fsdp.get("fsdp_offload_params", False))
    off_key = fsdp.key("fsdp_offload_params") if fsdp.has("fsdp_offload_params") else "(no fsdp_offload_params)"
    device = "cpu" if offload else "none"
    log.set(off_key, offload, "strategy.offload_optimizer", device, "CPUOffload: the optimizer step runs on the host")
    if zero == 3 or not offload:
        log.set(off_key, offload, "strategy.offload_parameters", device)
    else:
        log.ignore(
            off_key, offload, "parameter offload without full sharding is not a plan (offload_parameters needs ZeRO-3)"
        )
    ac = flag(fsdp.get("fsdp_activation_checkpointing", False))
    ac_key = fsdp.key("fsdp_activation_checkpointing")
    log.set(
        ac_key if fsdp.has("fsdp_activation_checkpointing") else "(no fsdp_activation_checkpointing)",
        ac,
        "strategy.gradient_checkpointing",
        "full" if ac else "none",
    )
    fsdp.rest(WRAP)
    return zero


def _deepspeed(ds: Section, log: ImportLog) -> int:
    if ds.has("deepspeed_config_file"):
        ds.ignore(
            "deepspeed_config_file",
            "NOT FOLLOWED: import that DeepSpeed JSON with --from to read its settings (the keys here are read)",
        )
    raw = ds.get("zero_stage")
    if isinstance(raw, int) and not isinstance(raw, bool) and 0 <= raw <= 3:
        zero = raw
        log.set(ds.key("zero_stage"), raw, "strategy.zero_stage", raw)
    else:  # absent (was named as if the file set it, and read as 0) or not a stage: accelerate's default
        zero = 2
        if raw is not None:
            log.ignore(ds.key("zero_stage"), raw, "not a ZeRO stage (0, 1, 2, 3)")
        log.set(
            f"(no {ds.key('zero_stage')})",
            None,
            "strategy.zero_stage",
            2,
            "DeepSpeedPlugin's default (accelerate/utils/dataclasses.py: ACCELERATE_DEEPSPEED_ZERO_STAGE or 2)",
        )
    for name, plan_key in (
        ("offload_optimizer_device", "strategy.offload_optimizer"),
        ("offload_param_device", "strategy.offload_parameters"),
    ):
        device = str(ds.get(name, "none")).lower()
        if device in ("none", "cpu", "nvme"):
            log.set(ds.key(name), device, plan_key, device)
        else:
            log.ignore(ds.key(name), device, "not an offload device (none, cpu, nvme)")
    accum = count(ds.get("gradient_accumulation_steps"))
    if accum is not None:
        log.batch.accum = accum
        log.batch.keys["accum"] = ds.key("gradient_accumulation_steps")
    clip = number(ds.get("gradient_clipping"))
    if clip is not None:
        log.set(ds.key("gradient_clipping"), clip, "training.grad_clip", clip if clip > 0 else None)
    ds.rest("a DeepSpeed launch or save option, no memory effect")
    return zero
