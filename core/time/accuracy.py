"""How far to trust a step time: its error on the published timings nearest to the plan.

`accuracy.json` beside this module holds one row per published training-step timing (tests/data/published_time.json,
collected by bench/data/published_time.py): the figure's id, method, stack framework, total parameters, what was
compared (tokens/s per GPU, or the seconds of a step), the kind of step (``short`` context, ``long`` context of
32k tokens or more, or an ``rl`` step), and the step time's signed error in percent: predicted / measured step time
- 1 (a tokens/s figure compares as measured / predicted tokens/s - 1). Negative: the model was too fast.
bench/data/time_accuracy.py writes it by running this model over those figures; a test fails when the model
changes and the file is not regenerated (``python -m bench.data.time_accuracy``).

`expected_error` first keeps the timings of the plan's kind of step (while at least `MIN_CASES` of them are
published; else all of them, and ``basis`` says so), then selects among them as the memory estimate does
(`core.memory.accuracy`: the same method, stack family, a model within 2x the parameters, widened step by step).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

from vramplan.core.memory.accuracy import MIN_CASES, CaseError, ExpectedError, nearest_error

if TYPE_CHECKING:
    from vramplan.core.plan.schema.plan import Plan

DATA = Path(__file__).with_name("accuracy.json")
COMMAND = "python -m bench.data.time_accuracy"
LONG_CONTEXT = 32_768  # tokens: from here a step is judged by the long-context timings
KIND_TEXT = {"short": "steps under 32k tokens", "long": "steps of 32k tokens or more", "rl": "RL steps"}


def step_kind(rl: bool, seq_len: int) -> str:
    """``rl``, ``long`` or ``short``: which published timings a step is judged by."""
    return "rl" if rl else ("long" if seq_len >= LONG_CONTEXT else "short")


def plan_kind(plan: Plan) -> str:
    return step_kind(plan.training.objective_spec.post_training, plan.training.seq_len)


@cache
def load_rows() -> tuple[tuple[str, CaseError], ...]:
    """The shipped rows as (step kind, row), read once."""
    import json

    data = json.loads(DATA.read_text())
    return tuple((row.pop("step_kind"), CaseError(**row)) for row in data["rows"])


@cache
def expected_error(kind: str, method: str, framework: str, params: int) -> ExpectedError:
    """The step time's error on the published timings nearest to a plan (see the module docstring)."""
    rows = load_rows()
    same = tuple(r for k, r in rows if k == kind)
    if len(same) >= MIN_CASES:
        ee = nearest_error(same, method, framework, params)
        return ee._replace(basis=f"{KIND_TEXT[kind]}; {ee.basis}")
    ee = nearest_error(tuple(r for _, r in rows), method, framework, params)
    return ee._replace(basis=f"any step ({len(same)} published {KIND_TEXT[kind]}, fewer than {MIN_CASES}); {ee.basis}")


def plan_expected_error(plan: Plan, params: int) -> ExpectedError:
    return expected_error(plan_kind(plan), plan.training.method, plan.stack.framework, params)
