"""Checklist rules about the training stack: settings that are unusual for the frameworks users run, and memory
that lives outside PyTorch's allocator (issue 12.11: "the checklist warns where a setting is unusual")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from vramplan.core.advice.checks.base import Context, Item, gib
from vramplan.core.plan.schema.precision import REGIMES

Rule = Callable[[Context], Item]

STACK_SRC = (
    "torchtune, litgpt and HF + PEFT load a LoRA/QLoRA base in bf16 (torchtune dtype: bf16; litgpt bf16-true; "
    "from_pretrained(torch_dtype=bfloat16)); PEFT utils/other.py prepare_model_for_kbit_training upcasts every "
    "non-quantized weight to fp32; bitsandbytes PR #1270 (0.43.2) stopped MatMul4Bit keeping each input; "
    "chunked and fused cross-entropy are alternatives (torchtune CEWithChunkedOutputLoss, Liger)"
)
PAGED_SRC = (
    "bitsandbytes optim/optimizer.py get_state_buffer -> F.get_paged (cudaMallocManaged): states the GPU cannot "
    "hold are paged to host memory by the driver and migrated back at each step, over the host link"
)


def stack_settings(c: Context) -> Item:
    """Settings a user of today's stacks rarely means, each with the change that removes it, measured."""
    t, s = c.plan.training, c.plan.strategy
    notes: list[str] = []
    changes: dict[str, Any] = {}
    if t.method != "full" and REGIMES[t.regime].weight_bytes == 4 and not t.kbit_prepare:
        notes.append(f"{t.regime} keeps the frozen base in fp32; the stacks load it in bf16")
        changes["training.precision"] = "bf16-pure"
    if t.kbit_prepare:
        notes.append(
            "prepare_model_for_kbit_training makes every non-quantized weight and so every activation fp32 "
            "(TRL's SFTTrainer, litgpt and torchtune do not)"
        )
        changes["training.kbit_prepare"] = False
    if t.bnb_generation == "legacy" and t.base_quantization in ("nf4", "fp4"):
        notes.append("bitsandbytes <= 0.43.1 keeps every 4-bit linear's input until its backward: upgrade")
        changes["training.bnb_generation"] = "current"
    if s.loss_chunks > 1 and s.fused_cross_entropy:
        notes.append("loss_chunks and fused_cross_entropy are both set: the chunked loss is what is estimated")
    if not notes:
        return Item("oom.stack", "oom", "ok", "Stack settings", "nothing unusual for the common stacks.", STACK_SRC)
    fix = c.measure("the common stack's setting", changes) if changes else None
    if fix is not None and not fix.saves_memory:
        fix = None
    return Item("oom.stack", "oom", "warn", "Stack settings", "; ".join(notes) + ".", STACK_SRC, fix)


def paged_states(c: Context) -> Item:
    """Paged optimizer states do not need to fit, but what does not fit is migrated every step."""
    paged = c.est.overhead_bytes.get("paged_optimizer_states", 0)
    if not paged:
        return Item("slow.paged", "slow", "ok", "Paged optimizer states", "no paged optimizer.", PAGED_SRC)
    free = max(c.est.headroom, 0)
    if paged <= free:
        detail = f"{gib(paged)} of paged optimizer states stay on the GPU ({gib(free)} free beside the peak)."
        return Item("slow.paged", "slow", "ok", "Paged optimizer states", detail, PAGED_SRC)
    detail = (
        f"{gib(paged)} of paged optimizer states and {gib(free)} free beside the peak: about "
        f"{gib(paged - free)} is paged to host memory and migrated at every step (the time it costs is not "
        "modelled: it depends on the driver and the host link)."
    )
    return Item("slow.paged", "slow", "warn", "Paged optimizer states", detail, PAGED_SRC)


OOM_RULES: tuple[Rule, ...] = (stack_settings,)
SLOW_RULES: tuple[Rule, ...] = (paged_states,)
