"""The plan panes' building blocks: `PlanPane` (gets the estimate and the errors, posts `Changed`) and the field
rows that edit one plan key each (a number, a choice, a flag, a list), each with its inline error and note."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.content import Content
from textual.message import Message
from textual.reactive import Reactive, var
from textual.widget import Widget
from textual.widgets import Input, Label, Static

from vramplan.core.memory.record import Estimate
from vramplan.core.plan.helpers.field_values import parse_count
from vramplan.core.plan.helpers.units import number_text, parse_number
from vramplan.core.plan.resolved import plan_value
from vramplan.core.plan.schema.plan import Plan
from vramplan.tui.choices import Choice, blocked, choices_of, shown_value
from vramplan.tui.widgets.choice_bar import ChoiceBar
from vramplan.tui.widgets.text import compact, show_text

NO_ERRORS: Mapping[str, str] = {}


class PlanPane(VerticalScroll):
    """A pane editing part of the plan. The planner binds `estimate` (which carries its plan) and `errors`
    (plan key -> message) into it; edits go up as `PlanPane.Changed`, never sideways."""

    TITLE = ""
    SOLO = False  # in the wide layout (every pane at once), shown on its own when it is the current pane
    _stale = False
    _sync_pending = False
    estimate: Reactive[Estimate | None] = var(None, init=False)
    errors: Reactive[Mapping[str, str]] = var(NO_ERRORS, init=False)

    class Changed(Message):
        """The user asks for plan changes (dotted keys). `coalesce` names a typing session for undo."""

        def __init__(self, changes: dict[str, Any], coalesce: str | None = None) -> None:
            super().__init__()
            self.changes = changes
            self.coalesce = coalesce

    class Invalid(Message):
        """What the user typed is not a value at all (e.g. an empty number): shown next to the field."""

        def __init__(self, key: str, message: str) -> None:
            super().__init__()
            self.key = key
            self.message = message

    def on_mount(self) -> None:
        self.border_title = self.TITLE
        self.fields: dict[str, FieldRow] = {row.key: row for row in self.query(FieldRow)}
        self._sync()

    def watch_estimate(self) -> None:
        self._schedule_sync()

    def watch_errors(self) -> None:
        self._schedule_sync()

    def _schedule_sync(self) -> None:
        """Sync once after the next frame: the gauges show a new figure first, the panes follow a frame later
        (and a change that sets both the errors and the estimate syncs once)."""
        if not self._sync_pending:
            self._sync_pending = True
            self.call_after_refresh(self._sync)

    def on_show(self) -> None:
        if self._stale:
            self._sync()

    def _sync(self) -> None:
        """Show the plan in every field (a hidden pane, e.g. another tab, catches up when it is shown)."""
        self._sync_pending = False
        est = self.estimate
        if est is None or not hasattr(self, "fields"):
            return
        if not self.display:
            self._stale = True
            return
        self._stale = False
        for key, row in self.fields.items():
            row.show(row.value_in(est.plan), self.errors.get(key))
        self.show_estimate(est)
        focused = self.screen.focused
        if focused is not None and self in focused.ancestors:  # texts above it may have grown: keep it in view
            self.call_after_refresh(focused.scroll_visible, animate=False)

    async def built(self) -> None:
        """Wait until every row exists (a pane may mount some after its first frame). Panes override it."""

    def show_estimate(self, est: Estimate) -> None:
        """Update what the pane derives from the plan (details, notes). Panes override it."""

    def focus_target(self) -> Widget:
        """What a pane key focuses: the pane's first control that keeps letters and digits as commands (a list,
        a choice bar: ``2`` then arrows work at once), not a text field; the pane itself if it has none."""
        for widget in self.query("*"):
            if widget.focusable and not isinstance(widget, Input):
                return widget
        return self

    def show_blocked(self, est: Estimate, keys: tuple[str, ...]) -> None:
        """Mark, at each choice control, which other choices are impossible with this plan and why."""
        for key in keys:
            row = self.fields[key]
            assert isinstance(row, ChoiceField)
            row.set_blocked(blocked(est.plan, key))


def plan_input(**kw: Any) -> Input:
    """A compact text field. Born with the class Textual's `Input` sets when it validates its first value (it has
    no validators: always ``-valid``), so showing the plan's value does not restyle it after the first styling."""
    return compact(Input(select_on_focus=True, classes="-valid", **kw))


def field_id(key: str) -> str:
    return "f-" + key.replace(".", "-")


