"""The GPU guide view (``g``): every GPU preset with the fewest GPUs that fit the plan as planned, the step time,
tokens/s, time and cost to train, and the fit advisor's change for fewer GPUs (`core.advice.gpuguide`). The guide is
computed in a thread worker (a fraction of a second to a few seconds); enter takes the highlighted GPU and count
into the plan (the planner applies it, one undoable change); ``s`` sorts by time or cost; esc closes."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.content import Content
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

from vramplan.core.advice.gpuguide import MAX_GPUS, SORTS, GpuRow, Guide, sort_rows
from vramplan.core.plan.describe import method_label, model_name
from vramplan.core.plan.helpers.units import fmt_count
from vramplan.core.plan.schema.plan import Plan
from vramplan.tui.screens.css import tcss
from vramplan.tui.widgets.text import show_text

# GpuRow.cells() without the GPU's own memory (the name says it), the name cut to fit 80 columns
HEADER = ("GPU", "GPUs", "GiB/GPU", "step", "tokens/s", "train", "cost USD")
NAME_WIDTH = 16


def table_cells(row: GpuRow) -> tuple[Text, ...]:
    """The row's cells as plain text (a user preset's name is never read as markup), numbers right-aligned."""
    name, _, *rest = row.cells()
    name = name if len(name) <= NAME_WIDTH else name[: NAME_WIDTH - 1] + "…"
    return (Text(name), *(Text(cell, justify="right") for cell in rest))


class GpuGuideScreen(ModalScreen[dict[str, Any] | None]):
    """Dismissed with the hardware changes of the chosen row (None: closed)."""

    DEFAULT_CSS = tcss("views.tcss")  # beside this module: see `vramplan.tui.screens.css`
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,g", "dismiss(None)", "Close", id="gpus_close"),
        Binding("s", "cycle_sort", "Sort by time or cost", id="gpus_sort"),
    ]
    AUTO_FOCUS = "#gpus-table"

    class Ready(Message):
        def __init__(self, guide: Guide | None, error: str = "") -> None:
            super().__init__()
            self.guide = guide
            self.error = error

    def __init__(self, plan: Plan) -> None:
        super().__init__()
        self.plan = plan
        self.guide: Guide | None = None
        self.rows: tuple[GpuRow, ...] = ()
        self.sort = "time"

    def compose(self) -> ComposeResult:
        with Vertical(id="gpus", classes="dialog"):
            yield Static(id="gpus-title", classes="muted")
            yield DataTable(id="gpus-table", cursor_type="row", zebra_stripes=False)
            yield Static(id="gpus-detail")
            yield Static("⏎ use this GPU and count · s sort by time/cost · esc closes", classes="dialog-hint")

    def on_mount(self) -> None:
        box = self.query_one("#gpus")
        box.border_title = "GPU guide"
        t = self.plan.training
        budget = f", {fmt_count(t.tokens)} tokens" if t.tokens else " (no token budget: training.tokens)"
        title = f"{model_name(self.plan.model)} {method_label(t, compact=True)}{budget}"
        show_text(self.query_one("#gpus-title", Static), Content(title))
        table = self.query_one("#gpus-table", DataTable)
        table.add_column(HEADER[0])
        for label in HEADER[1:]:
            table.add_column(Text(label, justify="right"))
        show_text(self.query_one("#gpus-detail", Static), Content("computing the fewest GPUs for every preset…"))
        self._compute(self.plan)

    @work(thread=True, exclusive=True, group="gpu-guide", exit_on_error=False)
    def _compute(self, plan: Plan) -> None:
        from vramplan.core.advice.gpuguide import gpu_guide

        try:
            self.post_message(self.Ready(gpu_guide(plan)))
        except Exception as exc:  # shown in the view; the planner keeps working
            self.post_message(self.Ready(None, f"{type(exc).__name__}: {exc}"))

    def on_gpu_guide_screen_ready(self, event: Ready) -> None:
        event.stop()
        if event.guide is None:
            show_text(self.query_one("#gpus-detail", Static), Content(f"✘ {event.error}"))
            return
        self.guide = event.guide
        self._fill()

    def _fill(self) -> None:
        assert self.guide is not None
        self.rows = sort_rows(self.guide.rows, self.sort)
        table = self.query_one("#gpus-table", DataTable)
        table.clear()
        for r in self.rows:
            table.add_row(*table_cells(r), key=r.gpu)
        table.move_cursor(row=0)
        box = self.query_one("#gpus")
        box.border_subtitle = f"fewest GPUs that fit as planned, up to {MAX_GPUS} · sorted by {self.sort}"
        self._detail(0)

    def _detail(self, index: int) -> None:
        if not 0 <= index < len(self.rows):
            return
        r = self.rows[index]
        fits = (
            f"{r.gpus_text} GPU{'s fit' if r.min_gpus != 1 else ' fits'} as planned"
            if r.fits
            else f"does not fit: {r.why}"
        )
        lines = [f"{r.name}: {fits}"]
        if r.change is not None:
            lines.append(f"with a change: {r.change.text()}")
        elif r.change_note:
            lines.append(r.change_note)
        if r.fits and r.cost is None and r.train_hours is not None:
            lines.append("cost: no price (hardware.price_per_gpu_hour, or price_per_gpu_hour in the GPU preset)")
        show_text(self.query_one("#gpus-detail", Static), Content("\n".join(lines)))

    @on(DataTable.RowHighlighted, "#gpus-table")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        self._detail(event.cursor_row)

    @on(DataTable.RowSelected, "#gpus-table")
    def _selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if not 0 <= event.cursor_row < len(self.rows):
            return
        r = self.rows[event.cursor_row]
        if r.layout is None:
            self.notify_row(f"✘ {r.name} does not fit at any count up to {MAX_GPUS} with these strategies")
            return
        gpn, nodes = r.layout
        self.dismiss({"hardware.gpu": r.gpu, "hardware.gpus_per_node": gpn, "hardware.nodes": nodes})

    def notify_row(self, text: str) -> None:
        show_text(self.query_one("#gpus-detail", Static), Content(text))

    def action_cycle_sort(self) -> None:
        self.sort = SORTS[(SORTS.index(self.sort) + 1) % len(SORTS)]
        if self.guide is not None:
            self._fill()
