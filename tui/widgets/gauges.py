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

from vramplan.core.advice.margin import FLOOR, need_bytes, safety_margin
from vramplan.core.memory.kinds import ALL_KINDS, KINDS, kind_label, plan_labels
from vramplan.core.memory.record import Estimate
from vramplan.core.plan.describe import gpu_name, method_label, model_name
from vramplan.core.plan.helpers.memo import memoised
from vramplan.core.plan.helpers.units import fmt_count
from vramplan.core.plan.helpers.units import gib_text as gib
from vramplan.core.time.record import StepTime
from vramplan.tui.names import short_gpu, short_model
from vramplan.tui.pinned import Pinned, pinned_line
from vramplan.tui.time_text import time_summary, time_table
from vramplan.tui.widgets.bars import KIND_CLASSES, KIND_CSS, KindLegend, StackedBar
from vramplan.tui.widgets.settle import Settled
from vramplan.tui.widgets.text import LineText, show_text, without_links


def headroom_state(est: Estimate, error: bool = True) -> str:
    """``over`` (does not fit), ``tight`` (fits without the safety margin free, `core.advice.margin`: the fit
    advisor's and the checklist's; ``error=False``, before the expected error has loaded: less than its floor,
    fragmentation's 10%) or ``ok``: the headline's colour and words follow it."""
    if not est.fits:
        return "over"
    if error:
        return "ok" if safety_margin(est).keeps(est) else "tight"
    return "tight" if est.headroom_fraction < FLOOR else "ok"


def error_text(est: Estimate, runs: bool = True) -> str:
    """How far to trust the total: ``± 6% on 14 runs``, the median error on the published runs nearest to the plan
    (`core.memory.accuracy`; ``runs=False``: ``± 6%``)."""
    ee = est.expected_error
    if not ee.n_cases:
        return "± ? (no similar runs)" if runs else "± ?"
    return f"± {ee.median_pct:.0f}%" + (f" on {ee.n_cases} runs" if runs else "")


def headline(est: Estimate, error: bool = True) -> Content:
    """Three lines: the verdict with the per-GPU total (one decimal, as ``vramplan estimate``); what the plan may
    need with its safety margin (`core.advice.margin.need_bytes`: at most the GPU's memory exactly when the margin
    is kept) beside the estimate's expected error (`error_text`); and what ``torch.cuda.max_memory_allocated()`` /
    ``max_memory_reserved()`` would show. Each line fits the 33 columns of the gauges at 80x24. ``error=False``:
    the free memory instead (the first frame: the expected error's data loads after it). Assembled, not parsed
    from markup: it is redrawn on every key."""
    total, cap = gib(est.total), gib(est.gpu_capacity)
    state = headroom_state(est, error)
    free, pct = f"{gib(est.headroom)} GiB free", f"{est.headroom_fraction:.0%}"
    need = f"may need up to {gib(need_bytes(est))} GiB" if error else ""
    if state == "tight":  # the words say it without colour
        verdict = Content.assemble(("! fits, tight", "bold"), f"  {total} / {cap} GiB")
        margin = f"{need}, {error_text(est, False)}" if error else f"{free} ({pct} < {FLOOR:.0%})"
    elif est.fits:
        verdict = Content.assemble(("✔ fits", "bold"), f"  {total} / {cap} GiB per GPU")
        margin = f"{need}, {error_text(est, False)}" if error else f"{free} ({pct} headroom)"
    elif est.gpu_fits:  # over the node's host memory or NVMe (`core.plan.node`)
        host = "host_memory" in est.exceeded
        verdict = Content.assemble((f"✘ does not fit in {'host RAM' if host else 'NVMe'}", "bold"))
        need_node, limit = (est.cpu_per_node, est.node.host) if host else (est.nvme_per_node, est.node.nvme)
        margin = f"{gib(need_node, 0)} / {gib(limit.bytes, 0)} GiB per node; GPU {total}"
    else:
        verdict = Content.assemble((f"✘ does not fit by {gib(-est.headroom)} GiB", "bold"))
        tail = f", {error_text(est, False)}" if error else f" ({est.total / est.gpu_capacity:.0%})"
        margin = f"{total} / {cap} GiB per GPU{tail}"
    # what torch.cuda.max_memory_allocated() / max_memory_reserved() would show (the total adds the process)
    torch = f"torch alloc {gib(est.allocated)} · resv {gib(est.reserved)}"
    return Content("\n").join([verdict, Content(margin), Content(torch)])


SUMMARY_WIDTH = 33  # the gauges' columns at 80x24, before they are laid out


GPU_MIN_WIDTH = 7  # the GPU's name at its shortest beside a long model name: ``H100 8…``, ``RTX A6…``, ``MI300X``


def plan_summary(est: Estimate, width: int = SUMMARY_WIDTH) -> str:
    """One line of context whatever pane is shown: model, method, GPUs, in ``width`` columns where it can. The
    model's name is kept whole where the GPU's keeps `GPU_MIN_WIDTH` columns, and the GPU's is cut first
    (`names`: both still unique among the presets): the GPU is on the Hardware pane and in the headline's
    capacity, where a cut model name (``Llama-3.1-7…`` for a 70B) is misread."""
    p = est.plan
    return summary_line(model_name(p.model), method_label(p.training, compact=True), p.hardware.total_gpus,
                        gpu_name(p), width)  # fmt: skip


@memoised(256, group="presets")  # the same line for every key that changes none of it (a strategy key); emptied
# with the presets (`presets.reload`: a new preset's name may change how the others are told apart)
def summary_line(model: str, method: str, gpus: int, gpu: str, width: int) -> str:
    """`plan_summary`'s line from its parts."""

    def line(model_text: str, gpu_text: str) -> str:
        return f"{model_text} {method}, {gpus} x {gpu_text}"

    room = width - len(line("", ""))  # for the two names: the model first, the GPU what is left
    model_text = short_model(model, max(6, min(len(model), room - GPU_MIN_WIDTH)))
    return line(model_text, short_gpu(gpu, max(6, room - len(model_text))))


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
            label=kind_label(kind, est.plan),
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


class MemoryGauges(VerticalScroll, can_focus=False):
    """Shows one estimate and its step time; the planner binds `estimate` and `timing` into it. It holds the
    colours of the kinds of memory that its bars and legend draw in (`bars.KIND_CLASSES`, styled by
    `bars.KIND_CSS` from each kind's theme variable). The column itself takes no focus (the mouse still scrolls
    it): `tab` goes to its legend, where the headline stays docked at the top (`-explaining`); focused itself, `↓`
    scrolled the fits / does-not-fit headline out of view, and it stayed there."""

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
        self.query_one(KindLegend).show(legend_rows(est), experts_note(est), plan_labels(est.plan))
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
        warn = state == "tight"
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
