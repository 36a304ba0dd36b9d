"""Undo/redo of plan changes: a list of plans and a cursor (no Textual: plain data)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vramplan.core.plan.schema.plan import Plan

if TYPE_CHECKING:
    from vramplan.core.files.planfile import Meta


class PlanHistory:
    """Every plan the user has had, oldest first. Typing into one field coalesces into one step.

    `push(plan, coalesce="training.seq_len")` replaces the newest step when the previous push had the same
    coalesce key (typing ``4096`` is one step, not four); any other push starts a new step and drops redo.
    Each step also keeps the `[meta]` of the plan file it came from (title and note, carried into exports): a
    push keeps the current one, `set_meta` replaces it (a file opened), undo and redo restore it with the plan.
    """

    def __init__(self, initial: Plan, meta: Meta | None = None, limit: int = 500) -> None:
        self._plans: list[Plan] = [initial]
        self._metas: list[Meta | None] = [meta]
        self._index = 0
        self._coalesce: str | None = None
        self._limit = limit

    @property
    def current(self) -> Plan:
        return self._plans[self._index]

    @property
    def meta(self) -> Meta | None:
        return self._metas[self._index]

    def set_meta(self, meta: Meta | None) -> None:
        self._metas[self._index] = meta

    @property
    def can_undo(self) -> bool:
        return self._index > 0

    @property
    def can_redo(self) -> bool:
        return self._index < len(self._plans) - 1

    def push(self, plan: Plan, coalesce: str | None = None) -> None:
        del self._plans[self._index + 1 :]
        del self._metas[self._index + 1 :]
        if coalesce is not None and coalesce == self._coalesce and self._index > 0:
            self._plans[self._index] = plan
        else:
            self._plans.append(plan)
            self._metas.append(self.meta)
            self._index += 1
            if len(self._plans) > self._limit:
                del self._plans[0], self._metas[0]
                self._index -= 1
        self._coalesce = coalesce

    def undo(self) -> Plan | None:
        if not self.can_undo:
            return None
        self._index -= 1
        self._coalesce = None
        return self.current

    def redo(self) -> Plan | None:
        if not self.can_redo:
            return None
        self._index += 1
        self._coalesce = None
        return self.current

    def break_coalescing(self) -> None:
        self._coalesce = None
