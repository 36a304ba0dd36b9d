"""The help screen: every key of the command table (as currently mapped) and the widget keys Textual handles; ``t``
opens the documentation pages (`vramplan.tui.screens.pages`, the pages `vramplan help` prints)."""

from __future__ import annotations

from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen, Screen
from textual.widgets import Static

from vramplan.tui.command_table import COMMANDS, WIDGET_KEYS
from vramplan.tui.screens.css import tcss

GROUPS = ("Plan", "View", "Strategies", "Training")
# Balanced so that every key shows at 80x24 (19 and 21 lines); a smaller terminal scrolls (the subtitle says how).
COLUMNS = (("Plan", "View"), ("Strategies", "Training", "Everywhere"))


def key_rows(screen: Screen[Any]) -> dict[str, list[tuple[str, str]]]:
    """(keys, description) per help group, with the keys each command id is bound to now (keymaps included)."""
    app = screen.app
    bound: dict[str, list[str]] = {}
    for key, active in screen.active_bindings.items():
        if active.binding.id:
            bound.setdefault(active.binding.id, []).append(app.get_key_display(Binding(key, "")))
    rows: dict[str, list[tuple[str, str]]] = {g: [] for g in GROUPS}
    for c in COMMANDS:
        if not c.key:
            continue
        keys = bound.get(c.id) or [app.get_key_display(Binding(k, "")) for k in c.key.split(",")]
        rows.setdefault(c.group, []).append((" ".join(dict.fromkeys(keys)), c.description))
    rows["Everywhere"] = list(WIDGET_KEYS)
    return rows


class HelpScreen(ModalScreen[None]):
    DEFAULT_CSS = tcss("help.tcss")  # beside this module: see `vramplan.tui.screens.css`
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,question_mark,f1,q", "app.pop_screen", "Close", id="help_close"),
        Binding("t", "topics", "Pages", id="help_topics"),
    ]

    def __init__(self, planner: Screen[Any]) -> None:
        super().__init__()
        self.planner = planner

    def compose(self) -> ComposeResult:
        rows = key_rows(self.planner)
        width = max(len(keys) for group in rows.values() for keys, _ in group)  # one key column, both sides
        with VerticalScroll(id="help"):
            with Horizontal(id="help-columns"):
                for n, groups in enumerate(COLUMNS):
                    yield Static(self._text(rows, groups, width), id=f"help-{n}", classes="help-column")
            tip = "ctrl+p finds every command, preset and setting: model: …, gpu: …"
            yield Static(Content.styled(tip, "dim"), id="help-tip")

    def on_mount(self) -> None:
        self.query_one("#help").border_title = "Keys"
        self._scroll_hint()

    def on_resize(self) -> None:
        self.call_after_refresh(self._scroll_hint)  # the keys' height against the new size, once laid out

    def _scroll_hint(self) -> None:
        """The subtitle says how to reach the keys below the fold when the terminal is too short for them all (the
        keys scroll the focused box: ↓ ↑, pgdn pgup, home end)."""
        box = self.query_one("#help", VerticalScroll)
        more = "↓ pgdn end: more keys · " if box.max_scroll_y else ""
        box.border_subtitle = f"{more}t: pages · esc closes"

    def action_topics(self) -> None:
        """The documentation's topics (docs/*.md), each page opened in a Markdown view."""
        from vramplan.tui.screens.pages import TopicsScreen

        self.app.push_screen(TopicsScreen())

    @staticmethod
    def _text(rows: dict[str, list[tuple[str, str]]], groups: tuple[str, ...], width: int) -> Content:
        lines: list[Content] = []
        for group in groups:
            if rows.get(group):
                if lines:
                    lines.append(Content(""))
                lines.append(Content.styled(group, "bold"))
                lines += [Content.assemble((f" {keys:<{width}}", "$accent"), f" {desc}") for keys, desc in rows[group]]
        return Content("\n").join(lines)
