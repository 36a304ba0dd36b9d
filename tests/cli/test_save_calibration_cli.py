"""``vramplan measure --save-calibration FILE`` (issue 29, point 5): refused before anything runs where it cannot be
written, written after a completed CUDA measurement, never after a stop."""

from __future__ import annotations

import argparse
import os
from dataclasses import replace
from pathlib import Path

import pytest

from vramplan.cli.calibrating import check_calibration_target, save_calibration
from vramplan.cli.parser import run
from vramplan.core.files.calibration import read_calibration
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.helpers.units import GiB, MiB
from vramplan.core.plan.schema.plan import plan_from_dict
from vramplan.measure.records import MeasureReport, RankFigures

PLAN = plan_from_dict({"model": {"preset": "llama-3.2-1b"}, "hardware": {"gpu": "h100-80gb", "gpus_per_node": 1}})
RANK = RankFigures(
    0,
    5 * GiB,
    5 * GiB,
    10 * GiB,
    GiB,
    20 * GiB,
    21 * GiB,
    21 * GiB + 400 * MiB,
    0.5,
    4096.0,
    process_source="nvidia-smi",
)
REPORT = MeasureReport("Llama-3.2-1B", "cuda", (RANK,), (), False, {"torch": "2.8.0"}, "n1: NVIDIA H100", steps_done=4)


def args(path: Path, force: bool = False) -> argparse.Namespace:
    return argparse.Namespace(save_calibration=str(path), force=force)


def test_on_the_cpu_it_is_refused_before_anything_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "cal.toml"
    code = run(["measure", "--model", "llama-3.2-1b", "--gpus", "1", "--device", "cpu", "--save-calibration", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "needs a CUDA measurement" in err[0], err
    assert not out.exists()


def test_an_existing_file_or_a_fifo_is_refused_before_the_run(tmp_path: Path) -> None:
    existing = tmp_path / "cal.toml"
    existing.write_text("keep")
    with pytest.raises(PlanError, match="--force"):
        check_calibration_target(args(existing), "cuda")
    check_calibration_target(args(existing, force=True), "cuda")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(PlanError, match="never replaced"):
        check_calibration_target(args(fifo, force=True), "cuda")
    assert existing.read_text() == "keep"


def test_a_completed_cuda_report_is_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cal.toml"
    assert save_calibration(args(out), REPORT, PLAN)
    cal = read_calibration(out)
    assert cal.cuda_context_bytes == 400 * MiB and cal.allocator_reserve_percent == 5.0
    assert (cal.machine, cal.gpu, cal.torch_version) == ("n1", "NVIDIA H100", "2.8.0")
    assert "wrote calibration" in capsys.readouterr().err


def test_a_stopped_or_failed_run_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "cal.toml"
    assert not save_calibration(args(out), replace(REPORT, partial=True), PLAN)
    assert not save_calibration(args(out), replace(REPORT, ranks=(replace(RANK, oom_phase="forward"),)), PLAN)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "nothing written" in err[0] and "out of memory" in err[1]
    assert not out.exists()
