"""Pilot tests: drive the planner like a user and check the plan, the estimate and what the screen shows."""

from __future__ import annotations

import json
import re

from textual.widgets import Input

from tests.tui.conftest import figure, text_of
from tests.waiting import until
from vramplan.cli import parser as cli
from vramplan.core.memory.peak import estimate
from vramplan.core.plan.helpers.units import GiB
from vramplan.core.plan.schema.plan import default_plan
from vramplan.tui.app import VramplanApp
from vramplan.tui.widgets.bars import GLYPHS_NO_COLOR, KindLegend, StackedBar
from vramplan.tui.widgets.choice_bar import ChoiceBar
from vramplan.tui.widgets.preset_list import PresetList


async def test_starts_on_the_default_plan_with_the_cli_total(capsys) -> None:
    assert cli.run(["estimate", "--json"]) == 0
    total = json.loads(capsys.readouterr().out)["memory"]["per_gpu"]["total"]
    app = VramplanApp()
    async with app.run_test() as pilot:
        await pilot.pause()
        assert app.planner.plan == default_plan()
        headline = text_of(app, "#headline")
        assert headline.startswith("✔ fits")
        assert f"{total / GiB:.1f} / 80.0 GiB per GPU" in headline


async def test_pick_a_preset_by_typing_then_enter() -> None:
    app = VramplanApp()
    async with app.run_test() as pilot:
        await pilot.press("slash", *"bloom 7", "enter")
        await pilot.pause()
        plan = app.planner.plan
        assert plan.model.preset == "bloom-7b1"
        assert plan.model.model_type == "bloom"
        assert figure(estimate(plan).total) in text_of(app, "#headline")
        assert "BLOOM-7B1" in text_of(app, "#model-details")


async def test_pick_a_gpu_with_arrows_and_the_mouse() -> None:
    app = VramplanApp()
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("2", "home", "enter")  # 2 focuses the GPU list; its first row is the smallest GPU
        await pilot.pause()
        plan = app.planner.plan
        assert plan.hardware.gpu == "rtx-3070-8gb"
        est = estimate(plan)
        assert not est.fits
        assert text_of(app, "#headline").startswith(f"✘ does not fit by {-est.headroom / GiB:.1f} GiB")
        assert f"{est.total / GiB:.1f} / {est.gpu_capacity / GiB:.1f} GiB" in text_of(app, "#headline")
        gpus = app.planner.query_one("#gpu-list", PresetList)
        row = [o.id for o in gpus.options].index("a100-40gb") - gpus.scroll_offset.y
        await pilot.click(gpus, offset=(4, row))
        await pilot.pause()
        assert app.planner.plan.hardware.gpu == "a100-40gb"
        assert figure(estimate(app.planner.plan).total) in text_of(app, "#headline")


async def test_strategy_keys_update_the_gauge_to_the_estimate() -> None:
    app = VramplanApp()
    async with app.run_test() as pilot:
        before = app.planner.plan
        await pilot.press("z")  # ZeRO 3 -> 0 (the next stage that is possible: 0)
        await pilot.pause()
        plan = app.planner.plan
        assert plan.strategy.zero_stage == 0
        assert plan == before.with_changes({"strategy.zero_stage": 0})
        assert figure(estimate(plan).total) in text_of(app, "#headline")
        await pilot.press("c")  # checkpointing full -> none
        await pilot.pause()
        assert app.planner.plan.strategy.gradient_checkpointing == "none"
        assert figure(estimate(app.planner.plan).total) in text_of(app, "#headline")


