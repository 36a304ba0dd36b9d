"""``vramplan measure [PLAN]``: run the plan's real training step on this machine (`vramplan.measure`, the only part
of vramplan that imports torch: imported here when the command runs, never before) and show it beside the estimate.

Exit codes: 0 for a completed measurement, 1 when it ran out of memory (a result: the report says in which phase
and whether the estimate said it would not fit), 2 on bad input or without the ``measure`` extra (one line),
130 when stopped by Ctrl-C (a partial report; nothing is written)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.helpers.units import fmt_bytes, fmt_seconds

if TYPE_CHECKING:
    import threading

    from vramplan.core.memory.record import Estimate
    from vramplan.core.plan.schema.plan import Plan
    from vramplan.core.time.record import StepTime
    from vramplan.measure.comparison import ComparisonRow
    from vramplan.measure.records import Device, MeasureReport, Progress

EXTRA_LINE = "measure needs torch, transformers and peft: pip install 'vramplan[measure]'"
INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C


def add_parser(sub: argparse._SubParsersAction, plan_args: Callable[[argparse.ArgumentParser], None]) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "measure",
        help="run the plan's training step here (random weights) and show measured against predicted memory",
        description="Build the plan's model with random weights (nothing is downloaded), run warm-up plus N "
        "optimizer steps of its micro-batches and show, beside the estimate, what PyTorch allocated: parameters, "
        "gradients, optimizer states, activations, the allocator's peaks, the process, step time. What this machine "
        "cannot reproduce of the plan is listed before anything runs. Exit code: 0 measured, 1 out of memory, 2 bad "
        "input or no measure extra, 130 stopped (Ctrl-C). Needs pip install 'vramplan[measure]'.",
        epilog="example: vramplan measure --model qwen2.5-0.5b --device cpu --steps 5",
    )
    plan_args(p)
    p.add_argument("--steps", type=_count, default=3, metavar="N", help="measured optimizer steps (default 3)")
    p.add_argument("--warmup", type=_count0, default=1, metavar="N", help="warm-up steps before them (default 1)")
    p.add_argument(
        "--device", choices=("cuda", "cpu"), help="where to run (default: cuda when torch sees a GPU, else cpu)"
    )
    p.add_argument("--json", action="store_true", help="one JSON object on stdout (units in the key names)")
    from vramplan.cli.calibrating import add_calibration_args

    add_calibration_args(p)
    p.set_defaults(handler=cmd_measure)


def _count(text: str) -> int:
    value = _count0(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return value


def _count0(text: str) -> int:
    try:
        value = int(text) if len(text) < 9 else -1
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number from 0 to 99,999,999, got {text[:40]!r}")
    return value


def _say(line: str) -> None:
    print(f"vramplan measure: {line}", file=sys.stderr, flush=True)


def cmd_measure(args: argparse.Namespace) -> int:
    from vramplan.cli.importing import resolve

    plan = resolve(args)
    _need_extra()
    from vramplan.measure import cuda
    from vramplan.measure.limitations import limitations
    from vramplan.measure.records import MeasureOptions
    from vramplan.measure.run import measure_plan

    gpus = cuda.local_gpus()
    device: Device = "cuda" if (args.device or ("cuda" if gpus else "cpu")) == "cuda" else "cpu"
    if device == "cuda" and not gpus:
        raise PlanError("--device cuda: torch sees no CUDA GPU here (use --device cpu)")
    from vramplan.cli.calibrating import check_calibration_target, save_calibration

    check_calibration_target(args, device)  # before minutes of GPU time, not after
    from vramplan.measure import distributed

    limits = limitations(plan, device, gpus)
    for lim in limits if not distributed.is_worker() else ():  # before anything runs (the ranks: not again)
        _say(f"cannot reproduce here: {lim.what}")
    relaunched = distributed.start(plan, device, gpus, _say)  # more than one GPU: torchrun, one rank per GPU
    if relaunched is not None:
        return relaunched
    est, st = _estimate(plan, device)  # first: after a Ctrl-C only the report is left to do
    options = MeasureOptions(device=device, steps=args.steps, warmup=args.warmup)
    import threading  # the command's own imports: `build_parser` imports this module for every command

    stop = threading.Event()
    with _stop_on_sigint(stop):
        try:
            report = measure_plan(plan, options, progress=_progress if distributed.rank() == 0 else None, stop=stop)
        except (ValueError, KeyError, TypeError, NotImplementedError, AttributeError) as exc:
            first = (str(exc).splitlines() or [type(exc).__name__])[0]
            raise PlanError(f"cannot build or run this plan here: {first[:300]}") from None
        except ImportError as exc:  # a library of the extra that will not load here (peft with an old torchao)
            first = (str(exc).splitlines() or [type(exc).__name__])[0]
            raise PlanError(f"a library the measurement needs does not load: {first[:300]}") from None
    from vramplan.measure.comparison import comparison_rows

    distributed.close_worker()
    if distributed.is_worker() and not report.ranks:  # not rank 0: rank 0 reports every rank
        return INTERRUPTED if report.partial else (1 if report.oom else 0)
    rows = comparison_rows(est, st, report, limits)
    if args.json:
        sys.stdout.write(json.dumps(_json(report, rows, est.gpu_fits)) + "\n")
    else:
        sys.stdout.write(report_text(report, rows, est.gpu_fits))
    saved = save_calibration(args, report, plan)
    if report.partial:
        return INTERRUPTED
    return 1 if report.oom else (0 if saved else 2)


def _need_extra() -> None:
    """One line, exit 2, without torch, transformers or peft (not installed, or a module set to None). Found, not
    imported: peft's import alone takes seconds, and only LoRA needs it."""
    import importlib.util

    for name in ("torch", "transformers", "peft"):
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # ValueError: sys.modules[name] is None (imports of it are blocked)
            found = False
        if not found:
            raise PlanError(f"{EXTRA_LINE} ({name} is missing)")


