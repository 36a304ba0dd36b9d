"""How far to trust a memory estimate: its error on the published GPU runs nearest to the plan.

`accuracy.json` beside this module holds one row per published training step with a measured memory figure
(tests/data/published, a copy of ../shared/published): the case's id, method, stack framework, total parameters,
how the figure was measured, and the estimate's signed error in percent (predicted / measured - 1; negative: the
estimate was under). bench/data/accuracy.py writes it by running this estimator over those cases; a test fails
when the estimator changes and the file is not regenerated (``python -m bench.data.accuracy``).

`expected_error` picks the rows nearest to a plan: the same method, the same stack family (the stacks that run
models through transformers count as one), a model within 2x the plan's parameters; while fewer than `MIN_CASES`
rows match, it widens one step at a time (size x4, any size, any stack, any method) and says so in ``basis``.
The file is read on first use and cached; ``json`` is imported only then.
"""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path
from typing import Any, NamedTuple

from vramplan.core.plan.stack.config import HF_FAMILY

DATA = Path(__file__).with_name("accuracy.json")
MIN_CASES = 5  # fewer matching runs than this: widen the selection
COMMAND = "python -m bench.data.accuracy"


class CaseError(NamedTuple):
    """One published run: the estimate's signed error on it (percent; negative: under)."""

    id: str
    method: str
    framework: str
    params: int
    figure_kind: str
    error_pct: float


class ExpectedError(NamedTuple):
    """The estimate's error on the published runs nearest to a plan."""

    median_pct: float  # median |error| over those runs, percent
    worst_under_pct: float  # the largest under-prediction among them, as a positive percent (0: none under)
    n_cases: int
    basis: str  # which runs, and how far the selection was widened

    def to_json(self) -> dict[str, Any]:
        return self._asdict()

    def text(self, under: str = "under") -> str:
        """``± 7% on 14 similar published runs (worst 22% under)``; ``under`` names an estimate below the measure
        (the time model says ``too fast``)."""
        worst = f"worst {self.worst_under_pct:.0f}% {under}" if self.worst_under_pct else f"none {under}"
        return f"± {self.median_pct:.0f}% on {self.n_cases} similar published runs ({worst})"

    def under_margin_bytes(self, predicted_bytes: int) -> int:
        """The memory to keep free above ``predicted_bytes`` if the estimate is as far under as its worst similar
        run: measured = predicted / (1 - w), so the margin is predicted x w / (1 - w)."""
        w = min(self.worst_under_pct, 90.0) / 100  # errors are predicted / measured - 1 > -1; cap at 10x
        return math.ceil(predicted_bytes * w / (1 - w))


@cache
def load_rows() -> tuple[CaseError, ...]:
    """The shipped rows (read once)."""
    import json

    data = json.loads(DATA.read_text())
    return tuple(CaseError(**row) for row in data["rows"])


def stack_family(framework: str) -> str:
    """Frameworks that run models through transformers' PreTrainedModel share its checkpointing and PEFT's
    adapters: one family (``transformers``); each other framework is its own."""
    return "transformers" if framework in HF_FAMILY else framework


class Step(NamedTuple):
    """One selection: the same method and stack family or not, and the size ratio allowed (0: any size)."""

    same_method: bool
    same_family: bool
    size_ratio: float


STEPS = (
    Step(True, True, 2.0),
    Step(True, True, 4.0),
    Step(True, True, 0.0),
    Step(True, False, 2.0),
    Step(True, False, 4.0),
    Step(True, False, 0.0),
    Step(False, False, 0.0),
)


def _matches(row: CaseError, step: Step, method: str, family: str, params: int) -> bool:
    if step.same_method and row.method != method:
        return False
    if step.same_family and stack_family(row.framework) != family:
        return False
    return not step.size_ratio or abs(math.log(row.params / params)) <= math.log(step.size_ratio)


def _describe(step: Step, method: str, family: str, params: int) -> str:
    parts = [method if step.same_method else "any method"]
    parts.append(f"{family} stacks" if step.same_family else "any stack")
    if step.size_ratio:
        lo, hi = params / step.size_ratio / 1e9, params * step.size_ratio / 1e9
        parts.append(f"{lo:.3g}B-{hi:.3g}B parameters")
    else:
        parts.append("any size")
    return ", ".join(parts)


def median_of(values: list[float]) -> float:
    """The middle value (the mean of the two middle ones for an even count); ``statistics`` costs start-up time."""
    v = sorted(values)
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2


@cache
def expected_error(method: str, framework: str, params: int) -> ExpectedError:
    """The error of the estimate on the published runs nearest to a plan of this method, stack framework and total
    parameter count (see the module docstring for the selection)."""
    return nearest_error(load_rows(), method, framework, params)


def nearest_error(rows: tuple[CaseError, ...], method: str, framework: str, params: int) -> ExpectedError:
    """The selection of the module docstring over ``rows`` (the time model's `core.time.accuracy` passes its own)."""
    family = stack_family(framework)
    first = _describe(STEPS[0], method, family, params)
    for n, step in enumerate(STEPS):
        chosen = [r for r in rows if _matches(r, step, method, family, params)]
        if len(chosen) >= MIN_CASES or n == len(STEPS) - 1:
            break
    errors = [r.error_pct for r in chosen]
    basis = f"published GPU runs: {_describe(step, method, family, params)}"
    if n:
        basis += f" (widened: fewer than {MIN_CASES} runs with {first})"
    if not errors:
        return ExpectedError(0.0, 0.0, 0, basis + "; no published runs")
    median = round(median_of([abs(e) for e in errors]), 1)
    worst_under = round(max(0.0, -min(errors)), 1)
    return ExpectedError(median, worst_under, len(errors), basis)
