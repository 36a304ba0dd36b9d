"""Issue 40.8: `Plan.with_changes` validates only what changed (the changed tables, the stack's defaults chosen
again, the rules across tables), and its result is the whole re-validation's: the same plan, the same stack choices,
the same error for a change the plan refuses."""

from __future__ import annotations

import random
from typing import Any

import pytest

from bench.data.behaviour_digest import draw
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.schema.plan import Plan, default_plan

SEED = 408
BASES = 150  # random valid plans (the behaviour digest's draws)
CHANGES_PER_BASE = 12


def _base_plans() -> list[Plan]:
    r = random.Random(SEED)
    plans: list[Plan] = []
    while len(plans) < BASES:
        try:
            plans.append(default_plan().with_changes(draw(r), whole=True))
        except PlanError:
            continue
    return plans


def _change_sets(r: random.Random) -> list[dict[str, Any]]:
    """Change sets as the advisor, the planner's keys and the palette make them: one to four keys of another random
    draw (model and objective changes included: those take the whole path), unsets (None), and values no plan
    takes."""
    pool = list(draw(r).items())
    out = []
    for _ in range(CHANGES_PER_BASE):
        changes = dict(r.sample(pool, r.randint(1, 4)))
        roll = r.random()
        if roll < 0.15:
            changes[r.choice(pool)[0]] = None  # unset: the field's default, or the stack's choice
        elif roll < 0.25:
            changes[r.choice(("strategy.zero_stage", "training.micro_batch_size", "strategy.attention"))] = "bogus"
        elif roll < 0.3:
            changes["strategy.tensor_parallel"] = 3  # heads that do not split
        out.append(changes)
    return out


def _outcome(plan: Plan, changes: dict[str, Any], whole: bool) -> Plan | str:
    try:
        return plan.with_changes(changes, whole=whole)
    except PlanError as exc:
        return f"PlanError: {exc.line()}"


def test_the_changed_tables_give_the_whole_plans_result() -> None:
    r = random.Random(SEED)
    compared = refused = 0
    for plan in _base_plans():
        for changes in _change_sets(r):
            fast, whole = _outcome(plan, changes, False), _outcome(plan, changes, True)
            if isinstance(whole, str):
                assert fast == whole, changes  # the same error, worded by the whole path
                refused += 1
                continue
            assert isinstance(fast, Plan), (changes, fast)
            assert fast == whole, changes
            assert fast.stack_chosen == whole.stack_chosen, changes
            assert fast.dump() == whole.dump() and hash(fast) == hash(whole)
            compared += 1
    assert compared > 1000 and refused > 50  # both outcomes well exercised


def test_a_stack_change_chooses_the_stacks_defaults_again() -> None:
    """Switching the framework re-chooses every key the plan leaves unset, in tables the change did not touch."""
    plan = default_plan().with_changes({"training.method": "lora"})
    assert plan.stack_chosen["training.lora_dtype"].value == "fp32"  # custom: PEFT's fp32 adapters
    tuned = plan.with_changes({"stack.framework": "torchtune"})
    assert tuned.training.lora_dtype == "bf16" and "training.lora_dtype" in tuned.stack_chosen
    assert tuned == plan.with_changes({"stack.framework": "torchtune"}, whole=True)
    stated = plan.with_changes({"training.lora_dtype": "fp32", "stack.framework": "torchtune"})
    assert stated.training.lora_dtype == "fp32" and "training.lora_dtype" not in stated.stack_chosen


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"strategy.zero_stage": 7}, "strategy.zero_stage"),
        ({"training.micro_batch_size": True}, "training.micro_batch_size"),
        ({"strategy.tensor_parallel": 3}, "strategy.tensor_parallel"),
        ({"strategy.nonsense": 1}, "strategy.nonsense"),
    ],
)
def test_each_rule_still_applies_to_what_changed(changes: dict[str, Any], message: str) -> None:
    """A field's range, the strict scalars, a rule across tables (heads that TP 3 does not split), an unknown key."""
    with pytest.raises(PlanError, match=message.replace(".", r"\.")):
        default_plan().with_changes(changes)


def test_unchanged_tables_are_shared_not_copied() -> None:
    plan = default_plan()
    new = plan.with_changes({"strategy.zero_stage": 2})
    assert new.strategy.zero_stage == 2
    assert new.training is plan.training and new.hardware is plan.hardware and new.model is plan.model
