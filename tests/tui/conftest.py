from __future__ import annotations

import asyncio
from typing import Any

import pytest
from textual.app import App
from textual.pilot import Pilot
from textual.widgets import Static
from textual.widgets.option_list import OptionDoesNotExist

from tests.waiting import HANG_S, POLL_S
from vramplan.core.plan.units import GiB
from vramplan.tui.app import VramplanApp
from vramplan.tui.widgets.checklist_pane import ChecklistList, ChecklistPane
from vramplan.tui.widgets.fields import PlanPane
from vramplan.tui.widgets.settle import Settled


def text_of(app: VramplanApp, selector: str) -> str:
    """The plain text a Static shows (markup removed)."""
    return str(app.planner.query_one(selector, Static).visual)


def row_text(app: VramplanApp, row_id: str) -> str:
    """A row's text, its wrapped lines joined ("" while the list does not hold it)."""
    try:
        option = app.planner.query_one(ChecklistList).get_option(row_id)
    except OptionDoesNotExist:
        return ""
    return " ".join(option.prompt.plain.split())  # type: ignore[union-attr]


def advised(app: VramplanApp) -> bool:
    """The fit advisor's rows are the current plan's: the pane judges the plan after its frame (`Settled`), then
    advises in a worker, so no one message says when."""
    pane = app.planner.query_one(ChecklistPane)
    head = row_text(app, "advice.head")
    current = pane.advice is not None and pane.advice.plan == app.planner.plan
    return current and bool(head) and "working…" not in head and "updating…" not in head


async def type_keys(pilot: Pilot[Any], *keys: str) -> None:
    """Press ``keys`` one at a time, each key's frame let through (a settling `pause`): a pane's sync after the
    frame shows the plan as of the key before, and would rewrite a field typed faster than frames come (at 3
    frames a second, "110" typed at once into host memory became 10)."""
    for key in keys:
        await pilot.press(key)
        await pilot.pause()


def figure(total_bytes: int) -> str:
    """The per-GPU total as the planner shows it: GiB with one decimal."""
    return f"{total_bytes / GiB:.1f} / "


@pytest.fixture(autouse=True)
def _plain_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Snapshots must not depend on the caller's NO_COLOR (read when an App is made; Textual's TEXTUAL_* settings
    are read at import, before any fixture)."""
    monkeypatch.delenv("NO_COLOR", raising=False)


def deferred(app: App[Any]) -> list[str]:
    """What the app has left to do on its current screen once its messages are processed: callbacks waiting for
    the next frame (``call_after_refresh``: a pane's sync, the footer's recompose, a scroll into view), a layout
    not yet done, a pane's sync, a `Settled` callback waiting for its frame or its timer. Read from Textual's
    screen (8.2: `textual==` is pinned in the test extra, so a rename fails here, loudly) and the panes' state."""
    screen = app.screen
    left = [f"{len(screen._callbacks)} callbacks after the frame"] if screen._callbacks else []
    if screen._layout_required or screen._scroll_required or screen._recompose_required:
        left.append("a layout")
    for widget in screen.walk_children():
        if isinstance(widget, PlanPane) and widget._sync_pending:
            left.append(f"{widget.id}'s sync")
        for value in vars(widget).values():
            if isinstance(value, Settled) and (value._timer is not None or value._queued):
                left.append(f"{widget.id}: {getattr(value.callback, '__name__', 'settled')}")
    return left


@pytest.fixture(autouse=True)
def _pause_settles(monkeypatch: pytest.MonkeyPatch) -> None:
    """In this suite ``await pilot.pause()`` (no delay) also waits until nothing is `deferred`: Textual's own pause
    waits for the messages queued and a moment of idle CPU, which a loaded machine fakes (the process, starved,
    uses no CPU while work is left), and the app leaves work for after the frame by design. ``pause(delay)`` is
    left as it is (`tests.waiting.until` polls with it)."""
    textual_pause = Pilot.pause

    async def pause(self: Pilot[Any], delay: float | None = None) -> None:
        await textual_pause(self, delay)
        if delay is not None or not self.app.is_running:
            return
        loop = asyncio.get_running_loop()
        give_up = loop.time() + HANG_S
        while left := deferred(self.app):
            if loop.time() > give_up:
                raise AssertionError(f"after {HANG_S:g} s the app still has to do: {left}")
            await textual_pause(self, POLL_S)

    monkeypatch.setattr(Pilot, "pause", pause)
