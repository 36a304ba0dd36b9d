"""``VramplanApp``: the planner. ``VramplanApp()`` opens the starting plan (the one ``vramplan estimate`` uses: the
default plan, on the GPUs ``nvidia-smi`` reports); ``VramplanApp(plan_path=...)`` opens a plan file (hand-written or
exported), and a problem with the file is shown in the app; ``VramplanApp(plan=...)`` opens a given plan."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TextIO

from vramplan.tui.startup import FirstFrame, long_lived

with long_lived():  # no garbage collection while the app's modules load (see `startup`)
    from textual.app import App
    from textual.binding import Binding, BindingType
    from textual.screen import Screen
    from textual.timer import Timer

    from vramplan.core.plan.catalogue import presets
    from vramplan.core.plan.detected import plan_on
    from vramplan.core.plan.helpers.errors import PlanError
    from vramplan.core.plan.schema.plan import Plan, default_plan
    from vramplan.tui import detection
    from vramplan.tui.command_table import PALETTE_LABEL, PlannerCommands
    from vramplan.tui.screens.planner import PlannerScreen

if TYPE_CHECKING:  # plan files are read when one is opened: their modules are not loaded before the first frame
    from vramplan.core.files.calibration import Calibration
    from vramplan.core.files.planfile import Meta


def open_plan(path: str | Path) -> tuple[Plan, list[str], Meta | None]:
    """A plan file's plan, its notices (e.g. the estimate changed since export) and ``[meta]``; a broken or
    missing file opens the default plan and says why."""
    from vramplan.core.files.planio import load_plan_file

    try:
        pf = load_plan_file(path)
    except PlanError as exc:
        return default_plan(), [f"✘ {exc.line()}; opened the default plan instead"], None
    return pf.plan, list(pf.notices), pf.meta


def _is_terminal(stream: TextIO | None) -> bool:
    try:
        return stream is not None and stream.isatty()
    except (ValueError, OSError):  # closed
        return False


class VramplanApp(App[int]):
    CSS_PATH = Path(__file__).with_name("app.tcss")  # absolute: subclasses elsewhere find it too
    TITLE = "vramplan"
    COMMANDS: ClassVar = App.COMMANDS | {PlannerCommands}
    # Textual's palette binding (its key, action and place), labelled for what the footer leaves to it
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(
            App.COMMAND_PALETTE_BINDING,
            "command_palette",
            PALETTE_LABEL,
            show=False,
            priority=True,
            tooltip="Open the command palette",
        )
    ]

    def __init__(
        self,
        plan_path: str | Path | None = None,
        plan: Plan | None = None,
        *,
        freeze: bool = False,
        calibration: Calibration | None = None,
    ) -> None:
        """``freeze``: the app is its process's only one (the `vramplan` command): what its start made is frozen
        out of the garbage collector's sight until it ends (`startup.FirstFrame`). ``calibration``: applied to the
        starting plan's ``[overhead]`` terms (``vramplan --calibration FILE``), and to the detected GPUs' plan."""
        super().__init__()
        self.calibration = calibration
        self.plan_path = plan_path
        self.detection: detection.Detection | None = None
        self._detect_timer: Timer | None = None
        self._detection_pending = False
        notices: list[str] = []
        meta: Meta | None = None
        if plan is not None:
            self.start_plan = plan
        elif plan_path is not None:
            self.start_plan, notices, meta = open_plan(plan_path)
            self.sub_title = str(plan_path)
        else:
            # Never waits for nvidia-smi: the detected GPUs are taken when they arrive (see `_check_detection`).
            self.detection = detection.begin()
            done = self.detection.done  # read once: it may finish while this runs
            det = self.detection.result if done else None
            self.start_plan = plan_on(det)
            self._detection_pending = not done
            if det is not None and self.start_plan.hardware.gpu == det.gpu_id:
                notices.append(detection.detected_notice(det))
        if calibration is not None:
            self.start_plan = self.calibrated(self.start_plan)
            notices.append(f"✔ calibrated from {calibration.provenance()}")
        notices[:0] = [f"✘ {line}" for line in presets.registry().problem_lines()]  # broken user presets
        self._notice = "\n".join(notices)
        self._meta = meta
        self._quit_asked = False
        self.freeze = freeze
        self._first_frame = FirstFrame(freeze=freeze)

    def run(self, *args: Any, **kwargs: Any) -> int | None:
        """Run the planner in this terminal. Textual reads keys from standard input and draws on standard error
        (its Linux driver: ``sys.__stdin__``, ``sys.__stderr__``); without a terminal there (a pipe, a file,
        /dev/null: cron, a CI job, ``vramplan < /dev/null``) it could never read a key nor be seen, and never
        ended: one line on stderr and 2 instead (`vramplan.__main__.run_app` returns it). Standard output may be
        redirected."""
        streams = (("standard input", sys.__stdin__), ("standard error", sys.__stderr__))
        missing = [name for name, stream in streams if not _is_terminal(stream)]
        if missing and not kwargs.get("headless"):
            print(
                f"vramplan: the planner needs a terminal ({' and '.join(missing)} "
                f"{'is' if len(missing) == 1 else 'are'} not one); the commands run anywhere: vramplan --help",
                file=sys.stderr,
            )
            return 2
        return super().run(*args, **kwargs)

    def get_default_screen(self) -> Screen[None]:
        return PlannerScreen(self.start_plan, self._notice, meta=self._meta)

    def on_load(self) -> None:
        self._first_frame.pause()  # no garbage collection until the first frame (see `startup.FirstFrame`)

    def on_mount(self) -> None:
        self.call_after_refresh(self._first_frame_shown)
        if self._detection_pending:
            self._detect_timer = self.set_interval(0.05, self._check_detection)

    def _first_frame_shown(self) -> None:
        self._first_frame.resume()
        if self.freeze:
            # exit_on_error=False: freezing is an optimisation; a failure here must never end the app
            self.run_worker(self._settle(), name="settle", group="start-up", exit_on_error=False)

    async def _settle(self) -> None:
        """The start-up work left for after the first frame (the shown pane's last rows, laid out and drawn) done:
        what it made is frozen too."""
        await self.planner.pane_widget(self.planner.pane)
        self.call_after_refresh(self._first_frame.settled)

    def on_unmount(self) -> None:
        self._first_frame.release()  # and the collector back on for an app that ends before its first frame

    def _check_detection(self) -> None:
        """Detection finished after start-up: the planner takes the detected GPUs if its plan is untouched."""
        if self.detection is None or not self.detection.done:
            return
        self._detection_pending = False
        if self._detect_timer is not None:
            self._detect_timer.stop()
        det = self.detection.result
        if det is not None:
            self.planner.take_detected(self.calibrated(plan_on(det)), det)

    def calibrated(self, plan: Plan) -> Plan:
        """`plan` with the app's calibration, if it has one."""
        if self.calibration is None:
            return plan
        from vramplan.core.files.calibration import apply_calibration

        return apply_calibration(plan, self.calibration)

    async def action_quit(self) -> None:
        """``ctrl+q``: with a changed plan not exported as a TOML plan file, ask once (the notice says so; a second
        ``ctrl+q`` quits)."""
        planner = self.planner
        if planner.plan != planner.saved_plan and not self._quit_asked:
            self._quit_asked = True
            planner.notice = "! the plan has changes not saved as a plan file: ctrl+q again quits, ctrl+s exports"
            return
        await super().action_quit()

    @property
    def planner(self) -> PlannerScreen:
        screen = self.screen_stack[0]
        assert isinstance(screen, PlannerScreen)
        return screen
