"""FSDP under gradient accumulation (``strategy.fsdp_grad_sync``): reduce-scatter every micro-batch ("each") or
hold every unit's unsharded gradient until the last micro-batch ("last": FSDP1 ``no_sync()``, FSDP2
``set_requires_gradient_sync(False)``), and which stack does which.

The small model of tests/core/memory/test_fsdp_versions.py: a Llama block of 50304 elements, LoRA r=8 on q and v (2048
per block), two blocks, vocabulary 1000 (embedding and lm_head 64000 each, final norm 64), three GPUs. Every
tensor is a multiple of 8 elements, so FSDP1's 16-byte alignment adds nothing: a litgpt block unit (adapters
inside) is 52352 elements, padded to 52353 for three ranks.
"""

from __future__ import annotations

from typing import Any

from vramplan.core.memory.peak import estimate
from vramplan.core.memory.record import Estimate
from vramplan.core.plan.resolved import shown_choices
from vramplan.core.plan.schema.plan import Plan, plan_from_dict

WORLD = 3
BLOCK_UNIT = 52353  # (50304 + 2048) padded to a multiple of 3
FULL_PARAMS = 2 * 50304 + 64000 + 64 + 64000


def small_plan(stack: dict[str, str], accum: int, method: str = "lora", **strategy: Any) -> Plan:
    return plan_from_dict(
        {
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
            "training": {
                "micro_batch_size": 1,
                "seq_len": 64,
                "method": method,
                "precision": "bf16-pure",
                "grad_accum_steps": accum,
            },
            "strategy": {"gradient_checkpointing": "full", "zero_stage": 3, **strategy},
            "stack": stack,
        }
    )


def held(e: Estimate) -> int:
    """The gradient bytes alive at the end of a later micro-batch's forward."""
    return next(p.live for p in e.phases if p.name == "forward")["gradients"]


def test_litgpt_fsdp1_holds_every_block_unit_unsharded_between_micro_batches() -> None:
    # lit-gpt's FSDPStrategy (before 0.5.11): a block's FlatParameter requires grad, frozen parts included, and
    # no_sync keeps its whole bf16 gradient until the last micro-batch
    plan = small_plan({"framework": "litgpt", "litgpt": "0.5.10"}, accum=4)
    assert plan.strategy.fsdp_grad_sync == "last" and "strategy.fsdp_grad_sync" in shown_choices(plan)
    assert held(estimate(plan)) == 2 * BLOCK_UNIT * 2
    each = plan.with_changes({"strategy.fsdp_grad_sync": "each"})
    assert held(estimate(each)) == 2 * BLOCK_UNIT * 2 // WORLD
    # the optimizer step sees the reduce-scattered shards either way
    opt = next(p.live for p in estimate(plan).phases if p.name == "optimizer")
    assert opt["gradients"] == 2 * BLOCK_UNIT * 2 // WORLD


def test_without_accumulation_nothing_is_held() -> None:
    plan = small_plan({"framework": "litgpt", "litgpt": "0.5.10"}, accum=1)
    assert held(estimate(plan)) == 0
    assert "strategy.fsdp_grad_sync" not in shown_choices(plan)


def test_fsdp2_holds_only_the_trainable_parameters_gradients() -> None:
    # litgpt 0.5.11+: ModelParallelStrategy (fully_shard per parameter); only LoRA's A and B have gradients
    plan = small_plan({"framework": "litgpt"}, accum=4)
    assert plan.strategy.fsdp_version == 2
    assert held(estimate(plan)) == 2 * 2048 * 2  # bf16 adapters (litgpt bf16-true)


def test_hf_trainer_full_fine_tuning_holds_the_whole_models_gradients() -> None:
    plan = small_plan({"framework": "hf-trainer"}, accum=2, method="full", fsdp_version=2)
    assert plan.strategy.fsdp_grad_sync == "last"
    assert held(estimate(plan)) == FULL_PARAMS * 2
    assert held(estimate(plan.with_changes({"strategy.fsdp_grad_sync": "each"}))) == FULL_PARAMS * 2 // WORLD


def test_torchtune_torchtitan_and_custom_reduce_every_micro_batch() -> None:
    for framework in ("torchtune", "torchtitan", "custom", "deepspeed"):
        plan = small_plan({"framework": framework}, accum=4, method="full")
        assert plan.strategy.fsdp_grad_sync == "each", framework
        assert held(estimate(plan)) == FULL_PARAMS * 2 // WORLD, framework


def test_fsdp1_holds_full_fine_tunings_gradients_in_the_mixed_precision_dtype() -> None:
    # FSDP1 MixedPrecision(param_dtype=bf16): autograd makes each unit's unsharded gradient in bf16, and no_sync
    # keeps it so (the cast to the fp32 reduce dtype comes after the sync check); the shards stay fp32
    plan = small_plan({"framework": "hf-trainer"}, accum=2, method="full", fsdp_version=1)
    plan = plan.with_changes({"training.precision": "bf16-fsdp"})
    units = 2 * 50304 + 128064  # each unit a multiple of 3 already: 50304 and the root's 128064
    assert held(estimate(plan)) == units * 2
    opt = next(p.live for p in estimate(plan).phases if p.name == "optimizer")
    assert opt["gradients"] == units * 4 // WORLD
