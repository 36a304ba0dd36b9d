"""Pilot tests of the GPU guide view (g), the pinned plan (P) in the gauges, and the compare view (d)."""

from __future__ import annotations

from textual.widgets import DataTable, Static

from tests.tui.conftest import text_of
from vramplan.core.advice.gpuguide import gpu_guide
from vramplan.core.advice.plandiff import plan_diff
from vramplan.core.memory.peak import estimate
from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.helpers.units import GiB
from vramplan.core.plan.schema.plan import default_plan
from vramplan.tui.app import VramplanApp
from vramplan.tui.command_table import palette_entries
from vramplan.tui.screens.gpu_guide import GpuGuideScreen
from vramplan.tui.screens.plan_compare import CompareScreen
from vramplan.tui.widgets.bars import StackedBar


async def test_pin_shows_the_pinned_plan_beside_the_edited_one() -> None:
    app = VramplanApp()
    async with app.run_test(size=(100, 32)) as pilot:
        await pilot.pause()
        gauges = app.planner.query_one("#gauges")
        assert not any(w.display for w in app.planner.query("#pinned"))  # built when first pinned
        pinned_plan = app.planner.plan
        await pilot.press("P")
        await pilot.pause()
        assert app.planner.pinned is not None and app.planner.pinned.plan == pinned_plan
        assert gauges.has_class("-pinned") and app.planner.query_one("#pinned-bar", StackedBar).display
        total = estimate(pinned_plan).total
        assert text_of(app, "#pinned").startswith(f"◆ pinned {total / GiB:.1f} GiB")
        assert "now: the same plan" in text_of(app, "#pinned")
        await pilot.press("z")  # ZeRO-3 -> the next stage: the edited plan changes, the pinned one stays
        await pilot.pause()
        edited = app.planner.plan
        assert edited != pinned_plan and app.planner.pinned.plan == pinned_plan
        delta = (estimate(edited).total - total) / GiB
        assert f"now {delta:+.1f} GiB" in text_of(app, "#pinned")
        bar = app.planner.query_one("#pinned-bar", StackedBar)
        assert sum(n for _, n in bar.segments) == total  # the pinned plan's bar: its own bytes
        await pilot.press("P")  # unpin
        await pilot.pause()
        assert app.planner.pinned is None and not gauges.has_class("-pinned")
        assert not app.planner.query_one("#pinned").display


async def test_compare_lists_the_differing_keys_and_deltas() -> None:
    app = VramplanApp()
    async with app.run_test(size=(100, 32)) as pilot:
        await pilot.press("d")  # nothing pinned: says how
        await pilot.pause()
        assert "pin a plan first" in app.planner.notice and not isinstance(app.screen, CompareScreen)
        await pilot.press("P", "z", "c")
        await pilot.pause()
        pinned, edited = app.planner.pinned.plan, app.planner.plan
        await pilot.press("d")
        await pilot.pause()
        assert isinstance(app.screen, CompareScreen)
        text = str(app.screen.query_one("#compare-text", Static).visual)
        d = plan_diff(pinned, edited)
        assert f"{len(d.keys)} keys differ (pinned -> now)" in text
        for k in d.keys:
            assert f"  {k.key}" in text and f"• {k.key}" in text  # listed, and its change alone
        total_line = next(line for line in text.splitlines() if line.strip().startswith("Total"))
        assert f"{(d.fb.total - d.fa.total) / GiB:+.1f}" in total_line
        assert "Step time" in text and "Parameters" in text
        await pilot.press("escape")
        await pilot.pause()
        assert not isinstance(app.screen, CompareScreen)


