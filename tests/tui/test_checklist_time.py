"""Pilot tests of the Checklist pane (fixes, ticks, the fit advisor) and the step-time figures (gauges, the MFU /
token budget / price fields, each strategy choice's effect)."""

from __future__ import annotations

from functools import partial
from typing import Any

from textual.pilot import Pilot
from textual.widgets import Input

from tests.tui.conftest import advised, figure, row_text, text_of
from tests.waiting import HANG_S, eventually, until
from vramplan.core.advice import advisor as advisor_module
from vramplan.core.advice.advisor import advise
from vramplan.core.advice.checklist import apply_fix, checklist
from vramplan.core.files.export import render
from vramplan.core.memory.peak import estimate
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.helpers.tomlio import loads
from vramplan.core.plan.helpers.units import GiB, fmt_seconds
from vramplan.core.plan.schema.plan import Plan, default_plan
from vramplan.core.time.record import StepTime
from vramplan.core.time.step import step_time
from vramplan.tui.app import VramplanApp
from vramplan.tui.effects import alternatives
from vramplan.tui.time_text import rate
from vramplan.tui.widgets.checklist_pane import ChecklistList, ChecklistPane
from vramplan.tui.widgets.checklist_rows import status_tag
from vramplan.tui.widgets.strategy_pane import EFFECT_KEYS

OVER = {"strategy.zero_stage": 0, "strategy.gradient_checkpointing": "none"}


async def show_checks(app: VramplanApp, pilot: Pilot[Any]) -> None:
    await pilot.press("5")
    await until(pilot, lambda: advised(app), "the fit advisor's rows for the plan")


async def highlight(app: VramplanApp, pilot: Pilot[Any], row_id: str) -> None:
    lst = app.planner.query_one(ChecklistList)
    lst.highlighted = lst.get_option_index(row_id)
    await pilot.pause()


async def test_enter_applies_a_fix_undo_restores_and_space_ticks_a_by_hand_item() -> None:
    plan = default_plan().with_changes(OVER)
    item = checklist(plan).item("oom.capacity")
    assert item.status == "fail" and item.fix is not None
    app = VramplanApp(plan=plan)
    async with app.run_test() as pilot:
        await pilot.press("5")
        await until(pilot, lambda: row_text(app, "oom.capacity"), "the checklist")  # judged after the frame
        assert isinstance(app.planner.focused, ChecklistList)
        assert row_text(app, "oom.capacity").startswith("✘ FAIL")
        assert item.fix.text() in row_text(app, "oom.capacity")
        await highlight(app, pilot, "oom.capacity")
        await pilot.press("enter")
        await pilot.pause()
        fixed = apply_fix(plan, item.fix)
        assert app.planner.plan == fixed
        assert figure(estimate(fixed).total) in text_of(app, "#headline")
        tag = status_tag(checklist(fixed).item("oom.capacity"))
        await until(pilot, lambda: row_text(app, "oom.capacity").startswith(tag), "the fixed plan's checklist")
        await pilot.press("ctrl+z")
        await pilot.pause()
        assert app.planner.plan == plan
        assert figure(estimate(plan).total) in text_of(app, "#headline")
        await until(pilot, lambda: row_text(app, "oom.capacity").startswith("✘ FAIL"), "the plan's checklist again")

        await highlight(app, pilot, "nan.data")  # a by-hand item: space ticks it, in the plan
        assert row_text(app, "nan.data").startswith("☐ check")
        await pilot.press("space")
        await pilot.pause()
        ticked = app.planner.plan
        assert ticked == plan.with_changes({"checklist.ticked": ("nan.data",)})
        await until(pilot, lambda: row_text(app, "nan.data").startswith("☑ done"), "the ticked row")
        assert "(1 ticked)" in text_of(app, "#checklist-summary")
        assert loads(render("toml", ticked).text)["checklist"]["ticked"] == ["nan.data"]  # exported with it
        await highlight(app, pilot, "oom.capacity")  # not a by-hand item: space does nothing
        await pilot.press("space")
        await pilot.pause()
        assert app.planner.plan == ticked
        await pilot.press("ctrl+z")  # ticking is a plan change like any other
        await pilot.pause()
        assert app.planner.plan == plan
        await until(pilot, lambda: row_text(app, "nan.data").startswith("☐ check"), "the unticked row")


