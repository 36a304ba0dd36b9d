"""The Training pane: batch and sequence, gradient accumulation (with the global batch), precision regime,
optimizer, the method (full fine-tuning, LoRA, QLoRA with rank, targets and base quantization), what the time
model needs: the MFU the math reaches and a token budget for the time to train, and last the objective (SFT,
DPO, GRPO, PPO) with its ``[rl]`` keys (`tui.widgets.rl_fields`)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.widgets import Label, Static

from vramplan.core.memory.record import Estimate
from vramplan.core.plan.helpers.units import fmt_count, fmt_seconds, fmt_steps
from vramplan.core.time.record import StepTime
from vramplan.core.time.step import step_time
from vramplan.tui.widgets.fields import ChoiceField, IntField, ListField, NumberField, PlanPane
from vramplan.tui.widgets.rl_fields import rl_rows, show_rl
from vramplan.tui.widgets.stack_fields import show_stack_keys, stack_key_rows, unplaced_stack_keys
from vramplan.tui.widgets.text import show_text

LORA_KEYS = (
    "training.lora_rank",
    "training.lora_targets",
    "training.quantization",
    "training.lora_dtype",
    "training.lora_dropout",
)
QUANT_KEYS = ("training.quantized_modules", "training.bnb_generation")
# The stack-decided keys this pane places itself; any other stack key of [training] gets a row made from the schema
PLACED_STACK_KEYS = ("training.lora_dtype", "training.lora_dropout", *QUANT_KEYS)


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
        yield ChoiceField("training.lora_dtype", "LoRA dtype", tooltip="stack's: what the stack (Hardware pane) makes")
        yield NumberField(
            "training.lora_dropout",
            "LoRA dropout",
            placeholder="the stack's",
            tooltip="probability before lora_A (a mask and a dropped copy per adapted linear); empty: the stack's",
        )
        yield ChoiceField("training.quantized_modules", "4-bit linears", tooltip="which linears a 4-bit base holds")
        yield ChoiceField("training.bnb_generation", "bitsandbytes", tooltip="<= 0.43.1 kept each 4-bit input")
        yield from stack_key_rows("training", PLACED_STACK_KEYS)
        yield Label("time (step time, time to train)", classes="section")
        yield NumberField(
            "training.mfu",
            "MFU setting",
            placeholder="auto (published MFU by GPU)",
            tooltip="fraction of the GPU's dense peak the math reaches: 0.3-0.55 (also 40%); empty: the default",
        )
        yield NumberField(
            "training.tokens",
            "token budget",
            integer=True,
            placeholder="unset (e.g. 2T)",
            tooltip="tokens to train on, for the time to train: 2T, 300B, 1e9; empty: unset",
        )
        yield Static(id="time-details", classes="details")
        yield from rl_rows()

    def show_estimate(self, est: Estimate) -> None:
        p = est.plan
        t = p.training
        seqs = t.micro_batch_size * t.grad_accum_steps * p.data_parallel
        # DPO/GRPO/PPO: TRL's batch (pairs, completions) of the [rl] lengths; training.seq_len is not used
        what, tokens = "sequences", seqs * t.seq_len
        if est.rl is not None:
            what = t.objective_spec.example
            tokens = seqs * est.rl.update_sequences // t.micro_batch_size * est.rl.update_seq_len
        self.query_one("#f-training-seq_len").display = est.rl is None
        show_text(
            self.query_one("#global-batch", Static),
            f"global batch {t.micro_batch_size} x {t.grad_accum_steps} x DP {p.data_parallel} = "
            f"[b]{seqs:,}[/b] {what} = [b]{tokens:,}[/b] tokens",
        )
        lora = t.method != "full"
        for key in LORA_KEYS:
            self.query_one(f"#f-{key.replace('.', '-')}").display = lora
        quantized = lora and t.base_quantization != "none"
        for key in QUANT_KEYS:
            self.query_one(f"#f-{key.replace('.', '-')}").display = quantized
        show_stack_keys(self, est.plan, unplaced_stack_keys("training", PLACED_STACK_KEYS))
        self.show_blocked(est, ("training.method", "training.objective"))
        st = step_time(est.plan)
        self._show_time(est, st)
        show_rl(self, est, st)

    def _show_time(self, est: Estimate, st: StepTime) -> None:
        setting = "" if st.mfu_setting is None else f" (matmuls at training.mfu {st.mfu_setting:g})"
        text = (
            f"MFU achieved [b]{st.mfu:.1%}[/b] of {st.peak_flops / 1e12:g} TFLOP/s{setting}: step "
            f"{fmt_seconds(st.step_seconds)} {st.error_text()}, mostly {st.bottleneck}"
        )
        tokens, steps, seconds, gpu_hours = st.tokens, st.train_steps, st.train_seconds, st.gpu_hours
        if tokens is not None and steps is not None and seconds is not None and gpu_hours is not None:
            text += (
                f"\n{fmt_count(tokens)} tokens in {fmt_steps(steps)}: [b]{fmt_seconds(seconds)}"
                f"[/b], {gpu_hours:,.0f} GPU-hours"
            )
            text += f", cost {st.cost:,.0f} USD" if st.cost is not None else " (a price per GPU-hour gives the cost)"
        show_text(self.query_one("#time-details", Static), text)
