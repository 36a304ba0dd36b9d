"""The memory gauges: a headline (fits / does not fit, headroom), the step time and throughput under it, one
stacked bar per GPU by kind against its capacity, a legend with GiB figures, the formula and source of the selected
kind, a host-RAM bar when offloading, and (large terminals) the step's time terms."""

from __future__ import annotations

from typing import ClassVar

from textual import events
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.reactive import Reactive, var
from textual.widgets import Static

from vramplan.core.memory.kinds import ALL_KINDS, KINDS
from vramplan.core.memory.record import FRAGMENTATION_RISK, Estimate
from vramplan.core.plan.describe import gpu_name, method_label, model_name
from vramplan.core.plan.helpers.units import fmt_count
from vramplan.core.plan.helpers.units import gib_text as gib
from vramplan.core.time.record import StepTime
from vramplan.tui.names import short_gpu, short_model
from vramplan.tui.pinned import Pinned, pinned_line
from vramplan.tui.time_text import time_summary, time_table
from vramplan.tui.widgets.bars import KIND_CLASSES, KIND_CSS, KindLegend, StackedBar
from vramplan.tui.widgets.settle import Settled
from vramplan.tui.widgets.text import LineText, show_text, without_links


def error_margin(est: Estimate) -> int:
    """The memory to keep free if the estimate is as far under as on its worst similar published run
    (`ExpectedError.under_margin_bytes`, as the checklist's OOM item warns)."""
    return est.expected_error.under_margin_bytes(est.on_gpu)


def headroom_state(est: Estimate, error: bool = True) -> str:
    """``over`` (does not fit), ``band`` (fits with less free than the estimate's error may take: `error_margin`;
    not judged with ``error=False``), ``tight`` (fits with less than the checklist's fragmentation margin free,
    `FRAGMENTATION_RISK`: 10%) or ``ok``: the headline's colour and words follow it."""
    if not est.fits:
        return "over"
    if error and est.headroom < error_margin(est):
        return "band"
    return "tight" if est.headroom_fraction < FRAGMENTATION_RISK else "ok"


def error_text(est: Estimate, runs: bool = True) -> str:
    """How far to trust the total: ``± 6% on 14 runs``, the median error on the published runs nearest to the plan
    (`core.memory.accuracy`; ``runs=False``: ``± 6%``)."""
    ee = est.expected_error
    if not ee.n_cases:
        return "± ? (no similar runs)" if runs else "± ?"
    return f"± {ee.median_pct:.0f}%" + (f" on {ee.n_cases} runs" if runs else "")


def headline(est: Estimate, error: bool = True) -> Content:
    """Three lines: the verdict with the per-GPU total (one decimal, as ``vramplan estimate``), the margin with the
    estimate's expected error (`error_text`; within its band, how far under the worst similar run was and what to
    keep free), and what ``torch.cuda.max_memory_allocated()`` / ``max_memory_reserved()`` would show. Each line
    fits the 33 columns of the gauges at 80x24. ``error=False``: without the expected error (the first frame: its
    data loads after it). Assembled, not parsed from markup: it is redrawn on every key."""
    total, cap = gib(est.total), gib(est.gpu_capacity)
    state = headroom_state(est, error)
    free, pct = f"{gib(est.headroom)} GiB free", f"{est.headroom_fraction:.0%}"
    if state == "band":  # the words say it without colour
        verdict = Content.assemble(("! fits, within the error", "bold"), f"  {total} / {cap} GiB per GPU")
        worst = est.expected_error.worst_under_pct
        margin = f"up to {worst:.0f}% under: keep {gib(error_margin(est))} GiB"
    elif state == "tight":
        verdict = Content.assemble(("! fits, tight", "bold"), f"  {total} / {cap} GiB per GPU")
        margin = f"{free} ({pct} < {FRAGMENTATION_RISK:.0%}" + (
            f"), {error_text(est, False)}" if error else " headroom)"
        )
    elif est.fits:
        verdict = Content.assemble(("✔ fits", "bold"), f"  {total} / {cap} GiB per GPU")
        margin = f"{free}, {error_text(est)}" if error else f"{free} ({pct} headroom)"
    elif est.gpu_fits:  # over the node's host memory or NVMe (`core.plan.node`)
        host = "host_memory" in est.exceeded
        verdict = Content.assemble((f"✘ does not fit in {'host RAM' if host else 'NVMe'}", "bold"))
        need, limit = (est.cpu_per_node, est.node.host) if host else (est.nvme_per_node, est.node.nvme)
        margin = f"{gib(need, 0)} / {gib(limit.bytes, 0)} GiB per node; GPU {total}"
    else:
        verdict = Content.assemble((f"✘ does not fit by {gib(-est.headroom)} GiB", "bold"))
        tail = f", {error_text(est, False)}" if error else f" ({est.total / est.gpu_capacity:.0%})"
        margin = f"{total} / {cap} GiB per GPU{tail}"
    # what torch.cuda.max_memory_allocated() / max_memory_reserved() would show (the total adds the process)
    torch = f"torch alloc {gib(est.allocated)} · resv {gib(est.reserved)}"
    return Content("\n").join([verdict, Content(margin), Content(torch)])


