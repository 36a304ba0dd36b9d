"""Issue 32.5, the planner at 80x24: every footer key shows, every help key can be reached, preset names abbreviate
to unique names, and without colour the bar's kinds are told apart by letters the legend repeats."""

from __future__ import annotations

import pytest
from textual.widgets import Static
from textual.widgets._footer import FooterKey

from tests.waiting import eventually, until
from vramplan.core.memory.peak import estimate
from vramplan.core.plan.schema.plan import default_plan
from vramplan.tui.app import VramplanApp
from vramplan.tui.command_table import COMMANDS
from vramplan.tui.names import abbreviated, gpu_names, model_names, short_gpu, short_model
from vramplan.tui.widgets.bars import GLYPHS_NO_COLOR, KindLegend, StackedBar
from vramplan.tui.widgets.gauges import plan_summary


async def test_every_footer_key_shows_whole_at_80x24() -> None:
    app = VramplanApp()
    async with app.run_test(size=(80, 24)) as pilot:

        def every_key_whole() -> None:  # the footer is composed again after a frame, then laid out
            keys = list(app.planner.query(FooterKey))
            palette = next((k for k in keys if k.has_class("-command-palette")), None)
            assert palette is not None, keys
            shown = [k for k in keys if k is not palette]
            assert len(shown) == sum(c.footer for c in COMMANDS) == 7
            for key in shown:  # whole, left of the palette key docked at the right
                region = key.region
                assert region.width >= len(key.description) + 2, key.description
                assert region.right <= palette.region.x <= 80 - len("^p all commands"), key.description
            assert "all commands" in palette.description

        await eventually(pilot, every_key_whole)


async def test_every_help_key_shows_at_80x24() -> None:
    app = VramplanApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        box = app.screen.query_one("#help")
        assert box.max_scroll_y == 0 and box.border_subtitle == "t: pages · esc closes"
        tip = app.screen.query_one("#help-tip")
        assert tip.region.bottom <= box.region.bottom - 1  # inside the border: the last line of the box shows


async def test_help_scrolls_to_its_last_key_when_short() -> None:
    app = VramplanApp()
    async with app.run_test(size=(80, 14)) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        box = app.screen.query_one("#help")
        assert box.max_scroll_y > 0 and "more keys" in str(box.border_subtitle)
        last = app.screen.query_one("#help-1", Static)
        assert last.region.bottom > box.region.bottom  # Quit, the last key, below the fold
        await pilot.press("end")
        await until(pilot, lambda: box.scroll_y == box.max_scroll_y, "the keys at their end")
        # the last key's line is now inside the box (its content region, scrolled)
        quit_y = last.region.y + str(last.visual).splitlines().index(" ctrl+q    Quit") - int(box.scroll_y)
        assert box.region.y < quit_y < box.region.bottom - 1


def test_a_long_name_loses_vendor_parentheses_and_common_words_only_as_needed() -> None:
    assert short_gpu("NVIDIA RTX 6000 Ada Generation", 16) == "RTX 6000 Ada"
    assert short_gpu("NVIDIA GH200 480GB (96 GB HBM3)", 16) == "GH200 480GB"
    assert short_gpu("AMD Instinct MI250X (one GCD)", 16) == "MI250X (one GCD)"  # fits: kept whole
    assert short_gpu("NVIDIA H100 80GB SXM5", 16) == "H100 80GB SXM5"
    assert short_gpu("NVIDIA H100 80GB SXM5", 12) == "H100 80GB…"  # cut after a whole word
    assert short_model("Gemma-3-27B (text)", 14) == "Gemma-3-27B"


def test_a_step_that_would_make_two_names_alike_is_not_taken() -> None:
    names = ("Card X (fast)", "Card X", "Card Y")
    assert abbreviated("Card X (fast)", names, 12) == "Card X (fas…"  # not "Card X": another preset's name
    assert abbreviated("Llama-3.1-70B", ("Llama-3.1-8B", "Llama-3.1-70B", "Llama-3.1-405B"), 10) == "Llama-3…0B"


@pytest.mark.parametrize("width", [8, 10, 12, 14, 16])
def test_every_preset_name_stays_unique_and_fits(width: int) -> None:
    for names, short in ((gpu_names(), short_gpu), (model_names(), short_model)):
        out = [short(n, width) for n in names]
        assert all(len(o) <= width for o in out), [o for o in out if len(o) > width]
        assert len(set(out)) == len(out), sorted(o for o in out if out.count(o) > 1)


def test_the_summary_fits_the_gauges_at_80x24() -> None:
    plan = default_plan().with_changes(
        {
            "model.preset": "qwen1.5-moe-a2.7b",
            "hardware.gpu": "rtx-6000-ada",
            "training.method": "qlora",
            "hardware.gpus_per_node": 8,
            "hardware.nodes": 2,
        }
    )
    line = plan_summary(estimate(plan), 33)
    assert len(line) <= 33 and " QLoRA r8, 16 x RTX 6000" in line, line
    assert plan_summary(estimate(plan), 80) == "Qwen1.5-MoE-A2.7B QLoRA r8, 16 x RTX 6000 Ada Generation"
    assert plan_summary(estimate(default_plan()), 33) == "LLaMA-7B full, 8 x A100 80GB SXM4"


async def test_no_color_bar_letters_are_the_legend_s(monkeypatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    app = VramplanApp(plan=default_plan().with_changes({"strategy.gradient_checkpointing": "none"}))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        bar = str(app.planner.query_one("#gpu-bar", StackedBar).render()).splitlines()[0]
        legend = str(app.planner.query_one(KindLegend).render()).splitlines()[1:]
        letters = {row[0] for row in legend if row.strip()}
        in_bar = set(bar) - {"·", "┃"}
        assert len(in_bar) >= 4 and in_bar <= letters, (bar, legend)
        assert all(g.isalpha() for g in in_bar)
    assert len(set(GLYPHS_NO_COLOR.values())) == len(GLYPHS_NO_COLOR)


def test_the_planners_costs_name_their_currency() -> None:
    """Issue 32.6: the cost the planner shows (training pane, GPU guide) says it is USD, as the CLI does."""
    from vramplan.core.time.step import step_time
    from vramplan.tui.screens.gpu_guide import HEADER
    from vramplan.tui.time_text import train_line

    plan = default_plan().with_changes({"training.tokens": "2T", "hardware.price_per_gpu_hour": 2})
    assert train_line(step_time(plan)).plain.endswith(" USD")
    assert "cost USD" in HEADER
