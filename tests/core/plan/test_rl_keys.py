"""`training.objective` and every [rl] key are listed by `vramplan keys` with a meaning, and settable (issue 30)."""

from __future__ import annotations

from typing import Any

from vramplan.core.plan.keyref import settable_keys
from vramplan.core.plan.schema.plan import Plan, default_plan
from vramplan.core.plan.schema.rl import RLConfig

GRPO = {"hardware.gpu": "h100-80gb", "training.objective": "grpo", "training.micro_batch_size": 8}


def grpo(**changes: Any) -> Plan:
    return default_plan().with_changes({**GRPO, **changes})


def test_every_rl_key_is_listed_and_settable() -> None:
    keys = {k.key: k for k in settable_keys()}
    assert keys["training.objective"].type == "pretrain|sft|dpo|grpo|ppo"
    assert keys["training.objective"].default == "sft"
    for name in RLConfig.model_fields:
        assert f"rl.{name}" in keys and keys[f"rl.{name}"].meaning, name
    plan = grpo(**{"rl.generation": "vllm-colocate", "rl.vllm_enable_sleep_mode": True})
    assert plan.rl.vllm_enable_sleep_mode is True
