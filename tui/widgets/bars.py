"""Leaf displays that draw themselves (`render()`): a stacked bar against a capacity, and the selectable legend
of memory kinds. Colours come from component classes styled in app.tcss (theme variables only); with NO_COLOR
each kind has its own letter instead."""

from __future__ import annotations

from typing import ClassVar

from textual import events
from textual.binding import Binding, BindingType
from textual.content import Content
from textual.geometry import Region
from textual.message import Message
from textual.reactive import reactive
from textual.strip import Strip
from textual.style import Style
from textual.widget import Widget

from vramplan.core.memory.kinds import HOST, KIND_LABELS, KIND_SPECS, KINDS, KindSpec
from vramplan.core.plan.helpers.units import gib_text as gib
from vramplan.tui.widgets.text import content_size, line_strip

SEGMENTS: tuple[KindSpec, ...] = (*KIND_SPECS, HOST)  # the kinds of GPU memory, then the host the plan offloads to
# Glyphs per kind: solid blocks in colour; without colour (NO_COLOR) a letter per kind (`KindSpec.glyph`), which the
# legend repeats: shades (▓ ▒ ░) drawn in one grey read alike in many fonts, a letter reads the same anywhere (and
# in copied text).
GLYPHS_NO_COLOR: dict[str, str] = {k.key: k.glyph for k in SEGMENTS}
# One colour per kind (`KindSpec.colour`, a theme variable), shared by the bars and the legend: component classes of
# the widget that holds them (the gauges), styled once by `KIND_CSS`. Declared on each bar and on the legend, they
# were styled once per widget at start-up (a component class costs Textual a style pass of its own), 26 passes
# instead of 11.
KIND_CLASSES: frozenset[str] = frozenset(f"kind--{k.key}" for k in SEGMENTS)
KIND_CSS = "\n".join(f"MemoryGauges > .kind--{k.key} {{ color: {k.colour}; }}" for k in SEGMENTS)


def kind_style(widget: Widget, kind: str) -> Style:
    """The colour of memory kind ``kind``: component class ``kind--<kind>`` of the nearest container that declares
    it (`KIND_CLASSES`), found as Textual finds a ``.class`` style in a text."""
    name = f"kind--{kind}"
    for node in widget.ancestors:
        if isinstance(node, Widget):
            try:
                return node.get_visual_style(name, partial=True)
            except KeyError:
                continue
    return Style()


def segment_cells(sizes: list[int], scale: int, width: int) -> list[int]:
    """Cells per segment so that cumulative edges are rounded (the cells add up to the rounded total)."""
    cells, edge, cum = [], 0, 0
    for n in sizes:
        cum += n
        end = round(cum * width / scale) if scale else 0
        cells.append(end - edge)
        edge = end
    return cells


