"""``vramplan trace [PLAN]``: the plan's real step at full size on fake tensors (`vramplan.measure.trace_run`, which
imports torch, transformers and peft when the command runs, never before), its allocations replayed through the
caching allocator model, beside the estimate.

Exit codes: 0 traced, 1 when the replayed allocator runs out of the GPU's memory (a result: the report says the
largest request it could not place), 2 on bad input or without the ``measure`` extra (one line), 130 when stopped
by Ctrl-C (a partial report)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.helpers.units import fmt_bytes

if TYPE_CHECKING:
    import threading

    from vramplan.measure.records import Progress
    from vramplan.measure.trace_records import TraceReport

EXTRA_LINE = "trace needs torch, transformers and peft: pip install 'vramplan[measure]'"
INTERRUPTED = 130  # 128 + SIGINT


def add_parser(sub: argparse._SubParsersAction, plan_args: Callable[[argparse.ArgumentParser], None]) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "trace",
        help="run the plan's step at full size on fake tensors and replay its allocations through PyTorch's allocator",
        description="Build the plan's model at full size on fake tensors (nothing is allocated, downloaded or run "
        "on a GPU), run its training step as its stack runs it, record every allocation and free, replay them "
        "through a model of PyTorch's CUDA caching allocator and show the traced peaks (allocated, reserved, by "
        "phase and module) beside the estimate, each difference named. What cannot run on fake tensors is listed "
        "before it starts. Exit code: 0 traced, 1 the replay ran out of the GPU's memory, 2 bad input or no measure "
        "extra, 130 stopped (Ctrl-C). Needs pip install 'vramplan[measure]'. See vramplan help trace.",
        epilog="example: vramplan trace --model llama-3.1-8b --set training.method=lora",
    )
    plan_args(p)
    p.add_argument("--steps", type=_steps, default=2, metavar="N", help="optimizer steps replayed (default 2)")
    p.add_argument(
        "--lengths",
        default="plan",
        metavar="DIST",
        help="each micro-batch's sequence length: plan (default), N, A,B,C (by step) or uniform:A-B[/R]",
    )
    p.add_argument(
        "--kernels",
        choices=("cuda", "cpu"),
        default="cuda",
        help="cuda (default): CUDA's kernels and caching allocator; cpu: as vramplan measure --device cpu runs it",
    )
    p.add_argument(
        "--alloc-conf",
        default="",
        metavar="CONF",
        help="a PYTORCH_CUDA_ALLOC_CONF value for the replay (max_split_size_mb:N, expandable_segments:True, ...)",
    )
    p.add_argument("--json", action="store_true", help="one JSON object on stdout (units in the key names)")
    p.set_defaults(handler=cmd_trace)


def _steps(text: str) -> int:
    try:
        value = int(text) if len(text) < 6 else -1
    except ValueError:
        value = -1
    if not 1 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"expected a whole number from 1 to 1,000, got {text[:40]!r}")
    return value


def _say(line: str) -> None:
    print(f"vramplan trace: {line}", file=sys.stderr, flush=True)


def _need_extra() -> None:
    """One line, exit 2, without torch, transformers or peft (found, not imported)."""
    import importlib.util

    for name in ("torch", "transformers", "peft"):
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise PlanError(f"{EXTRA_LINE} ({name} is missing)")


def options_from(args: argparse.Namespace) -> Any:
    """The trace options of the arguments; a bad ``--lengths`` or ``--alloc-conf`` is one line."""
    from vramplan.core.memory.alloc_conf import parse_alloc_conf
    from vramplan.measure.lengths import LengthsError, parse_lengths
    from vramplan.measure.trace_records import TraceOptions

    try:
        lengths = parse_lengths(args.lengths)
    except LengthsError as exc:
        raise PlanError(str(exc)) from None
    try:
        parse_alloc_conf(args.alloc_conf)
    except ValueError as exc:
        raise PlanError(f"--alloc-conf: {exc}") from None
    return TraceOptions(steps=args.steps, lengths=lengths, kernels=args.kernels, alloc_conf=args.alloc_conf)


def plan_and_config(args: argparse.Namespace) -> tuple[Any, dict[str, Any] | None]:
    """The plan of the arguments; for a ``--hf-config`` of a model_type without a formula family, the plan of the
    other arguments (its model is not used) and the config.json's keys, which the trace builds instead."""
    from vramplan.cli.importing import resolve

    try:
        return resolve(args), None
    except PlanError as exc:
        if not args.hf_config or "unsupported model_type" not in str(exc):
            raise
    from vramplan.core.plan.architecture.hf_config import config_path, parse_json
    from vramplan.core.plan.helpers.readfile import read_regular

    if any(s.strip().startswith("model.") for s in args.sets):
        raise PlanError("--set model.KEY: the model is the config.json's (no formula family); edit the file")
    path = config_path(args.hf_config)
    raw = parse_json(read_regular(str(path)).decode("utf-8", errors="replace"), str(path))
    rest = argparse.Namespace(**{**vars(args), "hf_config": None, "model": None})
    return resolve(rest), raw


