"""`measure_plan`: build the plan's model here and run warm-up plus N optimizer steps, measuring memory and time.

Each optimizer step runs the plan's ``grad_accum_steps`` micro-batches, as the oracle's profile pass does
(bench/measure/measure_step.py): forward with ``labels=input_ids`` (under autocast when the plan's precision has
one), loss = out.loss (/grad_accum_steps when > 1), ``del out``; ``loss.backward()`` and the loss dropped; then
``optimizer.step()`` and ``optimizer.zero_grad(set_to_none=True)``; every phase in its own meter range. Gradients
are read after the first backward, the optimizer state after the first step. The measured steps are the ones after
the warm-up: their highest allocated figure is the peak. Then one more forward under saved-tensor hooks counts the
activations (`vramplan.measure.saved`). A stop request (Ctrl-C) ends the run after the current phase: the report
is partial; an out-of-memory error ends it too, with the phase it stopped in: a result, not an exception."""

from __future__ import annotations

import gc
import platform
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from vramplan.core.plan.describe import plan_title
from vramplan.core.plan.schema.plan import Plan
from vramplan.measure.limitations import cannot_reproduce
from vramplan.measure.recipe import Recipe, recipe
from vramplan.measure.records import MeasureOptions, MeasureReport, Progress, RankFigures

ProgressFn = Callable[[Progress], None]
STACK = ("torch", "transformers", "peft")  # the distributions a report names the versions of (the measure extra)
PROFILED_STEPS = 2  # CPU: measured steps in the profiler's session (its events cost time; memory is steady by then)


class Stopped(Exception):
    """The stop event was set: the run ends after the phase that was running."""


@dataclass
class Run:
    """What one run has measured so far (filled as it goes, so a stopped or failed run still reports)."""

    recipe: Recipe
    options: MeasureOptions
    progress: ProgressFn | None
    stop: threading.Event | None
    phase: str = "build"
    steps_done: int = 0
    step_seconds: list[float] = field(default_factory=list)
    profiled_seconds: list[float] = field(default_factory=list)  # CPU: the measured steps run under the profiler
    params_bytes: int = 0
    grads_bytes: int | None = None
    optimizer_bytes: int | None = None
    activations: dict[str, Any] | None = None
    built_params: int | None = None
    oom_phase: str | None = None
    oom_allocated_bytes: int | None = None
    partial: bool = False
    notes: list[str] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)

    @property
    def total_steps(self) -> int:
        return self.options.warmup + self.options.steps

    def say(self, phase: str, message: str) -> None:
        if self.progress is not None:
            self.progress(Progress(phase, self.steps_done, self.total_steps, message))

    def check_stop(self) -> None:
        if self.stop is not None and self.stop.is_set():
            raise Stopped


def measure_plan(
    plan: Plan,
    options: MeasureOptions,
    progress: ProgressFn | None = None,
    stop: threading.Event | None = None,
) -> MeasureReport:
    """Measure `plan` on ``options.device``. `progress` is called from the measuring thread (building, each warm-up
    and measured step); when `stop` is set the run ends after the current phase and the report is ``partial``.
    An out-of-memory error is a result (``RankFigures.oom_phase``), not an exception. Raises ImportError when the
    ``measure`` extra (torch, transformers, peft) is not installed."""
    from vramplan.measure import cuda, distributed

    device = options.device
    gpus = cuda.local_gpus()
    lines = cannot_reproduce(plan, device, gpus)
    run = Run(recipe(plan), options, progress, stop)
    meter: Any = cuda.CudaMeter() if device == "cuda" else _cpu_meter()
    run.say("building", f"building {plan_title(plan)} on {device} (random weights)")
    meter.start()
    built = None
    try:
        try:
            built = _build(run, device)
            if distributed.is_worker():  # one rank of a multi-GPU plan: sharded before its first step
                built = distributed.shard_built(built, plan, device)
                from vramplan.measure.tensors import params_info

                run.params_bytes = params_info(built.model)["bytes"]
            _steps(run, built, meter, device)
            meter.stop()  # the CPU profiler's session ends with the measured steps
            run.phase = "activations"
            run.check_stop()
            run.say("activations", "one more forward under saved-tensor hooks: the activations")
            if distributed.is_sharded(built.model):  # FSDP2's gathered weights would count as saved tensors
                run.notes.append("activations: not counted in a sharded (FSDP2) run; see max_allocated")
            else:
                run.activations = _saved(run, built, device)
        except Stopped:
            run.partial = True
        except Exception as exc:
            if not _is_oom(exc, device):
                raise
            run.oom_phase = run.phase
            run.oom_allocated_bytes = meter.allocated_bytes() if device == "cuda" else None
            first = (str(exc).splitlines() or [type(exc).__name__])[0]
            run.notes.append(f"out of memory in {run.phase}: {first[:200]}")
    finally:
        meter.stop()
        figures = _figures(run, meter, device)
        from vramplan.measure.build import free

        free(built)
        del built
        gc.collect()
        if device == "cuda":
            cuda.empty_cache()
    run.say("stopped" if run.partial else "done", "stopped" if run.partial else "done")
    return MeasureReport(
        plan_summary=plan_title(plan),
        device=device,
        ranks=distributed.gather_figures(figures) if distributed.is_worker() else (figures,),
        cannot_reproduce=lines,
        partial=run.partial,
        versions=versions(),
        machine=_machine(device),
        before_free_bytes=(meter.total_bytes - meter.before_used_bytes) if device == "cuda" else None,
        total_device_bytes=meter.total_bytes if device == "cuda" else None,
        steps_done=run.steps_done,
        steps_planned=run.total_steps,
        tokens_per_step=run.recipe.tokens_per_step,
        notes=tuple(run.notes),
    )