class StackedBar(Widget):
    """One bar of bytes by kind against a capacity; the last line is the scale."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"stacked-bar--free", "stacked-bar--limit", "stacked-bar--scale"}

    def __init__(self, *, scale: bool = True, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.set_reactive(Widget.auto_links, False)  # no links: no link styles worked out on each render
        self.segments: list[tuple[str, int]] = []
        self.capacity = 0
        self.with_scale = scale  # False: the bar only (the pinned plan's, above the plan's own bar and scale)
        self._strips: dict[int, tuple[tuple[object, ...], Strip]] = {}  # line -> (what it showed, its strip)

    def show(self, segments: list[tuple[str, int]], capacity: int) -> None:
        segments = [(k, n) for k, n in segments if n > 0]
        if (segments, capacity) != (self.segments, self.capacity):
            self.segments, self.capacity = segments, capacity
            self.refresh()

    def _glyph(self, kind: str) -> str:
        return GLYPHS_NO_COLOR[kind] if self.app.no_color else "█"

    def _bar_rows(self, height: int) -> int:
        """The rows the bar takes at ``height``: every one, or all but the scale's."""
        return max(1, height - 1) if self.with_scale else max(1, height)

    def _line(self, y: int, width: int, height: int) -> Content:
        """Line ``y`` at this size: a bar row, the scale (under the bar, when shown) or nothing."""
        rows = self._bar_rows(height)
        if y < rows:
            return self._bar(width)
        return self._scale(width) if self.with_scale and y == rows else Content("")

    def render(self) -> Content:
        """The whole bar as text (what `render_line` draws line by line)."""
        size = content_size(self)
        if size.width < 4 or not self.capacity:
            return Content("")
        lines = self._bar_rows(size.height) + self.with_scale
        return Content("\n").join(self._line(y, size.width, size.height) for y in range(lines))

    def render_line(self, y: int) -> Strip:
        """One line, drawn from its spans (`line_strip`: a third of the cost of Textual's path for a text) and kept
        until what it shows changes: a key redraws the bar's row, and the scale only when the capacity or an
        overflow moves it."""
        size = content_size(self)
        total = sum(n for _, n in self.segments)
        # the scale shows the capacity, and where it falls when the bar is over it; a bar row shows every segment
        shows = (total if total > self.capacity else None) if y >= self._bar_rows(size.height) else self.segments
        key = (shows, self.capacity, size, self.app.no_color, self.app.theme, self.visual_style)
        cached = self._strips.get(y)
        if cached is not None and cached[0] == key:
            return cached[1]
        if size.width < 4 or not self.capacity:
            strip = Strip.blank(size.width, self.visual_style.rich_style)
        else:
            strip = line_strip(self._line(y, size.width, size.height), self.visual_style, y, size.width)
        self._strips[y] = (key, strip)
        return strip

    def _bar(self, width: int) -> Content:
        """Segments by kind; past the capacity (over) they turn to a shaded glyph behind a ``┃`` marker."""
        total = sum(n for _, n in self.segments)
        scale = max(total, self.capacity)
        over = total > self.capacity
        cap_pos = min(width - 1, round(self.capacity * width / scale)) if over else width
        cells = segment_cells([n for _, n in self.segments], scale, width)
        parts: list[tuple[str, object]] = []
        x = 0
        for (kind, _), n in zip(self.segments, cells, strict=True):
            style = kind_style(self, kind)
            glyph = self._glyph(kind)
            inside = max(0, min(n, cap_pos - x))
            if inside:
                parts.append((glyph * inside, style))
            if n - inside:
                parts.append(((glyph if self.app.no_color else "▓") * (n - inside), style))
            x += n
        if x < width:
            parts.append(("·" * (width - x), self.get_visual_style("stacked-bar--free")))
        content = Content.assemble(*parts)  # type: ignore[arg-type]
        if over:
            limit = self.get_visual_style("stacked-bar--limit")
            content = content[:cap_pos] + Content.assemble(("┃", limit)) + content[cap_pos + 1 :]
        return content

    def _scale(self, width: int) -> Content:
        total = sum(n for _, n in self.segments)
        scale = max(total, self.capacity)
        style = self.get_visual_style("stacked-bar--scale")
        right = f"{gib(self.capacity)} GiB"
        if total <= self.capacity:
            text = "0" + right.rjust(width - 1)
        else:
            cap_pos = min(width - 1, round(self.capacity * width / scale))
            mark = f"{right} ┘"
            start = max(2, cap_pos - len(mark) + 1)  # a space after the "0": never "079.6 GiB"
            text = ("0" + " " * (start - 1) + mark).ljust(width)[:width]
        return Content.assemble((text, style))


