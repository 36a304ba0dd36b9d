"""vramplan's core: the pure domain, in layers by concept. Never imports Textual or Rich.

- `plan`: the plan model, presets catalogue, config.json import, key syntax, describing a plan (imports nothing
  else of core);
- `memory`: the estimator, with the activation model as its own sub-package (imports plan);
- `time`: the step-time model (imports plan and memory);
- `advice`: the checklist, the fit advisor and what-if (imports plan, memory, time);
- `files`: plan files, exports and the review report (imports all of the above).

Importing this package (or any sub-package) builds nothing: each sub-package's ``__init__`` is a docstring, and the
names of this one's public face (`__all__`: a plan, its estimate and step time, the checklist) are imported when first
used (``from vramplan.core import Plan, estimate``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vramplan.core.advice.checklist import checklist
    from vramplan.core.files.planio import load_plan
    from vramplan.core.memory.peak import estimate
    from vramplan.core.memory.record import Estimate
    from vramplan.core.plan.helpers.errors import PlanError
    from vramplan.core.plan.schema.plan import Plan, default_plan, plan_from_dict
    from vramplan.core.time.record import StepTime
    from vramplan.core.time.step import step_time

# name -> the module that defines it
_HOME = {
    "Plan": "vramplan.core.plan.schema.plan",
    "default_plan": "vramplan.core.plan.schema.plan",
    "plan_from_dict": "vramplan.core.plan.schema.plan",
    "PlanError": "vramplan.core.plan.helpers.errors",
    "load_plan": "vramplan.core.files.planio",
    "estimate": "vramplan.core.memory.peak",
    "Estimate": "vramplan.core.memory.record",
    "step_time": "vramplan.core.time.step",
    "StepTime": "vramplan.core.time.record",
    "checklist": "vramplan.core.advice.checklist",
}
__all__ = [
    "Estimate",
    "Plan",
    "PlanError",
    "StepTime",
    "checklist",
    "default_plan",
    "estimate",
    "load_plan",
    "plan_from_dict",
    "step_time",
]


def __getattr__(name: str) -> object:
    """A public name, imported from its module on first use (PEP 562), so that importing vramplan.core stays light."""
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_HOME[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