async def test_click_a_strategy_choice() -> None:
    app = VramplanApp()
    async with app.run_test() as pilot:
        await pilot.press("4")
        bar = app.planner.query_one("#f-strategy-fused_cross_entropy ChoiceBar", ChoiceBar)
        assert bar.labels == ["off", "on"] and bar.index == 0
        await pilot.pause()  # the pane as shown: its effects and sync after the frame done, its layout settled
        await pilot.click(bar, offset=(7, 0))  # " off " then " on "
        await pilot.pause()
        plan = app.planner.plan
        assert plan.strategy.fused_cross_entropy is True
        assert bar.index == 1
        assert figure(estimate(plan).total) in text_of(app, "#headline")
        bar.focus()
        await pilot.press("left")  # keys move the choice too
        await pilot.pause()
        assert app.planner.plan.strategy.fused_cross_entropy is False


async def test_invalid_input_shows_an_inline_error_and_keeps_the_plan() -> None:
    app = VramplanApp()
    async with app.run_test() as pilot:
        await pilot.press("4")
        before = app.planner.plan
        field = app.planner.query_one("#f-strategy-tensor_parallel Input", Input)
        field.focus()
        await pilot.press("3")  # select_on_focus: replaces "1"
        await pilot.pause()
        row = app.planner.query_one("#f-strategy-tensor_parallel")
        assert row.has_class("-error")
        assert "8 GPUs are not divisible by tensor_parallel x pipeline_parallel = 3" in text_of(
            app, "#f-strategy-tensor_parallel .field-error"
        )
        assert app.planner.plan == before
        assert field.value == "3"  # what the user typed stays, to fix
        assert figure(estimate(before).total) in text_of(app, "#headline")
        await pilot.press("backspace", "2")
        await pilot.pause()
        assert not row.has_class("-error")
        assert app.planner.plan.strategy.tensor_parallel == 2


async def test_non_numbers_and_out_of_range_values_are_inline_errors() -> None:
    app = VramplanApp()
    async with app.run_test() as pilot:
        await pilot.press("3")
        before = app.planner.plan
        field = app.planner.query_one("#f-training-seq_len Input", Input)
        field.focus()
        await pilot.press("0")
        await pilot.pause()
        assert "greater than or equal to 1" in text_of(app, "#f-training-seq_len .field-error")
        await pilot.press("backspace")
        await pilot.pause()
        assert "enter a whole number" in text_of(app, "#f-training-seq_len .field-error")
        assert app.planner.plan == before


async def test_numeric_fields_take_what_the_cli_takes() -> None:
    """Issue 16.3: `4k` in sequence length is 4096 (it became 4: the integer input dropped the suffix), `32K`,
    `1e3`, `2_048` are read as the CLI reads them; anything else is an inline error and the plan is kept."""
    app = VramplanApp()
    async with app.run_test() as pilot:
        await pilot.press("3")
        field = app.planner.query_one("#f-training-seq_len Input", Input)
        field.focus()
        for typed, seq_len in (("4k", 4096), ("32K", 32768), ("1e3", 1000), ("2_048", 2048)):
            field.value = ""
            await pilot.press(*typed)
            await pilot.pause()
            assert field.value == typed and app.planner.plan.training.seq_len == seq_len, typed
        field.value = ""
        await pilot.press("4")
        await pilot.pause()
        before = app.planner.plan  # seq_len 4: the last valid value
        await pilot.press("x")
        await pilot.pause()
        assert field.value == "4x" and app.planner.plan == before
        assert "enter a number: 2048, 4k" in text_of(app, "#f-training-seq_len .field-error")
        micro = app.planner.query_one("#f-training-micro_batch_size Input", Input)
        micro.focus()
        micro.value = ""
        await pilot.press(*"2e0")
        await pilot.pause()
        assert app.planner.plan.training.micro_batch_size == 2


async def test_impossible_toggle_is_shown_next_to_its_control() -> None:
    app = VramplanApp()
    async with app.run_test() as pilot:
        await pilot.press("4")
        before = app.planner.plan
        await pilot.press("s")  # sequence parallel needs TP > 1
        await pilot.pause()
        assert app.planner.plan == before
        error = text_of(app, "#f-strategy-sequence_parallel .field-error")
        assert "set tensor_parallel > 1" in error
        assert "set tensor_parallel > 1" in text_of(app, "#notice")
        bar = app.planner.query_one("#f-strategy-sequence_parallel ChoiceBar", ChoiceBar)
        assert bar.index == 0 and bar.blocked == {1}  # "on" is struck through
        # the note next to the control says so before anyone tries
        assert "on: sequence parallelism" in text_of(app, "#f-strategy-sequence_parallel .field-note")


