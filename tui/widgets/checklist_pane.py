"""The Checklist pane: the fit advisor (changes that make the plan fit, ranked by step time; the largest micro-batch
that fits; the fewest GPUs) and the troubleshooting checklist (out of memory, NaN loss, slow training) judged
against the plan. Enter applies a suggestion or an item's fix (one plan change: ctrl+z undoes it); space ticks a
by-hand item, kept in the plan's ``[checklist]`` table and so saved and exported with it.

Keystrokes stay fast: the checklist (a few ms) is judged only while the pane is shown, and the advisor (10-300 ms)
runs in a thread worker, one at a time; a result for a plan that has changed since is dropped and the newest plan
advised instead. The checklist and advisor modules are imported when the pane is first shown (start-up time)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.content import Content
from textual.message import Message
from textual.widget import Widget
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from vramplan.core.memory.record import Estimate
from vramplan.tui.widgets.fields import PlanPane
from vramplan.tui.widgets.settle import Settled
from vramplan.tui.widgets.text import compact, show_text

if TYPE_CHECKING:
    from vramplan.core.advice.advisor import Advice
    from vramplan.core.advice.checklist import Checklist
    from vramplan.tui.widgets.checklist_rows import Row


class ChecklistList(OptionList):
    """The rows; space ticks the highlighted by-hand item."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("space", "tick", "Tick a by-hand item", show=False)]

    class Tick(Message):
        def __init__(self, row_id: str) -> None:
            super().__init__()
            self.row_id = row_id

    def action_tick(self) -> None:
        option = self.highlighted_option
        if option is not None and option.id and not option.disabled:
            self.post_message(self.Tick(option.id))

    def show_rows(self, rows: list[Row]) -> None:
        """Replace the rows, keeping the highlighted row (by id) and the scroll position."""
        ids = [r.id for r in rows]
        if ids == [o.id for o in self.options]:
            changed = False
            for i, (row, option) in enumerate(zip(rows, self.options, strict=True)):
                if option.disabled != (not row.selectable):
                    option.disabled = not row.selectable
                    changed = True
                old = option.prompt
                if not (isinstance(old, Content) and old.is_same(row.prompt)):
                    self.replace_option_prompt_at_index(i, row.prompt)
                    changed = True
            if changed:
                self.refresh()
            return
        keep = self.highlighted_option.id if self.highlighted_option is not None else None
        first = next((o.id for o in self.options if not o.disabled), None)
        y = self.scroll_y
        self.set_options(Option(r.prompt, id=r.id, disabled=not r.selectable) for r in rows)
        if keep in ids and keep != first:  # the cursor stays where the user put it, the rows where they were
            self.highlighted = ids.index(keep)
            self.scroll_to(y=y, animate=False, immediate=True)
            self.scroll_to_highlight()
        else:  # on the first row, it stays first, from the top
            self.action_first()
            self.scroll_home(animate=False, immediate=True)

    def on_resize(self) -> None:
        self.post_message(ChecklistPane.Rewrap())