class FieldRow(Widget):
    """One plan key: a label, a control, a note (derived figures, impossible choices) and an inline error."""

    DEFAULT_CSS = """
    FieldRow {
        layout: vertical;
        height: auto;
        & .field-line { height: auto; }
        & .field-label { width: 18; color: $text-muted; padding-right: 1; }
        /* a class set by FieldRow: see PlannerScreen._mark_focused_pane */
        &.-focus-within .field-label { color: $text; text-style: bold; }
        & .field-note, & .field-error, & .field-effect { height: auto; padding-left: 2; }
        /* notes and effects wrap: cut with "…" at 80 columns they hid what a choice does */
        & .field-note { color: $text-warning; }
        & .field-effect { color: $text-muted; }
        & .field-error { color: $text-error; text-style: bold; }
        & Input, & ChoiceBar { width: 1fr; }
    }
    """

    keeps_text = False  # True for text inputs: an error keeps what the user typed so they can fix it

    def __init__(self, key: str, label: str, *, tooltip: str | None = None, effect: bool = False) -> None:
        super().__init__(id=field_id(key))
        self.ready = False  # controls post their initial values on mount: ignore them until the plan is shown
        self.key = key
        self.label = label
        if tooltip:
            self.tooltip = tooltip
        self.control = self.make_control()
        self.note = Static("", classes="field-note")
        self.error = Static("", classes="field-error")
        self.note.display = self.error.display = False
        # effect=True: a line under the control for what the other choices would do (`set_effect`)
        self.effect = Static("", classes="field-effect") if effect else None
        if self.effect is not None:
            self.effect.display = False
        self._error_text = ""

    def compose(self) -> ComposeResult:
        # Not a grid: Textual sizes an auto grid row by its first column's width, so a wrapped note spanning both
        # columns got a row several lines too tall (blank lines under it in the wide layout).
        with Horizontal(classes="field-line"):
            yield Label(self.label, classes="field-label")
            yield self.control
        if self.effect is not None:
            yield self.effect
        yield self.note
        yield self.error

    def make_control(self) -> Widget:
        raise NotImplementedError

    # The label of the focused row is highlighted by a class, not `:focus-within` (see PlannerScreen): a focus
    # change restyles this row only.
    def on_descendant_focus(self) -> None:
        self.add_class("-focus-within")

    def on_descendant_blur(self) -> None:
        self.remove_class("-focus-within")

    def value_in(self, plan: Plan) -> Any:
        """What the control shows for this plan (the key's value; a row may show what is in effect)."""
        return plan_value(plan, self.key)

    def set_control(self, value: Any) -> None:
        raise NotImplementedError

    def show(self, value: Any, error: str | None) -> None:
        error = error or ""
        if error != self._error_text:
            self._error_text = error
            self.set_class(bool(error), "-error")
            show_text(self.error, Content(f"✘ {error}"))
            self.error.display = bool(error)
        if not (error and self.keeps_text):
            self.set_control(value)
        self.ready = True

    def set_note(self, text: str) -> None:
        show_text(self.note, Content(text))
        self.note.display = bool(text)

    def set_effect(self, text: str) -> None:
        if self.effect is not None:
            show_text(self.effect, Content(text))
            self.effect.display = bool(text)

    def post_change(self, value: Any, coalesce: bool = False) -> None:
        if not self.ready:
            return
        self.post_message(PlanPane.Changed({self.key: value}, self.key if coalesce else None))

    def post_invalid(self, message: str) -> None:
        if self.ready:
            self.post_message(PlanPane.Invalid(self.key, message))


class InputField(FieldRow):
    """A row whose control is a compact text `Input` (`plan_input`) with a placeholder saying what unset means; an
    error keeps what the user typed."""

    keeps_text = True

    def __init__(self, key: str, label: str, *, placeholder: str = "", **kw: Any) -> None:
        self.placeholder = placeholder
        super().__init__(key, label, **kw)

    def make_control(self) -> Widget:
        return plan_input(placeholder=self.placeholder)

    def set_placeholder(self, text: str) -> None:
        field = self.control
        assert isinstance(field, Input)
        if field.placeholder != text:
            field.placeholder = text


class IntField(InputField):
    """A whole number, typed as the CLI takes it (``4k``, ``32K``, ``1e3``, ``2_048``: `parse_count`); anything
    else is an inline error, never silently cut. A plain `Input` parsed here, not Textual's integer input type
    (which drops a suffix as it is typed, and whose validating regex can hang on a long run of digits). With
    ``optional=True`` empty unsets the key (the placeholder says what unset means); it is shown as typed digits
    (``2048``, not ``2.048K``)."""

    def __init__(self, key: str, label: str, *, optional: bool = False, **kw: Any) -> None:
        self.optional = optional
        super().__init__(key, label, **kw)

    def set_control(self, value: Any) -> None:
        field = self.control
        assert isinstance(field, Input)
        try:
            typed: int | str | None = parse_count(self.key, field.value)
        except ValueError:
            typed = field.value  # never a plan value: the plan's replaces it
        if typed != value:
            with self.prevent(Input.Changed):
                field.value = "" if value is None else str(value)

    @on(Input.Changed)
    def _typed(self, event: Input.Changed) -> None:
        event.stop()
        if event.value != event.input.value:
            return  # stale: the plan has set the field since
        if len(event.value) > 40:  # no plan count is this long: say so before parsing a pasted blob
            self.post_invalid("too long for a whole number")
            return
        try:
            value = parse_count(self.key, event.value)
        except ValueError as exc:
            self.post_invalid(str(exc))
            return
        if value is None and not self.optional:
            self.post_invalid("enter a whole number")
        else:
            self.post_change(value, coalesce=True)


