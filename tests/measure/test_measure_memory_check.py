"""`vramplan measure` checks the memory the run will need before it builds anything (issue 39): on the CPU an 8B full
fine-tuning (150 GiB predicted) on a machine of 23 GiB started building and died on a failed allocation (uncapped,
the kernel's OOM killer would have stopped it). The need is the estimate of the plan as this machine runs it."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch", reason="the measure extra (torch) is not installed")
pytest.importorskip("transformers", reason="the measure extra (transformers) is not installed")
pytest.importorskip("peft", reason="the measure extra (peft) is not installed")

from vramplan.cli.parser import run
from vramplan.core.plan.helpers.units import GiB
from vramplan.core.plan.keys import apply_overrides
from vramplan.core.plan.schema.plan import default_plan
from vramplan.machine import host
from vramplan.measure.need import as_run_here, memory_need


def test_the_plan_as_run_here_is_one_unsharded_process() -> None:
    """The default plan (8 x A100, ZeRO-3) measured on the CPU: one process holds the whole model, so its need is
    the one-GPU unsharded estimate (LLaMA-7B full fine-tuning: 16 B per parameter and more)."""
    plan = apply_overrides(default_plan(), "llama-3.1-8b", None, ["hardware.gpus_per_node=8"])
    here, nproc = as_run_here(plan, "cpu", 0)
    assert nproc == 1 and here.hardware.total_gpus == 1 and here.strategy.zero_stage == 0
    need = memory_need(plan, "cpu", 0)
    assert need.total_bytes > 8.03e9 * 16  # 8.03 B parameters x 16 B (bf16 weights, fp32 master and Adam)
    assert 140 * GiB < need.total_bytes < 160 * GiB


def test_a_plan_past_the_host_memory_is_refused_before_building(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from vramplan.measure import run as measure_run

    def built(*args: object, **kwargs: object) -> None:
        raise ImportError("the measurement started")

    monkeypatch.setattr(host, "available_memory_bytes", lambda *a: 23 * GiB)
    monkeypatch.setattr(measure_run, "measure_plan", built)
    argv = ["measure", "--model", "llama-3.1-8b", "--gpus", "1", "--device", "cpu"]
    assert run(argv) == 2
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert "predicted peak here is 150." in line and "23.00 GiB of host memory available" in line, line
    assert "not built (--force runs it anyway)" in line and captured.out == ""
    assert run([*argv, "--force"]) == 2  # --force: past the check, to the (stubbed) measurement
    assert "the measurement started" in capsys.readouterr().err


def test_a_plan_within_the_host_memory_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from vramplan.measure import run as measure_run

    def built(*args: object, **kwargs: object) -> None:
        raise ImportError("the measurement started")

    monkeypatch.setattr(host, "available_memory_bytes", lambda *a: 1 << 40)
    monkeypatch.setattr(measure_run, "measure_plan", built)
    assert run(["measure", "--model", "llama-3.1-8b", "--gpus", "1", "--device", "cpu"]) == 2
    assert "the measurement started" in capsys.readouterr().err
