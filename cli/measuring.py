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
from typing import TYPE_CHECKING, Any, NamedTuple

from vramplan.core.plan.helpers.errors import PlanError, printable
from vramplan.core.plan.helpers.units import fmt_bytes, fmt_seconds

if TYPE_CHECKING:
    import threading

    from vramplan.core.memory.record import Estimate
    from vramplan.core.plan.schema.plan import Plan
    from vramplan.core.time.record import StepTime
    from vramplan.measure.comparison import ComparisonRow
    from vramplan.measure.limitations import Limitation
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
    return _count_from(text, 1)


def _count0(text: str) -> int:
    return _count_from(text, 0)


def _count_from(text: str, least: int) -> int:
    """``--steps`` (at least 1) and ``--warmup`` (at least 0): a whole number up to 99,999,999; every value out of
    range (``0``, ``-1``, ``1e9``, ``x``) is the same line naming the bounds."""
    try:
        value = int(text) if len(text) < 9 else -1
    except ValueError:
        value = -1
    if value < least:
        raise argparse.ArgumentTypeError(f"expected a whole number from {least} to 99,999,999, got {text[:40]!r}")
    return value


def _say(line: str) -> None:
    print(f"vramplan measure: {printable(line)}", file=sys.stderr, flush=True)


class Prepared(NamedTuple):
    """What `_prepare` settles before anything is built."""

    plan: Plan
    device: Device
    gpus: int
    limits: tuple[Limitation, ...]


def cmd_measure(args: argparse.Namespace) -> int:
    import threading  # the command's own imports: `build_parser` imports this module for every command

    stop = threading.Event()
    # the first seconds import torch, transformers and numpy, whose imports a KeyboardInterrupt in the middle
    # leaves half done (numpy then refuses to load twice, transformers' lazy modules report "Could not import"):
    # Ctrl-C is taken at the next step instead (silently: a second or two), and is vramplan's "interrupted", 130
    with _stop_on_sigint(stop, None):
        prepared = _prepare(args, stop)
        plan, device, gpus, limits = prepared
        est, st = _estimate(plan, device)  # first: after a Ctrl-C only the report is left to do
        _stopped(stop)
    from vramplan.cli.calibrating import save_calibration
    from vramplan.measure import distributed
    from vramplan.measure.records import MeasureOptions
    from vramplan.measure.run import measure_plan

    for lim in limits if not distributed.is_worker() else ():  # before anything runs (the ranks: not again)
        _say(f"cannot reproduce here: {lim.what}")
    relaunched = distributed.start(plan, device, gpus, _say)  # more than one GPU: torchrun, one rank per GPU
    if relaunched is not None:
        return relaunched
    options = MeasureOptions(device=device, steps=args.steps, warmup=args.warmup)
    with _stop_on_sigint(stop, "stopping after this phase"):
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


def _prepare(args: argparse.Namespace, stop: threading.Event) -> Prepared:
    """The plan, the device, this machine's GPUs and what it cannot reproduce, each input checked before anything is
    built: the extra installed, the --save-calibration target, and the memory the run will need (`_check_memory`)."""
    from vramplan.cli.importing import resolve

    plan = resolve(args)
    _need_extra()
    _stopped(stop)
    from vramplan.cli.calibrating import check_calibration_target

    if args.device == "cpu":  # before torch is imported (seconds)
        check_calibration_target(args, "cpu")
        _check_memory(plan, "cpu", 0, args.force)
    _stopped(stop)
    from vramplan.measure import cuda

    _stopped(stop)
    from vramplan.measure.limitations import limitations

    gpus = cuda.local_gpus()
    device: Device = "cuda" if (args.device or ("cuda" if gpus else "cpu")) == "cuda" else "cpu"
    if device == "cuda" and not gpus:
        raise PlanError("--device cuda: torch sees no CUDA GPU here (use --device cpu)")
    check_calibration_target(args, device)  # before minutes of GPU time, not after
    if args.device != "cpu":
        _check_memory(plan, device, gpus, args.force)
    return Prepared(plan, device, gpus, limitations(plan, device, gpus))


def _stopped(stop: threading.Event) -> None:
    """A Ctrl-C taken by `_stop_on_sigint` during the preparation: the command ends here (exit 130)."""
    if stop.is_set():
        raise KeyboardInterrupt


def _check_memory(plan: Plan, device: Device, gpus: int, force: bool) -> None:
    """Refuse, before building, a measurement whose predicted peak (`vramplan.measure.need.memory_need`: the plan as
    run here) is more than this machine has free: host memory on the CPU (a plan past it ends in a failed
    allocation, or the kernel's OOM killer), each GPU's used on CUDA. ``--force`` runs it anyway (a CUDA
    out-of-memory error is then the report's result, exit 1). A rank of a relaunched run does not check again."""
    from vramplan.measure import distributed
    from vramplan.measure.need import memory_need

    if force or distributed.is_worker():
        return
    need = memory_need(plan, device, gpus)
    if device == "cpu":
        from vramplan.machine.host import available_memory_bytes

        free = available_memory_bytes()
        if free is not None and need.total_bytes > free:
            each = f" ({need.processes} processes)" if need.processes > 1 else ""
            raise PlanError(
                f"the plan's predicted peak here is {fmt_bytes(need.total_bytes)}{each}, more than the "
                f"{fmt_bytes(free)} of host memory available: not built (--force runs it anyway)"
            )
        return
    from vramplan.measure import cuda

    for index in range(need.processes):
        free = cuda.free_bytes(index)
        if need.per_process_bytes > free:
            raise PlanError(
                f"the plan's predicted peak per GPU here is {fmt_bytes(need.per_process_bytes)}, more than the "
                f"{fmt_bytes(free)} free on GPU {index}: not built (--force runs it anyway and reports where it "
                "runs out of memory)"
            )


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
def _stop_on_sigint(stop: threading.Event, what: str | None) -> Iterator[None]:
    """Ctrl-C sets `stop` (said as ``what``, if given: the run ends after the phase that is running); a second
    Ctrl-C interrupts at once."""

    def handler(signum: int, frame: Any) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        if what is not None:
            _say(f"{what} (Ctrl-C again to abort)")

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
