"""FSDP2's side-stream pools: the all-gather staging buffers reserved in the copy-in stream's pool
(`core.memory.states.fsdp2_all_gather_pool`), identities from torch's _fsdp_collectives.py and
_fsdp_param_group.py (no GPU measurement here)."""

from __future__ import annotations

from typing import Any

import pytest

from vramplan.core.memory.peak import estimate
from vramplan.core.memory.states.zero3 import fsdp2_all_gather_pool, fsdp2_root_reduce
from vramplan.core.plan.schema.plan import Plan, plan_from_dict


def _plan(**changes: Any) -> Plan:
    data: dict[str, dict[str, Any]] = {
        "model": {"preset": "llama-3-8b"},
        "hardware": {"gpu": "h100-80gb", "gpus_per_node": 8, "nodes": 1},
        "training": {"micro_batch_size": 1, "seq_len": 2048, "precision": "bf16-fsdp", "method": "full"},
        "strategy": {"gradient_checkpointing": "full", "attention": "flash", "zero_stage": 3},
    }
    for key, value in changes.items():
        table, name = key.split(".")
        data.setdefault(table, {})[name] = value
    return plan_from_dict(data)


def test_the_pool_formula_on_small_numbers() -> None:
    # root 300 B, block 100 B, 4 ranks: root + first block outputs together, plus the root's cast shard
    assert fsdp2_all_gather_pool(100, 300, 4) == 300 + 100 + 75
    # blocks larger than the root: two consecutive blocks, plus a block's cast shard
    assert fsdp2_all_gather_pool(300, 100, 4) == 300 + 300 + 75
    assert fsdp2_all_gather_pool(100, 0, 1) == 300  # (dp = 1 never reaches it: no all-gather)
    assert fsdp2_all_gather_pool(100, 300, 4, cast=False) == 400  # no param_dtype: the shards copied as they are


def test_llama_8b_pool_is_the_bf16_root_and_one_block() -> None:
    est = estimate(_plan())
    a = est.plan.model.arch()
    root = 2 * (2 * a.V * a.h + a.h)  # embedding + lm_head + final norm, bf16
    block = 2 * (a.layer_weight_params + a.layer_bias_params + a.layer_norm_params)
    pool = est.overhead_bytes["all_gather_pool"]
    assert pool == root + block + root // 8
    # reserved in another stream's pool: in max_memory_reserved, not in max_memory_allocated
    assert est.reserved - est.allocated >= pool
    # the same order as the gathered weights it stages, never above twice them
    assert est.largest["gathered_parameters"] // 2 < pool < 2 * est.largest["gathered_parameters"]


def test_the_pool_shrinks_with_the_data_parallel_group_to_the_outputs() -> None:
    eight = estimate(_plan()).overhead_bytes["all_gather_pool"]
    many = estimate(_plan(**{"hardware.nodes": 16})).overhead_bytes["all_gather_pool"]
    assert many < eight
    a = _plan().model.arch()
    root = 2 * (2 * a.V * a.h + a.h)
    assert eight - many == root // 8 - root // 128


@pytest.mark.parametrize(
    "changes",
    [
        {"hardware.gpus_per_node": 1},  # one rank: nothing is all-gathered
        {"training.precision": "bf16-master"},  # DeepSpeed's ZeRO-3 (not FSDP2)
        {"training.precision": "bf16-pure", "strategy.fsdp_version": 1},  # FSDP1: into the flat parameter
        {"training.precision": "bf16-pure", "strategy.zero_stage": 2},  # parameters never resharded
    ],
)
def test_no_pool_without_fsdp2_all_gathers(changes: dict[str, Any]) -> None:
    assert "all_gather_pool" not in estimate(_plan(**changes)).overhead_bytes


def test_fsdp2_without_mixed_precision_has_the_pool_too() -> None:
    pure = estimate(_plan(**{"training.precision": "bf16-pure"}))
    mixed = estimate(_plan())
    a = _plan().model.arch()
    root = 2 * (2 * a.V * a.h + a.h)
    # the same bf16 outputs; no cast copy of the root's shards without MixedPrecisionPolicy(param_dtype)
    assert mixed.overhead_bytes["all_gather_pool"] - pure.overhead_bytes["all_gather_pool"] == root // 8
    term = {t.name: t for t in pure.overhead_terms}["all_gather_pool"]
    assert "foreach_all_gather" in term.source and term.bytes == pure.overhead_bytes["all_gather_pool"]


def test_a_lora_base_is_all_gathered_through_the_same_pool() -> None:
    """foreach_all_gather runs for every FSDPParam of a unit, frozen or not: a LoRA plan's bf16 base has the pool
    of the same bf16 outputs as full fine-tuning (no MixedPrecisionPolicy: no cast copy)."""
    pure = {"training.precision": "bf16-pure"}
    lora = estimate(_plan(**pure, **{"training.method": "lora"})).overhead_bytes["all_gather_pool"]
    full = estimate(_plan(**pure)).overhead_bytes["all_gather_pool"]
    adapters = lora - full  # LoRA's blocks also hold their adapters (tiny beside the root + a block)
    assert 0 <= adapters < full // 100


def test_fsdp_only_stacks_have_no_deepspeed_reduce_buckets() -> None:
    titan = estimate(_plan(**{"stack.framework": "torchtitan"}))
    tune = estimate(_plan(**{"stack.framework": "torchtune", "training.precision": "bf16-pure"}))
    custom = estimate(_plan())  # may be exported to DeepSpeed: its buckets stay
    assert "zero_buckets" not in titan.overhead_bytes and "zero_buckets" not in tune.overhead_bytes
    assert custom.overhead_bytes["zero_buckets"] > 0
    assert custom.allocated - titan.allocated == custom.overhead_bytes["zero_buckets"]


def test_the_root_reduces_at_the_end_of_backward() -> None:
    assert fsdp2_root_reduce(10, 2, 4) == 60  # bf16 gradients + their fp32 reduce-scatter input
    est = estimate(_plan())
    a = est.plan.model.arch()
    root = 2 * a.V * a.h + a.h  # embedding + lm_head + final norm
    st_end = est.phases[4]  # end of backward
    assert st_end.moment.startswith("end of backward")
    assert st_end.live["temporaries"] >= root * (2 + 4)
    first_block = est.phases[3]
    assert first_block.moment.startswith("backward of the first block")
    # the lm_head's bf16 gradient is still unsharded while the first block runs backward
    assert first_block.live["temporaries"] >= 2 * a.V * a.h
    # DeepSpeed's ZeRO-3 (master regime): the embedding's gradient alone
    ds = estimate(_plan(**{"training.precision": "bf16-master"}))
    assert ds.phases[4].live["temporaries"] < st_end.live["temporaries"]
