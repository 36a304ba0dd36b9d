"""`PaneTabs`: the panes' titles on one line and a bar under them, the shown pane's title bold over a heavy bar
(``━``, the others over a light one, ``─``: readable without colour). One leaf widget (`render()`): Textual's
`Tabs` is ten widgets (a scroll container, a row, a `Tab` per title, an animated underline) that cost some 10 ms
of the first frame, and every one of them is in each later layout pass. Left/right (when focused) or a click picks
a pane; the planner screen shows it (`PaneTabs.Picked`)."""

from __future__ import annotations

from typing import ClassVar

from textual import events
from textual.binding import Binding, BindingType
from textual.content import Content
from textual.message import Message
from textual.reactive import reactive
from textual.style import Style
from textual.widget import Widget


def tab_spans(titles: list[str]) -> list[tuple[int, int]]:
    """Each title's cells (start, end): one space before each, as the titles are drawn."""
    spans, x = [], 0
    for title in titles:
        spans.append((x, x + len(title) + 1))
        x += len(title) + 1
    return spans


class PaneTabs(Widget, can_focus=True):
    DEFAULT_CSS = """
    PaneTabs {
        width: 1fr;
        height: 2;
        & > .pane-tabs--title { color: $foreground 50%; }
        & > .pane-tabs--shown { color: $foreground; text-style: bold; }
        & > .pane-tabs--bar { color: $foreground 15%; }
        & > .pane-tabs--shown-bar { color: $block-cursor-background; }
        &:focus > .pane-tabs--shown {
            color: $block-cursor-foreground;
            background: $block-cursor-background;
            text-style: $block-cursor-text-style;
        }
        &:focus > .pane-tabs--bar { color: $foreground 30%; }
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("left", "move(-1)", "Previous pane", show=False),
        Binding("right", "move(1)", "Next pane", show=False),
    ]
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "pane-tabs--title",
        "pane-tabs--shown",
        "pane-tabs--bar",
        "pane-tabs--shown-bar",
    }
    ALLOW_SELECT = False

    shown: reactive[str] = reactive("")  # the id of the pane shown

    class Picked(Message):
        """The user picked pane `pid` (a click, or left/right)."""

        def __init__(self, pid: str) -> None:
            super().__init__()
            self.pid = pid

    def __init__(self, panes: list[tuple[str, str]], shown: str, **kw: object) -> None:
        """`panes`: (id, title) in tab order."""
        super().__init__(**kw)  # type: ignore[arg-type]
        self.panes = panes
        self.spans = tab_spans([title for _, title in panes])
        self.set_reactive(PaneTabs.shown, shown)

    def _offset(self) -> int:
        """Cells the strip is moved left by: none while the titles fit, else enough to show the shown pane's."""
        ends = [end for (pid, _), (_, end) in zip(self.panes, self.spans, strict=True) if pid == self.shown]
        return max(0, (ends[0] if ends else 0) - self.size.width)

    def render(self) -> Content:
        style = {name: self.get_visual_style(f"pane-tabs--{name}") for name in ("title", "shown", "bar", "shown-bar")}
        titles: list[tuple[str, Style]] = []
        bars: list[tuple[str, Style]] = []
        for (pid, title), (start, end) in zip(self.panes, self.spans, strict=True):
            here = pid == self.shown
            titles.append((f" {title}", style["shown" if here else "title"]))
            bars.append(("━" * (end - start), style["shown-bar"]) if here else ("─" * (end - start), style["bar"]))
        offset = self._offset()
        drawn = self.spans[-1][1] if self.spans else 0
        bars.append(("─" * max(0, self.size.width + offset - drawn), style["bar"]))
        # one line each, never wrapped: narrower than the titles (a split tmux pane), the strip is cut at the edge
        lines = [Content.assemble(*titles), Content.assemble(*bars)]
        return Content("\n").join(line[offset : offset + self.size.width] for line in lines)

    def action_move(self, step: int) -> None:
        ids = [pid for pid, _ in self.panes]
        if self.shown in ids:
            self.post_message(self.Picked(ids[(ids.index(self.shown) + step) % len(ids)]))

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        x = offset.x + self._offset()
        for (pid, _), (start, end) in zip(self.panes, self.spans, strict=True):
            if start <= x < end:
                self.post_message(self.Picked(pid))
                return