async def test_undo_and_redo() -> None:
    app = VramplanApp()
    async with app.run_test() as pilot:
        start = app.planner.plan
        await pilot.press("z", "c")
        await pilot.pause()
        changed = app.planner.plan
        assert changed != start
        await pilot.press("ctrl+z", "ctrl+z")
        await pilot.pause()
        assert app.planner.plan == start
        assert figure(estimate(start).total) in text_of(app, "#headline")
        await pilot.press("ctrl+y", "ctrl+y")
        await pilot.pause()
        assert app.planner.plan == changed


async def test_typing_a_number_is_one_undo_step() -> None:
    app = VramplanApp()
    async with app.run_test() as pilot:
        await pilot.press("3")
        start = app.planner.plan
        app.planner.query_one("#f-training-seq_len Input", Input).focus()
        await pilot.press(*"4096")
        await pilot.pause()
        assert app.planner.plan.training.seq_len == 4096
        await pilot.press("escape", "ctrl+z")
        await pilot.pause()
        assert app.planner.plan == start
        assert app.planner.query_one("#f-training-seq_len Input", Input).value == "2048"


async def test_resize_to_40x12_and_back() -> None:
    app = VramplanApp()
    async with app.run_test() as pilot:
        await pilot.resize_terminal(40, 12)
        await pilot.pause()
        assert app.planner.has_class("-narrow")
        await pilot.press("z", "4", "tab", "down")
        await pilot.pause()
        assert figure(estimate(app.planner.plan).total) in text_of(app, "#headline")
        await pilot.resize_terminal(160, 48)
        await pilot.pause()
        assert app.planner.has_class("-wide") and app.planner.has_class("-tall")
        panes = list(app.planner.query(".plan-pane, PlanPane"))
        assert all(p.display for p in panes if not p.SOLO)  # every pane at once; the checklist on its own (5)
        assert not any(p.display for p in panes if p.SOLO)
        await pilot.resize_terminal(80, 24)
        await pilot.pause()
        assert app.planner.has_class("-normal")


async def test_legend_selection_shows_formula_and_source() -> None:
    app = VramplanApp()
    async with app.run_test() as pilot:
        await pilot.press("e", "down", "down")
        await pilot.pause()
        legend = app.planner.query_one(KindLegend)
        assert legend.kind == "optimizer_states"
        comp = estimate(app.planner.plan).components["optimizer_states"]
        shown = text_of(app, "#explain")
        assert comp.formula in shown and comp.source in shown
        await pilot.press("end")
        await pilot.pause()
        assert legend.kind == "overhead"
        for term in estimate(app.planner.plan).overhead_terms:
            assert term.formula in text_of(app, "#explain")


async def test_host_ram_bar_when_offloading() -> None:
    app = VramplanApp()
    async with app.run_test() as pilot:
        await pilot.pause()
        assert not any(w.display for w in app.planner.query("#host"))  # not built until something is offloaded
        await pilot.press("o")  # offload the optimizer to the CPU
        await pilot.pause()
        est = estimate(app.planner.plan)
        assert app.planner.plan.strategy.offload_optimizer == "cpu"
        await until(pilot, lambda: app.planner.query("#host"), "the host RAM bar")  # built after the frame
        host = app.planner.query_one("#host")
        await until(pilot, lambda: host.has_class("-on") and host.display, "the host RAM bar shown")
        assert f"host RAM per node {est.cpu_per_node / GiB:.1f} GiB" in text_of(app, "#host-label")
        while app.planner.plan.strategy.offload_optimizer != "none":  # back to no offloading: the bar goes
            await pilot.press("o")
            await pilot.pause()
        await until(pilot, lambda: not host.has_class("-on") and not host.display, "the host RAM bar hidden")


