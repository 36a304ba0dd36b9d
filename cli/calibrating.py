"""``vramplan measure --save-calibration FILE [--force]``: after a completed CUDA measurement, write what this machine
added beyond the step's tensors (`vramplan.measure.calibrate`) as a calibration file that ``--calibration FILE``
applies to later estimates (`vramplan.core.files.calibration`). The target is checked before anything runs (a
measurement is minutes of GPU time); a stopped run writes nothing."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from vramplan.core.plan.helpers.errors import PlanError

if TYPE_CHECKING:
    from vramplan.core.plan.schema.plan import Plan
    from vramplan.measure.records import MeasureReport


def add_calibration_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--save-calibration",
        metavar="FILE",
        help="write this machine's overheads (CUDA context, allocator gap, NCCL) as a calibration file for "
        "--calibration FILE (CUDA only; not after Ctrl-C or an out-of-memory error)",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="replace the --save-calibration FILE if it exists, and run a plan whose predicted memory is more than "
        "this machine has free (refused by default, before anything is built)",
    )


def check_calibration_target(args: argparse.Namespace, device: str) -> None:
    """Refuse at once what would be refused after the run: a CPU measurement, a file that exists (without
    --force), a directory, a FIFO, a missing folder."""
    path = getattr(args, "save_calibration", None)
    if path is None:
        return
    from vramplan.core.files.safewrite import OverwriteRefused, check_target

    if device != "cuda":
        raise PlanError("needs a CUDA measurement (--device cuda): the CPU has no CUDA context or allocator", path)
    try:
        check_target(path, overwrite=args.force)
    except OverwriteRefused as exc:
        raise PlanError(f"{exc.message} (use --force to replace it)", exc.where) from None


def save_calibration(args: argparse.Namespace, report: MeasureReport, plan: Plan) -> bool:
    """Write the calibration of `report` when asked; True when written or not asked, False (and one line on
    stderr) when this report gives none. A partial report writes nothing."""
    path = getattr(args, "save_calibration", None)
    if path is None:
        return True
    if report.partial:
        print(f"vramplan measure: {path}: stopped before the end: nothing written", file=sys.stderr)
        return False
    from vramplan.core.files.calibration import write_calibration
    from vramplan.core.memory.peak import estimate
    from vramplan.measure.calibrate import calibration_from_report

    try:
        cal = calibration_from_report(report, plan, estimate(plan))
        write_calibration(path, cal, overwrite=args.force)
    except PlanError as exc:
        print(f"vramplan measure: {path}: {exc.message}", file=sys.stderr)
        return False
    print(f"vramplan measure: wrote calibration {path}: {'; '.join(cal.lines())}", file=sys.stderr)
    return True
