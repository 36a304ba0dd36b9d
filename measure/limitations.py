"""What this machine cannot reproduce of a plan (`limitations`), said before anything runs. Each `Limitation` names
the rows of the comparison it makes unreliable, so the report marks them instead of silently measuring another
plan. Pure Python (the multi-GPU path, `vramplan.measure.distributed`, narrows the GPU-count line)."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from vramplan.core.plan.schema.plan import Plan
from vramplan.measure.distributed import launch_for, local_devices
from vramplan.measure.recipe import OPTIMIZERS, WEIGHTS_AND_AUTOCAST

MEMORY_ROWS = ("parameters", "gradients", "optimizer_states", "activations", "max_allocated", "max_reserved")
ALL_ROWS = (*MEMORY_ROWS, "process", "step_time", "tokens_per_s")
TIME_ROWS = ("step_time", "tokens_per_s")
STATE_ROWS = ("parameters", "gradients", "optimizer_states", "max_allocated", "max_reserved", "process")
ACTIVATION_ROWS = ("activations", "max_allocated", "max_reserved", "process")


@dataclass(frozen=True)
class Limitation:
    """One thing the plan asks that is not run here (``what``), and the comparison rows it affects."""

    what: str
    rows: tuple[str, ...] = ALL_ROWS


def limitations(plan: Plan, device: str, local_gpus: int) -> tuple[Limitation, ...]:
    """Everything of `plan` that a measurement on `device` (with `local_gpus` GPUs here) does not run as planned."""
    t, s = plan.training, plan.strategy
    out: list[Limitation] = []

    def add(what: str, rows: tuple[str, ...] = ALL_ROWS) -> None:
        out.append(Limitation(what, rows))

    if device == "cpu":
        add("on the CPU: no CUDA allocator (reserved = allocated), no CUDA context, CPU kernels", ("max_reserved",))
        add("on the CPU: step time and tokens/s are the CPU's, not the plan's GPU's", TIME_ROWS)
        add("on the CPU: nvidia-smi's process memory is not measured", ("process",))
    gpus = plan.hardware.total_gpus
    launch = launch_for(plan, device, local_devices(device, local_gpus))
    for line in launch.caveats if launch.relaunches else ():  # one rank per GPU here: what differs from the plan
        add(line, ALL_ROWS if "offload" in line else STATE_ROWS)
    if gpus > 1 and not launch.relaunches:
        here = "the CPU" if device == "cpu" else f"{local_gpus} local GPU(s)"
        rows = STATE_ROWS + ACTIVATION_ROWS if s.zero_stage or s.tensor_parallel > 1 else ("process", *TIME_ROWS)
        add(f"the plan's {gpus} GPUs: one process measured on {here}, unsharded (ZeRO-{s.zero_stage})", rows)
    if plan.hardware.nodes > 1:
        add(f"{plan.hardware.nodes} nodes: only this one can be measured", ("process", *TIME_ROWS))
    for name, value in (("tensor", s.tensor_parallel), ("pipeline", s.pipeline_parallel)):
        if value > 1:
            add(f"{name} parallel {value}: not run (one unsplit model is measured)")
    if s.sequence_parallel:
        add("sequence parallel: not run", ACTIVATION_ROWS)
    if s.expert_parallel > 1:
        add(f"expert parallel {s.expert_parallel}: not run (every expert on one device)", STATE_ROWS)
    if s.offload_optimizer != "none" or s.offload_parameters != "none":
        add(f"DeepSpeed offload (optimizer {s.offload_optimizer}, parameters {s.offload_parameters}): not run")
    if t.objective_spec.post_training:
        add(f"objective {t.objective}: only a supervised step of the policy is run (no generation, reference)")
    out += _precision_and_method(plan, device)
    if t.optimizer not in OPTIMIZERS:
        add(f"optimizer {t.optimizer}: not in torch.optim (needs bitsandbytes or another package); AdamW is run")
    if s.gradient_checkpointing in ("selective", "op"):
        add(
            f"{s.gradient_checkpointing} checkpointing: not run (HF checkpoints whole blocks or nothing)",
            ACTIVATION_ROWS,
        )
    if s.gradient_checkpointing == "full" and s.checkpoint_every > 1:
        add(f"checkpointing every {s.checkpoint_every}th block: HF checkpoints every block", ACTIVATION_ROWS)
    for flag, what in (
        (s.compile, "torch.compile"),
        (s.optimizer_in_backward, "the optimizer step in backward"),
        (s.activation_offload != "none", "activation offload to the CPU"),
        (s.loss_chunks > 1, f"the loss in {s.loss_chunks} chunks"),
        (s.activation_compression != "none", "activation compression"),
        (s.fused_cross_entropy, "a fused cross-entropy kernel"),
    ):
        if flag:
            add(f"{what}: not run", ACTIVATION_ROWS)
    if s.attention == "flash" and device == "cuda" and importlib.util.find_spec("flash_attn") is None:
        add("attention flash: PyTorch SDPA is run (its flash kernel where it applies)", ())
    return tuple(out)


def _precision_and_method(plan: Plan, device: str) -> list[Limitation]:
    t = plan.training
    reg = t.regime
    out = []
    if reg not in WEIGHTS_AND_AUTOCAST:
        kept = "bf16 weights" if reg.startswith("bf16") else "fp32 weights"
        out.append(Limitation(f"precision {reg}: no fp32 master copy outside DeepSpeed/FSDP here; {kept} run"))
    if reg == "fp16-autocast":
        out.append(Limitation("fp16 autocast: run without GradScaler's loss scaling", TIME_ROWS))
    if t.method == "qlora" or (t.quantization not in (None, "none")):
        has_bnb = importlib.util.find_spec("bitsandbytes") is not None
        why = "bitsandbytes is not installed" if not has_bnb else "this measures the CPU" if device == "cpu" else ""
        out.append(
            Limitation(
                f"quantized base ({t.base_quantization}): not run ({why or 'not built here yet'}); LoRA on a bf16 base "
                "is measured",
                ALL_ROWS,
            )
        )
    if t.kbit_prepare:
        out.append(Limitation("prepare_model_for_kbit_training: not run", ALL_ROWS))
    if t.method != "full" and t.lora_dtype != "fp32":
        out.append(Limitation(f"adapters in {t.lora_dtype}: PEFT keeps them fp32", STATE_ROWS))
    return out


def cannot_reproduce(plan: Plan, device: str, local_gpus: int) -> tuple[str, ...]:
    """The lines `vramplan measure` prints before it starts (`limitations`, as text)."""
    return tuple(lim.what for lim in limitations(plan, device, local_gpus))
