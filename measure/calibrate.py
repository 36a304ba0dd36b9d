"""``vramplan measure --save-calibration FILE``: what this machine added beyond the step's tensors, from a measurement
(`calibration_from_report`), as the `vramplan.core.files.calibration.Calibration` later estimates apply.

From the worst rank (the highest allocated peak): the CUDA context and kernels are what the process holds on the
GPU (nvidia-smi's figure) beyond the caching allocator's ``max_memory_reserved`` and NCCL's buffers; the allocator
gap is ``max_memory_reserved - max_memory_allocated`` over the allocated peak; NCCL's buffers are the driver's
used bytes gained around the first collective (multi-GPU runs only), per process group. The step time (the worst
rank's median over the measured steps) is kept beside what the time model gives for the same plan, the part of
it a measurement covers, and the plan's GPU preset and stack (`core.time.anchor`). Pure Python: the report is
already measured."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vramplan.core.files.calibration import Calibration, StepTiming
from vramplan.core.files.planfile import utc_now, vramplan_version
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.helpers.units import MiB
from vramplan.core.plan.schema.plan import Plan

if TYPE_CHECKING:
    from vramplan.core.memory.record import Estimate
    from vramplan.measure.records import MeasureReport


def _groups(plan: Plan, est: Estimate) -> int:
    """The process groups the estimate gives NCCL buffers (its ``nccl`` term over ``nccl_mib_per_group``), at
    least 1."""
    per = plan.overhead.nccl_mib_per_group * MiB
    return max(1, est.overhead_bytes.get("nccl", 0) // per) if per else 1


def calibration_from_report(
    report: MeasureReport, plan: Plan, est: Estimate, created: str | None = None
) -> Calibration:
    """The calibration a completed CUDA measurement gives; a `PlanError` (one line) when it gives none: on the
    CPU, after an out-of-memory error or a stop before a step was measured, or without nvidia-smi's figure of the
    process (the driver's used bytes, read after the context was made, leave the context out)."""
    where = "--save-calibration"
    if report.device != "cuda":
        raise PlanError("needs a CUDA measurement (--device cuda): the CPU has no CUDA context or allocator", where)
    if report.oom:
        raise PlanError("the measurement ran out of memory: calibrate with a plan that fits", where)
    worst = report.worst
    if worst is None or report.steps_done < 1 or worst.max_reserved_bytes is None or worst.max_allocated_bytes is None:
        raise PlanError("no step was measured (stopped before the first): nothing to calibrate", where)
    if worst.process_bytes is None or worst.process_source != "nvidia-smi":
        raise PlanError(
            "nvidia-smi did not list this process, so its CUDA context was not measured: nothing written", where
        )
    nccl = worst.nccl_bytes if len(report.ranks) > 1 else None
    context = max(0, worst.process_bytes - worst.max_reserved_bytes - (nccl or 0))
    host, _, gpu = report.machine.partition(": ")  # run.py's "host: GPU name"
    timing = step_timing(worst.step_time_s, plan)
    return Calibration(
        cuda_context_bytes=context,
        allocator_gap_bytes=max(0, worst.max_reserved_bytes - worst.max_allocated_bytes),
        allocated_peak_bytes=max(1, worst.max_allocated_bytes),
        nccl_bytes_per_group=None if nccl is None else nccl // _groups(plan, est),
        gpu=report.versions.get("gpu", gpu),
        machine=host,
        torch_version=report.versions.get("torch", ""),
        created=created or utc_now(),
        vramplan_version=vramplan_version(),
        plan=report.plan_summary,
        time=timing,
    )


def step_timing(measured_s: float | None, plan: Plan) -> StepTiming | None:
    """The ``[time]`` table of a step measured at ``measured_s`` (None when no time was measured or the model's
    link-bound terms alone exceed it: `core.time.anchor.anchor_of`)."""
    from vramplan.core.time.anchor import anchor_of
    from vramplan.core.time.step import step_time

    if measured_s is None or measured_s <= 0:
        return None
    bare = plan.with_changes({"overhead.step_time_factor": None})  # the model's own time, not a previous anchor's
    a = anchor_of(measured_s, step_time(bare).terms)
    if a is None:
        return None
    return StepTiming(a.measured_s, a.modelled_s, a.covered_s, plan.hardware.gpu, plan.stack.framework)
