"""``VramplanApp``: the planner. ``VramplanApp()`` opens the default plan (the one ``vramplan estimate`` uses);
``VramplanApp(plan_path=...)`` opens a plan file, and a problem with the file is shown in the app."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from textual.app import App
from textual.screen import Screen

from core.errors import PlanError
from core.plan import Plan, default_plan
from core.planio import load_plan
from tui.commands import PlannerCommands
from tui.screens.planner import PlannerScreen


def open_plan(path: str | Path | None) -> tuple[Plan, str]:
    """The plan to start on and a notice: a broken or missing file opens the default plan and says why."""
    if path is None:
        return default_plan(), ""
    try:
        return load_plan(path), ""
    except PlanError as exc:
        return default_plan(), f"✘ {exc.line()}; opened the default plan instead"


class VramplanApp(App[int]):
    CSS_PATH = Path(__file__).with_name("app.tcss")  # absolute: subclasses elsewhere find it too
    TITLE = "vramplan"
    COMMANDS: ClassVar = App.COMMANDS | {PlannerCommands}

    def __init__(self, plan_path: str | Path | None = None, plan: Plan | None = None) -> None:
        super().__init__()
        self.plan_path = plan_path
        if plan is not None:
            self.start_plan, self._notice = plan, ""
        else:
            self.start_plan, self._notice = open_plan(plan_path)
        if plan_path is not None:
            self.sub_title = str(plan_path)

    def get_default_screen(self) -> Screen[None]:
        return PlannerScreen(self.start_plan, self._notice)

    @property
    def planner(self) -> PlannerScreen:
        screen = self.screen_stack[0]
        assert isinstance(screen, PlannerScreen)
        return screen
