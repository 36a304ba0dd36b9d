"""Step-time text for the planner: the compact lines under the memory headline, and the fuller table (each term
busy / exposed, the MFU, the step's formula) shown when the terminal is large. Figures are `core.time.step`'s."""

from __future__ import annotations

from textual.content import Content

from vramplan.core.plan.helpers.units import fmt_count, fmt_seconds
from vramplan.core.time.record import LABELS, StepTime


def rate(per_second: float) -> str:
    """Tokens per second in few columns: ``987``, ``9,876``, ``19.2k``, ``1.23M``."""
    if per_second >= 1e6:
        return f"{per_second / 1e6:.2f}M"
    if per_second >= 1e4:
        return f"{per_second / 1e3:.1f}k"
    return f"{per_second:,.0f}"


def train_line(st: StepTime) -> Content:
    """``2.00 T tokens: 11.6 days, 2,227 GPU-h, cost 4,454 USD`` (empty without a token budget)."""
    if st.tokens is None or st.train_seconds is None or st.gpu_hours is None:
        return Content("")
    cost = f", cost {st.cost:,.0f} USD" if st.cost is not None else ""
    when = (fmt_seconds(st.train_seconds), "bold")
    return Content.assemble(f"{fmt_count(st.tokens)} tokens: ", when, f", {st.gpu_hours:,.0f} GPU-h{cost}")


SUMMARY_WIDTH = 32  # the gauges column at 80 columns


def _error_and_bottleneck(st: StepTime, error: bool) -> str:
    """`` ±26%, mostly compute`` after the step time (``error=False``: without the expected error, whose data loads
    after the first frame); without "mostly" where the line would wrap in the gauges column."""
    tail = (f" ±{st.expected_error.median_pct:.0f}%," if error else ",") + f" mostly {st.bottleneck}"
    if len(f"step {fmt_seconds(st.step_seconds)}{tail}") > SUMMARY_WIDTH:
        tail = tail.replace("mostly ", "")
    return tail


def time_summary(st: StepTime, error: bool = True) -> Content:
    """Two or three short lines for the gauges column, readable at 80x24 (``error``: with the step time's expected
    error)."""
    if st.assumed_figures:  # a detected GPU without a preset: say the time is a guess, and how to fix it
        return Content("\n").join(
            [
                Content.assemble("step ≈", (fmt_seconds(st.step_seconds), "bold"), " (assumed GPU figures)"),
                Content.styled("unknown GPU: add a hardware preset to time it", "$text-warning"),
            ]
        )
    lines = [
        Content.assemble("step ", (fmt_seconds(st.step_seconds), "bold"), _error_and_bottleneck(st, error)),
        Content(f"{rate(st.tokens_per_second)} tok/s ({rate(st.tokens_per_second_per_gpu)}/GPU), MFU {st.mfu:.0%}"),
    ]
    train = train_line(st)
    if train.plain:
        lines.append(train)
    return Content("\n").join(lines)


def time_table(st: StepTime, width: int = 52) -> Content:
    """The fuller view: the terms of one GPU's step (busy, exposed), throughput and MFU, the step's formula."""
    label_w = max(12, width - 20)
    lines = [Content.styled(f"{'time per GPU, per step':<{label_w}}{'busy':>10}{'exposed':>10}", "dim")]
    for t in st.terms:
        if t.seconds <= 0:
            continue
        exposed = fmt_seconds(t.exposed) if t.exposed > 0 else "hidden"
        label = LABELS.get(t.name, t.name)[:label_w]
        lines.append(Content(f"{label:<{label_w}}{fmt_seconds(t.seconds):>10}{exposed:>10}"))
    setting = "" if st.mfu_setting is None else f", matmuls at training.mfu {st.mfu_setting:g}"
    lines.append(
        Content(
            f"{st.tokens_per_step:,} tokens per step, {st.tokens_per_second:,.0f} tokens/s "
            f"({st.tokens_per_second_per_gpu:,.0f} per GPU); MFU {st.mfu:.1%} achieved of "
            f"{st.peak_flops / 1e12:g} TFLOP/s{setting}"
        )
    )
    lines.append(Content(f"step time {st.error_text()}"))
    formula, _ = st.explain().get("step", ("", ""))
    if formula:
        lines.append(Content.styled(f"step = {formula}", "dim"))
    return Content("\n").join(lines)
