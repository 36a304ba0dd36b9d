"""Updating text cheaply: a plan change re-renders only the texts that changed, and asks for a layout pass (the
costly part of a frame) only when a text's wrapped height changes."""

from __future__ import annotations

from textual.content import Content
from textual.widgets import Static


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
    height = content.get_height(widget.styles, region.width)
    widget.update(content, layout=height != region.height)