async def test_plan_file_opens_and_errors_are_shown(tmp_plan) -> None:
    good = tmp_plan('[model]\npreset = "qwen2.5-7b"\n[training]\nseq_len = 1024\n')
    app = VramplanApp(plan_path=good)
    async with app.run_test() as pilot:
        await pilot.pause()
        assert app.planner.plan.model.preset == "qwen2.5-7b"
        assert app.planner.plan.training.seq_len == 1024
    bad = tmp_plan("[training]\nseq_len = 0\n[model]\npreset = 'llama-7b'\n", "bad.toml")
    app = VramplanApp(plan_path=bad)
    async with app.run_test() as pilot:
        await pilot.pause()
        assert app.planner.plan == default_plan()
        notice = text_of(app, "#notice")
        assert "bad.toml: training.seq_len" in notice and "default plan" in notice


async def test_command_palette_sets_a_strategy() -> None:
    app = VramplanApp()
    async with app.run_test() as pilot:
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*"strategy: ZeRO-1")
        await app.workers.wait_for_complete()  # the palette's search is a worker per keystroke
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        assert app.planner.plan.strategy.zero_stage == 1


async def test_help_lists_every_key_and_follows_the_keymap() -> None:
    from vramplan.tui.command_table import COMMANDS

    app = VramplanApp()
    app.set_keymap({"cycle_zero": "Z"})
    async with app.run_test(size=(80, 40)) as pilot:
        await pilot.press("question_mark")
        await pilot.pause()
        text = "\n".join(str(w.visual) for w in app.screen.query(".help-column"))
        for c in COMMANDS:
            if c.key:
                assert c.description in text
        assert re.search(r"^ Z +ZeRO stage", text, re.M)
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is app.planner


