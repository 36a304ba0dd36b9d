"""Pilot tests of the file dialogs: export (each format, the overwrite confirmation, every write error inline with
the plan intact) and open (a stale export's notice at start-up, a plan file through the prompt, a broken file's
error, one undoable change)."""

from __future__ import annotations

import errno
import json
import os
import re
from pathlib import Path

from textual.widgets import Input, Static

from tests.tui.conftest import figure, text_of
from vramplan.core.files import safewrite
from vramplan.core.files.export import default_file_name, export_plan, render
from vramplan.core.files.planio import load_plan_file
from vramplan.core.memory.peak import estimate
from vramplan.core.plan.helpers.units import GiB
from vramplan.core.plan.schema.plan import default_plan
from vramplan.tui.app import VramplanApp
from vramplan.tui.screens.files import ExportScreen, OpenScreen

# Pipeline parallelism: a plan the DeepSpeed JSON cannot fully express (it warns)
PP_PLAN = default_plan().with_changes({"strategy.pipeline_parallel": 2, "strategy.zero_stage": 1})


def shown(screen: object, selector: str) -> str:
    return str(screen.query_one(selector, Static).visual)  # type: ignore[attr-defined]


async def test_export_each_format(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # the dialog's default: a name derived from the plan, in the current directory
    app = VramplanApp(plan=PP_PLAN)
    async with app.run_test() as pilot:
        await pilot.press("ctrl+s")
        await pilot.pause()
        dialog = app.screen
        assert isinstance(dialog, ExportScreen)
        assert dialog.query_one("#export-path", Input).value == default_file_name(PP_PLAN, "toml")
        await pilot.press("enter")
        await pilot.pause()
        toml_file = tmp_path / default_file_name(PP_PLAN, "toml")
        assert load_plan_file(toml_file).plan == PP_PLAN  # loads back to the identical plan
        assert app.screen is app.planner and f"✔ wrote {toml_file}" in text_of(app, "#notice")

        # DeepSpeed: the format changes the extension; what DeepSpeed cannot express is said before and after
        await pilot.press("ctrl+s", "shift+tab", "right")
        await pilot.pause()
        dialog = app.screen
        assert dialog.query_one("#export-path", Input).value == default_file_name(PP_PLAN, "deepspeed")
        (warning,) = render("deepspeed", PP_PLAN).warnings
        assert "pipeline_parallel" in warning and warning in shown(dialog, "#export-about")
        await pilot.press("tab", "enter")
        await pilot.pause()
        config = json.loads((tmp_path / default_file_name(PP_PLAN, "deepspeed")).read_text())
        assert config["train_micro_batch_size_per_gpu"] == 1 and config["zero_optimization"]["stage"] == 1
        assert warning in text_of(app, "#notice")

        # Markdown: the dialog opens on the last format exported
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert app.screen.query_one("#export-path", Input).value.endswith(".deepspeed.json")
        await pilot.press("shift+tab", "right", "tab", "enter")
        await pilot.pause()
        report = (tmp_path / default_file_name(PP_PLAN, "markdown")).read_text()
        assert report.startswith("# ") and f"{estimate(PP_PLAN).total / GiB:.2f} GiB" in report
        assert app.planner.plan == PP_PLAN


async def test_enter_exports_from_anywhere_in_the_dialog(tmp_path: Path, monkeypatch) -> None:
    """The documented keys: ctrl+s, shift+tab, right (DeepSpeed), enter writes the DeepSpeed file (enter on the
    format bar used to step the format to Markdown and write nothing)."""
    monkeypatch.chdir(tmp_path)
    app = VramplanApp(plan=default_plan())
    async with app.run_test() as pilot:
        await pilot.press("ctrl+s", "shift+tab", "right")
        await pilot.pause()
        assert app.screen.focused is app.screen.query_one("#export-format")
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen is app.planner
        written = sorted(p.name for p in tmp_path.iterdir())
        assert written == [default_file_name(default_plan(), "deepspeed")]


async def test_an_existing_file_is_replaced_only_after_confirmation(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    target = tmp_path / default_file_name(default_plan(), "toml")
    target.write_text("my notes\n")
    app = VramplanApp(plan=default_plan())
    async with app.run_test() as pilot:
        await pilot.press("ctrl+s", "enter")
        await pilot.pause()
        dialog = app.screen
        assert isinstance(dialog, ExportScreen) and dialog.confirming
        assert f"{target.name} exists. Replace it?" in shown(dialog, "#export-confirm-text")
        await pilot.press("enter")  # the focus is on "Keep": enter keeps the file
        await pilot.pause()
        assert target.read_text() == "my notes\n" and app.screen is dialog and not dialog.confirming
        await pilot.press("enter", "y")  # asked again: y replaces it
        await pilot.pause()
        assert app.screen is app.planner
        assert load_plan_file(target).plan == default_plan()


async def test_write_errors_are_shown_in_the_dialog_and_the_plan_is_kept(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "a-directory").mkdir()
    app = VramplanApp(plan=default_plan())
    async with app.run_test() as pilot:
        await pilot.press("z", "ctrl+s")
        await pilot.pause()
        plan = app.planner.plan
        dialog = app.screen
        assert isinstance(dialog, ExportScreen) and plan != default_plan()

        async def attempt(path: str) -> str:
            dialog.query_one("#export-path", Input).value = path
            await pilot.press("enter")
            await pilot.pause()
            assert app.screen is dialog  # still open, to fix the path
            return shown(dialog, "#export-error")

        assert "directory does not exist" in await attempt(str(tmp_path / "missing" / "plan.toml"))
        assert "is a directory" in await attempt("a-directory")
        # typed or pasted paths the OS layer rejects: an unknown ~user is a missing directory, NUL is named
        assert "directory does not exist" in await attempt("~no-such-user-here/plan.toml")
        assert "NUL character" in await attempt("plan\0.toml")
        # Permission denied, simulated (root writes anywhere): the OS refuses the temporary file in tmp_path
        real_open, real_fsync = os.open, os.fsync

        def refuse(path: object, *args: object, **kwargs: object) -> int:
            if os.path.abspath(path).startswith(str(tmp_path)):  # type: ignore[arg-type]
                raise PermissionError(errno.EACCES, "Permission denied")
            return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(safewrite.os, "open", refuse)
        assert "cannot write: permission denied" in await attempt("plan.toml")
        monkeypatch.setattr(safewrite.os, "open", real_open)

        def disk_full(fd: int) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(safewrite.os, "fsync", disk_full)
        assert "cannot write: no space left on device" in await attempt("plan.toml")
        monkeypatch.setattr(safewrite.os, "fsync", real_fsync)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["a-directory"]  # nothing written, nothing left over

        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is app.planner and app.planner.plan == plan
        assert figure(estimate(plan).total) in text_of(app, "#headline")


async def test_open_plan_files_stale_exports_and_broken_ones(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    hand = tmp_path / "hand.toml"
    hand.write_text('[model]\npreset = "bloom-7b1"\n[training]\nseq_len = 1024\n')
    reviewed = default_plan().with_changes({"model.preset": "qwen2.5-7b"})
    stale = tmp_path / "stale.toml"
    export_plan(stale, "toml", reviewed, title="for review")
    text = re.sub(r"^total_bytes = \d+", "total_bytes = 1", stale.read_text(), count=1, flags=re.M)
    stale.write_text(re.sub(r'^vramplan_version = ".*"', 'vramplan_version = "0.0.9"', text, count=1, flags=re.M))
    (tmp_path / "broken.toml").write_text('[model]\npreset = "llama-7b"\n[training]\nseq_len = 0\n')
    stale_notice = "stale.toml: estimate changed since this plan was exported with vramplan 0.0.9"

    app = VramplanApp(plan_path=stale)  # `vramplan stale.toml`
    async with app.run_test() as pilot:
        await pilot.pause()
        assert app.planner.plan == reviewed
        assert stale_notice in text_of(app, "#notice")
        assert app.planner.meta is not None and app.planner.meta.title == "for review"  # carried into exports

        await pilot.press("ctrl+o", *"hand.toml", "enter")  # typed, like a user
        await pilot.pause()
        opened = app.planner.plan
        assert (opened.model.preset, opened.training.seq_len) == ("bloom-7b1", 1024)
        assert "opened hand.toml" in text_of(app, "#notice")
        assert figure(estimate(opened).total) in text_of(app, "#headline")
        assert app.planner.meta is None  # a hand-written file: no [meta]
        await pilot.press("ctrl+o")
        await pilot.pause()
        app.screen.query_one("#open-path", Input).value = "broken.toml"
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, OpenScreen)
        assert "broken.toml: training.seq_len" in shown(app.screen, "#open-error")
        await pilot.press("escape")
        await pilot.pause()
        assert app.planner.plan == opened

        await pilot.press("ctrl+z")  # opening a file is one undoable change
        await pilot.pause()
        assert app.planner.plan == reviewed


async def test_export_an_accelerate_config_from_the_dialog(tmp_path: Path, monkeypatch) -> None:
    """Issue 17.4: the export dialog's fourth format; what the accelerate config cannot express is said before and
    after writing."""
    monkeypatch.chdir(tmp_path)
    app = VramplanApp(plan=PP_PLAN)
    async with app.run_test() as pilot:
        await pilot.press("ctrl+s", "shift+tab", "right", "right", "right")
        await pilot.pause()
        dialog = app.screen
        assert dialog.query_one("#export-path", Input).value == default_file_name(PP_PLAN, "accelerate")
        (warning,) = render("accelerate", PP_PLAN).warnings
        assert "pipeline_parallel" in warning and warning in shown(dialog, "#export-about")
        await pilot.press("tab", "enter")
        await pilot.pause()
        text = (tmp_path / default_file_name(PP_PLAN, "accelerate")).read_text()
        assert "distributed_type: FSDP" in text and "#   - strategy.pipeline_parallel = 2" in text
        assert warning in text_of(app, "#notice")


async def test_the_open_prompt_imports_a_training_config(tmp_path: Path, monkeypatch) -> None:
    """Issue 17.1: a DeepSpeed JSON typed into the open prompt is read over the planner's plan (its model and GPUs
    kept), the notice says what was read and ignored; one undoable change; a file it cannot read is shown inline."""
    monkeypatch.chdir(tmp_path)
    seed = Path(__file__).resolve().parents[1] / "data" / "import" / "seed_13b_zero3.json"
    (tmp_path / "ds.json").write_text(seed.read_text())
    (tmp_path / "bomb.yaml").write_text("a: &a [1,1,1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
                                        "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c]\n"
                                        "e: [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d]\n")  # fmt: skip
    start = default_plan().with_changes({"model.preset": "llama-2-13b", "hardware.gpus_per_node": 4})
    app = VramplanApp(plan=start)
    async with app.run_test() as pilot:
        await pilot.press("ctrl+o", *"ds.json", "enter")
        await pilot.pause()
        plan = app.planner.plan
        t, s = plan.training, plan.strategy
        assert (plan.model.preset, plan.hardware.total_gpus) == ("llama-2-13b", 4)
        assert (t.micro_batch_size, t.grad_accum_steps, t.precision) == (2, 4, "fp16-master")
        assert (s.zero_stage, s.offload_optimizer, s.gradient_checkpointing) == (3, "cpu", "full")
        notice = text_of(app, "#notice")
        assert "imported ds.json (DeepSpeed JSON)" in notice and "fp16.loss_scale_window" in notice
        assert app.planner.saved_plan != plan  # not saved as a plan file yet
        await pilot.press("ctrl+o")
        await pilot.pause()
        app.screen.query_one("#open-path", Input).value = "bomb.yaml"
        await pilot.press("enter")
        await pilot.pause()
        assert isinstance(app.screen, OpenScreen)
        error = shown(app.screen, "#open-error")
        assert "bomb.yaml: more than" in error and "alias bomb" in error and "the plan is unchanged" in error
        await pilot.press("escape", "ctrl+z")
        await pilot.pause()
        assert app.planner.plan == start
