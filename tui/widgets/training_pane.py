"""The Training pane: batch and sequence, gradient accumulation (with the global batch), precision regime,
optimizer, and the method (full fine-tuning, LoRA, QLoRA with rank, targets and base quantization)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.widgets import Static

from core.result import Estimate
from tui.widgets.fields import ChoiceField, IntField, ListField, PlanPane
from tui.widgets.text import show_text

LORA_KEYS = ("training.lora_rank", "training.lora_targets", "training.quantization")


class TrainingPane(PlanPane):
    TITLE = "Training"

    def compose(self) -> ComposeResult:
        yield IntField("training.micro_batch_size", "micro batch")
        yield IntField("training.seq_len", "sequence length")
        yield IntField("training.grad_accum_steps", "grad accumulation")
        yield Static(id="global-batch", classes="details")
        yield ChoiceField("training.precision", "precision")
        yield ChoiceField("training.optimizer", "optimizer")
        yield ChoiceField("training.method", "method")
        yield IntField("training.lora_rank", "LoRA rank")
        yield ListField(
            "training.lora_targets", "LoRA targets", tooltip="q k v o gate up down, qkv (BLOOM), or all-linear"
        )
        yield ChoiceField("training.quantization", "base weights")

    def show_estimate(self, est: Estimate) -> None:
        p = est.plan
        t = p.training
        seqs = t.micro_batch_size * t.grad_accum_steps * p.data_parallel
        show_text(
            self.query_one("#global-batch", Static),
            f"global batch {t.micro_batch_size} x {t.grad_accum_steps} x DP {p.data_parallel} = "
            f"[b]{seqs:,}[/b] sequences = [b]{seqs * t.seq_len:,}[/b] tokens",
        )
        lora = t.method != "full"
        for key in LORA_KEYS:
            self.query_one(f"#f-{key.replace('.', '-')}").display = lora
        self.show_blocked(est, ("training.method",))
