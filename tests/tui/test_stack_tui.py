"""Pilot tests of the stack beside the hardware (`stack.framework`, the versions), `strategy.checkpoint_impl`, the
node's host memory and NVMe limits, and the estimate's expected error in the headline (issue 28)."""

from __future__ import annotations

from textual.widgets import Input

from tests.tui.conftest import figure, text_of
from tests.waiting import until
from vramplan.core.memory.peak import estimate
from vramplan.core.plan.helpers.units import GiB
from vramplan.core.plan.schema.plan import default_plan
from vramplan.core.plan.stack.config import FRAMEWORKS
from vramplan.tui.app import VramplanApp
from vramplan.tui.widgets.choice_bar import ChoiceBar
from vramplan.tui.widgets.gauges import error_margin, headroom_state

QLORA = {"training.method": "qlora"}


async def test_changing_the_framework_rechooses_the_stack_keys_and_the_estimate() -> None:
    app = VramplanApp(plan=default_plan().with_changes(QLORA))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("2")
        custom = app.planner.plan
        assert custom.stack.framework == "custom" and custom.training.lora_dtype == "fp32"
        bar = app.planner.query_one("#f-stack-framework ChoiceBar", ChoiceBar)
        bar.focus()
        # from custom (the last) round to torchtune, one key at a time: each is a plan the estimate follows
        for _ in range(FRAMEWORKS.index("torchtune") + 1):
            await pilot.press("right")
        await pilot.pause()
        plan = app.planner.plan
        assert plan.stack.framework == "torchtune"
        assert plan.training.lora_dtype == "bf16" and "training.lora_dtype" in plan.stack_chosen  # re-chosen
        assert plan == custom.with_changes({"stack.framework": "torchtune"})
        est, before = estimate(plan), estimate(custom)
        assert est.total < before.total  # bf16 adapters, their gradients and Adam states: smaller than fp32
        headline = text_of(app, "#headline")
        assert figure(est.total) in headline
        ee = est.expected_error
        assert ee != before.expected_error  # the torchtune runs, not the transformers family's
        assert f"± {ee.median_pct:.0f}% on {ee.n_cases} runs" in headline
        chose = text_of(app, "#stack-chose")
        assert chose.startswith("stack torchtune chose:") and "lora_dtype bf16" in chose
        assert bar.index == FRAMEWORKS.index("torchtune")


async def test_an_invalid_version_is_shown_at_its_field_and_the_plan_kept() -> None:
    app = VramplanApp(plan=default_plan().with_changes({"stack.framework": "hf-trainer"}))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("2")
        before = app.planner.plan
        assert before.strategy.checkpoint_impl == "non-reentrant"  # transformers unset: the newest (5.x)
        field = app.planner.query_one("#f-stack-transformers Input", Input)
        field.focus()
        await pilot.press(*"v4.40")  # no prefix of it is a version
        await pilot.pause()
        row = app.planner.query_one("#f-stack-transformers")
        assert row.has_class("-error")
        assert "not a version" in text_of(app, "#f-stack-transformers .field-error")
        assert app.planner.plan == before and field.value == "v4.40"  # kept, and what was typed stays to fix
        assert figure(estimate(before).total) in text_of(app, "#headline")
        assert app.planner.notice.startswith("✘ stack.transformers: not a version")
        await pilot.press("home", "delete")
        await pilot.pause()
        assert not row.has_class("-error")
        plan = app.planner.plan
        assert plan.stack.transformers == "4.40"
        assert plan.strategy.checkpoint_impl == "reentrant"  # transformers 4.38-4.57: use_reentrant=True
        assert "checkpoint_impl reentrant" in text_of(app, "#stack-chose")
        await pilot.press("ctrl+a", "ctrl+k")  # empty: unset again
        await pilot.pause()
        assert app.planner.plan.stack.transformers is None
        assert app.planner.plan.strategy.checkpoint_impl == "non-reentrant"


