"""Updating text cheaply: a plan change re-renders only the texts that changed, and asks for a layout pass (the
costly part of a frame) only when a text's wrapped height changes; `LineText` redraws only the lines that
changed, each straight from its spans (`line_strip`)."""

from __future__ import annotations

from functools import lru_cache
from typing import TypeVar

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style as RichStyle
from textual.content import Content
from textual.geometry import Size
from textual.strip import Strip
from textual.style import Style
from textual.widget import Widget
from textual.widgets import Static

W = TypeVar("W", bound=Widget)


def without_links(widget: W) -> W:
    """A widget whose text holds no links (figures, verdicts): Textual then does not work out link styles on
    each render, a tenth of a short text's cost on every frame that repaints it."""
    widget.set_reactive(Widget.auto_links, False)
    return widget


def compact(widget: W) -> W:
    """Textual's compact look (no border) for an `Input` or an `OptionList`, given at birth. Their ``compact=True``
    sets a class through a reactive, and Textual restyles the widget (and each of its component classes) for it
    before the widget is even mounted: the preset list, its filter and the Model pane's ten fields were styled
    twice at start-up. Here the class is added without a restyle and the reactive set quietly; the widget is
    styled once, when mounted."""
    widget.add_class("-textual-compact", update=False)
    widget.set_reactive(type(widget).compact, True)  # type: ignore[attr-defined]
    return widget


def content_size(widget: Widget) -> Size:
    """A widget's content area as last laid out: its outer size less padding and border. ``Widget.size`` and
    ``content_region`` ask the compositor, which rebuilds its map of the whole screen (some 90 widgets at 80x24, 2 ms)
    when a layout pass invalidated it, as the frame before a key often did; this reads what that pass set."""
    outer, gutter = widget.outer_size, widget.styles.gutter
    return Size(max(0, outer.width - gutter.width), max(0, outer.height - gutter.height))


def text_height(content: Content, widget: Static, width: int) -> int:
    """The lines ``content`` takes at ``width``: one per line when every line fits (the common case, a few
    microseconds), else as Textual wraps it."""
    plain = content.plain
    if plain and not plain.endswith("\n"):
        lines = plain.split("\n")
        if all(cell_len(line) <= width for line in lines):
            return len(lines)
    # Textual documents (and passes, `Widget._get_height`) a widget's styles here, but annotates a RulesMap, the
    # TypedDict that RenderStyles, a mapping of the same rules, is not; `get_render_rules()` would copy all ~100.
    return content.get_height(widget.styles, width)  # type: ignore[arg-type]


def show_text(widget: Static, text: str | Content) -> None:
    """Set a Static's text (markup or Content) if it differs; relayout only when its height changes."""
    content = Content.from_markup(text) if isinstance(text, str) else text
    old = widget.visual
    if isinstance(old, Content) and old.plain == content.plain and old.spans == content.spans:
        return
    size = content_size(widget)
    if size.width <= 0 or not widget.display:
        widget.update(content)
        return
    widget.update(content, layout=shown_height(widget, text_height(content, widget, size.width)) != size.height)


def shown_height(widget: Static, lines: int) -> int:
    """The height of the content region of an auto-height ``widget`` that holds ``lines`` lines: at least its
    ``min-height`` in cells (which counts the padding and border, Textual's default ``box-sizing``)."""
    minimum = widget.styles.min_height
    if minimum is None or not minimum.is_cells:
        return lines
    return max(lines, int(minimum.value) - widget.styles.gutter.height)


@lru_cache(maxsize=1024)
def _offset_style(style: Style, x: int, y: int) -> RichStyle:
    """`Style.rich_style_with_offset`, kept: a redrawn line puts its spans at the offsets it had (6 us each)."""
    return style.rich_style_with_offset(x, y)


def line_strip(line: Content, style: Style, y: int, width: int) -> Strip:
    """One line that fits its width (a legend's, a bar's, a wrapped text's), as a strip: rendered straight from its
    spans, without the wrapping, alignment and link passes of a Static's text (a third of a line's cost), with the
    offsets Textual's text selection reads. Styles given as text (``$text-warning``) take the app's theme, as
    `Content.render` parses them."""
    segments = []
    x = 0
    for text, text_style in line.render(style, end=""):
        segments.append(Segment(text, _offset_style(text_style, x, y)))
        x += len(text)
    return Strip(segments).crop(0, width)


class LineText(Static):
    """A Static drawn line by line: its text wrapped at its width as a Static wraps it, each line's strip kept
    until that line changes (`line_strip`). A key that changes the figures of a three-line headline redraws them
    in a third of the time Textual's whole-text path takes. It wraps as a left-aligned, wrapping Static does (its
    CSS may not set ``text-align``, ``text-wrap`` or ``text-overflow``); with a text selection in it, it draws as
    a Static (which shows the selection). Its text holds no links (`without_links`)."""

    def __init__(self, content: str | Content = "", **kw: object) -> None:
        super().__init__(content, **kw)  # type: ignore[arg-type]
        self.set_reactive(Widget.auto_links, False)
        self._wrapped: tuple[object, int, list[Content]] | None = None  # (text, width, its lines)
        self._strips: dict[int, tuple[tuple[object, ...], Strip]] = {}  # line -> (what it showed, its strip)

    def _lines(self, text: Content, width: int) -> list[Content]:
        wrapped = self._wrapped
        if wrapped is None or wrapped[0] is not text or wrapped[1] != width:
            wrapped = self._wrapped = (text, width, text.wrap(width))
        return wrapped[2]

    def render_line(self, y: int) -> Strip:
        text = self.visual
        width = content_size(self).width
        if not isinstance(text, Content) or self.text_selection is not None or width <= 0:
            return super().render_line(y)
        lines = self._lines(text, width)
        style = self.visual_style
        if y >= len(lines):
            return Strip.blank(width, style.rich_style)
        line = lines[y]
        key = (line.plain, tuple(line.spans), width, style, self.app.theme)
        cached = self._strips.get(y)
        if cached is not None and cached[0] == key:
            return cached[1]
        strip = line_strip(line, style, y, width)
        self._strips[y] = (key, strip)
        return strip
