"""The plan's ``[checklist]`` table: which by-hand items of the troubleshooting checklist the user has checked."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field, field_validator

from vramplan.core.plan.helpers.errors import shown, suggest
from vramplan.core.plan.helpers.field_values import FROZEN_TABLE, word_list

# The checklist items vramplan cannot judge (core/checklist.py): the user ticks them when checked.
MANUAL_CHECKS: tuple[str, ...] = ("oom.other_processes", "nan.learning_rate", "nan.data", "slow.data_loading")


class ChecklistConfig(BaseModel):
    """The by-hand items of the troubleshooting checklist that have been checked (``vramplan check``)."""

    model_config = FROZEN_TABLE

    ticked: tuple[str, ...] = Field(default=(), description="ids of checked by-hand items, e.g. slow.data_loading")

    @field_validator("ticked", mode="before")
    @classmethod
    def _ticked_tuple(cls, v: Any) -> Any:
        """``"nan.data,slow.data_loading"`` (``--set checklist.ticked=a,b``, as other list keys take it) or a list."""
        return word_list(v)

    @field_validator("ticked")
    @classmethod
    def _known_items(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for item in v:
            if item not in MANUAL_CHECKS:
                hint = suggest(item, MANUAL_CHECKS) or f" (one of {', '.join(MANUAL_CHECKS)})"
                raise ValueError(f"not a by-hand checklist item: {shown(item)}{hint}")
        return tuple(sorted(set(v)))  # a set: ticking in another order gives the same plan
