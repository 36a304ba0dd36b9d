"""Pilot tests of the measure view (palette: plan: measure here) and the calibration dialog (issue 29, point 7):
the run is a thread worker with a progress bar, the app answers keys while it runs, esc stops it (the stop event)
and esc again closes; a calibration file applies its [overhead] terms and the planner says where from. The
measurement itself is a fake injected in place of `run_measurement` (the real one is tested in tests/measure)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from textual.widgets import Input, ProgressBar, Static

from tests.waiting import until
from vramplan.core.files.calibration import Calibration, write_calibration
from vramplan.core.memory.peak import estimate
from vramplan.core.plan.helpers.units import GiB, MiB
from vramplan.core.plan.schema.plan import Plan
from vramplan.core.time.step import step_time
from vramplan.measure.comparison import comparison_rows
from vramplan.measure.records import MeasureReport, Progress, RankFigures
from vramplan.tui import command_table
from vramplan.tui.app import VramplanApp
from vramplan.tui.screens import measure
from vramplan.tui.screens.measure import MeasureScreen, Outcome


def outcome(plan: Plan, partial: bool, steps: int) -> Outcome:
    rank = RankFigures(0, 5 * GiB, 5 * GiB, 10 * GiB, GiB, 20 * GiB, 21 * GiB, None, 0.5, 4096.0)
    report = MeasureReport("LLaMA-7B here", "cpu", (rank,), ("on the CPU",), partial, {}, "box: CPU", steps_done=steps)
    report = MeasureReport(**{**report.__dict__, "steps_planned": 4})
    return Outcome(report, comparison_rows(estimate(plan), step_time(plan), report, ()), ("on the CPU: no allocator",))


class Fake:
    """A measurement that reports progress, then waits until released or stopped (the stop event)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.stop: threading.Event | None = None

    def __call__(self, plan: Plan, progress: Callable[[Progress], None], stop: threading.Event) -> Outcome:
        self.stop = stop
        progress(Progress("building", 0, 4, "building LLaMA-7B"))
        progress(Progress("step", 2, 4, "step 2/4: 0.5 s"))
        while not (self.release.is_set() or stop.is_set()):
            stop.wait(0.01)
        return outcome(plan, stop.is_set(), 2 if stop.is_set() else 4)


def screen_text(app: VramplanApp, selector: str) -> str:
    return str(app.screen.query_one(selector, Static).visual)


def test_the_palette_offers_measuring_only_with_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    class Planner:
        def run_action(self, action: str) -> None: ...

        def apply_changes(self, changes: object) -> bool:
            return True

    texts = [e.text for e in command_table.palette_entries(Planner())]  # type: ignore[arg-type]
    assert "plan: apply a calibration" in texts
    monkeypatch.setattr(command_table, "measure_available", lambda: True)
    assert "plan: measure here (real step)" in [e.text for e in command_table.palette_entries(Planner())]  # type: ignore[arg-type]
    monkeypatch.setattr(command_table, "measure_available", lambda: False)
    assert "plan: measure here (real step)" not in [e.text for e in command_table.palette_entries(Planner())]  # type: ignore[arg-type]


async def test_measuring_runs_in_a_worker_and_shows_the_comparison(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = Fake()
    monkeypatch.setattr(measure, "run_measurement", fake)
    app = VramplanApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await app.planner.run_action("measure")
        await until(
            pilot, lambda: isinstance(app.screen, MeasureScreen) and "step 2/4" in screen_text(app, "#measure-status")
        )
        bar = app.screen.query_one("#measure-bar", ProgressBar)
        assert (bar.total, bar.progress) == (4, 2)
        await pilot.press("j")  # the app still answers keys while the worker waits
        await pilot.pause()
        fake.release.set()
        await until(pilot, lambda: screen_text(app, "#measure-status").startswith("measured"))
        text = screen_text(app, "#measure-text")
        assert "predicted" in text and "measured" in text and "parameters" in text and "* not reproduced here" in text
        assert all(len(line) <= 78 for line in text.splitlines()[:15])  # fits the 80-column view
        assert not fake.stop.is_set()  # type: ignore[union-attr]
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is app.planner


async def test_esc_stops_the_run_and_esc_again_closes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    fake = Fake()
    monkeypatch.setattr(measure, "run_measurement", fake)
    app = VramplanApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await app.planner.run_action("measure")
        await until(pilot, lambda: fake.stop is not None)
        await pilot.press("escape")
        assert fake.stop is not None and fake.stop.is_set()
        await until(pilot, lambda: screen_text(app, "#measure-status").startswith("stopped"))
        assert "stopped: partial report" in screen_text(app, "#measure-text")
        assert isinstance(app.screen, MeasureScreen)
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is app.planner


async def test_a_failed_run_is_one_line_in_the_view(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(plan: Plan, progress: object, stop: object) -> Outcome:
        raise ValueError("model_type 'x' is not built by transformers\nsecond line")

    monkeypatch.setattr(measure, "run_measurement", broken)
    app = VramplanApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await app.planner.run_action("measure")
        await until(pilot, lambda: "cannot run" in screen_text(app, "#measure-status"))
        assert "second line" not in screen_text(app, "#measure-status")


async def test_a_calibration_file_applies_and_says_where_from(tmp_path: Path) -> None:
    path = tmp_path / "cal.toml"
    write_calibration(path, Calibration(cuda_context_bytes=300 * MiB, gpu="H100", machine="n1", created="2026-12-03"))
    bad = tmp_path / "bad.toml"
    bad.write_text("[terms]\ncuda_context_bytes = inf\n")
    app = VramplanApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await app.planner.run_action("load_calibration")
        await pilot.pause()
        app.screen.query_one("#calibration-path", Input).value = str(bad)
        await pilot.press("enter")
        await pilot.pause()
        assert "whole number of bytes" in screen_text(app, "#calibration-error")
        assert app.planner.plan.overhead.calibrated_from is None
        app.screen.query_one("#calibration-path", Input).value = str(path)
        await pilot.press("enter")
        await pilot.pause()
        assert app.screen is app.planner
        o = app.planner.plan.overhead
        assert o.cuda_context_mib == 300 and o.calibrated_from == f"{path} (H100 on n1, 2026-12-03)"
        assert app.planner.estimate.overhead_bytes["cuda_context"] == 300 * MiB
        assert "calibrated from" in app.planner.notice


async def test_the_app_starts_calibrated(tmp_path: Path) -> None:
    cal = Calibration(cuda_context_bytes=256 * MiB, gpu="H100", created="2026-12-03", source="cal.toml")
    app = VramplanApp(calibration=cal)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert app.planner.plan.overhead.cuda_context_mib == 256
        assert app.planner.plan.overhead.calibrated_from == "cal.toml (H100, 2026-12-03)"


def test_vramplan_calibration_flag_refuses_a_bad_file_before_the_app(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from vramplan.__main__ import run_app

    bad = tmp_path / "bad.toml"
    bad.write_text("[terms]\ncuda_context_bytes = nan\n")
    for args in (["--calibration", str(bad)], [f"--calibration={bad}", "plan.toml"], ["--calibration"]):
        assert run_app(args) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("vramplan: "), err