class ChecklistPane(PlanPane):
    TITLE = "Checklist"
    SOLO = True

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("f", "cycle_framework", "Advice for a framework", show=False, id="advice_framework"),
    ]

    class AdviceReady(Message):
        def __init__(self, advice: Advice | None, error: str = "", framework: str = "all") -> None:
            super().__init__()
            self.advice = advice
            self.error = error
            self.framework = framework

    class Rewrap(Message):
        """The list's width changed: wrap the rows again."""

    def __init__(self, **kw: object) -> None:
        super().__init__(**kw)  # type: ignore[arg-type]
        self.checklist: Checklist | None = None
        self.advice: Advice | None = None  # the newest advice, possibly for an older plan
        self._advice_error = ""
        self._advising = False
        self.framework = "all"  # the advisor's framework filter (`f` cycles it; core.advice.frameworks)
        self._advised_for = "all"  # the framework self.advice was made for
        self._judged_for = "all"  # the framework self.checklist was made for
        self.judge = Settled(self, self._judge)

    def compose(self) -> ComposeResult:
        yield Static(id="checklist-summary", classes="details")
        yield compact(ChecklistList(id="checklist-list"))

    def on_mount(self) -> None:  # PlanPane.on_mount runs too (Textual calls each class's handler)
        self._subtitle()

    def _subtitle(self) -> None:
        from vramplan.core.advice.frameworks import FRAMEWORKS

        self.border_subtitle = f"⏎ apply  space tick  f: {FRAMEWORKS[self.framework]}  1-4 back"

    def action_cycle_framework(self) -> None:
        """Restrict the advisor's suggestions to what a framework runs (all, HF + DeepSpeed, FSDP, Megatron)."""
        from vramplan.core.advice.frameworks import FRAMEWORKS

        names = list(FRAMEWORKS)
        self.framework = names[(names.index(self.framework) + 1) % len(names)]
        self._subtitle()
        if self.estimate is not None and self.display:
            self._judge()  # the checklist's memory fix follows the same framework

    def focus_target(self) -> Widget:
        return self.query_one(ChecklistList)

    # -- judging ---------------------------------------------------------------------------------------------
    def show_estimate(self, est: Estimate) -> None:
        self.judge()

    def _judge(self) -> None:
        from vramplan.core.advice.checklist import checklist

        est = self.estimate
        if est is None or not self.display:
            return  # hidden: the pane catches up when shown
        if self.checklist is None or self.checklist.plan != est.plan or self._judged_for != self.framework:
            self.checklist = checklist(est.plan, est, framework=self.framework)
            self._judged_for = self.framework
        self._request_advice(est)
        self._show()

    def _request_advice(self, est: Estimate) -> None:
        if self._advising or (
            self.advice is not None and self.advice.plan == est.plan and self._advised_for == self.framework
        ):
            return
        self._advising = True
        self._advise(est, self.framework)

    @work(thread=True, exclusive=True, group="advice", exit_on_error=False)
    def _advise(self, est: Estimate, framework: str = "all") -> None:
        from vramplan.core.advice.advisor import advise

        try:
            self.post_message(self.AdviceReady(advise(est.plan, est=est, framework=framework), framework=framework))
        except Exception as exc:  # shown in the pane; the planner keeps working
            self.post_message(self.AdviceReady(None, f"{type(exc).__name__}: {exc}"))

    def on_checklist_pane_advice_ready(self, event: AdviceReady) -> None:
        event.stop()
        self._advising = False
        self._advice_error = event.error
        if event.advice is not None:
            self.advice = event.advice
            self._advised_for = event.framework
        est = self.estimate
        if est is None:
            return
        if not self.display:  # hidden: judged and advised again when shown (the plan may have changed)
            self._stale = True
            return
        stale = self.advice is not None and (self.advice.plan != est.plan or self._advised_for != self.framework)
        if stale and not event.error:
            self._request_advice(est)  # the plan changed while it ran: advise the newest one
        self._show()

    def on_checklist_pane_rewrap(self, event: Rewrap) -> None:
        event.stop()
        if self.display and self.checklist is not None:
            self._show()

    def _show(self) -> None:
        from vramplan.tui.widgets.checklist_rows import advice_rows, checklist_rows

        est, cl = self.estimate, self.checklist
        if est is None or cl is None or cl.plan != est.plan:
            return
        lst = self.query_one(ChecklistList)
        width = lst.scrollable_content_region.width or 40
        show_text(
            self.query_one("#checklist-summary", Static),
            Content.assemble(
                (cl.summary(), "bold"),
                ("\n⏎ apply a fix · space tick ☐ · ctrl+z undo", "dim"),
            ),
        )
        lst.show_rows(advice_rows(self.advice, est, width, self._advice_error) + checklist_rows(cl, width))

    # -- acting ----------------------------------------------------------------------------------------------
    @on(OptionList.OptionSelected, "#checklist-list")
    def _selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        row = event.option.id or ""
        changes = self._changes_for(row)
        if changes:
            self.post_message(PlanPane.Changed(changes))
        elif self.checklist is not None and any(i.id == row and i.status == "manual" for i in self.checklist):
            self._tick(row)

    @on(ChecklistList.Tick)
    def _ticked(self, event: ChecklistList.Tick) -> None:
        event.stop()
        if self.checklist is not None and any(i.id == event.row_id and i.status == "manual" for i in self.checklist):
            self._tick(event.row_id)

    def _tick(self, item_id: str) -> None:
        from vramplan.core.advice.checklist import toggle_ticked

        est = self.estimate
        if est is not None:
            ticked = toggle_ticked(est.plan, item_id).checklist.ticked
            self.post_message(PlanPane.Changed({"checklist.ticked": ticked}))

    def _changes_for(self, row: str) -> dict[str, object]:
        """The plan changes a row stands for (empty: none), only when judged on the current plan."""
        est, cl, advice = self.estimate, self.checklist, self.advice
        if est is None:
            return {}
        if row.startswith("advice."):
            if advice is None or advice.plan != est.plan:
                return {}
            if row == "advice.micro_batch":
                return {"training.micro_batch_size": advice.max_micro_batch_size}
            if row == "advice.seq_len":
                return {"training.seq_len": advice.max_seq_len}
            if row == "advice.min_gpus":
                return dict(advice.min_gpus_changes)
            index = int(row.removeprefix("advice.s"))
            return advice.suggestions[index].changes
        if cl is None or cl.plan != est.plan:
            return {}
        item = next((i for i in cl if i.id == row), None)
        return dict(item.fix.changes) if item is not None and item.fix is not None else {}
