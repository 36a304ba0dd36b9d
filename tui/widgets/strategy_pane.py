"""The Strategies pane: checkpointing, attention kernel, int8 activations, fused cross-entropy, ZeRO stage,
offloading, tensor/pipeline/sequence parallelism. Choices the plan cannot take are noted next to their control."""

from __future__ import annotations

from textual.app import ComposeResult

from core.result import Estimate
from tui.widgets.fields import ChoiceField, IntField, PlanPane

BLOCKABLE = (
    "strategy.gradient_checkpointing",
    "strategy.attention",
    "strategy.activation_compression",
    "strategy.fused_cross_entropy",
    "strategy.zero_stage",
    "strategy.offload_optimizer",
    "strategy.offload_parameters",
    "strategy.sequence_parallel",
)


class StrategyPane(PlanPane):
    TITLE = "Strategies"

    def compose(self) -> ComposeResult:
        yield ChoiceField("strategy.gradient_checkpointing", "checkpointing")
        yield ChoiceField("strategy.attention", "attention")
        yield ChoiceField("strategy.activation_compression", "int8 activations")
        yield ChoiceField("strategy.fused_cross_entropy", "fused CE loss")
        yield ChoiceField("strategy.zero_stage", "ZeRO stage")
        yield ChoiceField("strategy.offload_optimizer", "offload optimizer")
        yield ChoiceField("strategy.offload_parameters", "offload params")
        yield IntField("strategy.tensor_parallel", "tensor parallel")
        yield IntField("strategy.pipeline_parallel", "pipeline parallel")
        yield ChoiceField("strategy.sequence_parallel", "sequence parallel")

    def show_estimate(self, est: Estimate) -> None:
        self.show_blocked(est, BLOCKABLE)
