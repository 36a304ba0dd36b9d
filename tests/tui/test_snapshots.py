"""Snapshots of the planner (pytest-textual-snapshot; update with ``pytest --snapshot-update`` after checking the
report). Deterministic: no clock, the focus on a list (no blinking cursor), notifications off in tests."""

from __future__ import annotations

from tests.tui.conftest import advised, text_of
from tests.waiting import until
from vramplan.core.plan.schema.plan import default_plan
from vramplan.tui.app import VramplanApp

OVER_CAPACITY = {"strategy.zero_stage": 0, "strategy.gradient_checkpointing": "none"}


async def show_strategies(pilot) -> None:
    """The Strategies pane, with each choice's effect (the pane shows them after its frame: `Settled`)."""
    await pilot.press("4")
    await until(pilot, lambda: text_of(pilot.app, "#f-strategy-zero_stage .field-effect"), "the effects")


def test_main_80x24(snap_compare) -> None:
    assert snap_compare(VramplanApp(), terminal_size=(80, 24))


def test_main_160x48(snap_compare) -> None:
    assert snap_compare(VramplanApp(), terminal_size=(160, 48))


def test_over_capacity_80x24(snap_compare) -> None:
    app = VramplanApp(plan=default_plan().with_changes(OVER_CAPACITY))
    assert snap_compare(app, terminal_size=(80, 24), run_before=show_strategies)


def test_help_80x24(snap_compare) -> None:
    """Every key shows at 80x24, down to the last (m, the method), with the palette tip under them."""
    assert snap_compare(VramplanApp(), terminal_size=(80, 24), press=["question_mark"])


def test_help_scrolled_to_its_last_key_80x16(snap_compare) -> None:
    """A shorter terminal: the keys scroll (end), the subtitle says so, the last key and the tip show."""
    assert snap_compare(VramplanApp(), terminal_size=(80, 16), press=["question_mark", "end"])


def test_main_no_color_80x24(snap_compare, monkeypatch) -> None:
    """NO_COLOR: the whole footer (every footer key, then ^p all commands); a pattern per kind in the bar, repeated
    by the legend (P parameters, G gradients, O optimizer states, T temporaries, X overhead)."""
    monkeypatch.setenv("NO_COLOR", "1")
    assert snap_compare(VramplanApp(), terminal_size=(80, 24))


def test_over_capacity_no_color_80x24(snap_compare, monkeypatch) -> None:
    """NO_COLOR over capacity: activations (A) join the bar's letters, past the ┃ limit too."""
    monkeypatch.setenv("NO_COLOR", "1")
    app = VramplanApp(plan=default_plan().with_changes(OVER_CAPACITY))
    assert snap_compare(app, terminal_size=(80, 24), run_before=show_strategies)


def test_narrow_40x12(snap_compare) -> None:
    assert snap_compare(VramplanApp(), terminal_size=(40, 12))


def test_checklist_and_advisor_80x24(snap_compare) -> None:
    async def show_checks(pilot) -> None:  # judged after the frame, advised in a worker: wait for its rows
        await pilot.press("5")
        await until(pilot, lambda: advised(pilot.app), "the fit advisor's rows")

    app = VramplanApp(plan=default_plan().with_changes(OVER_CAPACITY))
    assert snap_compare(app, terminal_size=(80, 24), run_before=show_checks)


def test_pinned_plan_80x24(snap_compare) -> None:
    """The pinned plan (P) above the edited one: its total, step time and bar, and the change from it."""
    assert snap_compare(VramplanApp(), terminal_size=(80, 24), press=["P", "z"])
