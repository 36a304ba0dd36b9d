"""DPO, GRPO and PPO plans round-trip through the TOML export: the [rl] table holds what the plan states, and the
file reads back as the same plan, byte for byte (issue 30)."""

from __future__ import annotations

from typing import Any

import pytest

from vramplan.core.files.planfile import plan_toml
from vramplan.core.files.planio import plan_file_from_data
from vramplan.core.plan.helpers.tomlio import loads
from vramplan.core.plan.schema.plan import Plan, default_plan

GRPO = {"hardware.gpu": "h100-80gb", "training.objective": "grpo", "training.micro_batch_size": 8}


def grpo(**changes: Any) -> Plan:
    return default_plan().with_changes({**GRPO, **changes})


@pytest.mark.parametrize(
    "changes",
    [
        {"rl.beta": 0.04, "rl.generation": "vllm-colocate", "rl.vllm_gpu_memory_utilization": 0.4},
        {"training.objective": "dpo", "rl.max_length": 2048, "rl.reference": "precomputed"},
        {"training.objective": "ppo", "rl.reward_model": "llama-7b", "rl.frozen_offload": "cpu"},
        {"rl.generation": "vllm-server", "rl.vllm_tensor_parallel_size": 2, "rl.prompts": 5000},
    ],
)
def test_rl_plans_round_trip_through_the_toml_export(changes: dict[str, Any]) -> None:
    plan = grpo(**changes)
    text = plan_toml(plan, created="2026-01-01T00:00:00Z")
    data = loads(text)
    assert data["training"]["objective"] == plan.training.objective
    assert data["rl"] == plan.rl.stated()
    again = plan_file_from_data(data, "<export>").plan
    assert again == plan
    assert plan_toml(again, created="2026-01-01T00:00:00Z") == text
