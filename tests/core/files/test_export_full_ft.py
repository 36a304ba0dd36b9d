"""A TOML export of full fine-tuning omits the adapter keys, and loads back to the identical plan (issue 32)."""

from __future__ import annotations

import pytest
import tomllib

from vramplan.core.files.planfile import ADAPTER_KEYS, plan_toml
from vramplan.core.files.planio import plan_file_from_data
from vramplan.core.plan.schema.plan import default_plan


def exported(changes: dict[str, object]) -> tuple[dict[str, object], object, object]:
    plan = default_plan().with_changes(changes)
    data = tomllib.loads(plan_toml(plan, created="2026-01-01T00:00:00Z"))
    return data["training"], plan, plan_file_from_data(data, "p.toml").plan


@pytest.mark.parametrize("gpu", ["a100-80gb", "h100-80gb"])
def test_full_fine_tuning_omits_adapter_keys_and_reloads_identically(gpu: str) -> None:
    training, plan, back = exported({"hardware.gpu": gpu, "training.method": "full"})
    assert not set(ADAPTER_KEYS) & set(training), training
    assert back == plan and back.training.lora_rank == 8 and back.training.lora_targets == ("q", "v")


def test_lora_keeps_its_keys_and_a_full_plan_keeps_a_set_one() -> None:
    training, plan, back = exported({"training.method": "lora", "training.lora_rank": 16})
    assert training["lora_rank"] == 16 and training["lora_targets"] == ["q", "v"] and back == plan
    training, plan, back = exported({"training.method": "full", "training.lora_rank": 64})
    assert training["lora_rank"] == 64 and "lora_targets" not in training and back == plan
