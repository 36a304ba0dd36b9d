"""Issue 40.8: a search packs the caching allocator's segments only for candidates that fit on their allocated bytes
(`WhatIf.tried`, `estimate(pack=False)`): the packing was 62% of `fit`'s time, spent on plans that already failed."""

from __future__ import annotations

import math
from typing import Any

import pytest

from vramplan.core.advice import whatif
from vramplan.core.advice.advisor import advise
from vramplan.core.advice.margin import safety_margin
from vramplan.core.memory.peak import estimate, packs
from vramplan.core.plan.schema.plan import Plan, default_plan

OVER = default_plan().with_changes(
    {"strategy.zero_stage": 0, "strategy.gradient_checkpointing": "none", "training.micro_batch_size": 4}
)


@pytest.mark.parametrize(
    "changes",
    [{}, {"training.method": "qlora"}, {"overhead.expandable_segments": True}, {"model.preset": "qwen2.5-72b"}],
)
def test_without_packing_every_figure_is_at_most_the_whole_estimates(changes: dict[str, Any]) -> None:
    """``pack=False`` leaves out only the allocator's rounding and segment waste (its reserve term): the tensors,
    the other overheads and what is offloaded are the same, so it bounds the whole estimate from below."""
    plan = OVER.with_changes(changes)
    whole, floor = estimate(plan), estimate(plan, pack=False)
    assert packs(plan)
    assert floor.peak == whole.peak and floor.cpu_per_node == whole.cpu_per_node
    assert floor.overhead_bytes["allocator_reserve"] == 0 < whole.overhead_bytes["allocator_reserve"]
    rest = {k: v for k, v in whole.overhead_bytes.items() if k != "allocator_reserve"}
    assert {k: v for k, v in floor.overhead_bytes.items() if k != "allocator_reserve"} == rest
    waste = whole.overhead_bytes["allocator_reserve"]
    assert whole.on_gpu - floor.on_gpu == whole.total - floor.total == waste
    set_reserve = plan.with_changes({"overhead.allocator_reserve_percent": 5})
    assert not packs(set_reserve) and estimate(set_reserve, pack=False) == estimate(set_reserve)


def test_fit_packs_only_what_fits_on_its_allocated_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    whole_estimates: list[Plan] = []
    real = whatif.estimate

    def counting(plan: Plan, **kw: Any) -> Any:
        if kw.get("pack", True):
            whole_estimates.append(plan)
        return real(plan, **kw)

    monkeypatch.setattr(whatif, "estimate", counting)
    advice = advise(OVER)
    candidates = advice.searched
    assert advice.suggestions and candidates > 300
    packed = {p for p in whole_estimates if p != OVER}
    for p in packed:  # each whole estimate is of a plan that keeps its margin without the packing
        floor = real(p, pack=False)
        assert safety_margin(floor).keeps(floor), p
    assert len(packed) < candidates / 3  # most candidates never pay for the packing


@pytest.mark.parametrize(
    "changes",
    [
        {},
        {"strategy.tensor_parallel": 2},
        {"strategy.tensor_parallel": 4, "hardware.gpu": "a100-40gb"},
        {"strategy.tensor_parallel": 8, "strategy.pipeline_parallel": 2, "strategy.zero_stage": 1, "hardware.nodes": 2},
        {"strategy.pipeline_parallel": 3, "strategy.zero_stage": 1, "hardware.gpus_per_node": 3},
    ],
)
def test_the_gpu_counts_min_gpus_bisects_are_indexed_not_listed(changes: dict[str, Any]) -> None:
    """`Realizable` reads a size by its index (the search reads about 20 of up to 800,000): the same sizes, in the
    same order, as listing them (one node's worth of TP x PP groups, then whole nodes up to MAX_NODES)."""
    from vramplan.core.advice.fit_limits import MAX_NODES, Realizable, node_size

    plan = default_plan().with_changes(changes)
    s, per_node = plan.strategy, node_size(plan)
    unit = s.tensor_parallel * s.pipeline_parallel
    step = per_node // math.gcd(unit, per_node)
    listed = list(range(1, per_node // unit + 1))
    listed += [k * step for k in range(per_node // unit // step + 1, MAX_NODES * per_node // unit // step + 1)]
    sizes = Realizable(plan)
    assert len(sizes) == len(listed) and list(sizes) == listed and sizes[-1] == listed[-1]
