"""The checklist's mixture-of-experts items and the advisor's expert-parallel move (issue 14)."""

from __future__ import annotations

from typing import Any

from vramplan.core.advice.advisor import advise
from vramplan.core.advice.checklist import checklist
from vramplan.core.advice.moves import memory_moves
from vramplan.core.plan.schema.plan import plan_from_dict


def _plan(model: str, nodes: int = 1, **strategy: Any) -> Any:
    return plan_from_dict(
        {
            "model": {"preset": model},
            "hardware": {"gpu": "h200", "gpus_per_node": 8, "nodes": nodes},
            "strategy": strategy,
        }
    )


MOE_IDS = {"oom.moe_experts", "nan.moe_router", "nan.moe_aux_loss", "slow.moe_imbalance", "slow.moe_ep"}


def test_moe_items_only_for_moe_models() -> None:
    dense = {i.id for i in checklist(_plan("llama-3.1-8b"))}
    assert not dense & MOE_IDS
    cl = checklist(_plan("qwen3-30b-a3b"))
    assert {i.id for i in cl} >= MOE_IDS
    assert cl.item("nan.moe_aux_loss").status == "manual" and cl.item("slow.moe_imbalance").status == "manual"
    assert [i.group for i in cl] == sorted((i.group for i in cl), key=["oom", "nan", "slow"].index)


def test_batched_experts_in_training_fail_with_the_grouped_fix() -> None:
    """batched_mm keeps every token-expert pair's expert weights for backward: the plan no longer fits, and the
    checklist names the path and measures grouped_mm as the fix; the loop and grouped_mm are fine."""
    plan = _plan("qwen3-30b-a3b", zero_stage=3, experts="batched")
    item = checklist(plan).item("oom.moe_experts")
    assert item.status == "fail" and "batched_mm" in item.detail
    assert item.fix is not None and dict(item.fix.changes) == {"strategy.experts": "grouped"} and item.fix.fits
    for how in ("grouped", "loop"):
        assert checklist(_plan("qwen3-30b-a3b", zero_stage=3, experts=how)).item("oom.moe_experts").status == "ok"


def test_router_in_16_bit_is_flagged() -> None:
    assert checklist(_plan("mixtral-8x7b")).item("nan.moe_router").status == "ok"
    pure = _plan("mixtral-8x7b").with_changes({"training.precision": "bf16-pure"})
    assert checklist(pure).item("nan.moe_router").status == "warn"


def test_expert_parallel_across_nodes_warns_and_measures_the_fix() -> None:
    item = checklist(_plan("qwen3-30b-a3b", nodes=2, expert_parallel=16, zero_stage=3)).item("slow.moe_ep")
    assert item.status == "warn" and "crosses nodes" in item.detail
    assert item.fix is not None and dict(item.fix.changes) == {"strategy.expert_parallel": 8}
    assert item.fix.relative_step_time < 1
    assert checklist(_plan("qwen3-30b-a3b", expert_parallel=8)).item("slow.moe_ep").status == "ok"


def test_advisor_may_propose_expert_parallelism() -> None:
    plan = _plan("mixtral-8x7b", zero_stage=1).with_changes({"hardware.gpu": "h100-80gb"})
    assert any(mv.dim == "ep" for mv in memory_moves(plan))
    assert not any(mv.dim == "ep" for mv in memory_moves(_plan("llama-3.1-8b")))
    found = advise(plan)
    assert any("strategy.expert_parallel" in s.changes for s in found.suggestions)