class TextField(InputField):
    """Optional text as ``--set`` takes it (a model preset id, a package version); empty unsets the key. A string
    the key does not take is the plan's error, shown here."""

    def set_control(self, value: Any) -> None:
        field = self.control
        assert isinstance(field, Input)
        if (field.value.strip() or None) != value:
            with self.prevent(Input.Changed):
                field.value = value or ""

    @on(Input.Changed)
    def _typed(self, event: Input.Changed) -> None:
        event.stop()
        if event.value != event.input.value:
            return  # stale: the plan has set the field since
        self.post_change(event.value.strip() or None, coalesce=True)


class ListField(InputField):
    """A list of words (LoRA targets), separated by spaces or commas."""

    def set_control(self, value: Any) -> None:
        field = self.control
        assert isinstance(field, Input)
        if _parse_words(field.value) != tuple(value):
            with self.prevent(Input.Changed):
                field.value = " ".join(value)

    @on(Input.Changed)
    def _typed(self, event: Input.Changed) -> None:
        event.stop()
        if event.value != event.input.value:
            return
        words = _parse_words(event.value)
        if not words:
            self.post_invalid("at least one target")
        else:
            self.post_change(words, coalesce=True)


class NumberField(InputField):
    """An optional number (a float, or an integer with ``integer=True``): decimals, exponents, K/M/B/T and %.
    Empty unsets it; the placeholder says what unset means."""

    def __init__(self, key: str, label: str, *, integer: bool = False, **kw: Any) -> None:
        self.integer = integer
        super().__init__(key, label, **kw)

    def set_control(self, value: Any) -> None:
        field = self.control
        assert isinstance(field, Input)
        try:
            shown = parse_number(field.value, self.integer)
        except ValueError:
            shown = math.nan  # never equal: the plan's value replaces it
        if shown != value:
            with self.prevent(Input.Changed):
                field.value = "" if value is None else number_text(value, self.integer)

    @on(Input.Changed)
    def _typed(self, event: Input.Changed) -> None:
        event.stop()
        if event.value != event.input.value:
            return
        try:
            value = parse_number(event.value, self.integer)
        except ValueError as exc:
            self.post_invalid(str(exc))
            return
        self.post_change(value, coalesce=True)


def _parse_words(text: str) -> tuple[str, ...]:
    return tuple(w for w in re.split(r"[\s,]+", text.strip()) if w)


class ChoiceField(FieldRow):
    """Every choice of a setting in a `ChoiceBar` (`tui.choices.choices_of` unless given); flags are off/on."""

    def __init__(self, key: str, label: str, choices: tuple[Choice, ...] | None = None, **kw: Any) -> None:
        self.choices = choices if choices is not None else choices_of(key)
        super().__init__(key, label, **kw)

    def make_control(self) -> Widget:
        return ChoiceBar([c.label for c in self.choices])

    def value_in(self, plan: Plan) -> Any:
        return shown_value(plan, self.key)  # a key the stack chose: its "stack's" choice

    def _index(self, value: Any) -> int:
        for i, c in enumerate(self.choices):
            if c.value == value and type(c.value) is type(value):
                return i
        return 0

    def set_control(self, value: Any) -> None:
        bar = self.control
        assert isinstance(bar, ChoiceBar)
        bar.show(self._index(value), bar.blocked)

    def set_blocked(self, blocked: list[tuple[Choice, str]]) -> None:
        """Strike through the choices the plan cannot take, and say why in the note."""
        bar = self.control
        assert isinstance(bar, ChoiceBar)
        bar.show(bar.index, frozenset(self.choices.index(c) for c, _ in blocked))
        notes: dict[str, list[str]] = {}
        for choice, why in blocked:
            notes.setdefault(why, []).append(choice.label)
        self.set_note("\n".join(f"✘ {', '.join(labels)}: {why}" for why, labels in notes.items()))

    @on(ChoiceBar.Changed)
    def _chosen(self, event: ChoiceBar.Changed) -> None:
        event.stop()
        self.post_change(self.choices[event.index].value)
