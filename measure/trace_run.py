"""`trace_plan`: run the plan's step at full size on fake tensors, record every allocation and free, replay them
through the caching allocator model and compare with the estimate (`vramplan.measure.trace_analysis`).

Each optimizer step runs the plan's ``grad_accum_steps`` micro-batches as `vramplan measure` runs them
(`vramplan.measure.run`): a batch of ``micro_batch_size`` x the drawn length, forward (``labels=input_ids``, under
autocast when the precision has one) and the loss divided by the accumulation steps, backward, then
``optimizer.step()`` and ``zero_grad(set_to_none=True)``. A step whose lengths were already traced is not run
again: its events are the traced step's, repeated (a steady step allocates and frees the same), less what that
step left allocated (the optimizer's state step 1 creates). A stop request (Ctrl-C) ends the run within a few
thousand ops: the report is partial."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass, field
from typing import Any

from vramplan.core.plan.describe import plan_title
from vramplan.core.plan.schema.plan import Plan
from vramplan.measure.records import Progress
from vramplan.measure.trace_records import TraceOptions, TraceReport

ProgressFn = Callable[[Progress], None]


class Stopped(Exception):
    """The stop event was set: the trace ends where it is."""


@dataclass
class Traced:
    """What the run recorded: the recorder, which steps were traced (1-based) and their lengths, the steps to
    replay as (traced step it repeats, its lengths), the saved-for-backward allocation ids of the last forward."""

    rec: Any
    lengths: tuple[tuple[int, ...], ...]
    traced_steps: list[int] = field(default_factory=list)
    plan_of_steps: list[int] = field(default_factory=list)  # for each step to replay, the traced step it is
    partial: bool = False
    built_params: int = 0
    seconds: float = 0.0
    notes: tuple[str, ...] = ()


def steps_to_trace(lengths: tuple[tuple[int, ...], ...]) -> list[int]:
    """For each step (0-based), the step whose trace it replays: itself when it must run (its lengths are new),
    else the first step with the same lengths (repeated without what that step left allocated: the optimizer's
    state that step 1 creates)."""
    out: list[int] = []
    first: dict[tuple[int, ...], int] = {}
    for k, ls in enumerate(lengths):
        out.append(first.setdefault(ls, k))
    return out


def run_trace(
    plan: Plan, options: TraceOptions, progress: ProgressFn | None = None, stop: threading.Event | None = None
) -> Traced:
    """Build the plan's model on fake tensors and run its steps under the recorder."""
    import torch

    from vramplan.measure.fake_build import build_fake
    from vramplan.measure.recipe import recipe
    from vramplan.measure.trace_dist import Parallel, fake_group, running
    from vramplan.measure.trace_kernels import AutocastAsCuda
    from vramplan.measure.trace_limits import parallel_mode
    from vramplan.measure.tracer import ModuleNames, Recorder

    t0 = time.perf_counter()
    r = recipe(plan) if options.raw_config is None else raw_recipe(recipe(plan), options.raw_config)
    lengths = options.lengths.draw(r.seq_len, options.steps, r.grad_accum_steps, options.seed)
    plan_of = steps_to_trace(lengths)
    to_run = sorted(set(plan_of))

    def check() -> None:
        if stop is not None and stop.is_set():
            raise Stopped

    def say(message: str, step: int = 0) -> None:
        if progress is not None:
            progress(Progress("trace", step, len(to_run), message))

    from vramplan.core.plan.catalogue import presets

    generation = presets.gpu(plan.hardware.gpu).generation
    hopper = generation not in ("ampere", "turing", "volta", "ada", "cdna2", "cdna3")
    mode = parallel_mode(plan)
    par = Parallel(mode, plan.data_parallel, plan) if mode in ("fsdp2", "ddp") else None
    rec = Recorder(cuda=options.kernels == "cuda", hopper=hopper, stop_check=check, gathers=mode == "fsdp2")
    out = Traced(rec, lengths, plan_of_steps=plan_of)
    title = plan_title(plan) if options.raw_config is None else f"model_type {r.model_type}"
    say(f"building {title} on fake tensors (nothing is allocated)")
    try:
        with ExitStack() as stack:
            if par is not None:
                stack.enter_context(fake_group(par.world))
            stack.enter_context(rec.resizing())
            built = build_fake(r, rec, par)
            out.built_params, out.notes = built.built_params, built.notes
            say(f"built: {built.built_params:,} parameters in {time.perf_counter() - t0:.1f} s")
            stack.enter_context(built.mode)
            stack.enter_context(rec)
            names = stack.enter_context(ModuleNames(built.model, rec))
            if options.kernels == "cuda" and r.autocast:
                stack.enter_context(AutocastAsCuda())
            stack.enter_context(_unpacked_batches())
            stack.enter_context(running(built.runner))
            for n, k in enumerate(to_run, start=1):
                ts = time.perf_counter()
                _one_step(r, built, rec, names, k + 1, lengths[k], torch, par)
                out.traced_steps.append(k + 1)
                say(f"step {k + 1} traced ({n}/{len(to_run)}): {time.perf_counter() - ts:.1f} s", n)
                check()
    except Stopped:
        out.partial = True
    except Exception:
        if stop is None or not stop.is_set():
            raise
        out.partial = True  # the stop raised inside autograd's engine, which may re-raise it as another type
    rec.closed = True
    rec.settle_roles()
    out.seconds = time.perf_counter() - t0
    return out


