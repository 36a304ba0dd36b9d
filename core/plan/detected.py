"""The default plan on the GPUs nvidia-smi found (`core.plan.catalogue.gpu_match` maps them to a preset)."""

from __future__ import annotations

from vramplan.core.plan.catalogue.gpu_match import DetectedGpus
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.schema.plan import Plan, default_plan


def plan_on(det: DetectedGpus | None) -> Plan:
    """The default plan on detected GPUs (None: on the documented default hardware)."""
    plan = default_plan()
    if det is None:
        return plan
    try:
        return plan.with_changes({"hardware.gpu": det.gpu_id, "hardware.gpus_per_node": det.gpus})
    except PlanError:  # pragma: no cover - a count no strategy of the default plan accepts
        return plan
