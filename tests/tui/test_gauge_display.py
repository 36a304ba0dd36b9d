"""What the gauges and panes draw (Pilot): legend columns from 100 GiB up, the axis when
over capacity, the ChoiceBar's current choice without colour, the headline's state by headroom, the step-time
table after a resize, pane keys focusing the pane's first control."""

from __future__ import annotations

import re

from tests.waiting import eventually, until
from vramplan.core.memory.peak import estimate
from vramplan.core.plan.helpers.units import GiB
from vramplan.core.plan.schema.plan import default_plan
from vramplan.tui.app import VramplanApp
from vramplan.tui.widgets.bars import KindLegend, StackedBar

HUGE = default_plan().with_changes(
    {"model.preset": "qwen2.5-72b", "strategy.zero_stage": 0, "strategy.gradient_checkpointing": "none"}
)


async def test_legend_columns_stay_apart_from_100_gib_and_the_axis_reads_right_over_capacity() -> None:
    est = estimate(HUGE)
    assert est.per_gpu()["parameters"] >= 100 * GiB and not est.fits
    app = VramplanApp(plan=HUGE)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        legend = str(app.planner.query_one(KindLegend).render())
        params = next(line for line in legend.splitlines() if "Parameters" in line)
        assert re.search(r"Parameters\s+\d{3}\.\d\d\s+\d{3}\.\d\d$", params), params
        axis = str(app.planner.query_one("#gpu-bar", StackedBar).render()).splitlines()[-1]
        assert axis.startswith("0 ") and f"{est.gpu_capacity / GiB:.1f} GiB ┘" in axis, axis


async def test_the_current_choice_reads_without_colour(monkeypatch) -> None:
    """Issue 16.9: the ChoiceBar's current choice was only a background shade: under NO_COLOR or in copied text it
    was invisible. It is bracketed; the others are not."""
    monkeypatch.setenv("NO_COLOR", "1")
    app = VramplanApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("4")
        await pilot.pause()
        ckpt = app.planner.query_one("#f-strategy-gradient_checkpointing ChoiceBar")
        text = str(ckpt.render())
        assert "[full]" in text and " none " in text and "[none]" not in text
        await pilot.press("c")  # cycle checkpointing: the brackets follow (the pane syncs after the frame)
        await until(pilot, lambda: "[full]" not in str(ckpt.render()), "the pane's sync")
        assert str(ckpt.render()).count("[") == 1


def screen_rows(app: VramplanApp) -> list[str]:
    """The screen's text, row by row, read from the app's own SVG screenshot (what a terminal shows)."""
    import html

    svg = app.export_screenshot()
    rows: dict[float, list[tuple[float, str]]] = {}
    for m in re.finditer(r'<text[^>]*x="([\d.]+)"[^>]*y="([\d.]+)"[^>]*>(.*?)</text>', svg):
        rows.setdefault(float(m.group(2)), []).append((float(m.group(1)), html.unescape(m.group(3))))
    out = []
    for y in sorted(rows):
        line = ""
        for x, text in sorted(rows[y]):
            line = line.ljust(round(x / 12.2)) + text
        out.append(line.replace("\xa0", " "))
    return out


async def test_no_stray_character_after_the_cut_footer() -> None:
    """Issue 16.6: at 80 columns the footer is cut and a letter of a hidden key showed after the palette key
    (`^p paletteO`). The footer now fits (issue 32): the palette key, labelled for the commands it holds, ends it."""
    app = VramplanApp()
    async with app.run_test(size=(80, 24)) as pilot:

        def footer_ends_with_the_palette_key() -> None:  # the footer is composed again after a frame
            last = screen_rows(app)[-1]
            assert re.search(r"\^p all commands\s*$", last), last

        await eventually(pilot, footer_ends_with_the_palette_key)


async def test_the_headline_follows_the_headroom() -> None:
    """Issue 16.11: green only with a comfortable margin; amber (and `! fits, tight`) below 10% free, the
    checklist's fragmentation warning; red over capacity. The words say it without colour."""
    for micro, state, words in ((20, "", "✔ fits"), (32, "-warn", "! fits, tight"), (36, "-over", "✘ does not fit")):
        plan = default_plan().with_changes({"training.micro_batch_size": micro})
        app = VramplanApp(plan=plan)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            head = app.planner.query_one("#headline")
            assert str(head.visual).startswith(words), (micro, str(head.visual))
            assert head.has_class("-warn") == (state == "-warn") and head.has_class("-over") == (state == "-over")


async def test_the_step_time_table_is_filled_after_growing_the_terminal() -> None:
    """Issue 16.5: after a resize from 80x24 to 160x48 the step-time table was empty until the next plan change."""
    app = VramplanApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.resize_terminal(160, 48)
        await pilot.pause()
        await pilot.pause()
        terms = app.planner.query_one("#time-terms")
        lines = str(terms.visual).splitlines()
        assert terms.display and len(lines) > 3 and "step" in lines[0]
        assert terms.region.height >= len(lines)  # it was 1: the table cut to its header