def raw_recipe(r: Any, raw: dict[str, Any]) -> Any:
    """The plan's recipe with the model of a config.json vramplan has no formula family for: transformers builds it
    from every key of the file (less what would load code, weights or a quantization: `recipe.FILE_ONLY`), LoRA
    targets PEFT's ``all-linear``."""
    import dataclasses

    from vramplan.measure.recipe import FILE_ONLY

    return dataclasses.replace(
        r,
        model_type=raw["model_type"],
        config={k: v for k, v in raw.items() if k not in FILE_ONLY},
        hf_config_path=None,
        expected_params=0,
        vocab_size=int(raw.get("vocab_size") or r.vocab_size),
        experts=None,
    )


def _unpacked_batches() -> Any:
    """transformers reads position ids to find packed sequences, and takes any fake tensor for a traced graph whose
    values it cannot read (masking_utils.find_packed_sequence_indices, ``is_tracing``), so it would build a full
    [b, 1, s, s] mask a real run skips: the traced batches hold one sequence per row, as the plan's do."""
    from unittest import mock

    import transformers.masking_utils as mu

    if not hasattr(mu, "find_packed_sequence_indices"):
        return nullcontext()
    return mock.patch.object(mu, "find_packed_sequence_indices", lambda position_ids: None)


def _one_step(
    r: Any, built: Any, rec: Any, names: Any, step: int, lengths: tuple[int, ...], torch: Any, par: Any = None
) -> None:
    """One optimizer step of the recipe's micro-batches (`lengths`: each one's tokens)."""
    from vramplan.measure.build import autocast
    from vramplan.measure.forward import forward_loss
    from vramplan.measure.trace_dist import micro_batch

    model, opt, ga = built.model, built.optimizer, r.grad_accum_steps
    runner = built.runner if built.runner is not None else model
    for mb, s in enumerate(lengths, start=1):
        with micro_batch(runner, par, last=mb == len(lengths)):
            rec.set_phase("forward", step, mb)
            ids = torch.randint(0, r.vocab_size, (r.micro_batch_size, s), dtype=torch.int64)
            labels = ids.clone()
            rec.mark((ids, labels), "input")
            with autocast(r, "cpu"):
                loss = forward_loss(runner, ids, labels, ga)
            rec.set_phase("backward", step, mb)
            loss.backward()
            del loss, ids, labels
            names.clear_grad_hooks()
    rec.mark((p.grad for p in model.parameters() if p.grad is not None), "gradient")
    rec.set_phase("optimizer", step)
    built.grads_to_shards()
    opt.step()
    rec.mark((v for st in opt.state.values() for v in st.values() if isinstance(v, torch.Tensor)), "optimizer_state")
    rec.set_phase("zero_grad", step)
    opt.zero_grad(set_to_none=True)
    built.clear_grads()


def trace_plan(
    plan: Plan, options: TraceOptions, progress: ProgressFn | None = None, stop: threading.Event | None = None
) -> TraceReport:
    """Trace `plan` (see the module docstring) and compare with its estimate. Raises ImportError without the
    ``measure`` extra."""
    from vramplan.measure.trace_analysis import analyse

    traced = run_trace(plan, options, progress, stop)
    if progress is not None:
        progress(Progress("replay", 0, 0, f"replaying {len(traced.rec.events):,} events through the allocator"))
    return analyse(plan, options, traced)
