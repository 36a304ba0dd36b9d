"""vramplan's core: plan model, estimator and plan I/O. Pure Python: never imports Textual or Rich."""

from core.errors import PlanError
from core.estimate import estimate
from core.plan import Plan, default_plan, plan_from_dict
from core.result import Estimate

__version__ = "0.1.0"

__all__ = ["Estimate", "Plan", "PlanError", "__version__", "default_plan", "estimate", "plan_from_dict"]