def cmd_trace(args: argparse.Namespace) -> int:
    plan, raw = plan_and_config(args)
    options = options_from(args)
    if raw is not None:
        import dataclasses

        options = dataclasses.replace(options, raw_config=raw)
    _need_extra()
    from vramplan.measure.trace_limits import not_traced

    for line in not_traced(plan, raw):
        _say(f"not traced: {line}")
    import threading

    stop = threading.Event()
    try:
        with _stop_on_sigint(stop):
            report = _run(plan, options, stop)
    except KeyboardInterrupt:  # a second Ctrl-C: no report
        _say("stopped")
        return INTERRUPTED
    if args.json:
        sys.stdout.write(json.dumps(report.to_json()) + "\n")
    else:
        sys.stdout.write(report_text(report))
    if report.partial:
        return INTERRUPTED
    return 1 if report.oom else 0


def _run(plan: Any, options: Any, stop: threading.Event) -> TraceReport:
    from vramplan.measure.trace_run import trace_plan

    try:
        return trace_plan(plan, options, progress=_progress, stop=stop)
    except (ValueError, KeyError, TypeError, NotImplementedError, AttributeError, RuntimeError) as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise PlanError(f"cannot trace this plan on fake tensors: {type(exc).__name__}: {first[:300]}") from None
    except ImportError as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise PlanError(f"a library the trace needs does not load: {first[:300]}") from None


@contextmanager
def _stop_on_sigint(stop: threading.Event) -> Iterator[None]:
    """Ctrl-C sets `stop` (the trace ends within a few thousand ops, with a partial report); a second Ctrl-C
    interrupts at once."""

    def handler(signum: int, frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        _say("stopping (Ctrl-C again to abort)")

    import signal

    try:
        previous = signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _progress(p: Progress) -> None:
    _say(p.message)


def _gib(n: float) -> str:
    return fmt_bytes(n)


def report_text(r: TraceReport) -> str:
    """The traced peaks beside the estimate's, each row's difference named; the phases, the modules at the peak,
    what the forward saved by op, what was not traced."""
    v = r.versions
    kernels = "CUDA kernels, caching allocator replayed" if r.kernels == "cuda" else "CPU kernels (as measured on it)"
    conf = f" ({r.alloc_conf})" if r.alloc_conf else ""
    lines = [f"{r.plan_summary}: traced on fake tensors, {kernels}{conf}"]
    lengths = sorted({n for s in r.lengths for n in s})
    lines.append(
        f"torch {v.get('torch')}, transformers {v.get('transformers')}, peft {v.get('peft')}; {r.steps} steps "
        f"({r.steps_traced} traced, {r.ops:,} ops, {r.events:,} events, {r.seconds:.1f} s); "
        f"lengths {', '.join(f'{n:,}' for n in lengths)}"
    )
    if r.partial:
        lines.append("PARTIAL: stopped before the end (Ctrl-C); figures of the steps traced")
    if r.oom:
        lines.append(f"OUT OF MEMORY on the {r.gpu}: {r.failures} request(s) could not be placed, the largest "
                     f"{fmt_bytes(r.largest_failed)}")  # fmt: skip
    lines += ["", f"{'per GPU':20s} {'traced':>12s} {'estimate':>12s} {'error':>8s}  difference"]
    for d in r.differences:
        err = "-" if d.error is None else f"{100 * d.error:+.1f}%" if abs(d.error) < 10 else "off >999%"
        est = _gib(d.estimated) if r.has_estimate else "-"
        lines.append(f"{d.name:20s} {_gib(d.traced):>12s} {est:>12s} {err if r.has_estimate else '-':>8s}  {d.why}")
    lines.append(f"traced peak in {r.peak_phase} of step {r.peak_step}; fragmentation at the reserved peak "
                 f"{100 * r.fragmentation:.1f}%")  # fmt: skip
    for what, n in r.adjustments:
        lines.append(f"from the estimate: {what} {fmt_bytes(n)} (in the traced peaks)")
    lines += ["", "by phase (allocated / reserved):"]
    for p in r.phases:
        lines.append(f"  step {p.step} {p.phase:10s} {_gib(p.allocated):>12s} {_gib(p.reserved):>12s}")
    lines += ["", "at the traced peak, by module:"]
    lines += [f"  {m:44s} {_gib(n):>12s}" for m, n in r.by_module]
    lines += ["", "saved by one micro-batch's forward, by module and op:"]
    lines += [f"  {m:44s} {o:28s} {_gib(n):>12s}" for m, o, n in r.saved_by_op]
    if r.not_traced:
        lines += ["", "not traced:"] + [f"  {x}" for x in r.not_traced]
    if r.corrections:
        lines += ["", "applied for CUDA (the trace runs CPU kernels):"] + [f"  {x}" for x in r.corrections]
    lines += [f"note: {n}" for n in r.notes]
    lines.append("error = (estimate - traced) / traced. Without a GPU the allocator model is unvalidated against "
                 "real snapshots (vramplan help trace).")  # fmt: skip
    return "\n".join(lines) + "\n"
