"""`calibration_from_report` (issue 29, point 5): a measured report's overheads, and the reports that give none."""

from __future__ import annotations

from dataclasses import replace

import pytest

from vramplan.core.files.calibration import apply_calibration
from vramplan.core.memory.peak import estimate
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.helpers.units import GiB, MiB
from vramplan.core.plan.schema.plan import plan_from_dict
from vramplan.measure.calibrate import calibration_from_report
from vramplan.measure.records import MeasureReport, RankFigures

PLAN = plan_from_dict({"model": {"preset": "llama-3.2-1b"}, "hardware": {"gpu": "h100-80gb", "gpus_per_node": 1}})
RANK = RankFigures(
    rank=0,
    params_bytes=5 * GiB,
    grads_bytes=5 * GiB,
    optimizer_bytes=10 * GiB,
    activation_peak_bytes=1 * GiB,
    max_allocated_bytes=20 * GiB,
    max_reserved_bytes=21 * GiB,
    process_bytes=21 * GiB + 500 * MiB,  # nvidia-smi: reserved + 500 MiB of context and kernels
    step_time_s=0.5,
    tokens_per_s=4096.0,
    process_source="nvidia-smi",
)
REPORT = MeasureReport(
    plan_summary="Llama-3.2-1B on 1 x H100",
    device="cuda",
    ranks=(RANK,),
    cannot_reproduce=(),
    partial=False,
    versions={"torch": "2.8.0+cu128"},
    machine="node-7: NVIDIA H100 80GB HBM3",
    steps_done=4,
    steps_planned=4,
)


def test_a_cuda_report_gives_context_and_allocator_gap() -> None:
    cal = calibration_from_report(REPORT, PLAN, estimate(PLAN), created="2026-12-03T14:00:00Z")
    assert cal.cuda_context_bytes == 500 * MiB  # 21.5 GiB process - 21 GiB reserved
    assert (cal.allocator_gap_bytes, cal.allocated_peak_bytes) == (1 * GiB, 20 * GiB)
    assert cal.allocator_reserve_percent == 5.0  # 1 / 20
    assert cal.nccl_bytes_per_group is None  # one rank: no NCCL
    assert (cal.gpu, cal.machine, cal.torch_version) == ("NVIDIA H100 80GB HBM3", "node-7", "2.8.0+cu128")
    calibrated = apply_calibration(PLAN, cal).overhead
    assert (calibrated.cuda_context_mib, calibrated.allocator_reserve_percent) == (500, 5.0)


def test_two_ranks_give_nccl_per_process_group() -> None:
    """2 GPUs, ZeRO-3: one data-parallel group. The process holds 21.5 GiB: 21 GiB reserved, 300 MiB NCCL, so
    the context is the other 200 MiB."""
    plan = plan_from_dict({"model": {"preset": "llama-3.2-1b"}, "hardware": {"gpus_per_node": 2}})
    ranks = tuple(replace(RANK, rank=i, nccl_bytes=300 * MiB) for i in range(2))
    cal = calibration_from_report(replace(REPORT, ranks=ranks), plan, estimate(plan))
    assert (cal.nccl_bytes_per_group, cal.cuda_context_bytes) == (300 * MiB, 200 * MiB)
    assert apply_calibration(plan, cal).overhead.nccl_mib_per_group == 300


def test_the_worst_rank_is_used() -> None:
    small = replace(RANK, rank=1, max_allocated_bytes=10 * GiB, max_reserved_bytes=10 * GiB, process_bytes=11 * GiB)
    report = replace(REPORT, ranks=(small, RANK))
    assert calibration_from_report(report, PLAN, estimate(PLAN)).allocated_peak_bytes == 20 * GiB


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"device": "cpu"}, "needs a CUDA measurement"),
        ({"ranks": (replace(RANK, oom_phase="backward"),)}, "ran out of memory"),
        ({"steps_done": 0, "partial": True}, "no step was measured"),
        ({"ranks": (replace(RANK, process_bytes=None),)}, "nvidia-smi did not list"),
        ({"ranks": (replace(RANK, process_source="mem_get_info"),)}, "nvidia-smi did not list"),
    ],
)
def test_reports_that_give_no_calibration(change: dict[str, object], said: str) -> None:
    with pytest.raises(PlanError, match=said):
        calibration_from_report(replace(REPORT, **change), PLAN, estimate(PLAN))  # type: ignore[arg-type]
