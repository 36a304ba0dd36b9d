"""Display text for the planner: GiB with a fixed number of decimals, model and GPU names. No Textual."""

from __future__ import annotations

from core import presets
from core.plan import Plan
from core.units import GiB


def gib(n_bytes: int, digits: int = 1) -> str:
    """``16.6`` (GiB, no unit): the planner's per-GPU figures use the same rounding as ``--json`` / GiB."""
    return f"{n_bytes / GiB:.{digits}f}"


def gpu_name(plan: Plan) -> str:
    return presets.gpu(plan.hardware.gpu).name


def parallel_summary(plan: Plan) -> str:
    s = plan.strategy
    parts = [f"DP {plan.data_parallel}"]
    if s.tensor_parallel > 1:
        parts.append(f"TP {s.tensor_parallel}" + ("+SP" if s.sequence_parallel else ""))
    if s.pipeline_parallel > 1:
        parts.append(f"PP {s.pipeline_parallel}")
    if s.zero_stage:
        parts.append(f"ZeRO-{s.zero_stage}")
    return ", ".join(parts)


_VENDOR_PREFIXES = ("NVIDIA ", "AMD Instinct ", "AMD ", "GeForce ", "Tesla ")


def short_gpu_name(name: str) -> str:
    """``H100 80GB SXM5`` for ``NVIDIA H100 80GB SXM5``: lists and the palette have little room."""
    for prefix in _VENDOR_PREFIXES:
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name
