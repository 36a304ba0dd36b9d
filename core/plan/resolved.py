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


def shown_choices(plan: Plan) -> dict[str, StackDefault]:
    """The keys the stack chose that change this plan's estimate: the checkpoint implementation under full
    checkpointing, the adapters' keys under LoRA/QLoRA, the 4-bit keys on a quantized base."""
    t, s = plan.training, plan.strategy
    relevant = {
        "strategy.checkpoint_impl": s.gradient_checkpointing == "full",
        "training.lora_dtype": t.method != "full",
        "training.lora_dropout": t.method != "full",
        "training.quantized_modules": t.base_quantization != "none",
        "training.bnb_generation": t.base_quantization in ("nf4", "fp4"),
        "strategy.fsdp_version": fsdp_sharded(plan),
        "strategy.fsdp_adapter_wrap": fsdp_sharded(plan) and s.fsdp_version == 1 and t.method != "full",
        "strategy.fsdp_grad_sync": fsdp_sharded(plan) and t.grad_accum_steps > 1,
    }
    return {k: row for k, row in plan.stack_chosen.items() if relevant.get(k, True)}


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
