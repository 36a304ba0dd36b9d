"""The trace view (palette: ``plan: trace this plan``): `vramplan trace` of the planner's plan, its step at full size
on fake tensors, run in a thread worker while the app stays responsive, with a progress bar; then the traced peaks
beside the estimate's, row by row, and what was not traced. ``esc`` stops the run (the worker's stop event: the trace
ends within a few thousand ops, the report is partial), ``esc`` again closes. Only offered when the ``measure`` extra
is installed (`vramplan.tui.command_table.measure_available`; torch is imported by the worker, in its thread). After
the Model pane refused a config.json for want of a formula family, it traces that file as the model (issue 41.4)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import ProgressBar, Static

from vramplan.core.plan.helpers.units import fmt_bytes
from vramplan.core.plan.schema.plan import Plan
from vramplan.tui.screens.css import tcss

if TYPE_CHECKING:
    from vramplan.measure.records import Progress
    from vramplan.measure.trace_records import TraceReport


def run_trace(
    plan: Plan, progress: Callable[[Progress], None], stop: threading.Event, config: str | None = None
) -> TraceReport:
    """What `vramplan trace` does with its defaults (runs in the worker's thread: torch is imported here); with
    `config`, a config.json without a formula family is the model (`vramplan trace --hf-config`)."""
    from vramplan.measure.trace_records import TraceOptions
    from vramplan.measure.trace_run import trace_plan

    raw = None
    if config is not None:
        from vramplan.core.plan.architecture.hf_config import config_path, parse_json
        from vramplan.core.plan.helpers.readfile import read_regular

        path = config_path(config)
        raw = parse_json(read_regular(str(path)).decode("utf-8", errors="replace"), str(path))
    return trace_plan(plan, TraceOptions(raw_config=raw), progress=progress, stop=stop)


def _error(e: float | None) -> str:
    """(estimate - traced) / traced in percent, within 8 columns."""
    if e is None:
        return "-"
    if abs(e) >= 10:
        return ">+999%" if e > 0 else "<-999%"
    return f"{100 * e:+.1f}%"


def report_text(r: TraceReport) -> Content:
    """The comparison within 76 columns, then the peak's phase, the modules at the peak and what was not traced."""
    state = "stopped: partial report" if r.partial else ("OUT OF MEMORY" if r.oom else "done")
    lines = [
        Content.styled(r.plan_summary[:76], "bold"),
        Content(f"fake tensors, {r.kernels} kernels: {r.steps} steps ({r.steps_traced} traced), {state}"[:76]),
        Content(""),
        Content.styled(f"  {'per GPU':<22}{'traced':>13}{'estimate':>13}{'error':>9}", "bold"),
    ]
    for d in r.differences:
        est, err = (fmt_bytes(d.estimated), _error(d.error)) if r.has_estimate else ("-", "-")
        figures = f"{fmt_bytes(d.traced):>13}{est:>13}{err:>9}"
        lines.append(Content(f"  {d.name:<22}{figures}"))
    lines.append(Content(f"traced peak: {r.peak_phase} of step {r.peak_step}, fragmentation "
                         f"{100 * r.fragmentation:.1f}%"[:76]))  # fmt: skip
    named = [d for d in r.differences if d.why]
    if named:
        lines += [Content(""), Content.styled("what differs", "bold")]
        lines += [Content(f"  {d.name}: {d.why}"[:300]) for d in named]
    lines += [Content(""), Content.styled("at the traced peak, by module", "bold")]
    lines += [Content(f"  {m[:50]:<50}{fmt_bytes(n):>13}") for m, n in r.by_module[:6]]
    lines += [Content(f"from the estimate: {what} {fmt_bytes(n)}"[:300]) for what, n in r.adjustments]
    if r.not_traced:
        lines += [Content(""), Content("not traced:")] + [Content(f"  {x}"[:300]) for x in r.not_traced]
    lines.append(Content("without a GPU the allocator model is unvalidated (vramplan help trace)"))
    return Content("\n").join(lines)


class TraceScreen(ModalScreen[None]):
    """The trace and its result; the planner's plan is never changed here."""

    DEFAULT_CSS = tcss("trace.tcss")  # beside this module: see `vramplan.tui.screens.css`
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "stop_or_close", "Stop / close", id="trace_close"),
    ]

    def __init__(self, plan: Plan, config: str | None = None) -> None:
        super().__init__()
        self.plan = plan
        self.config = config  # a config.json the planner refused (no formula family), traced as the model
        self.stop = threading.Event()
        self.report: TraceReport | None = None
        self.failed = ""

    def compose(self) -> ComposeResult:
        with Vertical(id="trace", classes="dialog"):
            yield Static("starting: torch is being imported", id="trace-status")
            yield ProgressBar(total=None, show_eta=False, id="trace-bar")
            with VerticalScroll(id="trace-scroll"):
                yield Static("", id="trace-text")

    def on_mount(self) -> None:
        box = self.query_one("#trace")
        box.border_title = "Trace this plan (fake tensors)"
        box.border_subtitle = "esc stops · esc again closes"
        self._trace()

    @property
    def running(self) -> bool:
        return self.report is None and not self.failed

    @work(thread=True, exclusive=True, group="trace", exit_on_error=False)
    def _trace(self) -> None:
        try:
            report = run_trace(self.plan, self._progress_from_thread, self.stop, self.config)
        except Exception as exc:  # a plan fake tensors cannot run: said in the view, never a crash
            self.app.call_from_thread(self._failed, f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
            return
        self.app.call_from_thread(self._done, report)

    def _progress_from_thread(self, p: Progress) -> None:
        self.app.call_from_thread(self._show_progress, p)

    def _show_progress(self, p: Progress) -> None:
        if not self.is_attached:
            return
        self.query_one("#trace-status", Static).update(Content(p.message[:76]))
        if p.total:
            self.query_one("#trace-bar", ProgressBar).update(total=p.total, progress=p.step)

    def _done(self, report: TraceReport) -> None:
        self.report = report
        if not self.is_attached:
            return
        word = "stopped" if report.partial else ("out of memory" if report.oom else "traced")
        self.query_one("#trace-status", Static).update(Content(f"{word}: esc closes"))
        bar = self.query_one("#trace-bar", ProgressBar)
        bar.update(total=max(1, report.steps_traced), progress=report.steps_traced)
        self.query_one("#trace-text", Static).update(report_text(report))

    def _failed(self, line: str) -> None:
        self.failed = line
        if self.is_attached:
            self.query_one("#trace-status", Static).update(Content(f"cannot trace this plan: {line}"[:300]))

    def action_stop_or_close(self) -> None:
        if self.running and not self.stop.is_set():
            self.stop.set()
            self.query_one("#trace-status", Static).update(Content("stopping (esc closes)"))
            return
        self.stop.set()
        self.dismiss(None)