async def test_checkpoint_impl_is_set_and_unset_by_keyboard() -> None:
    app = VramplanApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("4", "tab")  # 4 focuses checkpointing; the implementation is the next control
        bar = app.planner.query_one("#f-strategy-checkpoint_impl ChoiceBar", ChoiceBar)
        assert app.focused is bar
        key = "strategy.checkpoint_impl"
        assert key in app.planner.plan.stack_chosen and bar.labels[bar.index] == "stack's"

        def effect() -> str:  # the pane shows the effects after the frame (`Settled`)
            return text_of(app, "#f-strategy-checkpoint_impl .field-effect")

        await until(pilot, lambda: "stack custom: non-reentrant" in effect(), "the stack's implementation")
        await pilot.press("right")
        await pilot.pause()
        plan = app.planner.plan
        assert plan.strategy.checkpoint_impl == "reentrant" and key not in plan.stack_chosen
        assert bar.labels[bar.index] == "reentrant"
        await until(pilot, lambda: "set in the plan" in effect(), "the plan's implementation")
        assert plan.dump()["strategy"]["checkpoint_impl"] == "reentrant"  # an export writes it as the user's
        await pilot.press("left")
        await pilot.pause()
        plan = app.planner.plan
        assert key in plan.stack_chosen and plan.strategy.checkpoint_impl == "non-reentrant"
        assert bar.labels[bar.index] == "stack's" and "checkpoint_impl" not in plan.dump()["strategy"]
        await pilot.press("c")  # checkpointing full -> none: the implementation no longer applies
        await until(pilot, lambda: "full checkpointing only" in effect(), "the note that it does not apply")


