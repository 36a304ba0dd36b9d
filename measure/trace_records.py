"""The records of `vramplan trace`: what to trace (`TraceOptions`), what one traced plan gives (`TraceReport`: the
peaks by phase, role and module beside the estimate's, each difference named). Pure Python: no torch, so the CLI, the
TUI and the tests can hold and print them without the ``measure`` extra."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from vramplan.measure.lengths import Lengths

Kernels = Literal["cuda", "cpu"]


@dataclass(frozen=True)
class TraceOptions:
    """``steps``: optimizer steps replayed (each runs the plan's micro-batches); ``lengths``: each micro-batch's
    sequence length (`vramplan.measure.lengths`); ``kernels``: ``cuda`` (the CUDA kernels' allocations and the
    caching allocator's blocks) or ``cpu`` (as the CPU runs it: what ``vramplan measure --device cpu`` measures);
    ``alloc_conf``: a PYTORCH_CUDA_ALLOC_CONF value for the replay; ``unlimited_memory``: replay without the GPU's
    capacity (no out-of-memory error, no release-and-retry: the peak of a plan larger than its GPU); ``raw_config``:
    the model is this config.json's (any model_type transformers builds; the plan gives the rest)."""

    steps: int = 2
    lengths: Lengths = field(default_factory=lambda: Lengths("plan"))
    kernels: Kernels = "cuda"
    alloc_conf: str = ""
    seed: int = 0
    unlimited_memory: bool = False
    raw_config: dict[str, Any] | None = None  # a config.json of a model without a formula family (`raw_recipe`)


@dataclass(frozen=True)
class PhasePeak:
    """The highest allocated and reserved bytes while one phase of one step ran."""

    step: int
    phase: str
    allocated: int
    reserved: int

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "phase": self.phase,
            "allocated_bytes": self.allocated,
            "reserved_bytes": self.reserved,
        }


@dataclass(frozen=True)
class Difference:
    """One row of the comparison: a quantity traced and estimated, and what makes them differ (empty: agree)."""

    name: str
    traced: int
    estimated: int
    why: str = ""

    @property
    def error(self) -> float | None:
        """(estimated - traced) / traced, as `vramplan measure` reports its errors."""
        return None if not self.traced else (self.estimated - self.traced) / self.traced

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "traced_bytes": self.traced,
            "estimated_bytes": self.estimated,
            "error": self.error,
            "why": self.why,
        }


@dataclass(frozen=True)
class TraceReport:
    """One traced plan, per GPU (one rank: every rank of a data-parallel plan holds the same).

    ``peak_allocated`` / ``peak_reserved``: the replayed allocator's peaks over the steps (on ``cpu`` kernels,
    reserved = allocated = the tensors' bytes); ``tensor_peak``: the most bytes of live storages, unrounded;
    ``by_role`` / ``by_module``: what was live at the allocated peak; ``saved_by_op``: what the last traced forward
    left for its backward, by module and op; ``adjustments``: parts taken from the estimate (what cannot run on
    fake tensors), already in the peaks; ``failures``: requests the allocator could not place on the GPU."""

    plan_summary: str
    kernels: Kernels
    gpu: str
    alloc_conf: str
    steps: int
    steps_traced: int
    lengths: tuple[tuple[int, ...], ...]
    peak_allocated: int
    peak_reserved: int
    peak_phase: str
    peak_step: int
    tensor_peak: int
    fragmentation: float
    capacity_bytes: int | None
    largest_failed: int
    failures: int
    phases: tuple[PhasePeak, ...]
    by_role: dict[str, int]
    by_module: tuple[tuple[str, int], ...]
    saved_by_op: tuple[tuple[str, str, int], ...]
    estimate_allocated: int
    estimate_reserved: int
    differences: tuple[Difference, ...]
    not_traced: tuple[str, ...]
    corrections: tuple[str, ...]
    adjustments: tuple[tuple[str, int], ...] = ()
    partial: bool = False
    events: int = 0
    ops: int = 0
    seconds: float = 0.0
    versions: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    @property
    def oom(self) -> bool:
        return self.failures > 0

    @property
    def has_estimate(self) -> bool:
        """False for a model without a formula family (traced from its config.json alone)."""
        return self.estimate_allocated > 0

    def to_json(self) -> dict[str, Any]:
        return {
            "plan": self.plan_summary,
            "kernels": self.kernels,
            "gpu": self.gpu,
            "alloc_conf": self.alloc_conf,
            "partial": self.partial,
            "steps": self.steps,
            "steps_traced": self.steps_traced,
            "lengths": [list(s) for s in self.lengths],
            "traced": {
                "peak_allocated_bytes": self.peak_allocated,
                "peak_reserved_bytes": self.peak_reserved,
                "peak_phase": self.peak_phase,
                "peak_step": self.peak_step,
                "tensor_peak_bytes": self.tensor_peak,
                "fragmentation": self.fragmentation,
                "capacity_bytes": self.capacity_bytes,
                "oom": self.oom,
                "failed_requests": self.failures,
                "largest_failed_bytes": self.largest_failed,
                "phases": [p.to_json() for p in self.phases],
                "by_role_bytes": dict(self.by_role),
                "by_module_bytes": dict(self.by_module),
                "saved_by_op": [{"module": m, "op": o, "bytes": n} for m, o, n in self.saved_by_op],
                "adjustments_bytes": dict(self.adjustments),
            },
            "estimate": {"allocated_bytes": self.estimate_allocated, "reserved_bytes": self.estimate_reserved},
            "differences": [d.to_json() for d in self.differences],
            "not_traced": list(self.not_traced),
            "cuda_corrections": list(self.corrections),
            "events": self.events,
            "ops": self.ops,
            "seconds": self.seconds,
            "versions": dict(self.versions),
            "notes": list(self.notes),
        }