async def test_fit_advisor_suggestion_and_largest_micro_batch_apply() -> None:
    plan = default_plan().with_changes(OVER)
    advice = advise(plan)
    assert advice.needed and advice.suggestions
    app = VramplanApp(plan=plan)
    async with app.run_test() as pilot:
        await show_checks(app, pilot)
        first = advice.suggestions[0]
        assert first.title in row_text(app, "advice.s0")
        assert " ".join(first.effect.set_args()) in row_text(app, "advice.s0")
        await highlight(app, pilot, "advice.s0")
        await pilot.press("enter")
        await pilot.pause()
        fixed = plan.with_changes(first.changes)
        assert app.planner.plan == fixed and estimate(fixed).fits
        assert figure(estimate(fixed).total) in text_of(app, "#headline")
        await until(pilot, lambda: advised(app), "the advice for the changed plan")
        now = advise(fixed)
        assert now.min_gpus is not None and f"these strategies: {now.min_gpus} (1 node x" in row_text(
            app, "advice.min_gpus"
        )
        assert f"largest micro-batch that fits as is: {now.max_micro_batch_size}" in row_text(app, "advice.micro_batch")
        await highlight(app, pilot, "advice.micro_batch")
        await pilot.press("enter")
        await pilot.pause()
        assert app.planner.plan == fixed.with_changes({"training.micro_batch_size": now.max_micro_batch_size})
        assert estimate(app.planner.plan).fits
        await pilot.press("ctrl+z", "ctrl+z")
        await pilot.pause()
        assert app.planner.plan == plan


async def test_advice_that_arrives_while_the_pane_is_hidden_is_renewed_when_shown(monkeypatch) -> None:
    import threading

    gate = threading.Event()

    def slow_advise(plan: Plan, **kw: Any) -> Any:
        gate.wait(HANG_S)
        return advise(plan, **kw)

    monkeypatch.setattr(advisor_module, "advise", slow_advise)
    app = VramplanApp(plan=default_plan())
    async with app.run_test() as pilot:
        await pilot.press("5")  # advising the default plan (held at the gate)
        await until(pilot, lambda: "working…" in row_text(app, "advice.head"), "the advisor to start")
        await pilot.press("c", "1")  # a new plan while it runs, then another pane
        await pilot.pause()
        gate.set()
        await app.workers.wait_for_complete()  # the old plan's advice arrives while the pane is hidden
        await pilot.pause()
        await show_checks(app, pilot)  # judged again, and advised for the plan now
        pane = app.planner.query_one(ChecklistPane)
        assert pane.advice is not None and pane.advice.plan == app.planner.plan != default_plan()
        assert "updating" not in row_text(app, "advice.head")


async def test_time_figures_follow_the_plan_and_the_time_inputs() -> None:
    app = VramplanApp()
    async with app.run_test() as pilot:

        def shown() -> str:
            return text_of(app, "#step-time")

        def expect(st: StepTime) -> None:
            assert fmt_seconds(st.step_seconds) in shown()
            assert f"{rate(st.tokens_per_second)} tok/s ({rate(st.tokens_per_second_per_gpu)}/GPU)" in shown()
            assert f"MFU {st.mfu:.0%}" in shown()

        expect(step_time(app.planner.plan))
        await pilot.press("c")  # checkpointing full -> none: faster
        await pilot.pause()
        expect(step_time(app.planner.plan))
        await pilot.press("3")
        mfu = app.planner.query_one("#f-training-mfu Input", Input)
        mfu.focus()
        await pilot.press("2")  # 2 > 1: an inline error, the plan kept
        await pilot.pause()
        assert "less than or equal to 1" in text_of(app, "#f-training-mfu .field-error")
        assert app.planner.plan.training.mfu is None
        await pilot.press("backspace", *".3")
        await pilot.pause()
        assert app.planner.plan.training.mfu == 0.3
        expect(step_time(app.planner.plan))
        assert f"MFU achieved {step_time(app.planner.plan).mfu:.1%}" in text_of(app, "#time-details")
        tokens = app.planner.query_one("#f-training-tokens Input", Input)
        tokens.focus()
        await pilot.press(*"2T")
        await pilot.pause()
        st = step_time(app.planner.plan)
        assert app.planner.plan.training.tokens == 2 * 10**12 and st.train_seconds is not None
        assert f"{fmt_seconds(st.train_seconds)}, {st.gpu_hours:,.0f} GPU-h" in shown()
        await pilot.press("escape", "2")
        price = app.planner.query_one("#f-hardware-price_per_gpu_hour Input", Input)
        price.focus()
        await pilot.press("3")
        await pilot.pause()
        st = step_time(app.planner.plan)
        assert app.planner.plan.hardware.price_per_gpu_hour == 3 and st.cost is not None
        assert f"cost {st.cost:,.0f}" in shown()
        await pilot.press("backspace")  # empty: unset again
        await pilot.pause()
        assert app.planner.plan.hardware.price_per_gpu_hour is None and "cost" not in shown()


def expected_brief(plan: Plan, value_changes: dict[str, Any]) -> str:
    """Memory and time of a changed plan, from a fresh estimate and step time (not tui.effects)."""
    new = plan.with_changes(value_changes)
    delta = (estimate(new).total - estimate(plan).total) / GiB
    memory = "same memory" if abs(delta) < 0.05 else f"{delta:+.1f} GiB"
    if estimate(new).fits != estimate(plan).fits:
        memory += " (fits)" if estimate(new).fits else " (over)"
    a, b = step_time(plan), step_time(new)
    r = (b.step_seconds / b.tokens_per_step) / (a.step_seconds / a.tokens_per_step)
    time = "same time" if abs(r - 1) < 0.005 else f"×{r:.1f} time" if r >= 2 else f"{(r - 1) * 100:+.0f}% time"
    return f"{memory}, {time}"


