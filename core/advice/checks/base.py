"""What every checklist rule works with: the `Item` it returns and the `Context` it judges (plan, estimate, step
time, and a `WhatIf` to measure its fixes)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from vramplan.core.advice.frameworks import unsupported
from vramplan.core.advice.moves import BROAD, Move, memory_moves
from vramplan.core.advice.speedup import speed_up
from vramplan.core.advice.whatif import Effect, WhatIf
from vramplan.core.memory.record import FRAGMENTATION_RISK, Estimate
from vramplan.core.plan.architecture.arch import Arch
from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.catalogue.specs import GpuSpec
from vramplan.core.plan.helpers.units import GiB
from vramplan.core.plan.schema.plan import Plan
from vramplan.core.time.record import StepTime

STATUSES = ("ok", "warn", "fail", "manual")


@dataclass(frozen=True)
class Item:
    """One line of the checklist, judged against one plan."""

    id: str  # "oom.activations": group.name
    group: str  # oom | nan | slow
    status: str  # ok | warn | fail | manual (vramplan cannot judge it: the user checks and ticks it)
    title: str
    detail: str  # one or two sentences with this plan's numbers
    source: str  # where the rule comes from
    fix: Effect | None = None  # the change that addresses it, measured
    alternatives: tuple[Effect, ...] = ()  # other measured remedies (the fix first among them when it is one)
    ticked: bool = False  # manual items: the user has checked it (kept in the plan's [checklist] table)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "group": self.group,
            "status": self.status,
            "title": self.title,
            "detail": self.detail,
            "source": self.source,
            "fix": self.fix.to_json() if self.fix else None,
            "alternatives": [e.to_json() for e in self.alternatives],
        }
        if self.status == "manual":
            out["ticked"] = self.ticked
        return out


def gib(n: int | float) -> str:
    return f"{n / GiB:.1f} GiB"


def pct(x: float) -> str:
    return f"{x:.0%}"


@dataclass
class Context:
    """A plan under review. Effects are measured lazily and memoised, so rules can share remedies."""

    plan: Plan
    est: Estimate
    whatif: WhatIf
    framework: str = "all"  # the memory fix: only plans this framework runs, as the fit advisor's suggestions
    _remedies: dict[str, tuple[Effect, ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, plan: Plan, est: Estimate | None = None, st: StepTime | None = None, framework: str = "all") -> Context:
        w = WhatIf(plan, est, st)
        return cls(plan, w.est, w, framework)

    @property
    def st(self) -> StepTime:
        return self.whatif.st

    @cached_property
    def gpu(self) -> GpuSpec:
        return presets.gpu(self.plan.hardware.gpu)

    @cached_property
    def arch(self) -> Arch:
        return self.plan.model.arch()

    @property
    def headroom_goal(self) -> float:
        """The headroom the memory fix leaves: ``advice.headroom_percent`` when the plan sets it (``vramplan check
        --headroom``), else what fragmentation can take (`FRAGMENTATION_RISK`); the estimate's own error band is
        the capacity item's warning (`core.advice.checks.oom`)."""
        percent = self.plan.advice.headroom_percent
        return FRAGMENTATION_RISK if percent is None else percent / 100

    @property
    def pressure(self) -> bool:
        """Over capacity, or fits with less headroom than `headroom_goal`."""
        return not self.est.fits or self.est.headroom_fraction < self.headroom_goal

    def goal(self, e: Effect) -> bool:
        """Whether a remedy solves the memory problem: fits if the plan does not, else leaves `headroom_goal`."""
        return e.fits if not self.est.fits else e.headroom_fraction >= self.headroom_goal

    def share(self, kinds: Iterable[str]) -> int:
        live = self.est.live_at_peak
        return sum(live.get(k, 0) for k in kinds)

    def measure(self, title: str, changes: dict[str, Any]) -> Effect | None:
        return self.whatif.measure(title, changes)

    def measure_moves(self, moves: Iterable[Move]) -> list[Effect]:
        out = []
        for mv in moves:
            e = self.measure(mv.title, dict(mv.changes))
            if e is not None:
                out.append(e)
        return out

    def runs(self, e: Effect) -> bool:
        """Whether the framework runs the changed plan (always, for ``all``)."""
        return not unsupported(e.plan, self.framework)

    def reaches_goal(self, est: Estimate) -> bool:
        """`goal` for an estimate, in a plan the framework runs (the fit advisor's test of a change set)."""
        if unsupported(est.plan, self.framework):
            return False
        return est.fits if not self.est.fits else est.headroom_fraction >= self.headroom_goal

    def fastest_fix(self) -> Effect | None:
        """The fastest single memory move (same training or numerics) that solves the problem, with the speed
        moves its spare memory pays for (`core.advice.speedup`): the fit advisor's ranking, on single moves."""
        found = []
        for mv in memory_moves(self.plan):
            e = self.measure(mv.title, dict(mv.changes)) if mv.tier <= 1 else None
            if e is not None and e.saves_memory and self.goal(e) and self.runs(e):
                found.append(speed_up(self.whatif, (mv,), e, self.reaches_goal)[0])
        return min(found, key=lambda e: (e.relative_step_time, e.memory_on_gpu), default=None)

    def remedies(self, target: str | None = None) -> tuple[Effect, ...]:
        """Measured memory moves (same training or numerics, not a method change) that lower the peak: for one
        target (`core.advice.moves.TARGET_KINDS`: the moves aimed at it, not those that split everything, like TP) or
        all; those that solve the problem first, fastest first."""
        key = target or "*"
        if key not in self._remedies:
            moves = [
                mv
                for mv in memory_moves(self.plan)
                if mv.tier <= 1 and (target is None or (target in mv.targets and mv.targets != BROAD))
            ]
            found = [e for e in self.measure_moves(moves) if e.saves_memory]
            found.sort(key=lambda e: (not self.goal(e), e.relative_step_time, e.memory_total))
            self._remedies[key] = tuple(found)
        return self._remedies[key]


def fastest(effects: Iterable[Effect], ok: Callable[[Effect], bool], faster: float = 1.0) -> Effect | None:
    """The fastest effect that satisfies `ok` and has a relative time below `faster` (per token)."""
    good = [e for e in effects if ok(e) and e.relative_token_time < faster]
    return min(good, key=lambda e: (e.relative_token_time, e.memory_total), default=None)


Rule = Callable[[Context], Item]
