from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from textual.app import App
from textual.pilot import Pilot
from textual.widgets import Static
from textual.widgets.option_list import OptionDoesNotExist

from tests.waiting import HANG_S, POLL_S
from vramplan.core.plan.helpers.units import GiB
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


def figure(total_bytes: int) -> str:
    """The per-GPU total as the planner shows it: GiB with one decimal."""
    return f"{total_bytes / GiB:.1f} / "


@pytest.fixture(autouse=True)
def _plain_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Snapshots must not depend on the caller's NO_COLOR (read when an App is made; Textual's TEXTUAL_* settings
    are read at import, before any fixture)."""
    monkeypatch.delenv("NO_COLOR", raising=False)


def deferred(app: App[Any]) -> list[str]:
    """What the app has left to do on its current screen once its messages are processed: widgets not mounted yet
    (a screen just pushed, a pane being built), callbacks waiting for the next frame (``call_after_refresh``: a
    pane's sync, the footer's recompose, a scroll into view), a layout not done, a `Settled` callback waiting for
    its frame or its timer. Read from Textual's screen (8.2: `textual==` is pinned in the test extra, so a rename
    fails here, loudly) and the panes' own state."""
    screen = app.screen
    left = [] if screen.is_mounted else ["the screen's mount"]
    if screen._callbacks:
        left.append(f"{len(screen._callbacks)} callbacks after the frame")
    if screen._layout_required or screen._scroll_required or screen._recompose_required:
        left.append("a layout")
    for widget in screen.walk_children():
        if not widget.is_mounted:
            left.append(f"{widget!r}'s mount")
        if isinstance(widget, PlanPane) and widget._sync_pending:
            left.append(f"{widget.id}'s sync")
        for value in vars(widget).values():
            if isinstance(value, Settled) and (value._timer is not None or value._queued):
                left.append(f"{widget.id}: {getattr(value.callback, '__name__', 'settled')}")
    return left


async def settle(pilot: Pilot[Any], pause: Callable[[Pilot[Any], float], Awaitable[None]]) -> None:
    """Let the app run until nothing is `deferred` (`HANG_S` at most), with Textual's own ``pause``."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + HANG_S
    while pilot.app.is_running and (left := deferred(pilot.app)):
        if loop.time() > give_up:
            raise AssertionError(f"after {HANG_S:g} s the app still has to do: {left}")
        await pause(pilot, POLL_S)


@pytest.fixture(autouse=True)
def _pilot_settles(monkeypatch: pytest.MonkeyPatch) -> None:
    """In this suite ``pilot.press(*keys)`` presses one key at a time and each key, like ``pilot.pause()`` (no
    delay), is followed by the app settling: nothing `deferred`. Textual's own press and pause wait for the
    messages queued and a moment of idle CPU, which a loaded machine fakes (a starved process uses no CPU while
    its work waits), and the app leaves work for after the frame by design: a pane shows the plan after the
    frame, a ChoiceBar's arrow moves from the choice it shows, a pushed screen mounts its inputs. Keys faster than
    frames were lost at 3 frames a second ("110" typed into a field became 10; "right right" moved once; a path
    typed after ctrl+o went nowhere). ``pause(delay)`` is left as it is (`tests.waiting.until` polls with it)."""
    textual_pause, textual_press = Pilot.pause, Pilot.press

    async def pause(self: Pilot[Any], delay: float | None = None) -> None:
        await textual_pause(self, delay)
        if delay is None:
            await settle(self, textual_pause)

    async def press(self: Pilot[Any], *keys: str) -> None:
        for key in keys:
            if not self.app.is_running:
                return
            await textual_press(self, key)
            await settle(self, textual_pause)

    monkeypatch.setattr(Pilot, "pause", pause)
    monkeypatch.setattr(Pilot, "press", press)