def effects_shown(app: VramplanApp, plan: Plan) -> int:
    """Each strategy choice's effect as the Strategies pane shows it, against a fresh estimate: how many."""
    shown = 0
    for key in EFFECT_KEYS:
        text = text_of(app, f"#f-{key.replace('.', '-')} .field-effect")
        parts = dict(part.split(": ", 1) for part in text.removeprefix("→ ").split(" · ") if part)
        for label, value in alternatives(plan, key):
            try:
                brief = expected_brief(plan, {key: value})
            except PlanError:  # an impossible choice: not shown (the note says why)
                assert label not in parts
                continue
            assert parts.get(label) == brief, (key, text)
            shown += 1
    return shown


async def test_each_strategy_choice_shows_its_re_estimated_effect() -> None:
    app = VramplanApp()
    async with app.run_test() as pilot:
        for _ in range(2):  # the default plan, then after a change
            await pilot.press("4")
            # shown after the frame (`Settled`): checked until they are this plan's
            assert await eventually(pilot, partial(effects_shown, app, app.planner.plan)) >= 10
            await pilot.press("c")


async def test_largest_sequence_length_is_shown_and_applies() -> None:
    """Issue 16.13: beside the largest micro-batch, the largest sequence length that fits as is, with the safety
    margin free (issue 32.1); enter takes it. Qwen2.5-7B: its preset states no trained context, so memory stops it."""
    plan = default_plan().with_changes({"model.preset": "qwen2.5-7b"})
    advice = advise(plan)
    best = advice.max_seq_len
    assert best > 2048 and advice.context_len is None
    assert advice.margin.keeps(estimate(plan.with_changes({"training.seq_len": best})))
    assert not advice.margin.keeps(estimate(plan.with_changes({"training.seq_len": best + 1})))
    app = VramplanApp(plan=plan)
    async with app.run_test(size=(100, 40)) as pilot:
        await show_checks(app, pilot)
        assert f"largest sequence length that fits as is: {best:,}" in row_text(app, "advice.seq_len")
        await highlight(app, pilot, "advice.seq_len")
        await pilot.press("enter")
        await pilot.pause()
        assert app.planner.plan == plan.with_changes({"training.seq_len": best})


async def test_largest_sequence_length_stops_at_the_trained_context() -> None:
    """Issue 32.1: LLaMA-7B fits far more than 2,048 tokens on 8 x A100-80GB; the row says the context caps it."""
    app = VramplanApp(plan=default_plan())
    async with app.run_test(size=(100, 40)) as pilot:
        await show_checks(app, pilot)
        text = " ".join(row_text(app, "advice.seq_len").split())
        assert "fits as is: 2,048 (capped at the model's 2,048-token context) (this plan's)" in text


async def test_f_restricts_the_advice_to_a_framework() -> None:
    """Issue 16.12 in the Checks pane: `f` cycles the advisor's framework (all, HF + DeepSpeed, FSDP, Megatron);
    the suggestions shown are then only plans that framework runs."""
    from vramplan.core.advice.frameworks import unsupported

    plan = default_plan().with_changes(
        {"model.preset": "bloom-7b1", "hardware.gpu": "a100-40gb", "hardware.gpus_per_node": 4, **OVER}
    )
    app = VramplanApp(plan=plan)
    async with app.run_test(size=(100, 40)) as pilot:
        await show_checks(app, pilot)
        pane = app.planner.query_one(ChecklistPane)
        assert pane.framework == "all" and "f: any framework" in str(pane.border_subtitle)
        await pilot.press("f")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert pane.framework == "hf-deepspeed" and "HF Trainer + DeepSpeed" in str(pane.border_subtitle)
        assert pane.advice is not None and pane.advice.suggestions
        for s in pane.advice.suggestions:
            assert not unsupported(plan.with_changes(s.changes), "hf-deepspeed"), s.title
        assert pane.advice.suggestions != advise(plan).suggestions  # TP + sequence parallel is gone
        assert pane.advice.suggestions[0].title in row_text(app, "advice.s0")
        for _ in range(2):  # -> Megatron-LM: the checklist's memory fix follows the framework too
            await pilot.press("f")
            await app.workers.wait_for_complete()
            await pilot.pause()
        assert pane.framework == "megatron" and pane.checklist is not None
        for e in (f := pane.checklist.item("oom.capacity")).alternatives + ((f.fix,) if f.fix else ()):
            assert not unsupported(e.plan, "megatron"), e.title