SUMMARY_WIDTH = 33  # the gauges' columns at 80x24, before they are laid out


def plan_summary(est: Estimate, width: int = SUMMARY_WIDTH) -> str:
    """One line of context whatever pane is shown: model, method, GPUs, in ``width`` columns where it can: the GPU's
    name and the model's are abbreviated (`names`: still unique among the presets), the GPU's to half the room at
    most."""
    p = est.plan
    t, hw = p.training, p.hardware
    method = method_label(t, compact=True)
    model, gpu = model_name(p.model), gpu_name(p)

    def line(model_text: str, gpu_text: str) -> str:
        return f"{model_text} {method}, {hw.total_gpus} x {gpu_text}"

    room = width - len(line("", ""))  # for the two names: the GPU takes at least half, the model what is left
    gpu_text = short_gpu(gpu, max(6, room - len(model), (room + 1) // 2 + 1))
    return line(short_model(model, max(6, room - len(gpu_text))), gpu_text)


def legend_rows(est: Estimate) -> list[tuple[str, int, int]]:
    """Every kind that occurs (the components, plus anything alive at the peak), in the gauges' order. Each
    kind's largest comes from `Estimate.per_gpu` (the components' bytes without their formulas, which the
    explanation alone needs: a key does not build them before its frame)."""
    live, largest = est.live_at_peak, est.per_gpu()
    rows = [(k, live.get(k, 0), largest.get(k, live.get(k, 0))) for k in ALL_KINDS if k in largest or k in live]
    while len(rows) > len(KINDS):  # a DPO/GRPO/PPO plan's extra kinds: the legend's height holds len(KINDS)
        rows.remove(min((r for r in rows if r[0] != "overhead"), key=lambda r: max(r[1], r[2])))  # the least
    return rows


def experts_note(est: Estimate) -> str:
    """A mixture-of-experts model's routed experts under the legend: their share of the parameters and how
    expert parallelism divides them (the weights, gradients and optimizer states above include them)."""
    arch = est.plan.model.arch()
    if arch.moe is None:
        return ""
    ep = est.plan.strategy.expert_parallel
    share = f"1/{ep} per GPU (EP {ep})" if ep > 1 else "no expert parallel"
    return f"experts {fmt_count(arch.expert_params)} of {fmt_count(arch.total_params)}, {share}"


def explanation(est: Estimate, kind: str) -> Content:
    """Formula and source of one kind (the overhead lists its terms)."""
    comps = est.components
    if kind not in comps:
        return Content("")
    c = comps[kind]
    live = est.live_at_peak.get(kind, 0)
    lines = [
        Content.from_markup(
            "[b]$label[/b]: $peak GiB at the peak, $most GiB at most",
            label=c.label,
            peak=gib(live, 2),
            most=gib(c.bytes, 2),
        ),
        Content(c.formula),
    ]
    terms = est.overhead_terms if kind == "overhead" else ()
    lines += [Content(f"• {t.name.replace('_', ' ')} {gib(t.bytes, 2)} GiB: {t.formula}") for t in terms]
    lines.append(Content.styled(f"source: {c.source}", "dim"))
    lines += [Content.styled(f"{t.name.replace('_', ' ')}: {t.source}", "dim") for t in terms]
    return Content("\n").join(lines)


class MemoryGauges(VerticalScroll):
    """Shows one estimate and its step time; the planner binds `estimate` and `timing` into it. It holds the
    colours of the kinds of memory that its bars and legend draw in (`bars.KIND_CLASSES`, styled by
    `bars.KIND_CSS` from each kind's theme variable)."""

    COMPONENT_CLASSES: ClassVar[set[str]] = set(KIND_CLASSES)
    DEFAULT_CSS = KIND_CSS

    estimate: Reactive[Estimate | None] = var(None, init=False)
    timing: Reactive[StepTime | None] = var(None, init=False)
    pinned: Reactive[Pinned | None] = var(None, init=False)  # a plan to show beside this one (P pins)

    def __init__(self, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        # what follows a change's frame: the details and the time table, in one callback (one message to this
        # widget before the frame instead of two: a plan change changes the estimate and the timing together)
        self.show_later = Settled(self, self._after_frame, after_frame=True)
        self._host_parts: tuple[Vertical, Static, StackedBar] | None = None  # the host RAM line and bar, once built
        # the expected errors join the headline and the step time after the first frame: their data (and json) load
        # then, not before
        self._with_error = False

    def compose(self) -> ComposeResult:
        yield without_links(Static(id="plan-summary"))
        yield LineText(id="headline")
        yield LineText(id="step-time")
        yield StackedBar(id="gpu-bar")
        yield LineText(id="peak-moment", classes="muted")
        yield KindLegend(id="legend")
        yield without_links(Static(id="explain"))
        yield without_links(Static(id="time-terms"))

    def on_mount(self) -> None:
        self.watch_estimate()
        self._details()  # the first frame complete
        self.watch_timing()

    def watch_timing(self) -> None:
        st = self.timing
        if st is None or not self.is_mounted:
            return
        show_text(self.query_one("#step-time", Static), time_summary(st, self._with_error))
        self.show_later()
        self.watch_pinned()

    def watch_pinned(self) -> None:
        """The pinned plan's figures and the change from them, and its bar above this plan's (hidden: none)."""
        if not self.is_mounted:
            return
        pinned, est, st = self.pinned, self.estimate, self.timing
        self.set_class(pinned is not None, "-pinned")
        if pinned is None or est is None or st is None:
            return
        if not self.query("#pinned"):  # built when first pinned (see `_host`)
            self.mount(without_links(Static(id="pinned")), StackedBar(id="pinned-bar", scale=False), before="#gpu-bar")
        show_text(self.query_one("#pinned", Static), Content(pinned_line(pinned, est, st)))
        pe = pinned.estimate
        live = pe.live_at_peak
        self.query_one("#pinned-bar", StackedBar).show([(k, live.get(k, 0)) for k in ALL_KINDS], pe.gpu_capacity)

    def _time_terms(self) -> None:
        """The fuller time table, shown in the wide and tall layout only: updated after the frame (`Settled`) and
        only while shown (a hidden text that changes would cost a layout pass)."""
        terms = self.query_one("#time-terms", Static)
        if self.timing is not None and terms.display:
            show_text(terms, time_table(self.timing))

    def on_resize(self) -> None:
        self.call_after_refresh(self._summary)  # at its width once laid out at the new size
        self._time_terms()  # the layout (and so whether the table is shown) changes with the terminal's size
        # a layout request made while the resize is being laid out is lost (the table kept the one line it had
        # while hidden, until the next plan change): ask again after this frame
        self.call_after_refresh(self._relayout_time_terms)

    def _relayout_time_terms(self) -> None:
        terms = self.query_one("#time-terms", Static)
        if terms.display:
            terms.refresh(layout=True)

    def watch_estimate(self) -> None:
        est = self.estimate
        if est is None or not self.is_mounted:
            return
        self._summary()
        self._headline(est)
        live = est.live_at_peak
        self.query_one("#gpu-bar", StackedBar).show([(k, live.get(k, 0)) for k in ALL_KINDS], est.gpu_capacity)
        stage = "" if est.stage == "all" else f" (busiest: {est.stage} pipeline stage)"
        show_text(self.query_one("#peak-moment", Static), Content(f"peak: {est.peak.moment}{stage}"))
        self.query_one(KindLegend).show(legend_rows(est), experts_note(est))
        # after the frame that shows the new figure: the explanation and the host bar change height (a layout
        # pass over the whole screen, e.g. switching ZeRO-3), and the key's frame need not wait for them
        self.show_later()

    def _summary(self) -> None:
        summary, est = self.query_one("#plan-summary", Static), self.estimate
        if est is not None:
            show_text(summary, Content(plan_summary(est, summary.content_size.width or SUMMARY_WIDTH)))

    def _headline(self, est: Estimate) -> None:
        show_text(self.query_one("#headline", Static), headline(est, self._with_error))
        state = headroom_state(est, self._with_error)
        warn = state in ("tight", "band")
        self.query_one("#headline").set_class(state == "over", "-over").set_class(warn, "-warn")

    def _after_frame(self) -> None:
        if not self._with_error and self.estimate is not None:
            self._with_error = True
            self._headline(self.estimate)
            if self.timing is not None:
                show_text(self.query_one("#step-time", Static), time_summary(self.timing))
        self._details()
        self._time_terms()

    def _details(self) -> None:
        est = self.estimate
        if est is None:
            return
        self._explain(self.query_one(KindLegend).kind)
        self._host(est)
        self.watch_pinned()

    def _host(self, est: Estimate) -> None:
        offloading = bool(est.cpu_per_node or est.nvme_per_node)
        if self._host_parts is not None:
            self._host_parts[0].set_class(offloading, "-on")
        if not offloading:
            return
        if self._host_parts is None:
            # Built when first needed, as the pinned plan's line and bar are: hidden, they still cost the first
            # frame their style passes (a bar takes one per component class) and a place in every layout.
            label, bar = without_links(Static(id="host-label")), StackedBar(id="host-bar")
            self._host_parts = (Vertical(label, bar, id="host", classes="-on"), label, bar)
            self.mount(self._host_parts[0], before="#time-terms")
        _, label, bar = self._host_parts
        hw = est.plan.hardware
        node_gpu = hw.gpus_per_node * est.gpu_capacity
        text = f"host RAM per node [b]{gib(est.cpu_per_node)} GiB[/b] (offloaded)"
        if est.nvme_per_node:
            text += f", NVMe per node {gib(est.nvme_per_node)} GiB"
        show_text(label, text + f"\n[dim]bar: against the node's {gib(node_gpu, 0)} GiB of GPU memory[/dim]")
        bar.show([("host", est.cpu_per_node)], node_gpu)

    def _explain(self, kind: str | None) -> None:
        est = self.estimate
        if est is not None and kind is not None:
            show_text(self.query_one("#explain", Static), explanation(est, kind))

    def on_kind_legend_selected(self, event: KindLegend.Selected) -> None:
        event.stop()
        self._explain(event.kind)
        if event.control.has_focus:  # reading explanations: bring the selected one into view
            self.call_after_refresh(self.query_one("#explain").scroll_visible, animate=False)

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        if isinstance(event.widget, KindLegend):  # reading explanations: show the selected one
            self.add_class("-explaining")  # the verdict stays in view (app.tcss docks it)
            self.call_after_refresh(self.query_one("#explain").scroll_visible, animate=False)

    def on_descendant_blur(self, event: events.DescendantBlur) -> None:
        if isinstance(event.widget, KindLegend):  # back to the headline
            self.remove_class("-explaining")
            self.scroll_home(animate=False)
