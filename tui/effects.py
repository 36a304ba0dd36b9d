"""What each strategy choice would do to this plan, next to its control: the memory per GPU and the time per token
of every other possible choice, measured by re-estimating the changed plan (`core.advice.whatif`). No Textual here.

One estimate (~50 us) and one step time (~40 us) per alternative: the Strategies pane's dozen or so alternatives
cost a few milliseconds, computed once per plan change while the pane is shown."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from vramplan.core.advice.whatif import Effect, WhatIf
from vramplan.core.memory.record import Estimate
from vramplan.core.plan.helpers.units import GiB
from vramplan.core.plan.resolved import plan_value
from vramplan.core.plan.schema.plan import Plan
from vramplan.core.plan.stack.defaults import STACK_KEYS
from vramplan.tui.choices import CHOICES, choice_index, choices_of

# Settings without a list of choices: the alternatives are twice and half the current degree.
DEGREE_KEYS = ("strategy.tensor_parallel", "strategy.pipeline_parallel")


def alternatives(plan: Plan, key: str) -> list[tuple[str, Any]]:
    """(label, value) of the other choices of `key`, the one a cycling key picks next first."""
    if key in CHOICES or key in STACK_KEYS:
        options = choices_of(key)
        start = choice_index(plan, key)
        picked = (options[(start + k) % len(options)] for k in range(1, len(options)))
        if key in STACK_KEYS:  # the stack's choice is one of the others: only the value not in effect differs
            now = plan_value(plan, key)
            return [(c.label, c.value) for c in picked if c.value is not None and c.value != now]
        return [(c.label, c.value) for c in picked]
    n = plan_value(plan, key)
    return [(str(n * 2), n * 2), *([(str(n // 2), n // 2)] if n > 1 else [])]


def toggle_effects(plan: Plan, est: Estimate, keys: Iterable[str]) -> dict[str, list[tuple[str, Effect]]]:
    """For each key, the measured effect of each alternative the plan can take (impossible ones left out: the
    pane says why next to the control)."""
    w = WhatIf(plan, est)
    out: dict[str, list[tuple[str, Effect]]] = {}
    for key in keys:
        found = [(label, w.measure(f"{key}={label}", {key: value})) for label, value in alternatives(plan, key)]
        out[key] = [(label, e) for label, e in found if e is not None]
    return out


def brief(e: Effect) -> str:
    """``-12.3 GiB (fits), +33% time``: memory per GPU and time per token (the step time when the global batch is
    kept); ``(fits)`` / ``(over)`` when the choice would make the plan fit / stop fitting."""
    delta = e.memory_delta / GiB
    memory = "same memory" if abs(delta) < 0.05 else f"{delta:+.1f} GiB"
    if e.fits != e.fitted_before:
        memory += " (fits)" if e.fits else " (over)"
    r = e.relative_token_time
    if abs(r - 1) < 0.005:
        time = "same time"
    elif r >= 2:
        time = f"×{r:.1f} time"
    else:
        time = f"{(r - 1) * 100:+.0f}% time"
    return f"{memory}, {time}"


def effects_line(pairs: list[tuple[str, Effect]]) -> str:
    """``→ full: -8.1 GiB, +33% time · none: +10.3 GiB, -25% time`` (empty when there is no alternative)."""
    if not pairs:
        return ""
    return "→ " + " · ".join(f"{label}: {brief(e)}" for label, e in pairs)
