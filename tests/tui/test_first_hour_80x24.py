"""Issue 40.6, the planner at 80x24 as a new user met it: the headline kept the GPU's name whole and cut the model's
(``Llama-3.1-7…`` for a 70B); hints and headings of the Training pane and an environment variable in the Checks pane
were cut mid-word; ``tab`` from Checks focused the gauges' column, whose ``↓`` scrolled the fits / does-not-fit
headline out of view; ``enter`` in the model filter picked the current model again when the filtered list kept it;
``q`` did not quit and the footer did not say how to. Each has a Pilot test and a snapshot (plain ``def``)."""

from __future__ import annotations

from typing import Any

import pytest
from textual.widgets import Input, Label

from vramplan.core.memory.peak import estimate
from vramplan.core.plan.schema.plan import default_plan
from vramplan.tui.app import VramplanApp
from vramplan.tui.widgets.bars import KindLegend
from vramplan.tui.widgets.checklist_pane import ChecklistList
from vramplan.tui.widgets.gauges import plan_summary

LLAMA_70B = {"model.preset": "llama-3.1-70b", "hardware.gpu": "h100-80gb", "hardware.gpus_per_node": 8}
TIGHT = {"training.micro_batch_size": 34}  # LLaMA-7B on 8 x A100 80GB: 79.0 GiB, 1% free (under fragmentation's 10%)


def test_the_summary_cuts_the_gpus_name_before_the_models() -> None:
    """33 columns: "Llama-3.1-70B full, 8 x " leaves 9 for "H100 80GB SXM5" (cut); the model stays whole."""
    line = plan_summary(estimate(default_plan().with_changes(LLAMA_70B)), 33)
    assert line == "Llama-3.1-70B full, 8 x H100 80G…"
    qwen = default_plan().with_changes({**LLAMA_70B, "model.preset": "qwen3-235b-a22b"})
    assert plan_summary(estimate(qwen), 33) == "Qwen3-235B-A22B full, 8 x H100 8…"  # the GPU keeps 7 columns


def test_70b_headline_80x24(snap_compare: Any) -> None:
    assert snap_compare(VramplanApp(plan=default_plan().with_changes(LLAMA_70B)), terminal_size=(80, 24))


@pytest.mark.parametrize("objective", ["sft", "dpo", "grpo", "ppo"])
async def test_training_hints_and_headings_show_whole_at_80x24(objective: str) -> None:
    """Every placeholder of the Training pane fits its field (``auto (published MFU by GPU)`` and ``DPO 0.1, GRPO 0,
    PPO 0.05`` did not: 23 columns), and a heading longer than the pane wraps at a space."""
    app = VramplanApp(plan=default_plan().with_changes({"training.objective": objective}))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("3")
        pane = await app.planner.pane_widget("training")
        await pilot.pause()
        shown = [i for i in pane.query(Input) if i.region.width]  # laid out: not in a row the objective hides
        assert len(shown) >= 5
        for field in shown:
            assert len(field.placeholder) <= field.content_size.width, field.placeholder
        for label in pane.query(".section").results(Label):
            assert label.region.right <= pane.content_region.right, str(label.render())
            lines = str(label.render()).split("\n") if label.content_size.height == 1 else []
            assert all(len(line) <= label.content_size.width for line in lines)
        if objective != "sft":  # the objective's own default, not every objective's
            beta = pane.query_one("#f-rl-beta Input", Input)
            assert (
                beta.placeholder
                == {"dpo": "0.1 (DPOConfig)", "grpo": "0 (GRPOConfig)", "ppo": "0.05 (PPOConfig)"}[objective]
            )


def test_training_rl_rows_80x24(snap_compare: Any) -> None:
    async def to_rl(pilot: Any) -> None:
        await pilot.press("3")
        await pilot.app.planner.pane_widget("training")
        await pilot.pause()
        heading = pilot.app.planner.query_one("#pane-training").query(".section").last()  # post-training (...)
        heading.scroll_visible(animate=False, top=True)
        await pilot.pause()

    app = VramplanApp(plan=default_plan().with_changes({"training.objective": "grpo"}))
    assert snap_compare(app, terminal_size=(80, 24), run_before=to_rl)


async def _show_capacity_item(pilot: Any) -> ChecklistList:
    await pilot.press("5")
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
    rows = pilot.app.planner.query_one(ChecklistList)
    rows.highlighted = next(i for i, o in enumerate(rows.options) if o.id == "oom.capacity")
    rows.scroll_to_highlight(top=True)
    await pilot.pause()
    return rows