async def test_quit_with_an_unsaved_changed_plan_asks_once() -> None:
    """Issue 16.18: ctrl+q with a changed plan not exported as TOML asks once; the second ctrl+q quits. An
    unchanged plan quits at once."""
    app = VramplanApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("z")
        await pilot.pause()
        await pilot.press("ctrl+q")
        await pilot.pause()
        assert app.is_running and "ctrl+q again quits" in str(app.planner.query_one("#notice").visual)
        await pilot.press("ctrl+q")
        await pilot.pause()
        assert not app.is_running
    fresh = VramplanApp()
    async with fresh.run_test(size=(80, 24)) as pilot:
        await pilot.press("ctrl+q")
        await pilot.pause()
        assert not fresh.is_running


async def test_pane_keys_focus_the_panes_first_control() -> None:
    """Issue 16.10: `2` then arrows changes the GPU at once (the pane key focused the pane, not a control);
    `4` focuses the first choice bar, whose right arrow changes it; digits stay commands."""
    from vramplan.tui.widgets.choice_bar import ChoiceBar
    from vramplan.tui.widgets.preset_list import PresetList

    app = VramplanApp()
    async with app.run_test(size=(80, 24)) as pilot:
        before = app.planner.plan
        await pilot.press("2")
        await pilot.pause()
        assert isinstance(app.planner.focused, PresetList)
        await pilot.press("down", "enter")
        await pilot.pause()
        assert app.planner.plan.hardware.gpu != before.hardware.gpu
        await pilot.press("4")
        await pilot.pause()
        bar = app.planner.focused
        assert isinstance(bar, ChoiceBar) and bar.has_focus
        await pilot.press("3")  # still a pane key, not typed anywhere
        await pilot.pause()
        assert app.planner.pane == "training"


async def test_an_unknown_gpus_step_time_is_marked_assumed() -> None:
    """Issue 16.7 in the planner: a detected GPU without a preset has placeholder figures; the step time says so."""
    from vramplan.core.plan.catalogue import presets
    from vramplan.core.plan.catalogue.gpu_match import custom_spec

    spec = custom_spec("NVIDIA L4", 23034)
    presets.register_gpu(spec, origin="detected")
    try:
        app = VramplanApp(plan=default_plan().with_changes({"hardware.gpu": spec.id}))
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.pause()
            text = str(app.planner.query_one("#step-time").visual)
            assert "(assumed GPU figures)" in text and "add a hardware preset" in text
    finally:
        presets.reload()


async def test_the_palette_reaches_numeric_settings() -> None:
    """Issue 16.15: `micro`, `seq`, `rank`, `gpus per node` in the palette open the field; typing sets it."""
    from textual.widgets import Input

    app = VramplanApp(plan=default_plan().with_changes({"training.method": "lora"}))
    async with app.run_test(size=(80, 24)) as pilot:  # one app, the palette opened from each field in turn
        for query, key in (("micro", "training.micro_batch_size"), ("seq", "training.seq_len"),
                           ("rank", "training.lora_rank"), ("gpus per node", "hardware.gpus_per_node")):  # fmt: skip
            await pilot.press("ctrl+p", *query)
            await app.workers.wait_for_complete()  # the palette's search is a worker per keystroke
            await pilot.pause()
            await pilot.press("enter")
            await pilot.pause()
            focused = app.planner.focused
            assert isinstance(focused, Input) and focused.parent is not None, query
            assert focused.parent.parent.id == "f-" + key.replace(".", "-"), (query, focused.parent.parent.id)


async def test_strategy_effects_and_notes_wrap_at_80x24() -> None:
    """Issue 16.18: at 80x24 the strategy effects and notes ended in "…" (cut); they wrap instead."""
    app = VramplanApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("4")
        await pilot.pause()
        shown = [w for w in app.planner.query("#pane-strategy .field-effect, #pane-strategy .field-note") if w.display]
        assert shown
        for w in shown:
            lines = w.render_lines(w.region.reset_offset)  # what the widget draws, line by line
            drawn = "".join(seg.text for line in lines for seg in line)
            assert "…" not in drawn, str(w.visual)


async def test_the_verdict_stays_in_view_while_explaining() -> None:
    """Issue 16.18: `e` at 80x24 scrolled the verdict off the gauges column; it stays at the top of it."""
    app = VramplanApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("e")

        def in_view() -> None:  # the explanation is scrolled into view after the frame that lays it out
            rows = screen_rows(app)
            assert any("✔ fits" in row for row in rows), "\\n".join(rows)
            assert any("Parameters: 3.14 GiB at the" in row for row in rows)  # the explanation is shown too

        await eventually(pilot, in_view)
        await pilot.press("1")  # focus leaves the legend: the column is as before
        await until(pilot, lambda: not app.planner.query_one("#gauges").has_class("-explaining"), "the column back")
