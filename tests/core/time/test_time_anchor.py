"""`vramplan measure` anchors time (issue 38, point 5): the measured step time goes into the calibration file with
the GPU preset and stack it was measured on; a calibrated estimate scales only the terms a measurement covers
(the GPU's work and the host issuing it; links stay modelled), says so, and applies nowhere else."""

from __future__ import annotations

from pathlib import Path

import pytest

from vramplan.cli.parser import run
from vramplan.core.files.calibration import (
    Calibration,
    StepTiming,
    apply_calibration,
    calibration_from_data,
    read_calibration,
    write_calibration,
)
from vramplan.core.files.planfile import plan_toml
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.helpers.units import MiB, fmt_seconds
from vramplan.core.plan.schema.plan import Plan, plan_from_dict
from vramplan.core.time.anchor import COVERED, anchor_of
from vramplan.core.time.step import step_time
from vramplan.measure.calibrate import step_timing

PLAN = {
    "model": {"preset": "llama-3.2-1b"},
    "hardware": {"gpu": "h100-80gb", "gpus_per_node": 8, "nodes": 2},
    "training": {"micro_batch_size": 1, "seq_len": 1024},
    "strategy": {"zero_stage": 3},
    "stack": {"framework": "hf-trainer"},
}


def _plan() -> Plan:
    return plan_from_dict(PLAN)


def _covered(plan: Plan) -> float:
    return sum(t.exposed for t in step_time(plan).terms if t.category in COVERED)


def test_the_factor_scales_the_covered_terms_only() -> None:
    plan = _plan()
    st = step_time(plan)
    measured = st.step_seconds * 1.5
    timing = step_timing(measured, plan)
    assert timing is not None and timing.gpu_preset == "h100-80gb" and timing.framework == "hf-trainer"
    covered = _covered(plan)
    # factor = (measured - modelled terms not covered) / modelled covered terms
    assert timing.factor == pytest.approx((measured - (st.step_seconds - covered)) / covered)
    cal = Calibration(cuda_context_bytes=300 * MiB, time=timing, source="cal.toml")
    anchored = step_time(apply_calibration(plan, cal))
    # the measured plan itself now takes what was measured
    assert anchored.step_seconds == pytest.approx(measured, rel=1e-5)
    for before, after in zip(st.terms, anchored.terms, strict=True):
        if before.category in COVERED:
            assert after.exposed == pytest.approx(before.exposed * timing.factor, rel=1e-5)
            assert "anchored to cal.toml" in after.formula
        else:  # links stay modelled
            assert after == before
    assert anchored.anchor.startswith("anchored: GPU work x") and "h100-80gb with hf-trainer" in anchored.anchor
    assert anchored.to_json()["anchor"] == anchored.anchor


def test_another_plan_on_the_same_gpu_and_stack_is_scaled_by_the_same_factor() -> None:
    plan = _plan()
    cal = Calibration(cuda_context_bytes=0, time=step_timing(step_time(plan).step_seconds * 0.8, plan))
    bigger = plan.with_changes({"training.seq_len": 4096})
    a = step_time(bigger)
    b = step_time(apply_calibration(bigger, cal))
    assert cal.time is not None
    assert _covered(b.plan) == pytest.approx(cal.time.factor * _covered(bigger), rel=1e-5)
    assert b.step_seconds < a.step_seconds


@pytest.mark.parametrize("change", [{"hardware.gpu": "a100-80gb"}, {"stack.framework": "torchtune"}])
def test_another_gpu_or_stack_is_not_anchored_and_says_so(change: dict[str, str]) -> None:
    plan = _plan()
    cal = Calibration(cuda_context_bytes=0, time=step_timing(step_time(plan).step_seconds * 2, plan))
    other = plan.with_changes(change)
    calibrated = step_time(apply_calibration(other, cal))
    assert calibrated.step_seconds == step_time(other).step_seconds
    assert calibrated.anchor.startswith("not anchored: the calibration's step time was measured on h100-80gb")


def test_the_cli_says_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plan = _plan()
    measured = 1.3 * step_time(plan).step_seconds
    path, plan_path = tmp_path / "cal.toml", tmp_path / "plan.toml"
    write_calibration(path, Calibration(cuda_context_bytes=0, time=step_timing(measured, plan)))
    assert read_calibration(path).time == step_timing(measured, plan)
    plan_path.write_text(plan_toml(plan))
    assert run(["estimate", str(plan_path), "--calibration", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"step time {fmt_seconds(measured)} per step" in out and "anchored: GPU work x 1.3" in out


def test_a_measurement_shorter_than_the_links_gives_no_anchor() -> None:
    plan = _plan()
    st = step_time(plan)
    links = st.step_seconds - _covered(plan)
    assert anchor_of(links * 0.5, st.terms) is None or links == 0
    assert step_timing(None, plan) is None


@pytest.mark.parametrize(
    ("table", "said"),
    [
        ({"measured_step_seconds": float("nan")}, "time.measured_step_seconds: must be more than 0"),
        ({"measured_step_seconds": -1.0}, "time.measured_step_seconds: must be more than 0"),
        ({"measured_step_seconds": True}, "time.measured_step_seconds: must be a number of seconds"),
        ({"gpu_preset": ""}, "time.gpu_preset: must be a preset or framework id"),
        ({"modelled_covered_seconds": 9.0}, "time: must not exceed modelled_step_seconds"),
        ({"measured_step_seconds": 1e6}, "time: gives a factor of"),
        ({"extra": 1}, "time.'extra': unknown key"),
    ],
)
def test_bad_time_tables_are_one_plan_error(table: dict[str, object], said: str) -> None:
    good = {"measured_step_seconds": 1.2, "modelled_step_seconds": 1.0, "modelled_covered_seconds": 0.9,
            "gpu_preset": "h100-80gb", "framework": "hf-trainer"}  # fmt: skip
    raw = {"terms": {"cuda_context_bytes": 1}, "time": {**good, **table}}
    with pytest.raises(PlanError) as err:
        calibration_from_data(raw, "cal.toml")
    assert said in str(err.value) and "\n" not in str(err.value)
    missing = {k: v for k, v in good.items() if k != "framework"}
    with pytest.raises(PlanError, match=r"time\.framework: missing"):
        calibration_from_data({"terms": {"cuda_context_bytes": 1}, "time": missing}, "cal.toml")


def test_the_factor_is_the_files_figures() -> None:
    t = StepTiming(1.2, 1.0, 0.9, "h100-80gb", "hf-trainer")
    assert t.factor == pytest.approx((1.2 - 0.1) / 0.9)
    assert t.overrides()["overhead.step_time_factor"] == round(t.factor, 6)
    # a calibration without [time] clears an earlier anchor (it would claim this file's provenance)
    plan = apply_calibration(_plan(), Calibration(cuda_context_bytes=0, time=t))
    assert plan.overhead.step_time_factor is not None
    cleared = apply_calibration(plan, Calibration(cuda_context_bytes=0))
    assert cleared.overhead.step_time_factor is None and step_time(cleared).anchor == ""
