"""What a change to a plan would do: re-estimate memory and step time, and say it in one line.

Both the troubleshooting checklist (`core.advice.checklist`) and the fit advisor (`core.advice.advisor`) measure their
proposals here, so a fix's "-38.2 GiB per GPU, about +33% step time" is always the estimator's and the time model's own
figures for the changed plan, never a rule of thumb. A change set is a dict of dotted plan keys
(``{"strategy.gradient_checkpointing": "full"}``), applied with `Plan.with_changes` (validated) and expressible
as ``vramplan estimate PLAN --set key=value ...`` (`core.plan.keys.set_args`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from vramplan.core.memory.peak import estimate
from vramplan.core.memory.record import Estimate
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.helpers.units import GiB
from vramplan.core.plan.keys import set_args
from vramplan.core.plan.schema.plan import Plan
from vramplan.core.time.record import StepTime
from vramplan.core.time.step import step_time


def plain(value: Any) -> Any:
    """A plan value as JSON/TOML data (tuples become lists)."""
    return list(value) if isinstance(value, tuple) else value


@dataclass(frozen=True)
class Effect:
    """A change set and what the estimator and the time model say it does, relative to the plan it changes."""

    title: str  # "full checkpointing"
    changes: Mapping[str, Any]  # dotted plan key -> value, in the order to apply them
    memory_total: int  # predicted peak per GPU of the changed plan
    memory_delta: int  # memory_total - the current plan's (negative: saves memory)
    memory_on_gpu: int  # what must fit on the GPU: memory_total less paged optimizer states (Estimate.on_gpu)
    fitted_before: bool  # whether the plan it changes fits
    gpu_capacity: int
    step_seconds: float
    relative_step_time: float  # new step_seconds / current step_seconds
    relative_token_time: float  # new seconds per token / current (differs when the global batch changes)
    plan: Plan = field(repr=False, compare=False)

    @property
    def fits(self) -> bool:
        return self.memory_on_gpu <= self.gpu_capacity

    @property
    def headroom_fraction(self) -> float:
        return (self.gpu_capacity - self.memory_on_gpu) / self.gpu_capacity

    @property
    def same_global_batch(self) -> bool:
        return abs(self.relative_step_time - self.relative_token_time) <= 1e-9 * self.relative_step_time

    @property
    def saves_memory(self) -> bool:
        return self.memory_delta < 0

    def set_args(self) -> tuple[str, ...]:
        return set_args(self.changes)

    def memory_text(self) -> str:
        delta = self.memory_delta / GiB
        return "no memory change" if abs(delta) < 0.005 else f"{delta:+.2f} GiB per GPU"

    def time_text(self) -> str:
        """``about +33% step time`` (``time per token`` when the change alters the global batch)."""
        rel = self.relative_step_time if self.same_global_batch else self.relative_token_time
        what = "step time" if self.same_global_batch else "time per token"
        pct = (rel - 1) * 100
        return f"same {what}" if abs(pct) < 0.5 else f"about {pct:+.0f}% {what}"

    def fit_text(self) -> str:
        if not self.fits:
            return f"still over by {(self.memory_on_gpu - self.gpu_capacity) / GiB:.2f} GiB"
        return f"fits, {self.headroom_fraction:.0%} free"

    def text(self) -> str:
        """``full checkpointing: -38.20 GiB per GPU, about +33% step time; fits, 21% free`` (the fit only when
        memory changes)."""
        fit = f"; {self.fit_text()}" if self.memory_delta else ""
        return f"{self.title}: {self.memory_text()}, {self.time_text()}{fit}"

    def to_json(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "changes": {k: plain(v) for k, v in self.changes.items()},
            "set": list(self.set_args()),
            "memory_total": self.memory_total,
            "memory_on_gpu": self.memory_on_gpu,
            "memory_delta": self.memory_delta,
            "fits": self.fits,
            "headroom_fraction": round(self.headroom_fraction, 4),
            "step_seconds": self.step_seconds,
            "relative_step_time": self.relative_step_time,
            "relative_token_time": self.relative_token_time,
            "effect": self.text(),
        }


class WhatIf:
    """Measures change sets against one plan; each change set is estimated once (memoised by its contents)."""

    def __init__(self, plan: Plan, est: Estimate | None = None, st: StepTime | None = None) -> None:
        self.plan = plan
        self.est = est if est is not None else estimate(plan)
        self._st = st
        self._plans: dict[frozenset[tuple[str, Any]], Plan | None] = {}
        self._effects: dict[frozenset[tuple[str, Any]], Effect | None] = {}
        self.estimated = 0  # how many changed plans were estimated (the advisor reports it)

    @property
    def st(self) -> StepTime:
        if self._st is None:
            self._st = step_time(self.plan)
        return self._st

    @staticmethod
    def key(changes: Mapping[str, Any]) -> frozenset[tuple[str, Any]]:
        return frozenset((k, tuple(v) if isinstance(v, list) else v) for k, v in changes.items())

    def changed(self, changes: Mapping[str, Any]) -> Plan | None:
        """The changed plan, or None when the change set is not a valid plan (a `PlanError`)."""
        k = self.key(changes)
        if k not in self._plans:
            try:
                self._plans[k] = self.plan.with_changes(dict(changes))
            except PlanError:
                self._plans[k] = None
        return self._plans[k]

    def memory(self, changes: Mapping[str, Any]) -> Estimate | None:
        """The changed plan's estimate (no step time: the advisor times only what fits)."""
        p = self.changed(changes)
        if p is None:
            return None
        self.estimated += 1
        return estimate(p)

    def measure(self, title: str, changes: Mapping[str, Any], est: Estimate | None = None) -> Effect | None:
        """The change set's `Effect`, or None when it is not a valid plan."""
        k = self.key(changes)
        if k in self._effects:
            found = self._effects[k]
            return None if found is None else _retitled(found, title)
        p = self.changed(changes)
        if p is None:
            self._effects[k] = None
            return None
        new_est = est if est is not None else estimate(p)
        new_st = step_time(p)
        base_st = self.st
        rel = new_st.step_seconds / base_st.step_seconds
        per_token = (new_st.step_seconds / new_st.tokens_per_step) / (base_st.step_seconds / base_st.tokens_per_step)
        effect = Effect(
            title=title,
            changes=dict(changes),
            memory_total=new_est.total,
            memory_delta=new_est.total - self.est.total,
            memory_on_gpu=new_est.on_gpu,
            fitted_before=self.est.fits,
            gpu_capacity=new_est.gpu_capacity,
            step_seconds=new_st.step_seconds,
            relative_step_time=rel,
            relative_token_time=per_token,
            plan=p,
        )
        self._effects[k] = effect
        return effect


def _retitled(e: Effect, title: str) -> Effect:
    return e if e.title == title else replace(e, title=title)
