"""`measure_plan`: build the plan's model here and run warm-up plus N optimizer steps, measuring memory and time."""

from __future__ import annotations

import threading
from collections.abc import Callable

from vramplan.core.plan.plan import Plan
from vramplan.measure.records import MeasureOptions, MeasureReport, Progress

ProgressFn = Callable[[Progress], None]


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
    raise NotImplementedError("measure_plan: being built (issue 29)")