async def test_typed_host_memory_makes_an_offload_plan_fit_or_not() -> None:
    app = VramplanApp(plan=default_plan().with_changes({"strategy.offload_optimizer": "cpu"}))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("2")
        await pilot.pause()
        est = estimate(app.planner.plan)
        need_gib = est.cpu_per_node / GiB
        assert est.fits and est.node.host.bytes > est.cpu_per_node  # the typical node's share holds it
        row = "#f-hardware-host_memory_gib"
        assert "unset: typical node" in text_of(app, f"{row} .field-effect")
        field = app.planner.query_one(f"{row} Input", Input)
        assert field.placeholder.startswith(f"{est.node.host.bytes / GiB:.0f} (typical node")
        field.focus()
        small = int(need_gib // 2)
        await pilot.press(*str(small))
        plan = app.planner.plan
        assert plan.hardware.host_memory_gib == small
        assert not estimate(plan).fits and estimate(plan).gpu_fits
        assert text_of(app, "#headline").startswith("✘ does not fit in host RAM")
        assert f"over by {need_gib - small:.1f} GiB" in text_of(app, f"{row} .field-note")
        await pilot.press("ctrl+a", "ctrl+k", *str(int(need_gib) + 10))
        plan = app.planner.plan
        assert plan.hardware.host_memory_gib == int(need_gib) + 10 and estimate(plan).fits
        assert text_of(app, "#headline").startswith("✔ fits")
        note = app.planner.query_one(f"{row} .field-note")
        await until(pilot, lambda: not note.display, "the note hidden (the pane syncs after the frame)")
        await pilot.press("ctrl+a", "ctrl+k", "minus", "1")  # not a limit: the error at the field, the plan kept
        await pilot.pause()
        assert "greater than 0" in text_of(app, f"{row} .field-error")
        assert app.planner.plan == plan.with_changes({"hardware.host_memory_gib": None})  # emptied: unset, kept


async def test_the_headline_shows_the_expected_error_and_its_band() -> None:
    app = VramplanApp()
    async with app.run_test(size=(80, 24)) as pilot:
        ee = estimate(app.planner.plan).expected_error
        error = f"± {ee.median_pct:.0f}% on {ee.n_cases} runs"  # joins the headline after the first frame
        await until(pilot, lambda: error in text_of(app, "#headline"), "the expected error in the headline")
        # QLoRA under torchtune at 24 x 4096 tokens: 11 GiB free, less than its worst similar run's 37% under
        band = QLORA | {"stack.framework": "torchtune", "training.micro_batch_size": 24, "training.seq_len": 4096}
        assert app.planner.apply_changes(band)
        await pilot.pause()
        est = estimate(app.planner.plan)
        assert est.fits and headroom_state(est) == "band" and est.headroom < error_margin(est)
        headline = text_of(app, "#headline")
        worst = est.expected_error.worst_under_pct
        assert headline.startswith("! fits, within the error")
        assert f"up to {worst:.0f}% under: keep {error_margin(est) / GiB:.1f} GiB" in headline
        assert app.planner.query_one("#headline").has_class("-warn")
        assert max(len(line) for line in headline.splitlines()[1:]) <= 33  # the gauges' width at 80x24


async def test_the_stack_fields_at_40x12_no_color_and_from_the_palette(monkeypatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    app = VramplanApp()
    async with app.run_test(size=(40, 12)) as pilot:
        await pilot.press("2")
        app.planner.query_one("#f-stack-framework ChoiceBar").focus()
        await pilot.press("left")  # custom -> unsloth
        await pilot.pause()
        assert app.planner.plan.stack.framework == "unsloth"
        for package in ("torch", "transformers", "peft"):  # tab walks the versions in order
            await pilot.press("tab")
            assert app.focused is app.planner.query_one(f"#f-stack-{package} Input")
        await app.planner.run_action("edit_field('stack.bitsandbytes')")  # the palette's entry: the stack's pane
        await pilot.pause()
        assert app.planner.pane == "hardware"
        assert app.focused is app.planner.query_one("#f-stack-bitsandbytes Input")
        await pilot.press(*"0.43.1")
        await pilot.pause()
        assert app.planner.plan.stack.bitsandbytes == "0.43.1"


async def test_the_other_stack_keys_and_the_fsdp_version_have_fields_of_their_own() -> None:
    """LoRA dropout, the 4-bit linears, the bitsandbytes generation (Training pane) and the FSDP version and FSDP1
    adapter units (Strategies pane): each shows the stack's choice until set, by keyboard, in the plan."""
    app = VramplanApp(plan=default_plan().with_changes(QLORA))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("3")
        planner = app.planner
        for key in ("training.lora_dropout", "training.quantized_modules", "training.bnb_generation"):
            assert planner.query_one(f"#f-{key.replace('.', '-')}").display, key
        bar = planner.query_one("#f-training-bnb_generation ChoiceBar", ChoiceBar)
        bar.focus()
        await pilot.press("right", "right")  # stack's -> current -> legacy
        await pilot.pause()
        assert planner.plan.training.bnb_generation == "legacy"
        assert "training.bnb_generation" not in planner.plan.stack_chosen
        dropout = planner.query_one("#f-training-lora_dropout Input", Input)
        dropout.focus()
        await pilot.press(*"0.1")
        await pilot.pause()
        assert planner.plan.training.lora_dropout == 0.1
        bar.focus()  # out of the text field, where "4" is a digit
        await pilot.press("4")
        assert planner.query_one("#f-strategy-fsdp_version").display  # ZeRO-3 over 8 GPUs
        version = planner.query_one("#f-strategy-fsdp_version ChoiceBar", ChoiceBar)
        version.focus()
        await pilot.press("right")  # stack's -> 1
        await pilot.pause()
        assert planner.plan.strategy.fsdp_version == 1
        assert planner.query_one("#f-strategy-fsdp_adapter_wrap").display  # FSDP1 with LoRA
    full = VramplanApp(plan=default_plan())
    async with full.run_test(size=(80, 24)) as pilot:
        await pilot.press("3")
        assert not full.planner.query_one("#f-training-lora_dropout").display