async def test_no_color_draws_a_pattern_per_kind(monkeypatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    app = VramplanApp()
    async with app.run_test() as pilot:
        await pilot.pause()
        assert app.no_color
        bar = str(app.planner.query_one("#gpu-bar", StackedBar).render()).splitlines()[0]
        live = estimate(app.planner.plan).live_at_peak
        for kind in live:  # every kind alive at the peak has its own glyph in the bar
            assert GLYPHS_NO_COLOR[kind] in bar, kind
        assert len({GLYPHS_NO_COLOR[k] for k in live}) == len(live)


async def test_theme_change_keeps_the_figures() -> None:
    app = VramplanApp()
    async with app.run_test() as pilot:
        before = text_of(app, "#headline")
        app.theme = "textual-light"
        await pilot.press("z")
        await pilot.pause()
        assert figure(estimate(app.planner.plan).total) in text_of(app, "#headline")
        assert text_of(app, "#headline") != before
        app.screen.query_one("#gpu-bar", StackedBar).render()  # draws with the light theme's colours


async def test_a_plan_file_with_toml_syntax_in_its_error_is_shown_verbatim(tmp_plan) -> None:
    path = tmp_plan("[training]\nseq_len = 4\n", "nomodel.toml")  # no [model] table
    app = VramplanApp(plan_path=path)
    async with app.run_test() as pilot:
        await pilot.pause()
        assert "missing [model] table" in text_of(app, "#notice")


async def test_wrapped_notes_leave_no_blank_lines_in_the_wide_layout() -> None:
    # An auto grid row was sized by its first column's width: a note spanning both columns got blank lines
    plan = default_plan().with_changes({"strategy.offload_optimizer": "cpu"})  # ZeRO "off" is then impossible
    app = VramplanApp(plan=plan)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        row = app.planner.query_one("#f-strategy-zero_stage")
        effect, note = row.query_one(".field-effect"), row.query_one(".field-note")
        assert note.display and "offload_optimizer" in str(note.visual)
        assert effect.region.height >= 1 and note.region.y == effect.region.bottom
        assert row.region.bottom == note.region.bottom


async def test_moe_model_shows_active_parameters_and_the_expert_parallel_control() -> None:
    """Issue 14: the Model pane gives total and active parameters of a mixture-of-experts model; Strategies shows
    the expert-parallel control for it (not for a dense model) and setting it changes the plan."""
    app = VramplanApp()
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.press("4")
        await pilot.pause()
        ep = app.planner.query_one("#f-strategy-expert_parallel")
        assert not ep.display  # LLaMA-7B: dense
        app.planner.apply_changes({"model.preset": "mixtral-8x7b"})
        await until(pilot, lambda: ep.display, "the expert-parallel control (the pane syncs after the frame)")
        app.planner.apply_changes({"strategy.expert_parallel": 8})
        await pilot.pause()
        assert app.planner.plan.strategy.expert_parallel == 8
        await pilot.press("1")
        await pilot.pause()
        assert "46.70 B params, 12.88 B active (top-2 of 8 experts)" in text_of(app, "#model-details")


async def test_moe_experts_path_is_a_strategy_with_its_effect() -> None:
    """Issue 14: how the experts run (transformers' grouped_mm, the per-expert loop, batched_mm) is a Strategies
    control for a mixture-of-experts model, with the memory each other choice would take; by keyboard."""
    mixtral = {"model.preset": "mixtral-8x7b", "hardware.gpus_per_node": 8, "strategy.gradient_checkpointing": "none"}
    app = VramplanApp(plan=default_plan().with_changes(mixtral))
    async with app.run_test(size=(100, 40)) as pilot:
        await pilot.press("4")
        await pilot.pause()
        row = app.planner.query_one("#f-strategy-experts")
        assert row.display

        def effect() -> str:  # shown after the frame (`Settled`)
            return str(row.query_one(".field-effect").visual)

        await until(pilot, lambda: "loop:" in effect() and "batched:" in effect(), "the experts' effects")
        before = estimate(app.planner.plan).total
        app.planner.set_focus(row.query_one(ChoiceBar))
        await pilot.press("right")
        await pilot.pause()
        plan = app.planner.plan
        assert plan.strategy.experts == "loop"
        assert estimate(plan).total != before
        assert figure(estimate(plan).total) in text_of(app, "#headline")
        app.planner.apply_changes({"model.preset": "llama-7b", "strategy.experts": "grouped"})
        await until(pilot, lambda: not row.display, "the experts' row hidden")  # a dense model has no experts


async def test_moe_experts_are_named_under_the_legend() -> None:
    """Issue 14: the legend names a mixture-of-experts model's routed experts and how expert parallelism divides
    them; a dense model has no such line."""
    app = VramplanApp()
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        legend = app.planner.query_one(KindLegend)
        assert "experts" not in str(legend.render())  # LLaMA-7B: dense
        app.planner.apply_changes({"model.preset": "mixtral-8x7b", "strategy.expert_parallel": 8})
        await pilot.pause()
        text = str(legend.render())
        assert "experts 45.10 B of 46.70 B, 1/8 per GPU (EP 8)" in text, text


async def test_setting_keys_cycle_from_a_list_and_type_their_letter_in_a_text_field() -> None:
    """c z a i x (and the other setting keys) are priority bindings (run before the focused widget sees them, for
    speed): from the preset list they change the plan; in a text field they are letters and the plan is kept."""
    app = VramplanApp()
    async with app.run_test() as pilot:
        await pilot.pause()
        plan = app.planner.plan
        await pilot.press("c")  # the preset list has the focus: full checkpointing -> the next choice
        assert app.planner.plan.strategy.gradient_checkpointing != plan.strategy.gradient_checkpointing
        assert figure(estimate(app.planner.plan).total) in text_of(app, "#headline")
        changed = app.planner.plan
        await pilot.press("slash", *"czaixopsrm")
        await pilot.pause()
        assert app.planner.query_one("#model-filter", Input).value == "czaixopsrm"
        assert app.planner.plan == changed
