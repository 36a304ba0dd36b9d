"""The records of `vramplan measure`: what to measure (`MeasureOptions`), what it says while running (`Progress`),
what one GPU (or the CPU) measured (`RankFigures`) and the whole report (`MeasureReport`). Pure Python: no torch,
so the CLI, the TUI and the tests can hold and print them without the ``measure`` extra."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Device = Literal["cuda", "cpu"]


@dataclass(frozen=True)
class MeasureOptions:
    """How to run the measurement: where (``cuda`` or ``cpu``), how many measured optimizer steps after the
    warm-up steps (each step runs the plan's ``grad_accum_steps`` micro-batches), and the random seed."""

    device: Device = "cuda"
    steps: int = 3
    warmup: int = 1
    seed: int = 0


@dataclass(frozen=True)
class Progress:
    """One progress event: ``phase`` is ``building``, ``warmup``, ``step``, ``done`` or ``stopped``; ``step`` of
    ``total`` counts the optimizer steps (warm-up included); ``message`` is the line to show."""

    phase: str
    step: int
    total: int
    message: str


@dataclass(frozen=True)
class RankFigures:
    """What one GPU (rank) measured, in bytes and seconds; None where the figure was not measured.

    params/grads/optimizer: the storages of the parameters, the ``.grad`` tensors after the first backward and the
    optimizer's state tensors after the first ``step()``; activation_peak: the bytes saved for backward by one
    micro-batch's forward (saved-tensor hooks on the CPU; forward-end minus forward-start allocated on CUDA);
    max_allocated / max_reserved: the allocator's peaks over the measured steps (torch.cuda.max_memory_allocated
    / max_memory_reserved; on the CPU the profiler's running total, reserved = allocated); process: what
    nvidia-smi shows for this process (mem_get_info's used bytes during minus before, CUDA only); step_time_s:
    median over the measured steps; oom_phase: where an out-of-memory error stopped it (``build``, ``forward``,
    ``backward``, ``optimizer``), else None."""

    rank: int
    params_bytes: int
    grads_bytes: int | None
    optimizer_bytes: int | None
    activation_peak_bytes: int | None
    max_allocated_bytes: int | None
    max_reserved_bytes: int | None
    process_bytes: int | None
    step_time_s: float | None
    tokens_per_s: float | None
    oom_phase: str | None = None
    oom_allocated_bytes: int | None = None  # allocated when the OOM was raised
    peak_phase: str | None = None  # the phase of the step whose allocation reached max_allocated
    process_source: str | None = None  # nvidia-smi | mem_get_info (the driver's used bytes: without the context)
    nccl_bytes: int | None = None  # NCCL's own buffers on this GPU (multi-GPU runs: driver's used bytes around init)
    logits_bytes: int | None = None  # of activation_peak: the saved tensors whose last dimension is the vocabulary
    weight_copy_bytes: int | None = None  # saved 16-bit copies of weights (autocast), not in activation_peak

    @property
    def layer_activation_bytes(self) -> int | None:
        """What the estimate's ``activations`` kind counts: the saved activations less the logits-like tensors
        (its ``logits`` kind; autocast's saved weight copies are not in either)."""
        if self.activation_peak_bytes is None:
            return None
        return self.activation_peak_bytes - (self.logits_bytes or 0)

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "params_bytes": self.params_bytes,
            "grads_bytes": self.grads_bytes,
            "optimizer_bytes": self.optimizer_bytes,
            "activation_peak_bytes": self.activation_peak_bytes,
            "max_allocated_bytes": self.max_allocated_bytes,
            "max_reserved_bytes": self.max_reserved_bytes,
            "process_bytes": self.process_bytes,
            "step_time_s": self.step_time_s,
            "tokens_per_s": self.tokens_per_s,
            "oom_phase": self.oom_phase,
            "oom_allocated_bytes": self.oom_allocated_bytes,
            "peak_phase": self.peak_phase,
            "process_source": self.process_source,
            "nccl_bytes": self.nccl_bytes,
            "logits_bytes": self.logits_bytes,
            "weight_copy_bytes": self.weight_copy_bytes,
            "layer_activation_bytes": self.layer_activation_bytes,
        }


@dataclass(frozen=True)
class MeasureReport:
    """The measurement of a plan: one `RankFigures` per GPU measured (one on the CPU), what the plan asks that this
    machine could not reproduce (listed before anything ran), whether it was stopped before the end (Ctrl-C), the
    versions of the stack and this machine's name. ``steps_done`` counts completed optimizer steps (warm-up
    included); ``before_free_bytes`` / ``total_device_bytes`` come from mem_get_info before the build (CUDA)."""

    plan_summary: str
    device: Device
    ranks: tuple[RankFigures, ...]
    cannot_reproduce: tuple[str, ...]
    partial: bool
    versions: dict[str, str]
    machine: str
    before_free_bytes: int | None = None
    total_device_bytes: int | None = None
    steps_done: int = 0
    steps_planned: int = 0
    tokens_per_step: int = 0
    notes: tuple[str, ...] = field(default=())

    @property
    def oom(self) -> bool:
        return any(r.oom_phase is not None for r in self.ranks)

    @property
    def worst(self) -> RankFigures | None:
        """The rank with the highest allocated peak (the one that limits the plan)."""
        if not self.ranks:
            return None
        return max(self.ranks, key=lambda r: r.max_allocated_bytes or 0)

    def to_json(self) -> dict[str, Any]:
        return {
            "plan": self.plan_summary,
            "device": self.device,
            "partial": self.partial,
            "oom": self.oom,
            "steps_done": self.steps_done,
            "steps_planned": self.steps_planned,
            "tokens_per_step": self.tokens_per_step,
            "cannot_reproduce": list(self.cannot_reproduce),
            "ranks": [r.to_json() for r in self.ranks],
            "versions": dict(self.versions),
            "machine": self.machine,
            "before_free_bytes": self.before_free_bytes,
            "total_device_bytes": self.total_device_bytes,
            "notes": list(self.notes),
        }