async def test_the_checks_pane_shows_the_allocator_setting_whole_at_80x24() -> None:
    app = VramplanApp(plan=default_plan().with_changes(TIGHT))
    async with app.run_test(size=(80, 24)) as pilot:
        rows = await _show_capacity_item(pilot)
        text = str(rows.get_option("oom.capacity").prompt)
        lines = text.split("\n")
        assert any("PYTORCH_CUDA_ALLOC_CONF" in line.split() for line in lines), text
        assert any("expandable_segments:True," in line.split() for line in lines), text
        width = rows.scrollable_content_region.width
        assert all(len(line) <= width for line in lines)


def test_checks_allocator_setting_80x24(snap_compare: Any) -> None:
    async def shown(pilot: Any) -> None:
        await _show_capacity_item(pilot)

    app = VramplanApp(plan=default_plan().with_changes(TIGHT))
    assert snap_compare(app, terminal_size=(80, 24), run_before=shown)


async def test_tab_from_checks_reaches_the_legend_and_the_headline_stays_in_view() -> None:
    app = VramplanApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("5")
        await app.workers.wait_for_complete()
        await pilot.pause()
        await pilot.press("tab")
        await pilot.pause()
        assert isinstance(app.focused, KindLegend)  # not the column: its ↓ scrolled the headline away
        await pilot.press(*["down"] * 8)
        await pilot.pause()
        gauges = app.planner.query_one("#gauges")
        headline = app.planner.query_one("#headline")
        assert gauges.region.y <= headline.region.y < gauges.region.bottom and "fits" in str(headline.render())
        await pilot.press("tab")  # leaving the legend: the column back at its top
        await pilot.pause()
        assert gauges.scroll_y == 0


def test_tab_from_checks_then_down_80x24(snap_compare: Any) -> None:
    async def tabbed(pilot: Any) -> None:
        await pilot.press("5")
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        await pilot.press("tab", *["down"] * 8)
        await pilot.pause()

    assert snap_compare(VramplanApp(), terminal_size=(80, 24), run_before=tabbed)


async def test_enter_in_the_model_filter_picks_the_best_match_not_the_current_model() -> None:
    """The plan is Llama-3.1-70B; "70b" keeps it in the list (Llama-2-70B first): enter picks the first row."""
    app = VramplanApp(plan=default_plan().with_changes(LLAMA_70B))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("slash", "7", "0", "b")
        await pilot.pause()
        lst = app.planner.query_one("#model-list")
        first = lst.get_option_at_index(0).id  # type: ignore[attr-defined]
        assert first != "llama-3.1-70b" and lst.highlighted == 0  # type: ignore[attr-defined]
        await pilot.press("enter")
        await pilot.pause()
        assert app.planner.plan.model.preset == first


def test_model_filter_enter_80x24(snap_compare: Any) -> None:
    app = VramplanApp(plan=default_plan().with_changes(LLAMA_70B))
    assert snap_compare(app, terminal_size=(80, 24), press=["slash", "7", "0", "b"])


async def test_q_quits_where_no_text_field_has_the_focus() -> None:
    app = VramplanApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("slash", "q")  # in the model filter: a letter
        await pilot.pause()
        assert app.is_running and app.planner.query_one("#model-filter", Input).value == "q"
        await pilot.press("escape", "q")
        await pilot.pause()
        assert not app.is_running
    app = VramplanApp(plan=default_plan().with_changes({"training.micro_batch_size": 2}))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("c", "q")  # a change not exported: asks once, as ctrl+q does
        await pilot.pause()
        assert app.is_running and "again quits" in app.planner.notice
        await pilot.press("q")
        await pilot.pause()
        assert not app.is_running


async def test_the_hardware_pane_names_the_gpus_memory() -> None:
    """Issue 40.7: the RTX A6000's 768 GB/s is GDDR6, not HBM."""
    app = VramplanApp(plan=default_plan().with_changes({"hardware.gpu": "rtx-a6000"}))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("2")
        pane = await app.planner.pane_widget("hardware")
        await pilot.pause()
        details = str(pane.query_one("#gpu-details").render())
        assert "GDDR6 768 GB/s" in details and "HBM" not in details


async def test_the_legend_says_fsdp_for_a_plan_fsdp_shards() -> None:
    """Issue 40.7: the gauges' legend called an FSDP plan's gathered weights "ZeRO-3 gathered"."""
    app = VramplanApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        legend = str(app.planner.query_one(KindLegend).render())
        assert "FSDP gathered" in legend and "ZeRO-3" not in legend
        assert app.planner.apply_changes({"training.precision": "bf16-master"})  # DeepSpeed's ZeRO-3
        await pilot.pause()
        assert "ZeRO-3 gathered" in str(app.planner.query_one(KindLegend).render())
