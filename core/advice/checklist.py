"""The troubleshooting checklist: OOM, NaN loss and slow training, judged against one plan (pure, milliseconds).

``checklist(plan)`` runs every rule of `core.advice.checks` (`oom`, `nan`, `slow`) and returns a `Checklist` of `Item`s,
each with an id (``oom.activations``), a status (``ok``, ``warn``, ``fail``, or ``manual`` for what vramplan
cannot know, e.g. the data loader), a detail sentence with this plan's numbers, the source of the rule, and where
a change helps, a `core.advice.whatif.Effect`: the change set and its effect measured by re-estimating the changed plan
("full checkpointing: -38.20 GiB per GPU, about +33% step time; fits, 21% free").

Manual items are ticked in the plan itself (``[checklist] ticked = [...]``; `toggle_ticked`), so their state is
saved and exported with it. A front end applies a fix with `apply_fix` (a validated `Plan.with_changes`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from vramplan.core.advice.checks import moe_checks, nan, oom, rl_checks, slow, stack_checks
from vramplan.core.advice.checks.base import STATUSES, Context, Item
from vramplan.core.advice.whatif import Effect
from vramplan.core.memory.record import FRAGMENTATION_RISK, Estimate
from vramplan.core.plan.schema.plan import Plan
from vramplan.core.time.record import StepTime

__all__ = [
    "FRAGMENTATION_RISK",
    "GROUPS",
    "STATUSES",
    "Checklist",
    "Effect",
    "Item",
    "apply_fix",
    "checklist",
    "toggle_ticked",
]

GROUPS: dict[str, str] = {"oom": "Out of memory", "nan": "NaN loss", "slow": "Slow training"}
RULES = (*oom.RULES, *stack_checks.OOM_RULES, *nan.RULES, *slow.RULES, *stack_checks.SLOW_RULES)
MOE_RULES = {"oom": moe_checks.OOM_RULES, "nan": moe_checks.NAN_RULES, "slow": moe_checks.SLOW_RULES}
RL_RULES: dict[str, tuple[Callable[[Context], Item | None], ...]] = {
    "oom": rl_checks.OOM_RULES,
    "slow": rl_checks.SLOW_RULES,
}


@dataclass(frozen=True)
class Checklist:
    plan: Plan
    items: tuple[Item, ...]

    def __iter__(self) -> Iterator[Item]:
        return iter(self.items)

    def group(self, name: str) -> tuple[Item, ...]:
        return tuple(i for i in self.items if i.group == name)

    def item(self, item_id: str) -> Item:
        return next(i for i in self.items if i.id == item_id)

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(STATUSES, 0)
        for i in self.items:
            out[i.status] += 1
        return out

    @property
    def failed(self) -> bool:
        return any(i.status == "fail" for i in self.items)

    @property
    def exit_code(self) -> int:
        """``vramplan check``'s exit code: 1 when an item fails (to gate a review), else 0."""
        return 1 if self.failed else 0

    def summary(self) -> str:
        """``2 fail, 3 warn, 12 ok, 4 to check by hand (1 ticked)``."""
        c = self.counts()
        ticked = sum(1 for i in self.items if i.status == "manual" and i.ticked)
        by_hand = f"{c['manual']} to check by hand" + (f" ({ticked} ticked)" if ticked else "")
        return f"{c['fail']} fail, {c['warn']} warn, {c['ok']} ok, {by_hand}"

    def to_json(self) -> dict[str, Any]:
        return {
            "summary": {**self.counts(), "failing": [i.id for i in self.items if i.status == "fail"]},
            "items": [i.to_json() for i in self.items],
        }


def checklist(plan: Plan, est: Estimate | None = None, st: StepTime | None = None, framework: str = "all") -> Checklist:
    """Judge every rule against ``plan`` (its estimate and step time are computed unless given); the memory fix
    is one that ``framework`` runs (`core.advice.frameworks`), as the fit advisor's suggestions are."""
    ctx = Context.of(plan, est, st, framework)
    items = [rule(ctx) for rule in RULES]
    groups: list[dict[str, tuple[Callable[[Context], Item | None], ...]]] = []
    if ctx.arch.moe is not None:  # mixture-of-experts items, after their group's others
        groups.append(MOE_RULES)
    if plan.training.objective_spec.post_training:  # DPO/GRPO/PPO items (`core.advice.checks.rl_checks`)
        groups.append(RL_RULES)
    for extra_rules in groups:
        extra = {g: [i for r in rules if (i := r(ctx)) is not None] for g, rules in extra_rules.items()}
        items = [i for g in GROUPS for i in (*[x for x in items if x.group == g], *extra.get(g, []))]
    return Checklist(plan, tuple(items))


def apply_fix(plan: Plan, fix: Effect) -> Plan:
    """The plan with a fix's changes (validated: `PlanError` if the plan changed so that they no longer apply)."""
    return plan.with_changes(dict(fix.changes))


def toggle_ticked(plan: Plan, item_id: str) -> Plan:
    """Tick a by-hand item, or untick it if ticked (the state lives in the plan's ``[checklist]`` table)."""
    ticked = set(plan.checklist.ticked)
    ticked.symmetric_difference_update({item_id})
    return plan.with_changes({"checklist.ticked": tuple(sorted(ticked))})
