from __future__ import annotations

import pytest
from textual.widgets import Static
from textual.widgets.option_list import OptionDoesNotExist

from vramplan.core.plan.units import GiB
from vramplan.tui.app import VramplanApp
from vramplan.tui.widgets.checklist_pane import ChecklistList, ChecklistPane


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