def _cpu_meter() -> Any:
    from vramplan.measure.cpu import CpuProfiler

    return CpuProfiler()


def _is_oom(exc: BaseException, device: str) -> bool:
    from vramplan.measure import cpu, cuda

    return cuda.is_out_of_memory(exc) if device == "cuda" else cpu.is_out_of_memory(exc)


def _build(run: Run, device: str) -> Any:
    from vramplan.measure.build import build
    from vramplan.measure.tensors import params_info

    run.phase = "build"
    built = build(run.recipe, device, run.options.seed)
    run.built_params = built.built_params
    run.params_bytes = params_info(built.model)["bytes"]
    if built.built_params != run.recipe.expected_params:
        run.notes.append(
            f"transformers built {built.built_params:,} parameters, the plan counts {run.recipe.expected_params:,}"
        )
    run.check_stop()
    return built


def _steps(run: Run, built: Any, meter: Any, device: str) -> None:
    """Warm-up plus measured optimizer steps, each phase in a meter range; stop checked after every phase."""
    from vramplan.measure.build import autocast
    from vramplan.measure.forward import forward_loss
    from vramplan.measure.tensors import grads_info, optimizer_state

    model, opt, ids, labels = built.model, built.optimizer, built.ids, built.labels
    ga = run.recipe.grad_accum_steps
    for step in range(1, run.total_steps + 1):
        t0 = time.perf_counter()
        for mb in range(1, ga + 1):
            run.phase = "forward"
            with meter.phase(step, "forward", mb), autocast(run.recipe, device):
                loss = forward_loss(model, ids, labels, ga)
            run.check_stop()
            run.phase = "backward"
            with meter.phase(step, "backward", mb):
                loss.backward()
            if step == 1 and mb == 1:
                run.grads_bytes = grads_info(model)["bytes"]
            run.losses.append(float(loss.item()))
            del loss
            run.check_stop()
        run.phase = "optimizer"
        with meter.phase(step, "optimizer", 0):
            opt.step()
        if step == 1:
            run.optimizer_bytes = optimizer_state(opt)["bytes"]
        with meter.phase(step, "zero_grad", 0):
            opt.zero_grad(set_to_none=True)
        if device == "cuda":
            from vramplan.measure.cuda import synchronize

            synchronize()
        seconds = time.perf_counter() - t0
        run.steps_done = step
        kind = "warm-up" if step <= run.options.warmup else "step"
        if step > run.options.warmup:
            run.step_seconds.append(seconds)
        if device == "cpu" and step == run.options.warmup + PROFILED_STEPS and step < run.total_steps:
            meter.stop()  # the later steps run, and are timed, without the profiler
            run.profiled_seconds, run.step_seconds = run.step_seconds, []
        run.say("warmup" if kind == "warm-up" else "step", f"{kind} {step}/{run.total_steps}: {seconds:.3f} s")
        run.check_stop()


def _saved(run: Run, built: Any, device: str) -> dict[str, Any]:
    from vramplan.measure.build import autocast
    from vramplan.measure.saved import saved_pass

    r = run.recipe
    return saved_pass(built.model, built.ids, built.labels, autocast(r, device), r.grad_accum_steps, r.vocab_size)


def _figures(run: Run, meter: Any, device: str) -> RankFigures:
    """The rank's figures from what the run and its meter recorded (the measured steps only for the peaks)."""
    measured = [p for p in _phases(meter, device) if p["step"] > run.options.warmup]
    seconds = run.step_seconds or run.profiled_seconds
    step_time = statistics.median(seconds) if seconds else None
    peak = max(measured, key=lambda p: p["peak"], default=None)
    reserved = max((p.get("reserved_peak") or p["peak"] for p in measured), default=None)
    return RankFigures(
        rank=0,
        params_bytes=run.params_bytes,
        grads_bytes=run.grads_bytes,
        optimizer_bytes=run.optimizer_bytes,
        activation_peak_bytes=run.activations["bytes"] if run.activations else None,
        max_allocated_bytes=peak["peak"] if peak else None,
        max_reserved_bytes=reserved,
        process_bytes=meter.process_bytes() if device == "cuda" else None,
        step_time_s=step_time,
        tokens_per_s=run.recipe.tokens_per_step / step_time if step_time else None,
        oom_phase=run.oom_phase,
        oom_allocated_bytes=run.oom_allocated_bytes,
        peak_phase=peak["phase"] if peak else None,
        process_source=meter.process_source if device == "cuda" else None,
        logits_bytes=run.activations["logits_like_bytes"] if run.activations else None,
        weight_copy_bytes=run.activations["excluded"]["param_copy"] if run.activations else None,
    )


def _phases(meter: Any, device: str) -> list[dict[str, Any]]:
    if device == "cuda":
        return list(meter.phases)
    fig = meter.figures()
    return [] if fig is None else [{"step": p.step, **p.to_json()} for s in fig.steps for p in s.phases]


def versions(names: tuple[str, ...] = STACK) -> dict[str, str]:
    """The installed versions of the distributions `names` and Python's (read from the metadata: importing peft alone
    takes seconds). Raises `importlib.metadata.PackageNotFoundError` for one that is not installed."""
    out = {name: metadata.version(name) for name in names}
    return {**out, "python": platform.python_version()}


def _machine(device: str) -> str:
    if device == "cuda":
        import torch

        return f"{platform.node()}: {torch.cuda.get_device_name()}"
    return f"{platform.node()}: CPU ({platform.processor() or platform.machine()})"
