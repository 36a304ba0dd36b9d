"""What a valid plan's keys resolve to beyond their own values: its ``[rl]`` keys at its objective's defaults
(`plan_rl_settings`), whether it shards with FSDP (`fsdp_sharded`), and the stack's choices that matter to it
(`shown_choices`, and their JSON and text)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vramplan.core.plan.schema.rl import RLSettings, rl_settings
from vramplan.core.plan.stack.config import StackDefault

if TYPE_CHECKING:
    from vramplan.core.plan.schema.plan import Plan


def plan_rl_settings(plan: Plan) -> RLSettings:
    """A plan's ``[rl]`` keys resolved for its objective (`rl_settings`)."""
    t = plan.training
    return rl_settings(t.objective, plan.rl, adapters=t.method != "full", zero_stage=plan.strategy.zero_stage)


def fsdp_sharded(plan: Plan) -> bool:
    """Whether the plan shards with FSDP, where FSDP1 and FSDP2 differ: ZeRO-2/3 over more than one data-parallel
    rank, outside DeepSpeed's and Megatron's master-weight regimes (their ZeRO is not FSDP)."""
    master = plan.training.regime in ("bf16-master", "fp16-master")
    return plan.strategy.zero_stage >= 2 and plan.data_parallel > 1 and not master


def plan_value(plan: Plan, key: str) -> Any:
    """The value of a dotted plan key (``strategy.zero_stage`` -> 3)."""
    table, _, name = key.partition(".")
    return getattr(getattr(plan, table), name)


def key_matters(plan: Plan, key: str) -> bool:
    """Whether a stack-decided key changes this plan's estimate: the checkpoint implementation under full
    checkpointing, the adapters' keys under LoRA/QLoRA, the 4-bit keys on a quantized base, the FSDP keys when FSDP
    shards. A key without a rule here always matters (a new stack key needs none to be shown)."""
    t, s = plan.training, plan.strategy
    if key == "strategy.checkpoint_impl":
        return s.gradient_checkpointing == "full"
    if key in ("training.lora_dtype", "training.lora_dropout"):
        return t.method != "full"
    if key == "training.quantized_modules":
        return t.base_quantization != "none"
    if key == "training.bnb_generation":
        return t.base_quantization in ("nf4", "fp4")
    if key == "strategy.fsdp_version":
        return fsdp_sharded(plan)
    if key == "strategy.fsdp_adapter_wrap":
        return fsdp_sharded(plan) and s.fsdp_version == 1 and t.method != "full"
    if key == "strategy.fsdp_grad_sync":
        return fsdp_sharded(plan) and t.grad_accum_steps > 1
    return True


def shown_choices(plan: Plan) -> dict[str, StackDefault]:
    """The keys the stack chose that change this plan's estimate (`key_matters`)."""
    return {k: row for k, row in plan.stack_chosen.items() if key_matters(plan, k)}


def choices_json(plan: Plan) -> dict[str, Any]:
    """``{"framework": ..., "chose": {key: {"value", "source"}}}``: what `vramplan estimate --json` reports."""
    chose = {k: {"value": row.value, "source": row.source} for k, row in shown_choices(plan).items()}
    return {"framework": plan.stack.framework, "chose": chose}


def choices_text(plan: Plan) -> str:
    """``stack torchtune chose: checkpoint_impl non-reentrant, lora_dtype bf16`` ("" when it chose nothing that
    matters here)."""
    chosen = shown_choices(plan)
    if not chosen:
        return ""
    words = ", ".join(f"{k.partition('.')[2]} {row.value}" for k, row in chosen.items())
    return f"stack {plan.stack.framework} chose: {words}"
