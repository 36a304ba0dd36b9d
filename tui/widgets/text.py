"""Updating text cheaply: a plan change re-renders only the texts that changed, and asks for a layout pass (the
costly part of a frame) only when a text's wrapped height changes."""

from __future__ import annotations

from typing import TypeVar

from rich.cells import cell_len
from textual.content import Content
from textual.widget import Widget
from textual.widgets import Static

W = TypeVar("W", bound=Widget)


def without_links(widget: W) -> W:
    """A widget whose text holds no links (figures, verdicts): Textual then does not work out link styles on
    each render, a tenth of a short text's cost on every frame that repaints it."""
    widget.set_reactive(Widget.auto_links, False)
    return widget


def text_height(content: Content, widget: Static, width: int) -> int:
    """The lines ``content`` takes at ``width``: one per line when every line fits (the common case, a few
    microseconds), else as Textual wraps it."""
    plain = content.plain
    if plain and not plain.endswith("\n"):
        lines = plain.split("\n")
        if all(cell_len(line) <= width for line in lines):
            return len(lines)
    return content.get_height(widget.styles, width)


def show_text(widget: Static, text: str | Content) -> None:
    """Set a Static's text (markup or Content) if it differs; relayout only when its height changes."""
    content = Content.from_markup(text) if isinstance(text, str) else text
    old = widget.visual
    if isinstance(old, Content) and old.plain == content.plain and old.spans == content.spans:
        return
    region = widget.content_region
    if region.width <= 0 or not widget.display:
        widget.update(content)
        return
    height = text_height(content, widget, region.width)
    widget.update(content, layout=height != region.height)
