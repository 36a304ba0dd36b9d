"""The compare view (``d``): the pinned plan (A) beside the plan being edited (B), as ``vramplan diff`` shows two
plan files: the keys that differ, memory per GPU by kind and the step time of both with the deltas, and what each
key's change alone does to the pinned plan (`core.advice.plandiff`)."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.content import Content
from textual.screen import ModalScreen
from textual.widgets import Static

from vramplan.core.advice.plandiff import PlanDiff, plan_diff, relative_text, signed_gib, value_text
from vramplan.core.memory.kinds import ALL_KINDS, KIND_LABELS
from vramplan.core.plan.helpers.units import fmt_seconds, gib_text
from vramplan.core.plan.schema.plan import Plan
from vramplan.tui.screens.css import tcss


def compare_text(d: PlanDiff) -> Content:
    """The diff as lines within the view's width (about 74 columns)."""
    fa, fb = d.fa, d.fb
    lines: list[Content] = []
    if d.same:
        lines.append(Content("The edited plan is the pinned plan (no key differs)."))
    else:
        lines.append(Content.styled(f"{d.keys_differ} (pinned -> now)", "bold"))
        width = max(len(k.key) for k in d.keys)
        lines += [Content(f"  {k.key:<{width}}  {value_text(k.a)} -> {value_text(k.b)}") for k in d.keys]
    lines.append(Content(""))
    lines.append(Content.styled(f"{'GiB per GPU at the peak':<34}{'pinned':>10}{'now':>10}{'change':>10}", "bold"))
    for kind in ALL_KINDS:  # an RL plan's kinds where either plan has them
        va, vb = fa.memory.get(kind, 0), fb.memory.get(kind, 0)
        if va or vb:
            lines.append(
                Content(f"  {KIND_LABELS[kind]:<32}{gib_text(va):>10}{gib_text(vb):>10}{signed_gib(vb - va):>10}")
            )
    total = signed_gib(fb.total - fa.total)
    lines.append(Content(f"  {'Total':<32}{gib_text(fa.total):>10}{gib_text(fb.total):>10}{total:>10}"))
    if fa.gpu_capacity != fb.gpu_capacity:  # another GPU
        lines.append(Content(f"  {'GPU memory':<32}{gib_text(fa.gpu_capacity):>10}{gib_text(fb.gpu_capacity):>10}"))
    fit = {True: "fits", False: "over"}
    lines.append(Content(f"  {'Verdict':<32}{fit[fa.fits]:>10}{fit[fb.fits]:>10}"))
    step = relative_text(fb.step_seconds / fa.step_seconds).removesuffix(" step time")
    lines.append(
        Content(f"{'Step time':<34}{fmt_seconds(fa.step_seconds):>10}{fmt_seconds(fb.step_seconds):>10}{step:>10}")
    )
    lines.append(Content(f"{'Tokens/s':<34}{fa.tokens_per_second:>10,.0f}{fb.tokens_per_second:>10,.0f}"))
    if d.keys:
        lines.append(Content(""))
        lines.append(Content.styled("Each change alone, applied to the pinned plan", "bold"))
        for k in d.keys:
            effect = k.alone.text() if k.alone else k.error
            lines.append(Content(f"• {k.key} {value_text(k.a)} -> {value_text(k.b)}: {effect}"))
    return Content("\n").join(lines)


class CompareScreen(ModalScreen[None]):
    DEFAULT_CSS = tcss("views.tcss")  # beside this module: see `vramplan.tui.screens.css`
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,d", "app.pop_screen", "Close", id="compare_close"),
    ]

    def __init__(self, pinned: Plan, current: Plan) -> None:
        super().__init__()
        self.diff = plan_diff(pinned, current)

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="compare", classes="dialog"):
            yield Static(compare_text(self.diff), id="compare-text")

    def on_mount(self) -> None:
        box = self.query_one("#compare")
        box.border_title = "Pinned plan vs now"
        box.border_subtitle = "P unpins · esc closes"