async def test_gpu_guide_lists_every_preset_and_enter_takes_a_gpu() -> None:
    app = VramplanApp()
    async with app.run_test(size=(100, 36)) as pilot:
        await pilot.press("g")
        await pilot.pause()
        assert isinstance(app.screen, GpuGuideScreen)
        await app.workers.wait_for_complete()
        await pilot.pause()
        screen = app.screen
        table = screen.query_one(DataTable)
        assert table.row_count == len(presets.registry().gpus)
        expected = gpu_guide(default_plan())
        first = screen.rows[0]
        same = next(r for r in expected.rows if r.gpu == first.gpu)
        assert (first.min_gpus, first.layout, first.step_seconds) == (same.min_gpus, same.layout, same.step_seconds)
        assert first.min_gpus is not None
        await pilot.press("s")  # by cost: no prices, so by time among equals; the order is the cost sort's
        await pilot.pause()
        assert screen.sort == "cost"
        await pilot.press("s")
        await pilot.pause()
        row = screen.rows[1]  # a row that fits (the default plan fits on every GPU)
        await pilot.press("down", "enter")
        await pilot.pause()
        assert not isinstance(app.screen, GpuGuideScreen)
        hw = app.planner.plan.hardware
        assert (hw.gpu, hw.gpus_per_node, hw.nodes) == (row.gpu, *row.layout)
        assert estimate(app.planner.plan).fits
        await pilot.press("ctrl+z")  # one undoable change
        await pilot.pause()
        assert app.planner.plan == default_plan()


async def test_palette_entries_for_the_new_views() -> None:
    app = VramplanApp()
    async with app.run_test() as pilot:
        entries = {e.text: e for e in palette_entries(app.planner)}
        for text in ("view: GPU guide (which GPU, how many)", "plan: pin (compare edits with it)", "plan: unpin"):
            assert text in entries
        await entries["plan: pin (compare edits with it)"].run()
        await pilot.pause()
        assert app.planner.pinned is not None
        await entries["plan: unpin"].run()
        await pilot.pause()
        assert app.planner.pinned is None
        await entries["view: compare with the pinned plan"].run()
        await pilot.pause()
        assert "pin a plan first" in app.planner.notice


async def test_pinned_plan_stays_when_another_file_opens(tmp_path) -> None:
    from vramplan.core.files.planio import load_plan_file

    other = tmp_path / "h100.toml"
    other.write_text('[model]\npreset = "llama-7b"\n[hardware]\ngpu = "h100-80gb"\ngpus_per_node = 4\n')
    app = VramplanApp()
    async with app.run_test(size=(100, 32)) as pilot:
        await pilot.press("P")
        app.planner.open_plan_file(load_plan_file(other))
        await pilot.pause()
        assert app.planner.pinned is not None and app.planner.pinned.plan == default_plan()
        assert app.planner.plan.hardware.gpu == "h100-80gb"
        await pilot.press("d")
        await pilot.pause()
        text = str(app.screen.query_one("#compare-text", Static).visual)
        assert "hardware.gpu" in text and "hardware.gpus_per_node" in text
        capacity = next(line for line in text.splitlines() if line.strip().startswith("GPU memory"))
        assert capacity.split()[-2:] == ["80.0", f"{presets.gpu('h100-80gb').memory_bytes / GiB:.1f}"]


async def test_a_user_gpu_named_like_markup_is_shown_as_typed(tmp_path, monkeypatch) -> None:
    import json

    hw = tmp_path / "cfg" / "hardware"
    hw.mkdir(parents=True)
    spec = presets.gpu("a100-80gb").model_dump(exclude={"id", "match", "name"})
    lines = [f"{k} = {json.dumps(v)}" for k, v in spec.items() if v is not None]
    (hw / "lab.toml").write_text("\n".join(['name = "Lab [/b] GPU"', *lines]))
    monkeypatch.setenv("VRAMPLAN_CONFIG_DIR", str(tmp_path / "cfg"))
    presets.reload()
    app = VramplanApp()
    async with app.run_test(size=(100, 36)) as pilot:
        await pilot.press("g")
        await app.workers.wait_for_complete()
        await pilot.pause()
        table = app.screen.query_one(DataTable)
        names = [str(table.get_row_at(i)[0]) for i in range(table.row_count)]
        assert "Lab [/b] GPU (u…" in names  # cut at 16 columns, never parsed as markup
