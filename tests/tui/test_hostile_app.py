"""Issue 15 in the app (Pilot): broken plan files at start and through ctrl+o, bad config.json files, huge numbers
typed into fields and a long run of digits in an integer field show an error; the app never crashes or hangs."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from textual.widgets import Input, Static

from tests.hostile import DOTTED_KEY_FILES, write_config_files, write_plan_files, write_training_configs
from tests.tui.conftest import text_of
from tests.waiting import HANG_S
from vramplan.core.plan.schema.plan import default_plan
from vramplan.tui.app import VramplanApp, open_plan
from vramplan.tui.screens.files import ExportScreen, OpenScreen


def test_every_broken_plan_file_opens_the_default_plan_with_a_reason(tmp_path: Path) -> None:
    """What the app does at start with a plan file (``vramplan FILE``): 6 of these 14 used to crash it."""
    for name, path in write_plan_files(tmp_path).items():
        plan, notices, meta = open_plan(path)
        assert plan == default_plan() and meta is None
        (line,) = notices
        assert line.startswith("✘ ") and name in line and line.endswith("opened the default plan instead")
        assert "\n" not in line and "\x1b" not in line


async def test_the_app_starts_on_a_broken_file(tmp_path: Path) -> None:
    path = write_plan_files(tmp_path)["deep_tables.toml"]
    app = VramplanApp(plan_path=path)
    async with app.run_test() as pilot:
        await pilot.pause()
        assert app.planner.plan == default_plan()
        notice = text_of(app, "#notice")
        assert "deep_tables.toml" in notice and "nested" in notice


async def test_ctrl_o_on_broken_plan_files_shows_the_error(tmp_path: Path) -> None:
    """The files that crashed the app through ctrl+o (every one is checked through `open_plan` above)."""
    crashed = ("huge_int.toml", "beyond_float.toml", "deep_tables.toml", "model_type_list.toml", "fifo.toml")
    files = {name: path for name, path in write_plan_files(tmp_path).items() if name in crashed}
    app = VramplanApp(plan=default_plan())
    async with app.run_test() as pilot:
        for name, path in files.items():
            await pilot.press("ctrl+o")
            await pilot.pause()
            assert isinstance(app.screen, OpenScreen)
            app.screen.query_one("#open-path", Input).value = str(path)
            await asyncio.wait_for(pilot.press("enter"), timeout=HANG_S)
            await pilot.pause()
            assert isinstance(app.screen, OpenScreen), name
            error = str(app.screen.query_one("#open-error", Static).visual)
            assert name in error and "(the plan is unchanged)" in error, error
            await pilot.press("escape")
            await pilot.pause()
        assert app.planner.plan == default_plan() and app.is_running


async def test_bad_config_json_files_are_inline_errors(tmp_path: Path) -> None:
    files = write_config_files(tmp_path)
    app = VramplanApp(plan=default_plan())
    async with app.run_test(size=(120, 50)) as pilot:
        for name, path in files.items():
            await app.planner.action_load_config()  # the palette's "Load a config.json": the prompt, focused
            await pilot.pause()
            field = app.planner.query_one("#f-model-hf_config Input", Input)
            assert app.screen.focused is field
            field.value = str(path)
            await asyncio.wait_for(pilot.press("enter"), timeout=HANG_S)
            await pilot.pause()
            notice = text_of(app, "#notice")
            assert notice.startswith("✘") and name in notice and "plan unchanged" in notice, (name, notice)
        assert app.planner.plan == default_plan() and app.is_running


async def test_huge_numbers_typed_into_fields_are_errors(tmp_path: Path) -> None:
    app = VramplanApp(plan=default_plan())
    async with app.run_test(size=(120, 50)) as pilot:
        for key, text, expected in (
            ("model.hidden_size", "9" * 400, "too long"),
            ("model.hidden_size", "9" * 39, "less than or equal to"),
            ("model.vocab_size", "1e300", "less than or equal to"),
            ("training.tokens", "1e300", "less than or equal to"),
            ("training.tokens", "9" * 400, "(got a 400-digit number)"),
            ("training.tokens", "9" * 25, f"(got {'9' * 25})"),  # issue 39: was float-rounded
            ("training.mfu", "5e-324", "greater than or equal to 0.001"),
        ):
            await app.planner.action_edit_field(key)  # its pane shown, the cursor in the field
            await pilot.pause()
            field = app.screen.focused
            assert isinstance(field, Input)
            field.value = text
            await pilot.pause()
            notice = text_of(app, "#notice")
            assert notice.startswith(f"✘ {key}: ") and expected in notice, (key, text, notice)
            assert len(notice) < 300
        assert app.planner.plan == default_plan() and app.is_running


async def test_a_long_run_of_digits_and_a_letter_does_not_hang_an_integer_field() -> None:
    """Textual's integer input type validated with a regex that backtracks exponentially (the app froze at
    100% CPU after about 28 digits and a letter); the fields parse the text instead."""
    app = VramplanApp(plan=default_plan())
    async with app.run_test(size=(120, 50)) as pilot:
        for key in ("model.vocab_size", "training.micro_batch_size", "training.seq_len", "hardware.gpus_per_node"):
            await app.planner.action_edit_field(key)
            await pilot.pause()
            field = app.screen.focused
            assert isinstance(field, Input) and field.type == "text" and not field.validators
            field.value = "1" * 30
            field.cursor_position = 30
            await asyncio.wait_for(pilot.press("a"), timeout=HANG_S)
            await pilot.pause()
            assert field.value == "1" * 30 + "a"
            assert text_of(app, "#notice").startswith(f"✘ {key}: "), key
        assert app.planner.plan == default_plan() and app.is_running


async def test_export_never_offers_to_replace_a_fifo_or_a_dangling_link(tmp_path: Path) -> None:
    """The export dialog's "Replace (y)" replaced a FIFO (or /dev/null) with a file: such targets are an error
    before any confirmation."""
    fifo = tmp_path / "pipe.toml"
    os.mkfifo(fifo)
    dangling = tmp_path / "link.toml"
    dangling.symlink_to(tmp_path / "nowhere.toml")
    app = VramplanApp(plan=default_plan())
    async with app.run_test() as pilot:
        await pilot.press("ctrl+s")
        await pilot.pause()
        dialog = app.screen
        assert isinstance(dialog, ExportScreen)
        for target, expected in ((fifo, "named pipe"), (dangling, "dangling")):
            dialog.query_one("#export-path", Input).value = str(target)
            await pilot.press("enter")
            await pilot.pause()
            assert app.screen is dialog and not dialog.confirming  # no "Replace it?" to say y to
            assert expected in str(dialog.query_one("#export-error", Static).visual)
        assert fifo.is_fifo() and dangling.is_symlink()
        assert sorted(p.name for p in tmp_path.iterdir()) == ["link.toml", "pipe.toml"]


async def test_the_app_starts_beside_a_fifo_and_a_broken_user_gpu(tmp_path: Path, monkeypatch) -> None:
    """A FIFO in the presets directory hung every command and the app; a broken user file with a built-in GPU's
    id is said to be replaced by the built-in."""
    from vramplan.core.plan.catalogue import presets

    (tmp_path / "models").mkdir()
    os.mkfifo(tmp_path / "models" / "pipe.toml")
    (tmp_path / "hardware").mkdir()
    (tmp_path / "hardware" / "a100-80gb.toml").write_text("name = 'mine'\nmemory_mib = 'lots'\n")
    monkeypatch.setenv("VRAMPLAN_CONFIG_DIR", str(tmp_path))
    presets.reload()
    app = VramplanApp(plan=default_plan())
    async with app.run_test() as pilot:
        await pilot.pause()
        notice = text_of(app, "#notice")
        assert "pipe.toml: is a named pipe" in notice
        assert "a100-80gb.toml" in notice and "(the built-in a100-80gb is used)" in notice


async def test_ctrl_o_refuses_a_long_dotted_key(tmp_path: Path) -> None:
    """Issue 39: a plan file of one dotted key of 100,000 parts froze the open dialog for ~20 s (tomllib's time grows
    with the square of a key's parts); the bound is checked before the parse (timed in bench/bench_hostile.py)."""
    app = VramplanApp(plan=default_plan())
    async with app.run_test() as pilot:
        for name, text in DOTTED_KEY_FILES.items():
            path = tmp_path / name
            path.write_text(text)
            await pilot.press("ctrl+o")
            await pilot.pause()
            app.screen.query_one("#open-path", Input).value = str(path)
            await asyncio.wait_for(pilot.press("enter"), timeout=HANG_S)  # a hang guard, no deadline
            await pilot.pause()
            assert isinstance(app.screen, OpenScreen), name
            error = str(app.screen.query_one("#open-error", Static).visual)
            assert name in error and "a dotted key of more than 16 parts" in error, error
            await pilot.press("escape")
            await pilot.pause()
        assert app.planner.plan == default_plan() and app.is_running


async def test_ctrl_o_on_training_configs_with_unconvertible_numbers(tmp_path: Path) -> None:
    """Issue 39: opening a DeepSpeed JSON with a 5,000-digit integer crashed the app."""
    app = VramplanApp(plan=default_plan())
    async with app.run_test() as pilot:
        for name, path in write_training_configs(tmp_path).items():
            await pilot.press("ctrl+o")
            await pilot.pause()
            app.screen.query_one("#open-path", Input).value = str(path)
            await pilot.press("enter")
            await pilot.pause()
            assert isinstance(app.screen, OpenScreen), name
            error = str(app.screen.query_one("#open-error", Static).visual)
            assert name in error and "(the plan is unchanged)" in error, error
            await pilot.press("escape")
            await pilot.pause()
        assert app.planner.plan == default_plan() and app.is_running


async def test_a_user_presets_escape_sequences_never_reach_the_screen(tmp_path: Path, monkeypatch) -> None:
    """Issue 39: a user preset's name is escaped where it is read, so the model list and the palette show
    ``\\x1b[2J``, never run it."""
    import tomli_w

    from vramplan.core.plan.catalogue import presets

    (tmp_path / "models").mkdir()
    model = {"name": "Evil\x1b]0;pwned\x07\x1b[2J", "source": "x", "config": {"preset": "llama-7b"}}
    (tmp_path / "models" / "evil.toml").write_text(tomli_w.dumps(model))
    monkeypatch.setenv("VRAMPLAN_CONFIG_DIR", str(tmp_path))
    presets.reload()
    app = VramplanApp(plan=default_plan().with_changes({"model.preset": "evil"}))
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        shown = app.export_screenshot()
        assert "\x1b" not in shown and "\x07" not in shown
        assert "Evil\\x1b]0;pwned" in shown.replace("&#160;", " ")


async def test_export_to_a_missing_folder_or_a_wrong_extension_is_an_error(tmp_path: Path, monkeypatch) -> None:
    """Issue 39: the dialog wrote a regular file ``newdir`` for ``newdir/`` and TOML into ``x.yaml``, both of which
    the CLI refuses (`core.files.export.export_target`, the check both share)."""
    monkeypatch.chdir(tmp_path)
    app = VramplanApp(plan=default_plan())
    async with app.run_test() as pilot:
        await pilot.press("ctrl+s")
        await pilot.pause()
        dialog = app.screen
        assert isinstance(dialog, ExportScreen)
        for typed, expected in (
            ("newdir/", "ends with / (a directory)"),
            ("x.yaml", "the name of an accelerate config, not a plan file: name it x.toml"),
            ("x.json", "the name of a DeepSpeed config, not a plan file"),
            ("x.conf", ".conf is no export format's extension: name it x.toml"),
        ):
            dialog.query_one("#export-path", Input).value = typed
            await pilot.press("enter")
            await pilot.pause()
            assert app.screen is dialog and not dialog.confirming, typed
            error = str(dialog.query_one("#export-error", Static).visual)
            assert expected in error and "(nothing was written)" in error, (typed, error)
        assert list(tmp_path.iterdir()) == []
        dialog.query_one("#export-path", Input).value = "plan"  # no extension: the format chosen decides
        await pilot.press("enter")
        await pilot.pause()
    assert [p.name for p in tmp_path.iterdir()] == ["plan"]
    assert (tmp_path / "plan").read_text().startswith("# vramplan plan file")
