"""Pilot tests of the trace view (palette: plan: trace this plan, issue 41.6): offered only with the measure extra,
run in a thread worker with a progress bar while the app answers keys, the traced peaks beside the estimate's once
done, esc stops it (the stop event) and esc again closes, a plan that cannot be traced is one line. The trace itself
is a fake injected in place of `run_trace` (the real one is tested in tests/measure)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from textual.widgets import ProgressBar, Static

from tests.conftest import DATA
from tests.waiting import until
from vramplan.core.plan.helpers.units import GiB, MiB
from vramplan.core.plan.schema.plan import Plan
from vramplan.measure.records import Progress
from vramplan.measure.trace_records import Difference, PhasePeak, TraceReport
from vramplan.tui import command_table
from vramplan.tui.app import VramplanApp
from vramplan.tui.screens import planner as planner_module
from vramplan.tui.screens import trace
from vramplan.tui.screens.trace import TraceScreen

HYBRID = DATA / "hybrid" / "nemotron-h-8b.json"


def report(partial: bool) -> TraceReport:
    rows = (
        Difference("parameters", 15 * GiB, 15 * GiB),
        Difference("temporaries", 32 * MiB, 0, "traced 32 MiB more; largest: cublas workspace 32 MiB"),
        Difference("peak allocated", 42 * GiB, 41 * GiB, "traced - estimate: temporaries +32 MiB"),
    )
    return TraceReport(
        plan_summary="Llama-3.1-8B on 1 x H100", kernels="cuda", gpu="H100", alloc_conf="", steps=2,
        steps_traced=1 if partial else 2, lengths=((4096,),), peak_allocated=42 * GiB, peak_reserved=44 * GiB,
        peak_phase="backward", peak_step=2, tensor_peak=42 * GiB, fragmentation=0.04, capacity_bytes=80 * GiB,
        largest_failed=0, failures=0, phases=(PhasePeak(1, "forward", 40 * GiB, 41 * GiB),),
        by_role={"parameter": 15 * GiB}, by_module=(("model.layers.*.mlp", 10 * GiB),), saved_by_op=(),
        estimate_allocated=41 * GiB, estimate_reserved=43 * GiB, differences=rows,
        not_traced=("attention flash: PyTorch SDPA's flash kernel is traced",), corrections=(), partial=partial,
    )  # fmt: skip


class Fake:
    """A trace that reports progress, then waits until released or stopped."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.stop: threading.Event | None = None
        self.config: str | None = None

    def __call__(
        self, plan: Plan, progress: Callable[[Progress], None], stop: threading.Event, config: str | None = None
    ) -> TraceReport:
        self.stop, self.config = stop, config
        progress(Progress("trace", 0, 2, "building Llama on fake tensors"))
        progress(Progress("trace", 1, 2, "step 1 traced (1/2): 4.0 s"))
        while not (self.release.is_set() or stop.is_set()):
            stop.wait(0.01)
        return report(stop.is_set())


def text_of(app: VramplanApp, selector: str) -> str:
    return str(app.screen.query_one(selector, Static).visual)


def test_the_palette_offers_tracing_only_with_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    class Planner:
        def run_action(self, action: str) -> None: ...

        def apply_changes(self, changes: object) -> bool:
            return True

    def texts() -> list[str]:
        return [e.text for e in command_table.palette_entries(Planner())]  # type: ignore[arg-type]

    monkeypatch.setattr(command_table, "measure_available", lambda: True)
    assert "plan: trace this plan (fake tensors)" in texts()
    monkeypatch.setattr(command_table, "measure_available", lambda: False)
    assert "plan: trace this plan (fake tensors)" not in texts()


async def test_tracing_runs_in_a_worker_and_shows_traced_beside_estimate(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = Fake()
    monkeypatch.setattr(trace, "run_trace", fake)
    app = VramplanApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        await app.planner.run_action("trace")
        await until(pilot, lambda: isinstance(app.screen, TraceScreen) and "(1/2)" in text_of(app, "#trace-status"))
        bar = app.screen.query_one("#trace-bar", ProgressBar)
        assert (bar.total, bar.progress) == (2, 1)
        await pilot.press("j")  # the app still answers keys while the worker runs
        fake.release.set()
        await until(pilot, lambda: text_of(app, "#trace-status").startswith("traced"))
        text = text_of(app, "#trace-text")
        assert "traced" in text and "estimate" in text and "peak allocated" in text and "cublas workspace" in text
        assert "not traced:" in text and "unvalidated" in text
        assert all(len(line) <= 78 for line in text.splitlines()[:10])
        assert not fake.stop.is_set()  # type: ignore[union-attr]
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is app.planner


async def test_esc_stops_the_trace_and_esc_again_closes(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = Fake()
    monkeypatch.setattr(trace, "run_trace", fake)
    app = VramplanApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await app.planner.run_action("trace")
        await until(pilot, lambda: fake.stop is not None)
        await pilot.press("escape")
        assert fake.stop is not None and fake.stop.is_set()
        await until(pilot, lambda: text_of(app, "#trace-status").startswith("stopped"))
        assert "stopped: partial report" in text_of(app, "#trace-text")
        await pilot.press("escape")
        await pilot.pause()
        assert app.screen is app.planner


async def test_a_plan_that_cannot_be_traced_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(plan: Plan, progress: object, stop: object, config: object = None) -> TraceReport:
        raise RuntimeError("no fake kernel for bitsandbytes\nsecond line")

    monkeypatch.setattr(trace, "run_trace", broken)
    app = VramplanApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await app.planner.run_action("trace")
        await until(pilot, lambda: "cannot trace" in text_of(app, "#trace-status"))
        assert "second line" not in text_of(app, "#trace-status")


async def test_a_config_json_without_a_formula_family_is_offered_to_the_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    # issue 41.4: the Model pane refuses Nemotron-H's config.json in one line naming trace; the palette's trace
    # entry then traces that file as the model, with the rest of the plan (until the plan changes)
    fake = Fake()
    monkeypatch.setattr(trace, "run_trace", fake)
    monkeypatch.setattr(planner_module, "measure_available", lambda: True)
    app = VramplanApp()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        before = app.planner.plan
        assert not app.planner.apply_changes({"model.hf_config": str(HYBRID)})
        assert app.planner.plan == before
        notice = str(app.planner.query_one("#notice", Static).visual)
        assert "unsupported model_type 'nemotron_h'" in notice and "plan: trace this plan traces" in notice
        await app.planner.run_action("trace")
        await until(pilot, lambda: fake.stop is not None)
        assert fake.config == str(HYBRID)
        fake.release.set()
        await until(pilot, lambda: text_of(app, "#trace-status").startswith("traced"))
        await pilot.press("escape")
        await pilot.pause()
        assert app.planner.apply_changes({"training.seq_len": 1024})  # the plan changed: the offer is withdrawn
        assert app.planner.refused_config is None
