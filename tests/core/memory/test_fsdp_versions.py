"""FSDP1 against FSDP2 (issue 28.2): ``strategy.fsdp_version`` and ``strategy.fsdp_adapter_wrap``, their stack
defaults, and what FSDP1's flat parameters keep (vramplan.core.memory.states.fsdp1).

The small model: a Llama block of h=64, i=176, 4 heads (q, k, v, o: 64 x 64 = 4096 each; gate, up, down:
64 x 176 = 11264 each; two [64] norms): 4 x 4096 + 3 x 11264 + 2 x 64 = 50304 elements. LoRA r=8 on q and v:
A 8 x 64 + B 64 x 8 = 1024 per linear, 2048 per block. Vocabulary 1000, untied: embedding and lm_head 64000 each,
the final norm 64. Three GPUs, which divide none of the units.
"""

from __future__ import annotations

from typing import Any

import pytest

from vramplan.core.memory.peak import estimate
from vramplan.core.memory.record import Estimate
from vramplan.core.memory.states.fsdp1 import flat_param_numel
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.resolved import shown_choices
from vramplan.core.plan.schema.plan import Plan, default_plan, plan_from_dict

WORLD = 3
BLOCK, ADAPTERS, ROOT = 50304, 2048, 64000 + 64 + 64000


def small_plan(method: str = "lora", **changes: Any) -> Plan:
    data: dict[str, Any] = {
        "model": {
            "model_type": "llama",
            "vocab_size": 1000,
            "hidden_size": 64,
            "intermediate_size": 176,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 4,
            "tie_word_embeddings": False,
        },
        "hardware": {"gpu": "a100-40gb", "gpus_per_node": WORLD, "nodes": 1},
        "training": {"micro_batch_size": 1, "seq_len": 64, "method": method, "precision": "bf16-pure"},
        "strategy": {"gradient_checkpointing": "full", "zero_stage": 3},
        "stack": {"framework": "litgpt", "litgpt": "0.5.10"},
    }
    for key, value in changes.items():
        table, _, name = key.partition(".")
        if name:
            data[table][name] = value
        else:
            data[table] = value
    return plan_from_dict(data)


def optimizer_moment(e: Estimate) -> dict[str, int]:
    """What lives at the optimizer step: the parameter shards and every gradient shard."""
    return next(p.live for p in e.phases if p.name == "optimizer")


def test_padding_is_exact_when_the_world_size_does_not_divide() -> None:
    # use_orig_params=False: ceil(N / world) per rank; 50305 = 3 x 16768 + 1 -> 3 x 16769
    assert flat_param_numel((BLOCK + 1,), WORLD, 0) == 3 * 16769
    # use_orig_params=True, bf16 (align 16 B / 2 B = 8): 5 -> pad 3 -> 8, + 3 = 11 -> a multiple of 4: 12
    assert flat_param_numel((5, 3), 4, 8) == 12
    assert flat_param_numel((5, 3), 4, 0) == 8
    assert flat_param_numel((8, 8), 4, 8) == 16  # aligned already: no padding


def test_fsdp1_lora_in_the_block_unit_shards_the_whole_block_as_gradient() -> None:
    """litgpt <= 0.5.10 (FSDP1, adapters in the Block's FlatParameter): the gradient is as large as the block."""
    plan = small_plan()
    assert (plan.strategy.fsdp_version, plan.strategy.fsdp_adapter_wrap) == (1, "block")
    # a block's unit: 50304 + 2048 = 52352 (every tensor a multiple of 8: no alignment padding) -> 52353 (3 x 17451)
    unit = flat_param_numel((BLOCK, ADAPTERS), WORLD, 8)
    assert unit == 52353
    live = optimizer_moment(estimate(plan))
    assert live["gradients"] == 2 * unit * 2 // WORLD == 69804  # bf16 gradients of both blocks' shards
    # parameters: both blocks + the root (128064, a multiple of 3 and of 8) in bf16, sharded over 3
    assert live["parameters"] == (2 * unit + ROOT) * 2 // WORLD == 155180
    # the unsharded flat gradient of the block behind waits for its reduce-scatter during the first block's
    # backward: the whole unit in bf16, where units of their own hold 4 x 513 adapter elements
    own = small_plan(**{"strategy.fsdp_adapter_wrap": "own"})

    def first_block(p: Plan) -> int:
        return next(ph.live["temporaries"] for ph in estimate(p).phases if "first block" in ph.moment)

    assert first_block(plan) - first_block(own) == (unit - 4 * 513) * 2


def test_fsdp2_and_own_units_give_the_adapters_gradient_only() -> None:
    fsdp2 = small_plan(**{"stack.litgpt": "0.5.11"})
    assert fsdp2.strategy.fsdp_version == 2
    # per-parameter shards: 2 blocks x 2048 adapter elements x 2 B (litgpt's bf16 adapters) / 3
    assert optimizer_moment(estimate(fsdp2))["gradients"] == 2 * ADAPTERS * 2 // WORLD == 2730
    own = small_plan(**{"strategy.fsdp_adapter_wrap": "own"})
    # FSDP1, each adapter linear its own unit: 1024 / 2 = 512 elements each -> 513 (3 x 171), 4 per block
    assert optimizer_moment(estimate(own))["gradients"] == 2 * 4 * 513 * 2 // WORLD == 2736


