"""The planner screen: owns the plan, its estimate and its step time. Panes send edits up (`PlanPane.Changed`); the
screen validates them (`Plan.with_changes`), keeps undo/redo, recomputes the estimate and the step time in
`watch_plan` (microseconds, synchronous) and binds them down into every pane and the gauges."""

from __future__ import annotations

from collections.abc import Mapping
from importlib import import_module
from typing import TYPE_CHECKING, Any, ClassVar

from textual import events
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Vertical
from textual.content import Content
from textual.reactive import Reactive, var
from textual.screen import Screen
from textual.widget import AwaitMount
from textual.widgets import Footer, Input, Static

import vramplan.tui.widgets.model_pane  # noqa: F401  (the pane shown first: loaded with the app, see `pane_class`)
from vramplan.core.files.importers.config_format import is_config_path
from vramplan.core.memory.peak import estimate
from vramplan.core.memory.record import Estimate
from vramplan.core.plan.catalogue.gpu_match import DetectedGpus
from vramplan.core.plan.helpers.errors import PlanError, printable
from vramplan.core.plan.schema.plan import Plan
from vramplan.core.time.record import StepTime
from vramplan.core.time.step import step_time
from vramplan.tui.choices import error_text, next_valid
from vramplan.tui.command_table import bindings, measure_available
from vramplan.tui.detection import detected_notice
from vramplan.tui.history import PlanHistory
from vramplan.tui.pinned import Pinned
from vramplan.tui.widgets.bars import KindLegend
from vramplan.tui.widgets.fields import NO_ERRORS, PlanPane, field_id
from vramplan.tui.widgets.gauges import MemoryGauges
from vramplan.tui.widgets.pane_tabs import PaneTabs

if TYPE_CHECKING:
    from vramplan.core.files.calibration import Calibration
    from vramplan.core.files.planfile import Meta
    from vramplan.core.files.planio import PlanFile
    from vramplan.tui.screens.files import Exported

# The plan panes, in tab order: (id, tab title, the module under vramplan.tui.widgets holding its class, the class).
# A new pane is one more row. A pane's module is imported when the pane is first built (`pane_class`): the first
# frame at 80x24 shows the Model pane only, and importing the other four (the strategy keys' effects and the
# checklist's widgets with them) took 4-6 ms of a cold start.
PANES: tuple[tuple[str, str, str, str], ...] = (
    ("model", "Model", "model_pane", "ModelPane"),
    ("hardware", "Hardware", "hardware_pane", "HardwarePane"),
    ("training", "Training", "training_pane", "TrainingPane"),
    ("strategy", "Strategies", "strategy_pane", "StrategyPane"),
    ("checklist", "Checks", "checklist_pane", "ChecklistPane"),
)

TABLE_PANES = {"stack": "hardware"}  # the tables edited in a pane named otherwise: the stack beside the hardware


def pane_class(pid: str) -> type[PlanPane]:
    """The class of pane ``pid``; its module is imported on first use (the Model pane's with this module)."""
    _, _, module, name = next(row for row in PANES if row[0] == pid)
    cls: type[PlanPane] = getattr(import_module(f"vramplan.tui.widgets.{module}"), name)
    return cls


# Narrow: the headline over one pane; normal: tabs + gauges side by side; wide and tall: every pane at once.
HORIZONTAL: list[tuple[int, str]] = [(0, "-narrow"), (64, "-normal"), (140, "-wide")]
VERTICAL: list[tuple[int, str]] = [(0, "-short"), (40, "-tall")]


def _breakpoint(size: int, breakpoints: list[tuple[int, str]]) -> str:
    return [name for threshold, name in breakpoints if size >= threshold][-1]


class PlannerScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = bindings()
    # Textual annotates these `ClassVar[...] | None` on Screen, which mypy reads as an instance variable that may be
    # None: this module's constants, typed as lists, are what the screen itself reads.
    HORIZONTAL_BREAKPOINTS = HORIZONTAL
    VERTICAL_BREAKPOINTS = VERTICAL
    AUTO_FOCUS = "#model-list"

    plan: Reactive[Plan] = var(None, init=False)  # type: ignore[arg-type]
    estimate: Reactive[Estimate] = var(None, init=False)  # type: ignore[arg-type]
    timing: Reactive[StepTime] = var(None, init=False)  # type: ignore[arg-type]
    errors: Reactive[Mapping[str, str]] = var(NO_ERRORS, init=False)
    pane: Reactive[str] = var("model", init=False)
    notice: Reactive[str] = var("", init=False)
    pinned: Reactive[Pinned | None] = var(None, init=False)  # the plan kept aside to compare with (P)

    def __init__(self, plan: Plan, notice: str = "", meta: Meta | None = None) -> None:
        super().__init__()
        self.export_format = "toml"
        self._shown_once = False
        self._mounting: dict[str, AwaitMount] = {}  # panes built after the first frame, being mounted
        self.saved_plan = plan  # the plan as last opened or exported as TOML: quitting with another one asks first
        self.refused_config: str | None = None  # a config.json refused for want of a formula family: traced instead
        self.history = PlanHistory(plan, meta)
        self.set_reactive(PlannerScreen.plan, plan)
        self.set_reactive(PlannerScreen.estimate, estimate(plan))
        self.set_reactive(PlannerScreen.timing, step_time(plan))
        self.set_reactive(PlannerScreen.notice, notice)

    def compose(self) -> ComposeResult:
        # The layout classes the first resize would set, set now: the whole tree is styled once, not twice.
        width, height = self.app.size
        self.add_class(_breakpoint(width, HORIZONTAL), _breakpoint(height, VERTICAL))
        # the screen lays the editor and the gauges side by side (app.tcss); the notice and the footer are docked
        with Vertical(id="editor"):  # the tabs over the panes (a grid of them, wide and tall: app.tcss)
            yield PaneTabs([(pid, title) for pid, title, _, _ in PANES], self.pane, id="pane-tabs")
            # only the panes shown now: the others are built when first shown
            yield from (self._new_pane(pid) for pid in self._shown_panes(width, height))
        gauges = MemoryGauges(id="gauges")
        gauges.set_reactive(MemoryGauges.estimate, self.estimate)
        gauges.set_reactive(MemoryGauges.timing, self.timing)
        yield gauges.data_bind(PlannerScreen.estimate, PlannerScreen.timing, PlannerScreen.pinned)
        yield Static(id="notice")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.watch_notice()

    def on_screen_resume(self, event: events.ScreenResume) -> None:
        """The first time the screen is shown, its widgets were styled as they were mounted, a moment before:
        Textual's handler (after this one) would style them all again before the first frame."""
        if not self._shown_once:
            self._shown_once = True
            event.refresh_styles = False

    # -- panes, built when first shown -------------------------------------------------------------------------
    def _shown_panes(self, width: int, height: int) -> list[str]:
        """The panes a screen of this size shows: the current one, and in the wide and tall layout every pane
        that is not SOLO."""
        every = width >= HORIZONTAL[-1][0] and height >= VERTICAL[-1][0]
        return [pid for pid, *_ in PANES if pid == self.pane or (every and not pane_class(pid).SOLO)]

    def _new_pane(self, pid: str) -> PlanPane:
        pane = pane_class(pid)(id=f"pane-{pid}", classes="-current" if pid == self.pane else "")
        pane.set_reactive(PlanPane.estimate, self.estimate)  # shown on mount, not a frame later
        pane.set_reactive(PlanPane.errors, self.errors)
        return pane.data_bind(PlannerScreen.estimate, PlannerScreen.errors)

    def _built(self, pid: str) -> PlanPane | None:
        found = self.query(f"#pane-{pid}")
        return found.first(PlanPane) if found else None

    def _build(self, pid: str) -> PlanPane:
        """The pane ``pid``; built and mounted (in `PANES` order) if it was not yet (`pane_widget` awaits it)."""
        pane = self._built(pid)
        if pane is None:
            pane = self._new_pane(pid)
            later = [p for p, *_ in PANES][[p for p, *_ in PANES].index(pid) + 1 :]
            before = next((w for p in later if (w := self._built(p)) is not None), None)
            self._mounting[pid] = self.query_one("#editor").mount(pane, before=before)
        return pane

    async def pane_widget(self, pid: str) -> PlanPane:
        """The pane ``pid``, built and mounted."""
        pane = self._build(pid)
        if pid in self._mounting:
            await self._mounting[pid]
        await pane.built()
        return pane

    def on_resize(self, event: events.Resize) -> None:
        for pid in self._shown_panes(event.size.width, event.size.height):
            self._build(pid)
        self.call_after_refresh(self._mark_focused_pane)

    # The wide layout's border around the pane holding the focus is a class set here, not `:focus-within` in CSS:
    # with that pseudo-class, Textual restyles a whole pane on every focus change (and the first frame twice).
    def on_descendant_focus(self) -> None:
        self._mark_focused_pane()

    def on_descendant_blur(self) -> None:
        self.call_after_refresh(self._mark_focused_pane)

    def _mark_focused_pane(self) -> None:
        every = self.has_class("-wide") and self.has_class("-tall")
        focused = self.focused
        for pane in self.query(PlanPane):
            pane.set_class(every and focused is not None and pane in focused.ancestors, "-focus-within")

    # -- the one way the plan changes ------------------------------------------------------------------------
    def apply_changes(self, changes: dict[str, Any], coalesce: str | None = None) -> bool:
        """Validate and apply plan changes; a `PlanError` is shown next to the control and the plan is kept."""
        try:
            new = self.plan.with_changes(changes)
        except PlanError as exc:
            self._reject(next(iter(changes)), exc)
            self._offer_trace(changes, exc)
            return False
        self._commit(new, coalesce)
        return True

    def _offer_trace(self, changes: dict[str, Any], exc: PlanError) -> None:
        """A config.json of a model_type without a formula family: `vramplan trace` gives its memory, so the
        palette's trace entry traces that file (with the rest of the plan) until the plan changes."""
        from vramplan.core.plan.architecture.hf_config import TRACE_GIVES_IT  # a config reader: not at start-up

        path = changes.get("model.hf_config")
        if isinstance(path, str) and TRACE_GIVES_IT in str(exc) and measure_available():
            self.refused_config = path
            self.notice += "\npalette: plan: trace this plan traces this config.json at full size (fake tensors)"

    def _commit(self, new: Plan, coalesce: str | None = None) -> None:
        self.errors = NO_ERRORS
        self.notice = ""
        self.refused_config = None
        if new == self.plan:
            return
        self.history.push(new, coalesce)
        self.plan = new

    def _reject(self, key: str, exc: PlanError) -> None:
        message = error_text(exc, key)
        self.errors = {key: message}
        self.notice = f"✘ {key}: {message} (plan unchanged)"

    @property
    def meta(self) -> Meta | None:
        """The `[meta]` of the plan file the current plan came from (its title and note carry over into exports)."""
        return self.history.meta

    def watch_plan(self, plan: Plan) -> None:
        self.estimate = estimate(plan)
        self.timing = step_time(plan)

    def on_plan_pane_changed(self, event: PlanPane.Changed) -> None:
        event.stop()
        self.apply_changes(event.changes, event.coalesce)

    def on_plan_pane_invalid(self, event: PlanPane.Invalid) -> None:
        event.stop()
        self._reject(event.key, PlanError(event.message, event.key))

    # -- view state ------------------------------------------------------------------------------------------
    def watch_notice(self) -> None:
        notice = self.query_one("#notice", Static)
        # plain text (messages quote TOML: "[model]"), never a raw escape sequence (a file name in a notice)
        notice.update(Content(printable(self.notice, keep="\n")))
        notice.display = bool(self.notice)
        notice.set_class("✘" not in self.notice, "-info")  # an error, or news (a file written, GPUs detected)

    def watch_pane(self, pane: str) -> None:
        for pid, *_ in PANES:
            if (built := self._built(pid)) is not None:
                built.set_class(pid == pane, "-current")
        self._build(pane)
        # in the wide layout, a SOLO pane (the checklist) is shown on its own instead of with the others
        self.set_class(pane_class(pane).SOLO, "-solo-pane")
        self.query_one(PaneTabs).shown = pane

    def on_pane_tabs_picked(self, event: PaneTabs.Picked) -> None:
        event.stop()
        self.pane = event.pid

    # -- actions (bound by the command table) ----------------------------------------------------------------
    def action_undo(self) -> None:
        plan = self.history.undo()
        if plan is None:
            self.notice = "nothing to undo"
            return
        self.errors, self.notice = NO_ERRORS, ""
        self.plan = plan

    def action_redo(self) -> None:
        plan = self.history.redo()
        if plan is None:
            self.notice = "nothing to redo"
            return
        self.errors, self.notice = NO_ERRORS, ""
        self.plan = plan

    def action_cycle(self, key: str) -> None:
        """Move a setting to its next possible choice (the keys of the Strategies and Training rows)."""
        result = next_valid(self.plan, key)
        if isinstance(result, PlanError):
            self._reject(key, result)
        else:
            self.history.break_coalescing()
            self._commit(result)

    # Focus moves with `set_focus` (at once, not on the next idle like `Widget.focus`): keys typed right after
    # a pane key (or pasted) then go where the user expects.
    async def action_show_pane(self, pane: str) -> None:
        """Show a pane and focus its first control that is not a text field (`PlanPane.focus_target`): arrows
        work at once, digits and letters stay commands."""
        self.pane = pane
        self.set_focus((await self.pane_widget(pane)).focus_target())

    async def action_edit_field(self, key: str) -> None:
        """Show the pane holding the field of plan key ``key`` and put the cursor in it (the palette's numbers)."""
        table = key.split(".")[0]  # the panes are named after the plan's tables (model, hardware...)
        self.pane = TABLE_PANES.get(table, table)
        row = (await self.pane_widget(self.pane)).query_one(f"#{field_id(key)}")
        if not row.display:  # e.g. LoRA rank with full fine-tuning
            hint = " (choose LoRA or QLoRA: m)" if key.startswith("training.lora") else ""
            self.notice = f"! {key} does not apply to this plan{hint}"
            return
        self.set_focus(row.query_one(Input))

    async def action_find_model(self) -> None:
        self.pane = "model"
        self.set_focus((await self.pane_widget("model")).query_one("#model-filter"))

    def action_explain(self) -> None:
        self.set_focus(self.query_one(KindLegend))

    def action_leave_field(self) -> None:
        if isinstance(self.focused, Input):
            self.set_focus(None)

    def action_export(self, fmt: str | None = None) -> None:
        """The export dialog, on `fmt` (else the last format exported)."""
        from vramplan.tui.screens.files import ExportScreen

        screen = ExportScreen(self.plan, self.estimate, fmt or self.export_format, self.meta)
        self.app.push_screen(screen, self._exported)

    def _exported(self, result: Exported | None) -> None:
        if result is None:
            return
        self.export_format = result.format
        if result.format == "toml":
            self.saved_plan = self.plan
        lines = [f"✔ wrote {result.path}", *(f"⚠ {w}" for w in result.warnings)]
        self.notice = "\n".join(lines)

    def action_open_plan(self) -> None:
        from vramplan.tui.screens.files import OpenScreen

        self.app.push_screen(OpenScreen(base=self.plan), self.open_plan_file)

    def open_plan_file(self, pf: PlanFile | None) -> None:
        """Make an opened plan file the plan: one undoable change; its notices (the estimate changed since it was
        exported...) are shown."""
        if pf is None:
            return
        self.history.break_coalescing()
        self._commit(pf.plan)
        self.history.set_meta(pf.meta)  # undo goes back to the plan before and its [meta]
        if not is_config_path(pf.path):  # an imported config is not saved as a plan file yet
            self.saved_plan = pf.plan
        self.app.sub_title = pf.path
        self.notice = "\n".join(pf.notices) or f"✔ opened {pf.path}"

    def take_detected(self, plan: Plan, det: DetectedGpus) -> None:
        """The GPUs nvidia-smi reported arrived after the first frame: start on them if nothing was changed yet."""
        if self.history.can_undo or self.history.can_redo:
            self.notice = detected_notice(det, kept=True)
            return
        self.history = PlanHistory(plan)
        self.errors = NO_ERRORS
        self.plan = plan
        self.saved_plan = plan
        self.notice = detected_notice(det)

    async def action_load_config(self) -> None:
        """Focus the Model pane's config.json prompt."""
        self.pane = "model"
        self.set_focus((await self.pane_widget("model")).query_one("#f-model-hf_config Input"))

    # -- GPU guide, pinned plan (issue 17) -------------------------------------------------------------------
    def action_gpu_guide(self) -> None:
        from vramplan.tui.screens.gpu_guide import GpuGuideScreen

        self.app.push_screen(GpuGuideScreen(self.plan), self._gpu_chosen)

    def _gpu_chosen(self, changes: dict[str, Any] | None) -> None:
        if changes:
            self.history.break_coalescing()
            if self.apply_changes(changes):
                hw = self.plan.hardware
                self.notice = f"✔ {hw.total_gpus} x {hw.gpu} (from the GPU guide)"

    def action_toggle_pin(self) -> None:
        """Pin the current plan (the gauges then show it beside the edited one), or unpin it."""
        if self.pinned is None:
            self.pinned = Pinned(self.plan, self.estimate, self.timing)
            self.notice = "◆ pinned: edit the plan to compare (d: the keys and deltas, P unpins)"
        else:
            self.action_unpin()

    def action_unpin(self) -> None:
        self.notice = "" if self.pinned is not None else "nothing is pinned (P pins the plan)"
        self.pinned = None

    def action_compare(self) -> None:
        if self.pinned is None:
            self.notice = "! pin a plan first (P), then edit: d compares the edited plan with it"
            return
        from vramplan.tui.screens.plan_compare import CompareScreen

        self.app.push_screen(CompareScreen(self.pinned.plan, self.plan))

    # -- measure here, calibration (issue 29) ------------------------------------------------------------------
    def action_measure(self) -> None:
        from vramplan.tui.screens.measure import MeasureScreen

        self.app.push_screen(MeasureScreen(self.plan))

    def action_trace(self) -> None:
        from vramplan.tui.screens.trace import TraceScreen

        self.app.push_screen(TraceScreen(self.plan, self.refused_config))

    def action_load_calibration(self) -> None:
        from vramplan.tui.screens.calibration_dialog import CalibrationScreen

        self.app.push_screen(CalibrationScreen(), self.apply_calibration)

    def apply_calibration(self, cal: Calibration | None) -> None:
        """A calibration file's [overhead] terms applied (one undo step); the notice says where they came from."""
        if cal is not None and self.apply_changes(cal.overrides()):
            self.notice = f"✔ calibrated from {cal.provenance()}"

    def action_help(self) -> None:
        from vramplan.tui.screens.help import HelpScreen

        self.app.push_screen(HelpScreen(self))
