"""The Strategies pane: checkpointing, attention kernel, int8 activations, fused cross-entropy, ZeRO stage,
offloading, tensor/pipeline/sequence parallelism, and for a mixture of experts expert parallelism and how the experts
run. Under each control, what the other choices would do (memory per
GPU and time per token, measured: `tui.effects`, a few ms, once the plan has settled); choices the plan cannot take
are noted next to their control."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.widgets import Static

from vramplan.core.memory.record import Estimate
from vramplan.tui.effects import DEGREE_KEYS, effects_line, toggle_effects
from vramplan.tui.widgets.fields import ChoiceField, IntField, PlanPane
from vramplan.tui.widgets.settle import Settled
from vramplan.tui.widgets.stack_fields import show_stack_keys, stack_key_rows, unplaced_stack_keys

BLOCKABLE = (
    "strategy.gradient_checkpointing",
    "strategy.attention",
    "strategy.activation_compression",
    "strategy.fused_cross_entropy",
    "strategy.zero_stage",
    "strategy.offload_optimizer",
    "strategy.offload_parameters",
    "strategy.sequence_parallel",
    "strategy.compile",
    "strategy.optimizer_in_backward",
    "strategy.activation_offload",
    "strategy.float8",
)
IMPL = "strategy.checkpoint_impl"
# The stack-decided keys this pane places itself; any other stack key of [strategy] gets a row made from the schema
PLACED_STACK_KEYS = (IMPL, "strategy.fsdp_version", "strategy.fsdp_adapter_wrap", "strategy.fsdp_grad_sync")
EFFECT_KEYS = (*BLOCKABLE, *DEGREE_KEYS)


def impl_line(est: Estimate) -> str:
    """Under the checkpoint implementation: whose choice it is, and what the other one would do (only full
    checkpointing runs through torch.utils.checkpoint: elsewhere it changes nothing)."""
    plan = est.plan
    s = plan.strategy
    if s.gradient_checkpointing != "full":
        return "applies to full checkpointing only"
    whose = f"stack {plan.stack.framework}: {s.checkpoint_impl}" if IMPL in plan.stack_chosen else "set in the plan"
    pairs = toggle_effects(plan, est, (IMPL,))[IMPL]
    return f"{whose} · {effects_line(pairs)}" if pairs else whose


class StrategyPane(PlanPane):
    TITLE = "Strategies"

    def __init__(self, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.show_effects = Settled(self, self._show_effects)

    def compose(self) -> ComposeResult:
        yield Static("→ other choices: memory per GPU, time", id="effects-legend", classes="muted")
        yield ChoiceField("strategy.gradient_checkpointing", "checkpointing", effect=True)
        yield ChoiceField(
            "strategy.checkpoint_impl",
            "checkpoint impl",
            effect=True,
            tooltip="full checkpointing through torch's reentrant autograd.Function or its saved-tensor hooks; "
            "stack's: what the stack (Hardware pane) does",
        )
        yield ChoiceField("strategy.attention", "attention", effect=True)
        yield ChoiceField("strategy.activation_compression", "int8 activations", effect=True)
        yield ChoiceField("strategy.fused_cross_entropy", "fused CE loss", effect=True)
        yield ChoiceField("strategy.zero_stage", "ZeRO stage", effect=True)
        yield ChoiceField(
            "strategy.fsdp_version", "FSDP version", tooltip="under ZeRO-2/3: 1 flat parameters, 2 fully_shard"
        )
        yield ChoiceField(
            "strategy.fsdp_adapter_wrap", "FSDP1 adapters", tooltip="block: adapters share their block's unit"
        )
        yield ChoiceField(
            "strategy.fsdp_grad_sync", "FSDP accum sync", tooltip="last: no_sync holds unsharded gradients"
        )
        yield ChoiceField("strategy.offload_optimizer", "offload optimizer", effect=True)
        yield ChoiceField("strategy.offload_parameters", "offload params", effect=True)
        yield IntField("strategy.tensor_parallel", "tensor parallel", effect=True)
        yield IntField("strategy.pipeline_parallel", "pipeline parallel", effect=True)
        yield IntField("strategy.expert_parallel", "expert parallel", effect=True)  # shown for MoE models
        yield ChoiceField("strategy.experts", "experts run", effect=True)  # shown for MoE models
        yield ChoiceField("strategy.sequence_parallel", "sequence parallel", effect=True)
        yield ChoiceField("strategy.compile", "torch.compile", effect=True)
        yield ChoiceField("strategy.optimizer_in_backward", "optimizer in bwd", effect=True)
        yield ChoiceField("strategy.activation_offload", "offload activations", effect=True)
        yield IntField("strategy.loss_chunks", "loss chunks")
        yield ChoiceField("strategy.float8", "Float8 linears", effect=True)
        yield from stack_key_rows("strategy", PLACED_STACK_KEYS)

    def show_estimate(self, est: Estimate) -> None:
        self.show_blocked(est, BLOCKABLE)
        moe = est.plan.model.arch().moe is not None
        s = est.plan.strategy
        sharded = s.zero_stage >= 2 and est.plan.data_parallel > 1
        self.fields["strategy.fsdp_version"].display = sharded
        self.fields["strategy.fsdp_adapter_wrap"].display = (
            sharded and s.fsdp_version == 1 and est.plan.training.method != "full"
        )
        self.fields["strategy.fsdp_grad_sync"].display = sharded and est.plan.training.grad_accum_steps > 1
        self.fields["strategy.expert_parallel"].display = moe
        self.fields["strategy.experts"].display = moe
        show_stack_keys(self, est.plan, unplaced_stack_keys("strategy", PLACED_STACK_KEYS))
        self.show_effects()

    def _show_effects(self) -> None:
        est = self.estimate
        if est is None or not self.display:
            return  # hidden: the pane catches up when shown
        moe = est.plan.model.arch().moe is not None
        keys = (*EFFECT_KEYS, "strategy.expert_parallel", "strategy.experts") if moe else EFFECT_KEYS
        for key, pairs in toggle_effects(est.plan, est, keys).items():
            self.fields[key].set_effect(effects_line(pairs))
        self.fields[IMPL].set_effect(impl_line(est))
