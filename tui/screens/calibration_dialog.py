"""The calibration dialog (palette: ``plan: apply a calibration``): a calibration file written by ``vramplan measure
--save-calibration`` (`core.files.calibration`), read as safely as a plan file; a problem is shown here, and the
planner applies the file's ``[overhead]`` terms (its estimate then says it is calibrated, and from where)."""

from __future__ import annotations

from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Input, Label, Static

from vramplan.core.files.calibration import Calibration, read_calibration
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.helpers.paths import user_path
from vramplan.tui.screens.css import tcss
from vramplan.tui.widgets.path_input import PathSuggester


class CalibrationScreen(ModalScreen[Calibration | None]):
    DEFAULT_CSS = tcss("files.tcss") + "\nCalibrationScreen { align: center middle; }\n"  # the open dialog's
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "dismiss(None)", "Cancel", id="calibration_cancel")]
    AUTO_FOCUS = "#calibration-path"

    def compose(self) -> ComposeResult:
        with Vertical(id="open", classes="dialog"):
            with Horizontal(classes="dialog-row"):
                yield Label("calibration", classes="dialog-label")
                yield Input(
                    placeholder="a file from vramplan measure --save-calibration",
                    compact=True,
                    id="calibration-path",
                    suggester=PathSuggester((".toml",)),
                )
            yield Static(id="calibration-error", classes="dialog-error")
            yield Static("enter applies · → completes a name · esc cancels", classes="dialog-hint")

    def on_mount(self) -> None:
        self.query_one("#open").border_title = "Apply a calibration"
        self.query_one("#calibration-error").display = False

    @on(Input.Submitted, "#calibration-path")
    def _apply(self, event: Input.Submitted) -> None:
        event.stop()
        text = event.value.strip()
        if not text:
            return
        try:
            cal = read_calibration(user_path(text))
        except PlanError as exc:
            error = self.query_one("#calibration-error", Static)
            error.update(Content(f"✘ {exc.line()}"))
            error.display = True
            return
        self.dismiss(cal)
