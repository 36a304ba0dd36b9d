"""The objective and its [rl] keys in the Training pane, by keyboard, at 80x24 (issue 30, point 5)."""

from __future__ import annotations

from textual.widgets import Input

from tests.tui.conftest import text_of
from vramplan.core.plan.schema.plan import default_plan
from vramplan.tui.app import VramplanApp
from vramplan.tui.widgets.choice_bar import ChoiceBar


def shown(app: VramplanApp, key: str) -> bool:
    return bool(app.planner.query_one(f"#f-{key.replace('.', '-')}").display)


async def test_an_sft_plan_shows_the_objective_alone() -> None:
    app = VramplanApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("3")
        await pilot.pause()
        assert shown(app, "training.objective")
        assert not shown(app, "rl.num_generations") and not shown(app, "rl.beta")
        assert not app.planner.query_one("#rl-details").display


async def test_choose_grpo_and_vllm_by_keyboard_and_see_the_phases() -> None:
    app = VramplanApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("3")
        bar = app.planner.query_one("#f-training-objective ChoiceBar", ChoiceBar)
        bar.focus()
        await pilot.press("right", "right")  # SFT -> DPO -> GRPO
        await pilot.pause()
        assert app.planner.plan.training.objective == "grpo"
        assert shown(app, "rl.num_generations") and shown(app, "rl.generation")
        assert not shown(app, "rl.max_length") and not shown(app, "rl.vllm_gpu_memory_utilization")
        details = text_of(app, "#rl-details")
        assert "generation" in details and "update" in details and "peak:" in details
        app.planner.query_one("#f-rl-generation ChoiceBar", ChoiceBar).focus()
        await pilot.press("right")  # hf -> vLLM colocate
        await pilot.pause()
        assert app.planner.plan.rl.generation == "vllm-colocate"
        assert shown(app, "rl.vllm_gpu_memory_utilization")
        field = app.planner.query_one("#f-rl-vllm_gpu_memory_utilization Input", Input)
        field.focus()
        await pilot.press(*"0.5")
        await pilot.pause()
        assert app.planner.plan.rl.vllm_gpu_memory_utilization == 0.5
        await pilot.press("backspace", "backspace", "backspace", *"1.5")
        await pilot.pause()
        assert "less than or equal to 1" in text_of(app, "#f-rl-vllm_gpu_memory_utilization .field-error")
        assert app.planner.plan.rl.vllm_gpu_memory_utilization == 1.0  # "1", the last valid value typed


async def test_a_dpo_plan_file_shows_its_keys() -> None:
    plan = default_plan().with_changes({"training.objective": "dpo", "rl.max_length": 2048})
    app = VramplanApp(plan=plan)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("3")
        await pilot.pause()
        assert shown(app, "rl.max_length") and not shown(app, "rl.generation")
        assert app.planner.query_one("#f-rl-max_length Input", Input).value == "2048"
        assert "scoring" in text_of(app, "#rl-details")


async def test_every_rl_key_has_a_row() -> None:
    from vramplan.core.plan.schema.rl import RLConfig

    app = VramplanApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("3")
        await pilot.pause()
        for name in RLConfig.model_fields:
            assert app.planner.query(f"#f-rl-{name}"), name


async def test_choose_pretraining_by_keyboard_and_adapters_are_struck() -> None:
    """Issue 43.3: Pretrain is the objective bar's first choice (left of SFT); a pretraining plan strikes LoRA and
    QLoRA from the method bar, saying why, and the gauges call it "pretrain"."""
    app = VramplanApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("3")
        app.planner.query_one("#f-training-objective ChoiceBar", ChoiceBar).focus()
        await pilot.press("left")  # SFT -> Pretrain
        await pilot.pause()
        assert app.planner.plan.training.objective == "pretrain"
        assert not shown(app, "rl.beta") and not app.planner.query_one("#rl-details").display
        method = app.planner.query_one("#f-training-method ChoiceBar", ChoiceBar)
        assert method.blocked == frozenset({1, 2})  # full, [LoRA], [QLoRA]
        note = text_of(app, "#f-training-method .field-note")
        assert "LoRA, QLoRA: pretraining trains every weight from scratch" in note
        assert text_of(app, "#plan-summary").startswith("LLaMA-7B pretrain, 8 x ")
