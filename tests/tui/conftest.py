from __future__ import annotations

from textual.widgets import Static

from core.units import GiB
from tui.app import VramplanApp


def text_of(app: VramplanApp, selector: str) -> str:
    """The plain text a Static shows (markup removed)."""
    return str(app.planner.query_one(selector, Static).visual)


def figure(total_bytes: int) -> str:
    """The per-GPU total as the planner shows it: GiB with one decimal."""
    return f"{total_bytes / GiB:.1f} / "
