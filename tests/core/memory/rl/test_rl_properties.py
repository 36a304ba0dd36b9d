"""Properties of every valid RL plan (issue 30): the peak is the worst phase, more completion tokens never cost
less memory, a plan file reads back as the same plan, and the step is the sum of its parts."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from vramplan.core.files.planfile import plan_toml
from vramplan.core.files.planio import plan_file_from_data
from vramplan.core.memory.peak import estimate
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.helpers.tomlio import loads
from vramplan.core.plan.schema.plan import Plan, default_plan
from vramplan.core.time.step import step_time


@st.composite
def rl_changes(draw: st.DrawFn) -> dict[str, Any]:
    objective = draw(st.sampled_from(["dpo", "grpo", "ppo"]))
    out: dict[str, Any] = {
        "training.objective": objective,
        "training.method": draw(st.sampled_from(["full", "lora"])),
        "training.micro_batch_size": draw(st.sampled_from([1, 2, 4, 8])),
        "strategy.zero_stage": draw(st.sampled_from([0, 2, 3])),
        "hardware.gpu": draw(st.sampled_from(["a100-80gb", "h100-80gb"])),
    }
    if objective == "dpo":
        out["rl.max_length"] = draw(st.sampled_from([512, 1024, 2048]))
        out["rl.reference"] = draw(st.sampled_from([None, "copy", "precomputed"]))
        return out
    out["rl.max_completion_length"] = draw(st.sampled_from([64, 256, 1024]))
    out["rl.generation"] = draw(st.sampled_from(["hf", "vllm-colocate", "vllm-server"]))
    if out["rl.generation"] == "vllm-colocate":
        out["rl.vllm_gpu_memory_utilization"] = draw(st.sampled_from([0.2, 0.3, 0.5]))
        out["rl.vllm_enable_sleep_mode"] = draw(st.booleans())
    if objective == "grpo":
        out["rl.num_generations"] = draw(st.sampled_from([2, 4, 8]))
        out["rl.beta"] = draw(st.sampled_from([0.0, 0.04]))
    return out


def plan_of(changes: dict[str, Any]) -> Plan:
    try:
        return default_plan().with_changes(changes)
    except PlanError:
        assume(False)  # a combination the plan refuses (a GRPO batch that is not whole groups, ...)
        raise


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(changes=rl_changes())
def test_every_rl_plan_estimates_reads_back_and_adds_up(changes: dict[str, Any]) -> None:
    plan = plan_of(changes)
    est, st_ = estimate(plan), step_time(plan)
    assert est.rl is not None and st_.rl is not None
    assert est.peak.total == max(p.total for p in est.phases) == max(p.total for p in est.rl.phases)
    assert est.rl.peak_phase == est.peak.name
    assert est.total == est.peak.total + est.overhead
    assert st_.step_seconds == pytest.approx(st_.rl.generation_s + st_.rl.scoring_s + st_.rl.update_s)
    assert sum(t.exposed for t in st_.terms) == pytest.approx(st_.step_seconds)
    text = plan_toml(plan, created="2026-01-01T00:00:00Z")
    assert plan_file_from_data(loads(text), "<export>").plan == plan


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(changes=rl_changes())
def test_more_completion_tokens_never_cost_less(changes: dict[str, Any]) -> None:
    assume(changes["training.objective"] != "dpo")
    short = plan_of(changes)
    long = plan_of({**changes, "rl.max_completion_length": 2 * changes["rl.max_completion_length"]})
    # less the allocator's reserve, as the SFT property (tests/core/memory/test_properties.py): its packing is not
    # monotone
    a, b = estimate(short), estimate(long)
    assert b.total - b.overhead_bytes.get("allocator_reserve", 0) >= a.total - a.overhead_bytes.get(
        "allocator_reserve", 0
    )
    assert step_time(long).step_seconds > step_time(short).step_seconds
