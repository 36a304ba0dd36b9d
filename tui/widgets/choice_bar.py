"""`ChoiceBar`: every choice of a setting in a row (wrapping when narrow), the current one highlighted and in
brackets (``[full]``: readable without colour) and the impossible ones struck through. One leaf widget
(`render()`): left/right or a click picks."""

from __future__ import annotations

from typing import ClassVar

from textual import events
from textual.binding import Binding, BindingType
from textual.content import Content
from textual.message import Message
from textual.widget import Widget


def layout_tokens(labels: list[str], width: int) -> list[list[tuple[int, int]]]:
    """Lines of (choice index, x), each choice drawn as `` label ``, one space apart when they fit on one line
    that way, else touching (their backgrounds tell them apart), wrapping when they still do not fit."""
    gap = 1 if sum(len(label) + 3 for label in labels) - 1 <= width else 0
    lines: list[list[tuple[int, int]]] = [[]]
    x = 0
    for i, label in enumerate(labels):
        w = len(label) + 2
        if x and x + w > width:
            lines.append([])
            x = 0
        lines[-1].append((i, x))
        x += w + gap
    return lines


class ChoiceBar(Widget, can_focus=True):
    DEFAULT_CSS = """
    ChoiceBar {
        height: auto;
        & > .choice-bar--option { color: $text; background: $boost; }
        & > .choice-bar--selected { color: $text; background: $primary; text-style: bold; }
        &:focus > .choice-bar--selected { background: $accent; color: auto 90%; text-style: bold; }
        & > .choice-bar--blocked { color: $text-disabled; text-style: strike; }
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("left", "move(-1)", "Previous choice", show=False),
        Binding("right", "move(1)", "Next choice", show=False),
        Binding("space,enter", "move(1)", "Next choice", show=False),
    ]
    COMPONENT_CLASSES: ClassVar[set[str]] = {"choice-bar--selected", "choice-bar--blocked", "choice-bar--option"}

    class Changed(Message):
        """The user picked choice `index` (the plan decides whether it takes)."""

        def __init__(self, bar: ChoiceBar, index: int) -> None:
            super().__init__()
            self.bar = bar
            self.index = index

    def __init__(self, labels: list[str], **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.labels = labels
        self.index = 0
        self.blocked: frozenset[int] = frozenset()

    def show(self, index: int, blocked: frozenset[int] = frozenset()) -> None:
        if (index, blocked) != (self.index, self.blocked):
            self.index, self.blocked = index, blocked
            if self.is_mounted:  # before that, the first paint shows it: a repaint asked for now would wait
                self.refresh()  # for the widget's next message and then mark the screen's map stale

    def _lines(self) -> list[list[tuple[int, int]]]:
        return layout_tokens(self.labels, max(1, self.content_region.width or self.size.width))

    def get_content_width(self, container: object, viewport: object) -> int:
        return sum(len(label) + 3 for label in self.labels) - 1

    def get_content_height(self, container: object, viewport: object, width: int) -> int:
        return len(layout_tokens(self.labels, max(1, width)))

    def render(self) -> Content:
        styles = {
            "selected": self.get_visual_style("choice-bar--selected"),
            "blocked": self.get_visual_style("choice-bar--blocked"),
            "option": self.get_visual_style("choice-bar--option"),
        }
        rows = []
        for line in self._lines():
            parts: list[tuple[str, object] | str] = []
            end = 0
            for i, x in line:
                kind = "selected" if i == self.index else "blocked" if i in self.blocked else "option"
                parts.append(" " * (x - end))
                # the current choice is bracketed, so it reads without colour (NO_COLOR, copied text)
                text = f"[{self.labels[i]}]" if i == self.index else f" {self.labels[i]} "
                parts.append((text, styles[kind]))
                end = x + len(self.labels[i]) + 2
            rows.append(Content.assemble(*parts))  # type: ignore[arg-type]
        return Content("\n").join(rows)

    def action_move(self, step: int) -> None:
        """The next choice in that direction that is possible (wrapping), as cycling keys do."""
        n = len(self.labels)
        for k in range(1, n):
            i = (self.index + step * k) % n
            if i not in self.blocked:
                self.post_message(self.Changed(self, i))
                return

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        lines = self._lines()
        if not 0 <= offset.y < len(lines):
            return
        for i, x in lines[offset.y]:
            if x <= offset.x < x + len(self.labels[i]) + 2:
                self.post_message(self.Changed(self, i))
                return