@contextmanager
def _stop_on_sigint(stop: threading.Event) -> Iterator[None]:
    """Ctrl-C sets `stop` (the run ends after the phase that is running); a second Ctrl-C interrupts at once."""

    def handler(signum: int, frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        _say("stopping after this phase (Ctrl-C again to abort)")

    import signal

    try:
        previous = signal.signal(signal.SIGINT, handler)
    except ValueError:  # not the main thread: no handler, the caller's stop event only
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _progress(p: Progress) -> None:
    _say(p.message)


def _estimate(plan: Plan, device: str) -> tuple[Estimate, StepTime]:
    """The estimate to compare with (PyTorch's CPU kernels where they differ, on the CPU) and the step time."""
    from vramplan.core.memory.peak import estimate
    from vramplan.core.time.step import step_time

    return estimate(plan, cpu=device == "cpu"), step_time(plan)


def _json(report: MeasureReport, rows: tuple[ComparisonRow, ...], fits: bool) -> dict[str, Any]:
    out = report.to_json()
    out["comparison"] = [r.to_json() for r in rows]
    if report.oom:
        out["estimate_fits"] = fits
    return out


def _value(row: ComparisonRow, value: float | None) -> str:
    if value is None:
        return "-"
    if row.unit == "bytes":
        return fmt_bytes(value)
    if row.unit == "s":
        return fmt_seconds(value)
    return f"{value:,.0f} tok/s"


def report_text(report: MeasureReport, rows: tuple[ComparisonRow, ...], fits: bool = True) -> str:
    """The comparison table: predicted, measured, error; rows this machine did not reproduce end in ``*``."""
    v = report.versions
    head = f"{report.plan_summary}: measured on {report.machine}"
    done = f"{report.steps_done} of {report.steps_planned} steps" if report.partial else f"{report.steps_done} steps"
    lines = [head, f"torch {v.get('torch')}, transformers {v.get('transformers')}, peft {v.get('peft')}; {done}"]
    if report.partial:
        lines.append("PARTIAL: stopped before the end (Ctrl-C); figures of the steps that ran")
    worst = report.worst
    if worst is not None and worst.oom_phase:
        at = f" ({fmt_bytes(worst.oom_allocated_bytes)} allocated)" if worst.oom_allocated_bytes else ""
        said = "the estimate said it fits" if fits else "as the estimate said: it does not fit"
        lines.append(f"OUT OF MEMORY in {worst.oom_phase}{at}; {said}")
    lines += ["", f"{'':20s} {'predicted':>12s} {'measured':>12s} {'error':>8s}"]
    for row in rows:
        err = "-" if row.error is None else f"{100 * row.error:+.1f}%" if abs(row.error) < 10 else "off >999%"
        mark = "" if row.reproducible else " *"
        name = row.name.replace("_", " ")
        lines.append(f"{name:20s} {_value(row, row.predicted):>12s} {_value(row, row.measured):>12s} {err:>8s}{mark}")
    if not all(r.reproducible for r in rows):
        lines.append("* not reproduced as planned on this machine (the lines before the run say why)")
    lines += [f"note: {n}" for n in report.notes]
    lines.append("error = (predicted - measured) / measured. allocated: the tensors; reserved: + allocator cache;")
    lines.append("process: what nvidia-smi shows (+ the CUDA context)")
    return "\n".join(lines) + "\n"
