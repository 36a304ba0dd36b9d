"""The pure-Python parts of `vramplan trace`: the ``--lengths`` spec, which steps are traced and which repeated,
module names grouped by layer, what is listed as not traced, how one rank of a data-parallel plan runs. No torch
needed."""

from __future__ import annotations

import pytest

from vramplan.core.plan.schema.plan import default_plan
from vramplan.measure.lengths import Lengths, LengthsError, parse_lengths
from vramplan.measure.trace_limits import not_traced, parallel_mode, shard_factors
from vramplan.measure.trace_run import steps_to_trace


def test_lengths_specs() -> None:
    assert parse_lengths("plan") == Lengths("plan")
    assert parse_lengths("").draw(4096, 2, 3) == ((4096,) * 3, (4096,) * 3)
    assert parse_lengths("2k").draw(4096, 2, 1) == ((2048,), (2048,))
    assert parse_lengths("1k,4k").draw(4096, 3, 2) == ((1024, 1024), (4096, 4096), (1024, 1024))
    drawn = parse_lengths("uniform:1000-3000").draw(4096, 4, 2, seed=1)
    assert len(drawn) == 4 and all(len(s) == 2 for s in drawn)
    assert all(1024 <= n <= 3008 and n % 64 == 0 for s in drawn for n in s)  # rounded up to 64
    assert drawn == parse_lengths("uniform:1000-3000").draw(4096, 4, 2, seed=1)  # seeded: a run repeats
    assert all(n % 512 == 0 for s in parse_lengths("uniform:1k-8k/512").draw(4096, 5, 1) for n in s)


@pytest.mark.parametrize("bad", ["0", "-5", "abc", "uniform:5k-1k", "uniform:1k", "1k,,2k", "9" * 40])
def test_bad_lengths_are_one_line(bad: str) -> None:
    with pytest.raises(LengthsError) as e:
        parse_lengths(bad)
    assert str(e.value).startswith("--lengths: ") and "\n" not in str(e.value)


def test_a_step_with_lengths_already_traced_repeats_that_step() -> None:
    # step 0 runs; step 1 repeats it (its state exists by then); a new length runs; then repeats
    assert steps_to_trace(((4096,), (4096,), (4096,))) == [0, 0, 0]
    assert steps_to_trace(((1024,), (4096,), (1024,), (4096,))) == [0, 1, 0, 1]


def test_module_groups() -> None:
    pytest.importorskip("torch", reason="trace_analysis imports the tracer")
    from vramplan.measure.trace_analysis import HEAD, module_group

    assert module_group("base_model.model.model.layers.12.self_attn.q_proj.lora_A.default") == (
        "model.layers.*.self_attn"
    )
    assert module_group("model.layers.3.mlp.experts") == "model.layers.*.mlp"
    assert module_group("") == module_group("base_model.model") == HEAD


def test_how_one_rank_of_a_data_parallel_plan_is_traced() -> None:
    plan = default_plan()  # ZeRO-3 on 8 GPUs, full fine-tuning, FSDP2 (the custom stack's)
    assert parallel_mode(plan) == "fsdp2"  # fully_shard in a fake process group: nothing divided
    assert any(line.startswith("ZeRO-3 as FSDP2 over 8 ranks") for line in not_traced(plan))
    assert shard_factors(plan) == {}
    assert parallel_mode(plan.with_changes({"strategy.zero_stage": 0})) == "ddp"
    assert shard_factors(plan.with_changes({"strategy.zero_stage": 0})) == {}
    one = plan.with_changes({"hardware.gpus_per_node": 1, "strategy.zero_stage": 0})
    assert parallel_mode(one) == "" and shard_factors(one) == {}
    # what cannot run here is divided: FSDP1 (no CPU device), DeepSpeed's ZeRO-1/2 and master regimes, offload, TP
    for changes in (
        {"strategy.fsdp_version": 1},
        {"strategy.zero_stage": 2},
        {"strategy.zero_stage": 1},
        {"training.precision": "bf16-master"},
        {"strategy.offload_optimizer": "cpu"},
        {"strategy.tensor_parallel": 2},
    ):
        p = plan.with_changes(changes)
        assert parallel_mode(p) == "divided", changes
        assert shard_factors(p)["optimizer_state"] == p.data_parallel
    fsdp1 = plan.with_changes({"strategy.fsdp_version": 1})
    assert shard_factors(fsdp1) == {"optimizer_state": 8, "optimizer_temporary": 8, "gradient": 8, "parameter": 8}
    assert any("FSDP1 (FullyShardedDataParallel) needs an accelerator" in line for line in not_traced(fsdp1))
    assert shard_factors(plan.with_changes({"strategy.zero_stage": 2})) == {
        "optimizer_state": 8,
        "optimizer_temporary": 8,
        "gradient": 8,
    }
    # bf16-fsdp runs as it is (fp32 shards, MixedPrecisionPolicy) under FSDP2, not under DeepSpeed
    fsdp_mp = plan.with_changes({"training.precision": "bf16-fsdp"})
    assert not any("precision bf16-fsdp" in line for line in not_traced(fsdp_mp))


def test_what_is_not_traced_on_one_gpu() -> None:
    one = default_plan().with_changes({"hardware.gpus_per_node": 1, "strategy.zero_stage": 0})
    q = one.with_changes({"training.method": "qlora", "training.optimizer": "adamw-8bit"})
    lines = not_traced(q)
    assert any("bitsandbytes has no fake-tensor kernels" in line for line in lines)
    assert any("optimizer adamw-8bit" in line for line in lines)