class KindLegend(Widget, can_focus=True):
    """The kinds of memory with their GiB at the peak and at their largest; the cursor selects one to explain."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up,k", "move(-1)", "Previous", show=False),
        Binding("down,j", "move(1)", "Next", show=False),
        Binding("home", "move(-99)", "First", show=False),
        Binding("end", "move(99)", "Last", show=False),
    ]
    COMPONENT_CLASSES: ClassVar[set[str]] = {"kind-legend--cursor", "kind-legend--header"}
    cursor: reactive[int] = reactive(0)

    class Selected(Message):
        def __init__(self, legend: KindLegend, kind: str) -> None:
            super().__init__()
            self.legend = legend
            self.kind = kind

        @property
        def control(self) -> KindLegend:
            return self.legend

    def __init__(self, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.rows: list[tuple[str, int, int]] = []  # kind, bytes at the peak, bytes at its largest
        self._strips: dict[int, tuple[tuple[object, ...], Strip]] = {}  # line -> (what it showed, its strip)
        self._cols: tuple[int, list[tuple[str, int, int]], tuple[int, int]] | None = None  # (width, rows, columns)
        self._keys: list[tuple[object, ...]] = []  # every line's key after the last show
        self.note = ""  # a dim line under the rows where there is room (a mixture-of-experts model's experts)
        self.labels: dict[str, str] = {}  # the plan's own labels of some kinds (`show`)

    @property
    def kind(self) -> str | None:
        return self.rows[self.cursor][0] if self.rows else None

    def show(self, rows: list[tuple[str, int, int]], note: str = "", labels: dict[str, str] | None = None) -> None:
        """The rows (kind, bytes at the peak, at its largest), a note under them, and the plan's own labels of
        some kinds (`core.memory.kinds.plan_labels`: FSDP's words for an FSDP plan)."""
        labels = labels or {}
        if rows == self.rows and note == self.note and labels == self.labels:
            return
        # the keys the last show left (a focus, theme or size change since repainted the whole legend anyway)
        before = self._keys or self._line_keys()
        kind = self.kind
        self.rows = rows
        self.note = note
        self.labels = labels
        kinds = [k for k, _, _ in rows]
        self.set_reactive(KindLegend.cursor, kinds.index(kind) if kind in kinds else 0)
        # same height whatever the rows: no layout pass (the costly part of a frame); only changed lines repaint
        self._refresh_changed(before)

    def get_content_height(self, container: object, viewport: object, width: int) -> int:
        """Room for every kind (the header and one row each), so that a plan showing more or fewer kinds neither
        moves what is below nor costs a layout pass."""
        return len(KINDS) + 1

    def select(self, kind: str) -> None:
        kinds = [k for k, _, _ in self.rows]
        if kind in kinds:
            self.cursor = kinds.index(kind)

    def action_move(self, step: int) -> None:
        if self.rows:
            self.cursor = max(0, min(len(self.rows) - 1, self.cursor + step))

    def watch_cursor(self) -> None:
        if self.rows:
            self.post_message(self.Selected(self, self.rows[self.cursor][0]))

    def on_click(self, event: events.Click) -> None:
        row = event.y - 1
        if 0 <= row < len(self.rows):
            self.cursor = row
            self.focus()

    def _columns(self, width: int | None = None) -> tuple[int, int]:
        """(label width, number column width): each number column is one wider than its widest figure (262.83
        and up never run together). Worked out once per rows and width: every line's key asks for it."""
        width = content_size(self).width if width is None else width
        cols = self._cols
        if cols is not None and cols[0] == width and cols[1] is self.rows:
            return cols[2]
        num_w = max([6, *(len(gib(n, 2)) + 1 for _, a, b in self.rows for n in (a, b))])
        value = max(4, width - 2 - 2 * num_w), num_w
        self._cols = (width, self.rows, value)
        return value

    def _look(self) -> tuple[object, ...]:
        """What every line's look depends on besides its row: the columns, width, focus, theme and colours."""
        width = content_size(self).width
        return (self._columns(width), width, self.has_focus, self.app.theme, self.app.no_color, self.visual_style)

    def _line_key(self, y: int, context: tuple[object, ...] | None = None) -> tuple[object, ...]:
        """What line ``y`` shows: its strip is redrawn only when this changes."""
        row = self.rows[y - 1] if 0 < y <= len(self.rows) else None
        label = self.labels.get(row[0]) if row is not None else None
        cursor = y - 1 == self.cursor
        note = self.note if y == self._note_y() else None
        return (y == 0, row, label, note, cursor, self._look() if context is None else context)

    def _line_keys(self) -> list[tuple[object, ...]]:
        """Every line's key (the context worked out once)."""
        context = self._look()
        return [self._line_key(y, context) for y in range(len(KINDS) + 1)]

    def _note_y(self) -> int:
        """The note's line, below the rows, or -1 where there is no note or no room for it."""
        return len(self.rows) + 1 if self.note and len(self.rows) < len(KINDS) else -1

    def _line(self, y: int) -> Content:
        if y == self._note_y():
            return Content.styled(f"  {self.note}"[: content_size(self).width], "dim")
        label_w, num_w = self._columns()
        if y == 0:
            header = f"{'GiB per GPU':<{label_w + 2}}{'peak':>{num_w}}{'max':>{num_w}}"
            return Content.assemble((header, self.get_visual_style("kind-legend--header")))
        kind, at_peak, largest = self.rows[y - 1]
        glyphs = GLYPHS_NO_COLOR if self.app.no_color else {}
        label = (self.labels.get(kind) or KIND_LABELS.get(kind, kind))[:label_w]
        line = Content.assemble(
            (glyphs.get(kind, "█"), kind_style(self, kind)),
            f" {label:<{label_w}}{gib(at_peak, 2):>{num_w}}{gib(largest, 2):>{num_w}}",
        )
        if y - 1 == self.cursor:
            line = line.stylize(self.get_visual_style("kind-legend--cursor"), 1)
        return line

    def render(self) -> Content:
        """The whole legend as text (what `render_line` draws line by line)."""
        return Content("\n").join(self._line(y) for y in range(max(len(self.rows), self._note_y()) + 1))

    def render_line(self, y: int) -> Strip:
        """One line, redrawn only when what it shows changed (`_line_key`): a key that changes two figures
        redraws two lines, not the legend."""
        width = content_size(self).width
        if y > len(self.rows) and y != self._note_y():
            return Strip.blank(width, self.visual_style.rich_style)
        key = self._line_key(y)
        cached = self._strips.get(y)
        if cached is not None and cached[0] == key:
            return cached[1]
        strip = line_strip(self._line(y), self.visual_style, y, width)
        self._strips[y] = (key, strip)
        return strip

    def _refresh_changed(self, before: list[tuple[object, ...]]) -> None:
        """Repaint the lines whose `_line_key` changed."""
        width = content_size(self).width
        after = self._keys = self._line_keys()
        changed = [Region(0, y, width, 1) for y, (a, b) in enumerate(zip(before, after, strict=True)) if a != b]
        if changed:
            self.refresh(*changed)
