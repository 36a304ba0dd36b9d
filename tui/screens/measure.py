"""The measure view (palette: ``plan: measure here``): `vramplan measure` of the planner's plan, run in a thread
worker while the app stays responsive, with a progress bar, then the comparison of predicted and measured figures.
``esc`` stops the run (the worker's stop event: it ends after the phase running, the report is partial), ``esc``
again closes. Only offered when the ``measure`` extra is installed
(`vramplan.tui.command_table.measure_available`: found, never imported; torch is imported by the worker, in its
thread)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import ProgressBar, Static

from vramplan.core.plan.helpers.units import fmt_bytes, fmt_seconds
from vramplan.core.plan.schema.plan import Plan
from vramplan.tui.screens.css import tcss

if TYPE_CHECKING:
    from vramplan.measure.comparison import ComparisonRow
    from vramplan.measure.records import MeasureReport, Progress


@dataclass(frozen=True)
class Outcome:
    """A finished measurement: the report, its comparison rows, and what this machine could not reproduce."""

    report: MeasureReport
    rows: tuple[ComparisonRow, ...]
    cannot: tuple[str, ...]


def run_measurement(plan: Plan, progress: Callable[[Progress], None], stop: threading.Event) -> Outcome:
    """What `vramplan measure` does, on this machine's GPU when torch sees one, else the CPU (runs in the
    worker's thread: torch is imported here)."""
    from vramplan.core.memory.peak import estimate
    from vramplan.core.time.step import step_time
    from vramplan.measure import cuda
    from vramplan.measure.comparison import comparison_rows
    from vramplan.measure.limitations import limitations
    from vramplan.measure.records import Device, MeasureOptions
    from vramplan.measure.run import measure_plan

    gpus = cuda.local_gpus()
    device: Device = "cuda" if gpus else "cpu"
    limits = limitations(plan, device, gpus)
    report = measure_plan(plan, MeasureOptions(device=device), progress=progress, stop=stop)
    rows = comparison_rows(estimate(plan, cpu=device == "cpu"), step_time(plan), report, limits)
    return Outcome(report, rows, tuple(lim.what for lim in limits))


def _figure(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "bytes":
        return fmt_bytes(value)
    if unit == "s":
        return fmt_seconds(value)
    return f"{value:,.0f}"


def _error(e: float) -> str:
    """(predicted - measured) / measured in percent, within 8 columns (``+12.3%``, ``<-999%``)."""
    if abs(e) >= 10:
        return ">+999%" if e > 0 else "<-999%"
    return f"{100 * e:+.1f}%"


def outcome_text(o: Outcome) -> Content:
    """The comparison within 76 columns: one row per figure, ``*`` where this machine did not reproduce the plan."""
    r = o.report
    state = "stopped: partial report" if r.partial else ("OUT OF MEMORY" if r.oom else "done")
    lines = [
        Content.styled(f"{r.plan_summary}"[:76], "bold"),
        Content(f"{r.machine}, {r.device}: {r.steps_done}/{r.steps_planned} steps, {state}"[:76]),
        Content(""),
        Content.styled(f"  {'per GPU (worst rank)':<22}{'predicted':>13}{'measured':>13}{'error':>9}", "bold"),
    ]
    for row in o.rows:
        err = "-" if row.error is None else _error(row.error)
        mark = " " if row.reproducible else "*"
        text = f"{mark} {row.name.replace('_', ' '):<22}{_figure(row.predicted, row.unit):>13}"
        lines.append(Content(text + f"{_figure(row.measured, row.unit):>13}{err:>9}"))
    lines += [Content(n[:76]) for n in r.notes]
    if o.cannot:
        lines += [Content(""), Content("* not reproduced here:")]
        lines += [Content(f"  {c}"[:200]) for c in o.cannot]
    return Content("\n").join(lines)


class MeasureScreen(ModalScreen[None]):
    """The run and its result; the planner's plan is never changed here."""

    DEFAULT_CSS = tcss("measure.tcss")  # beside this module: see `vramplan.tui.screens.css`
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "stop_or_close", "Stop / close", id="measure_close"),
    ]

    def __init__(self, plan: Plan) -> None:
        super().__init__()
        self.plan = plan
        self.stop = threading.Event()
        self.outcome: Outcome | None = None
        self.failed = ""

    def compose(self) -> ComposeResult:
        with Vertical(id="measure", classes="dialog"):
            yield Static("starting: torch is being imported", id="measure-status")
            yield ProgressBar(total=None, show_eta=False, id="measure-bar")
            with VerticalScroll(id="measure-scroll"):
                yield Static("", id="measure-text")

    def on_mount(self) -> None:
        box = self.query_one("#measure")
        box.border_title = "Measure this plan here"
        box.border_subtitle = "esc stops · esc again closes"
        self._measure()

    @property
    def running(self) -> bool:
        return self.outcome is None and not self.failed

    @work(thread=True, exclusive=True, group="measure", exit_on_error=False)
    def _measure(self) -> None:
        try:
            outcome = run_measurement(self.plan, self._progress_from_thread, self.stop)
        except Exception as exc:  # a plan this stack cannot build: said in the view, never a crash
            self.app.call_from_thread(self._failed, f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
            return
        self.app.call_from_thread(self._done, outcome)

    def _progress_from_thread(self, p: Progress) -> None:
        self.app.call_from_thread(self._show_progress, p)

    def _show_progress(self, p: Progress) -> None:
        if not self.is_attached:
            return
        self.query_one("#measure-status", Static).update(Content(p.message[:76]))
        self.query_one("#measure-bar", ProgressBar).update(total=max(1, p.total), progress=p.step)

    def _done(self, outcome: Outcome) -> None:
        self.outcome = outcome
        if not self.is_attached:
            return
        r = outcome.report
        word = "stopped" if r.partial else ("out of memory" if r.oom else "measured")
        self.query_one("#measure-status", Static).update(Content(f"{word}: esc closes"))
        self.query_one("#measure-bar", ProgressBar).update(total=max(1, r.steps_planned), progress=r.steps_done)
        self.query_one("#measure-text", Static).update(outcome_text(outcome))

    def _failed(self, line: str) -> None:
        self.failed = line
        if self.is_attached:
            self.query_one("#measure-status", Static).update(Content(f"cannot run this plan here: {line}"[:300]))

    def action_stop_or_close(self) -> None:
        if self.running and not self.stop.is_set():
            self.stop.set()
            self.query_one("#measure-status", Static).update(Content("stopping after this phase (esc closes)"))
            return
        self.stop.set()  # closing while it runs: the worker still stops, in its own time
        self.dismiss(None)
