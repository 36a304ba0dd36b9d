"""Opening a dialog or a view styles its own widgets only. Its rules are the screen's DEFAULT_CSS
(`vramplan.tui.screens.css`): with a ``CSS_PATH``, Textual parsed the app's whole stylesheet again and restyled
every widget of the planner the first time each dialog opened (44 ms for the planner's 142)."""

from __future__ import annotations

import pytest
from textual.css.stylesheet import Stylesheet
from textual.widget import Widget

from vramplan.tui.app import VramplanApp

DIALOGS = [  # the keys that open it, the screen, its box and the width its .tcss file gives that box
    (("ctrl+s",), "ExportScreen", ".dialog", 76),
    (("ctrl+o",), "OpenScreen", ".dialog", 76),
    (("question_mark",), "HelpScreen", "#help", 78),
    (("g",), "GpuGuideScreen", "#gpus", 80),
    (("P", "c", "d"), "CompareScreen", "#compare", 80),  # pin the plan, change it, compare
]


@pytest.mark.parametrize(("keys", "screen", "box", "width"), DIALOGS)
async def test_a_dialog_opens_without_restyling_the_planner(
    keys: tuple[str, ...], screen: str, box: str, width: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    restyled: list[str] = []
    for name in ("update", "reparse"):
        original = getattr(Stylesheet, name)

        def spy(self: Stylesheet, *args: object, _name: str = name, _original: object = original, **kw: object) -> None:
            restyled.append(_name)
            _original(self, *args, **kw)  # type: ignore[operator]

        monkeypatch.setattr(Stylesheet, name, spy)
    app = VramplanApp()
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.pause()
        await pilot.press(*keys)
        await pilot.pause()
        assert type(app.screen).__name__ == screen
        assert restyled == []  # no second parse of every rule, no new styles for the planner's widgets
        # the dialog's own rules apply: its box has the width its .tcss file gives it
        assert app.screen.query_one(box, Widget).styles.width.value == width  # type: ignore[union-attr]
        await pilot.press("escape")
        await pilot.pause()
        assert type(app.screen).__name__ == "PlannerScreen"