def test_fsdp1_keeps_the_root_unsharded_beside_two_blocks() -> None:
    """limit_all_gathers: the unit computing and the one prefetched; the root is not resharded after forward."""
    full1 = small_plan("full", **{"strategy.fsdp_version": 1})
    full2 = small_plan("full", **{"strategy.fsdp_version": 2})
    block = flat_param_numel((BLOCK,), WORLD, 0)  # 50304 = 3 x 16768: no padding
    assert estimate(full1).largest["gathered_parameters"] == (2 * block + ROOT) * 2
    # FSDP2 (today's model): the largest unit (the 64000-row vocabulary) + the next block
    assert estimate(full2).largest["gathered_parameters"] == (64000 + BLOCK) * 2


@pytest.mark.parametrize(
    ("stack", "method", "version"),
    [
        ({"framework": "litgpt", "litgpt": "0.5.10"}, "lora", 1),
        ({"framework": "litgpt", "litgpt": "0.5.11"}, "lora", 2),
        ({"framework": "litgpt"}, "lora", 2),  # unset: the newest litgpt
        ({"framework": "litgpt"}, "full", 1),  # finetune/full.py still FSDPStrategy
        ({"framework": "torchtune"}, "lora", 2),
        ({"framework": "torchtune", "torchtune": "0.2.1"}, "lora", 1),
        ({"framework": "torchtitan"}, "full", 2),
        ({"framework": "accelerate"}, "lora", 1),
        ({"framework": "axolotl"}, "full", 1),
        ({"framework": "custom"}, "full", 2),
        ({"framework": "deepspeed"}, "full", 2),
    ],
)
def test_stack_defaults(stack: dict[str, str], method: str, version: int) -> None:
    plan = small_plan(method, stack=stack)
    assert plan.strategy.fsdp_version == version
    assert "strategy.fsdp_version" in plan.stack_chosen


def test_hf_stacks_on_deepspeed_master_weights_are_not_fsdp1() -> None:
    plan = small_plan("full", **{"stack.framework": "trl", "training.precision": "bf16-master"})
    assert plan.strategy.fsdp_version == 2  # DeepSpeed's ZeRO: per-parameter partitions
    assert not _shown(plan)
    assert small_plan("full", **{"stack.framework": "trl"}).strategy.fsdp_version == 1


def _shown(plan: Plan) -> bool:
    return "strategy.fsdp_version" in shown_choices(plan)


def test_the_version_is_shown_only_where_fsdp_shards() -> None:
    assert _shown(small_plan())
    assert not _shown(small_plan(**{"strategy.zero_stage": 1}))
    assert not _shown(small_plan(**{"hardware.gpus_per_node": 1}))


def test_an_explicit_key_wins_and_round_trips() -> None:
    plan = small_plan(**{"strategy.fsdp_version": 2, "strategy.fsdp_adapter_wrap": "own"})
    assert "strategy.fsdp_version" not in plan.stack_chosen
    again = plan_from_dict(plan.dump())
    assert again == plan and again.strategy.fsdp_version == 2 and again.strategy.fsdp_adapter_wrap == "own"
    chosen = small_plan()
    dumped = chosen.dump()
    assert "fsdp_version" not in dumped["strategy"]  # the stack's choice is not written as the user's
    assert plan_from_dict(dumped).strategy.fsdp_version == 1


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("strategy.fsdp_version", 3),
        ("strategy.fsdp_version", True),
        ("strategy.fsdp_version", "two"),
        ("strategy.fsdp_adapter_wrap", "everywhere"),
        ("stack.litgpt", "not a version"),
    ],
)
def test_bad_values_are_one_line_errors(key: str, value: Any) -> None:
    with pytest.raises(PlanError) as err:
        default_plan().with_changes({key: value})
    message = str(err.value)
    assert "\n" not in message and key.partition(".")[2] in message


def test_custom_is_todays_per_parameter_model() -> None:
    """The custom stack's FSDP is version 2, whose states are `model_states`' own (no flat-parameter path), and
    the default plan's bytes are those it gave before the key existed."""
    plan = default_plan()
    assert plan.strategy.fsdp_version == 2
    e = estimate(plan)
    # (+ FSDP2's all-gather staging pool, core.memory.states.fsdp2_all_gather_pool, modelled since)
    assert (e.allocated, e.total - e.overhead_bytes["all_gather_pool"]) == (16980256768, 19612565504)
    lora2 = small_plan(**{"stack.framework": "custom", "training.lora_dtype": "bf16"})
    assert optimizer_moment(estimate(lora2))["gradients"] == 2 * ADAPTERS * 2 // WORLD
