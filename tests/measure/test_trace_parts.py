"""The pure-Python parts of `vramplan trace`: the ``--lengths`` spec, which steps are traced and which repeated,
module names grouped by layer, what is listed as not traced, one rank's shard factors. No torch needed."""

from __future__ import annotations

import pytest

from vramplan.core.plan.schema.plan import default_plan
from vramplan.measure.lengths import Lengths, LengthsError, parse_lengths
from vramplan.measure.trace_limits import not_traced, shard_factors
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


def test_what_is_not_traced_and_one_ranks_shards() -> None:
    plan = default_plan()  # ZeRO-3 on 8 GPUs, full fine-tuning
    lines = not_traced(plan)
    assert any(line.startswith("ZeRO-3 over 8 ranks") for line in lines)
    assert shard_factors(plan) == {"optimizer_state": 8, "optimizer_temporary": 8, "gradient": 8, "parameter": 8}
    one = plan.with_changes({"hardware.gpus_per_node": 1, "strategy.zero_stage": 0})
    assert shard_factors(one) == {}
    q = one.with_changes({"training.method": "qlora", "training.optimizer": "adamw-8bit"})
    lines = not_traced(q)
    assert any("bitsandbytes has no fake-tensor kernels" in line for line in lines)
    assert any("optimizer adamw-8bit" in line for line in lines)
