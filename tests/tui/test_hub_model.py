"""The Model pane takes a Hugging Face id as --model does: typed in the filter, enter: the Hub cache's config.json,
else the preset that names it; an id nothing stands for is said next to the list and the plan kept."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Input

from tests.core.plan.test_hub_ids import REPO, fake_cache
from tests.tui.conftest import text_of
from vramplan.tui.app import VramplanApp


async def _submit(app: VramplanApp, pilot, text: str) -> None:  # type: ignore[no-untyped-def]
    await pilot.press("slash")
    box = app.planner.query_one("#model-filter", Input)
    box.value = text
    await pilot.press("enter")
    await pilot.pause()


async def test_hub_id_in_the_filter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    app = VramplanApp()
    async with app.run_test() as pilot:
        await _submit(app, pilot, "meta-llama/Llama-3.1-8B-Instruct")
        assert app.planner.plan.model.preset == "llama-3.1-8b"
        path = fake_cache(tmp_path)
        await _submit(app, pilot, REPO)
        assert app.planner.plan.model.hf_config == str(path)
        assert "Qwen/Qwen3-0.6B" in text_of(app, "#model-details")
        plan = app.planner.plan
        await _submit(app, pilot, "nobody/nothing")
        assert app.planner.plan == plan
        assert "not in the Hugging Face cache" in text_of(app, "#notice")
