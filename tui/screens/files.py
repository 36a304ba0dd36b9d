"""The file dialogs: export the plan (format and path; an existing file is replaced only after an explicit
confirmation) and open a plan file. Every problem (a missing directory, permission denied, a full disk, a path
that is a directory, a broken plan file) is shown inline in the dialog; the planner's plan is never touched here:
the dialogs return what happened and the planner applies it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from vramplan.core.files.export import FORMATS, default_file_name, export_plan, render
from vramplan.core.files.importers.apply import open_file
from vramplan.core.files.planfile import Meta
from vramplan.core.files.planio import PlanFile
from vramplan.core.files.safewrite import OverwriteRefused, WriteError
from vramplan.core.memory.record import Estimate
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.helpers.paths import user_path
from vramplan.core.plan.schema.plan import Plan
from vramplan.tui.screens.css import tcss
from vramplan.tui.widgets.choice_bar import ChoiceBar
from vramplan.tui.widgets.path_input import PathSuggester
from vramplan.tui.widgets.text import show_text

FORMAT_LABELS = {"toml": "TOML", "deepspeed": "DeepSpeed", "markdown": "Markdown", "accelerate": "Accelerate"}
_EXTENSIONS = (".accelerate.yaml", ".deepspeed.json", ".json", ".toml", ".markdown", ".md")  # longest first


def with_format(path: str, fmt: str) -> str:
    """`path` with the extension of `fmt` in place of an export extension (``plan.toml`` -> ``plan.md``)."""
    if not path.strip():
        return path
    for ext in _EXTENSIONS:
        if path.lower().endswith(ext):
            return path[: -len(ext)] + FORMATS[fmt].extension
    return path + FORMATS[fmt].extension


@dataclass(frozen=True)
class Exported:
    """A file the export dialog wrote."""

    path: Path
    format: str
    warnings: tuple[str, ...] = ()


class ExportScreen(ModalScreen[Exported | None]):
    """Export the plan: a format (TOML, DeepSpeed, Markdown, accelerate) and a path, by default a name derived from
    the plan in the current directory whose extension follows the format."""

    DEFAULT_CSS = tcss("files.tcss")  # beside this module: see `vramplan.tui.screens.css`

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel", id="export_cancel"),
        # enter exports from anywhere (the format bar would otherwise take it as "next choice"), except on the
        # Replace/Keep buttons of the confirmation, which keep their own meaning
        Binding("enter", "export", "Export", show=False, priority=True, id="export_enter"),
        Binding("y", "replace", "Replace", show=False, id="export_replace"),
        Binding("n", "keep", "Keep", show=False, id="export_keep"),
    ]
    AUTO_FOCUS = "#export-path"

    def __init__(self, plan: Plan, est: Estimate, fmt: str = "toml", meta: Meta | None = None) -> None:
        super().__init__()
        self.plan, self.est, self.format = plan, est, fmt
        self.meta = meta
        self.confirming = False

    def compose(self) -> ComposeResult:
        with Vertical(id="export", classes="dialog"):
            with Horizontal(classes="dialog-row"):
                yield Label("format", classes="dialog-label")
                yield ChoiceBar(list(FORMAT_LABELS.values()), id="export-format")
            yield Static(id="export-about", classes="dialog-note")
            with Horizontal(classes="dialog-row"):
                yield Label("file", classes="dialog-label")
                yield Input(
                    default_file_name(self.plan, self.format),
                    compact=True,
                    id="export-path",
                    suggester=PathSuggester(),
                )
            yield Static(id="export-where", classes="dialog-note")
            yield Static(id="export-error", classes="dialog-error")
            with Vertical(id="export-confirm", classes="dialog-confirm"):
                yield Static(id="export-confirm-text")
                with Horizontal(classes="dialog-buttons"):
                    yield Button("Replace (y)", id="export-replace", variant="error", compact=True)
                    yield Button("Keep (n)", id="export-keep", compact=True)
            yield Static("enter exports · tab: format and file · esc cancels", classes="dialog-hint")

    def on_mount(self) -> None:
        self.query_one("#export").border_title = "Export plan"
        self._show_format()
        self._show_where()

    # -- format and path ------------------------------------------------------------------------------------
    def _show_format(self) -> None:
        self.query_one("#export-format", ChoiceBar).show(list(FORMAT_LABELS).index(self.format))
        about = Content(FORMATS[self.format].label)
        if self.format in ("deepspeed", "accelerate"):  # what the config cannot express, said before writing
            for warning in render(self.format, self.plan).warnings:
                about += Content.styled(f"\n⚠ {warning}", "$text-warning")
        show_text(self.query_one("#export-about", Static), about)

    def _show_where(self) -> None:
        text = self.query_one("#export-path", Input).value.strip()
        try:
            where = f"in {user_path(text).absolute().parent}" if text else ""
        except PlanError as exc:
            where = exc.message
        show_text(self.query_one("#export-where", Static), Content(where))

    def on_choice_bar_changed(self, event: ChoiceBar.Changed) -> None:  # the format bar (the only choice here)
        event.stop()
        self.format = list(FORMAT_LABELS)[event.index]
        self._show_format()
        path = self.query_one("#export-path", Input)
        path.value = with_format(path.value, self.format)

    @on(Input.Changed, "#export-path")
    def _path_typed(self, event: Input.Changed) -> None:
        event.stop()
        self._error("")
        self._unconfirm()
        self._show_where()

    @on(Input.Submitted, "#export-path")
    def _path_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.export()

    # -- writing --------------------------------------------------------------------------------------------
    def export(self, overwrite: bool = False) -> None:
        """Write the file; an existing one asks first (`OverwriteRefused`), any error is shown here."""
        text = self.query_one("#export-path", Input).value.strip()
        if not text:
            self._error("enter a file name")
            return
        meta = self.meta
        try:
            path = user_path(text)
            rendered = export_plan(
                text,  # as typed: export_plan checks a trailing / and the extension against the format
                self.format,
                self.plan,
                overwrite=overwrite,
                est=self.est,
                title=meta.title if meta else None,
                note=meta.note if meta else None,
            )
        except OverwriteRefused:
            self._confirm(path)
            return
        except WriteError as exc:
            self._unconfirm()
            self._error(exc.message)
            return
        except PlanError as exc:
            self._unconfirm()
            self._error(exc.line())
            return
        except OSError as exc:  # anything the atomic write did not already turn into a WriteError
            self._unconfirm()
            self._error(f"cannot write: {exc.strerror or exc}")
            return
        self.dismiss(Exported(path.absolute(), self.format, rendered.warnings))

    def _error(self, message: str) -> None:
        error = self.query_one("#export-error", Static)
        show_text(error, Content(f"✘ {message} (nothing was written)" if message else ""))
        error.display = bool(message)

    def _confirm(self, path: Path) -> None:
        self.confirming = True
        self._error("")
        show_text(self.query_one("#export-confirm-text", Static), Content(f"✘ {path.name} exists. Replace it?"))
        self.query_one("#export-confirm").display = True
        self.set_focus(self.query_one("#export-keep"))
        self.refresh_bindings()

    def _unconfirm(self) -> None:
        if self.confirming:
            self.confirming = False
            self.query_one("#export-confirm").display = False
            self.refresh_bindings()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("replace", "keep"):
            return self.confirming
        if action == "export":
            # the path field submits itself (after its pending edits); buttons keep enter for themselves
            return not self.confirming and not isinstance(self.focused, (Button, Input))
        return True

    def action_export(self) -> None:
        self.export()

    def action_replace(self) -> None:
        if self.confirming:
            self.export(overwrite=True)

    def action_keep(self) -> None:
        self._unconfirm()
        self.set_focus(self.query_one("#export-path"))

    def action_cancel(self) -> None:
        if self.confirming:
            self.action_keep()
        else:
            self.dismiss(None)

    @on(Button.Pressed, "#export-replace")
    def _replace_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.action_replace()

    @on(Button.Pressed, "#export-keep")
    def _keep_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.action_keep()


class OpenScreen(ModalScreen[PlanFile | None]):
    """Open a plan file (hand-written or exported), or import a training config (DeepSpeed JSON, accelerate,
    torchtune, axolotl, LLaMA-Factory: `core.files.importers`) over the planner's plan: a path; a problem with the
    file is shown here and the planner keeps its plan."""

    DEFAULT_CSS = tcss("files.tcss")  # beside this module: see `vramplan.tui.screens.css`

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "dismiss(None)", "Cancel", id="open_cancel")]
    AUTO_FOCUS = "#open-path"

    def __init__(self, path: str = "", base: Plan | None = None) -> None:
        super().__init__()
        self.initial = path
        self.base = base  # the plan a training config is imported over (None: a plan file only)

    def compose(self) -> ComposeResult:
        with Vertical(id="open", classes="dialog"):
            with Horizontal(classes="dialog-row"):
                yield Label("plan file", classes="dialog-label")
                yield Input(
                    self.initial,
                    placeholder="a plan (.toml) or a training config (DeepSpeed, accelerate, torchtune, axolotl...)",
                    compact=True,
                    id="open-path",
                    suggester=PathSuggester((".toml", ".json", ".yaml", ".yml")),
                )
            yield Static(id="open-error", classes="dialog-error")
            yield Static("enter opens · → completes a name · esc cancels", classes="dialog-hint")

    def on_mount(self) -> None:
        self.query_one("#open").border_title = "Open a plan"

    @on(Input.Changed, "#open-path")
    def _typed(self, event: Input.Changed) -> None:
        event.stop()
        self.query_one("#open-error").display = False

    @on(Input.Submitted, "#open-path")
    def _open(self, event: Input.Submitted) -> None:
        event.stop()
        text = event.value.strip()
        error = self.query_one("#open-error", Static)
        if not text:
            message = "enter the path of a plan file"
        else:
            try:
                self.dismiss(open_file(user_path(text), self.base))
                return
            except PlanError as exc:
                message = exc.line()
        show_text(error, Content(f"✘ {message} (the plan is unchanged)"))
        error.display = True
