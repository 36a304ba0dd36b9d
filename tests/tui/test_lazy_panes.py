"""Issue 16, speed: the panes a screen does not show are not built before the first frame (at 80x24 the app shows
one pane at a time), and each is built when first shown (a pane key, a tab, the palette's field commands, a
resize to the layout that shows every pane); a strategy key's first frame does not wait for a layout pass."""

from __future__ import annotations

from textual.widgets import Input

from tests.waiting import until
from vramplan.tui.app import VramplanApp
from vramplan.tui.screens.planner import PANES, pane_class
from vramplan.tui.widgets.fields import PlanPane


def built(app: VramplanApp) -> set[str]:
    return {(p.id or "").removeprefix("pane-") for p in app.planner.query(PlanPane)}


async def test_at_80x24_only_the_shown_pane_is_built_and_a_pane_key_builds_and_focuses_its_pane() -> None:
    app = VramplanApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert built(app) == {"model"}
        await pilot.press("4")  # Strategies: built on the key, its first control focused at once
        await pilot.pause()
        assert built(app) == {"model", "strategy"}
        focused = app.focused
        assert focused is not None and app.planner.query_one("#pane-strategy") in focused.ancestors
        await pilot.press("c")  # the plan's change shows in the new pane, and in the one built before
        ckpt = app.planner.query_one("#f-strategy-gradient_checkpointing ChoiceBar")
        await until(pilot, lambda: "[full]" not in str(ckpt.render()), "the pane's sync")  # after the frame
        await pilot.press("2")
        await pilot.pause()
        assert built(app) == {"model", "hardware", "strategy"}
        order = [p.id for p in app.planner.query_one("#editor").query_children(PlanPane)]
        assert order == ["pane-model", "pane-hardware", "pane-strategy"]  # mounted in tab order


async def test_the_palette_field_command_builds_the_pane_and_puts_the_cursor_in_the_field() -> None:
    app = VramplanApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert "training" not in built(app)
        await app.planner.run_action("edit_field('training.seq_len')")
        await pilot.pause()
        assert app.focused is app.planner.query_one("#f-training-seq_len Input", Input)


async def test_the_wide_layout_builds_every_pane_it_shows() -> None:
    app = VramplanApp()
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        assert built(app) == {pid for pid, *_ in PANES if not pane_class(pid).SOLO}
    app = VramplanApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await pilot.resize_terminal(160, 48)
        await pilot.pause()
        await pilot.pause()
        assert built(app) == {pid for pid, *_ in PANES if not pane_class(pid).SOLO}
        order = [p.id for p in app.planner.query_one("#editor").query_children(PlanPane)]
        assert order == [f"pane-{pid}" for pid, *_ in PANES if not pane_class(pid).SOLO]
