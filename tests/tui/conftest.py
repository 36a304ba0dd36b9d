from __future__ import annotations

import pytest
from textual.widgets import Static

from vramplan.core.plan.helpers.units import GiB
from vramplan.tui.app import VramplanApp


def text_of(app: VramplanApp, selector: str) -> str:
    """The plain text a Static shows (markup removed)."""
    return str(app.planner.query_one(selector, Static).visual)


def figure(total_bytes: int) -> str:
    """The per-GPU total as the planner shows it: GiB with one decimal."""
    return f"{total_bytes / GiB:.1f} / "


@pytest.fixture(autouse=True)
def _plain_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """Snapshots must not depend on the caller's NO_COLOR (read when an App is made; Textual's TEXTUAL_* settings
    are read at import, before any fixture)."""
    monkeypatch.delenv("NO_COLOR", raising=False)
