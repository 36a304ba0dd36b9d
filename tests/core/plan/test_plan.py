"""The plan model: presets fill keys, one validating update, errors that name the key."""

from __future__ import annotations

import pytest

from vramplan.core.plan.catalogue.presets import registry
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.keys import parse_value
from vramplan.core.plan.schema.plan import default_plan, plan_from_dict


def test_preset_fills_and_keys_override() -> None:
    plan = plan_from_dict({"model": {"preset": "llama-7b", "num_hidden_layers": 16}})
    assert plan.model.hidden_size == 4096
    assert plan.model.num_hidden_layers == 16
    assert plan.model.preset == "llama-7b"


def test_plan_is_frozen_and_hashable() -> None:
    plan = default_plan()
    with pytest.raises(Exception):  # noqa: B017 - pydantic's frozen-instance error
        plan.training.seq_len = 1  # type: ignore[misc]
    assert hash(plan) == hash(default_plan())


def test_with_changes_validates() -> None:
    plan = default_plan()
    assert plan.with_changes({"strategy.zero_stage": 2}).strategy.zero_stage == 2
    with pytest.raises(PlanError) as exc:
        plan.with_changes({"strategy.zero_stage": 7})
    assert exc.value.where == "strategy.zero_stage"
    assert plan.strategy.zero_stage == 3  # the original is untouched


def test_new_model_preset_replaces_model_keys() -> None:
    plan = default_plan().with_changes({"model.num_hidden_layers": 4})
    bloom = plan.with_changes({"model.preset": "bloom-7b1"})
    assert bloom.model.num_hidden_layers == 30
    assert bloom.model.vocab_size == 250880


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"model.num_key_value_heads": 5}, "model.num_key_value_heads"),
        ({"model.model_type": "mamba"}, "model.model_type"),  # gpt2 is supported since issue 7
        ({"training.method": "qlora", "training.quantization": "none"}, "training.quantization"),
        ({"training.method": "full", "training.quantization": "nf4"}, "training.quantization"),
        ({"strategy.offload_parameters": "cpu", "strategy.zero_stage": 2}, "strategy.offload_parameters"),
        ({"strategy.offload_optimizer": "cpu", "strategy.zero_stage": 0}, "strategy.offload_optimizer"),
        ({"strategy.tensor_parallel": 3}, "strategy.tensor_parallel"),
        ({"strategy.pipeline_parallel": 2, "strategy.zero_stage": 3}, "strategy.zero_stage"),
        ({"strategy.sequence_parallel": True}, "strategy.sequence_parallel"),
        ({"training.method": "lora", "training.lora_targets": ["x"]}, "training.lora_targets"),
        (
            {"model.preset": "bloom-7b1", "training.method": "lora", "training.lora_targets": ["q", "v"]},
            "training.lora_targets",
        ),
        ({"model.preset": "bloom-7b1", "model.intermediate_size": 1000}, "model.intermediate_size"),
        ({"hardware.gpu": "nope"}, "hardware.gpu"),
        ({"training.micro_batch_size": 0}, "training.micro_batch_size"),
        ({"training.bogus": 1}, "training.bogus"),
    ],
)
def test_invalid_combinations_name_the_key(changes: dict, key: str) -> None:
    with pytest.raises(PlanError) as exc:
        default_plan().with_changes(changes)
    assert exc.value.where == key, exc.value.line()


def test_gpu_count_divisible_by_tp_pp() -> None:
    with pytest.raises(PlanError) as exc:
        default_plan().with_changes(
            {"hardware.gpus_per_node": 6, "strategy.tensor_parallel": 4, "strategy.zero_stage": 0}
        )
    assert "not divisible" in exc.value.message


def test_dump_load_round_trip_for_every_preset() -> None:
    for mp in registry().models.values():
        plan = plan_from_dict({"model": {"preset": mp.id}})
        assert plan_from_dict(plan.dump()) == plan


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("3", 3),
        ("true", True),
        ('["q","v"]', ["q", "v"]),
        ("eager", "eager"),
        ('"x y"', "x y"),
        ("2.5", 2.5),
        ("llama-7b", "llama-7b"),
    ],
)
def test_set_values_are_toml_literals_or_bare_strings(text: str, value: object) -> None:
    assert parse_value(text) == value


def test_every_hardware_preset_is_complete() -> None:
    gpus = registry().gpus
    for gid in (
        "rtx-3070-8gb",
        "rtx-3090",
        "rtx-4090",
        "t4",
        "a10",
        "l40s",
        "v100-32gb",
        "a100-40gb",
        "a100-80gb",
        "h100-80gb",
        "h100-pcie",
        "h200",
        "b200",
        "mi250x",
        "mi300x",
    ):
        g = gpus[gid]
        assert g.source and g.memory_mib > 0 and g.fp32_tflops > 0 and g.gpu_link_gbs > 0 and g.host_link_gbs > 0
        assert (g.bf16_tflops > 0) == g.bf16
    assert not gpus["v100-32gb"].bf16 and not gpus["t4"].bf16
    assert gpus["h100-80gb"].bf16_tflops == 989.0  # dense, not the 1,979 sparse figure
    assert gpus["h100-80gb"].gpu_link_gbs == 450.0  # per direction, not the 900 GB/s bidirectional total


def test_token_budget_and_mfu_take_the_planners_suffixes_in_files_and_set() -> None:
    plan = default_plan().with_changes({"training.tokens": "2T", "training.mfu": "45%"})
    assert plan.training.tokens == 2 * 10**12 and plan.training.mfu == 0.45
    assert plan_from_dict({**plan.dump(), "training": {"tokens": "300B"}}).training.tokens == 300 * 10**9
    assert plan.dump()["training"]["tokens"] == 2 * 10**12  # written back as the number it is
    with pytest.raises(PlanError, match=r"training\.tokens: enter a number"):
        default_plan().with_changes({"training.tokens": "lots"})
    with pytest.raises(PlanError, match="whole number"):
        default_plan().with_changes({"training.tokens": "1.5"})
