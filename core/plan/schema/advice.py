"""The plan's ``[advice]`` table: how the fit advisor and the checklist judge a plan that "fits".

``headroom_percent`` is the safety margin every suggestion keeps free on the GPU (``vramplan fit --headroom``):
the fit advisor's change sets, the largest micro-batch and sequence length, the fewest GPUs and the checklist's
memory fix all leave at least this share of the GPU's memory free. Unset, the margin of `core.advice.margin`
applies: the estimate's worst under-prediction on similar published runs, and never less than fragmentation's 10%.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, model_validator

from vramplan.core.plan.helpers.field_values import FROZEN_TABLE, strict_scalars

MAX_HEADROOM_PERCENT = 90.0  # a margin above this leaves no room for a plan


class AdviceConfig(BaseModel):
    model_config = FROZEN_TABLE

    headroom_percent: float | None = Field(
        default=None,
        ge=0,
        le=MAX_HEADROOM_PERCENT,
        description="GPU memory every suggestion leaves free, %; unset: the estimate's worst under-prediction on "
        "similar published runs, at least 10% (fragmentation)",
    )

    @model_validator(mode="before")
    @classmethod
    def _strict(cls, data: Any) -> Any:
        return strict_scalars(cls, data, "advice")
