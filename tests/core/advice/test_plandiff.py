"""Plan diff (`core.advice.plandiff`): the keys that differ after defaults, per-kind memory and step-time deltas,
each key's change alone applied to A."""

from __future__ import annotations

from pathlib import Path

from vramplan.core.advice.plandiff import changes_between, plan_diff
from vramplan.core.files.planio import load_plan
from vramplan.core.memory.kinds import KINDS
from vramplan.core.memory.peak import estimate
from vramplan.core.plan.schema.plan import default_plan
from vramplan.core.time.step import step_time


def test_same_plans_have_no_keys_and_no_deltas() -> None:
    a = default_plan()
    d = plan_diff(a, a)
    assert d.same and d.delta.total == 0 and d.delta.memory == {} and d.delta.step_seconds == 0


def test_deltas_are_the_estimators_by_kind_and_add_up() -> None:
    a = default_plan()
    b = a.with_changes({"strategy.zero_stage": 2, "training.micro_batch_size": 2})
    d = plan_diff(a, b)
    assert [k.key for k in d.keys] == ["training.micro_batch_size", "strategy.zero_stage"]
    ea, eb = estimate(a), estimate(b)
    for kind in KINDS:  # the peak's composition, as the gauges show it
        assert d.fb.memory[kind] - d.fa.memory[kind] == eb.live_at_peak.get(kind, 0) - ea.live_at_peak.get(kind, 0)
    assert sum(d.delta.memory.values()) == d.delta.total == eb.total - ea.total
    assert d.delta.step_seconds == step_time(b).step_seconds - step_time(a).step_seconds
    zero = next(k for k in d.keys if k.key == "strategy.zero_stage")
    alone = a.with_changes({"strategy.zero_stage": 2})
    assert zero.a == 3 and zero.b == 2
    assert zero.alone is not None and zero.alone.total == estimate(alone).total - ea.total
    # ZeRO-2 keeps whole bf16 parameters on each of 8 GPUs: 6.74e9 x 2 B x 7/8 more than ZeRO-3's shard
    assert zero.alone.memory["parameters"] > 0


def test_a_change_only_valid_with_another_says_so() -> None:
    a = default_plan().with_changes({"hardware.gpus_per_node": 4})
    b = a.with_changes({"hardware.gpus_per_node": 8, "strategy.tensor_parallel": 8, "strategy.zero_stage": 1})
    d = plan_diff(a, b)
    tp = next(k for k in d.keys if k.key == "strategy.tensor_parallel")
    assert tp.alone is None and tp.error.startswith("not a valid plan on its own:")
    gpus = next(k for k in d.keys if k.key == "hardware.gpus_per_node")
    assert gpus.alone is not None and gpus.alone.total < 0  # ZeRO-3 over 8 GPUs instead of 4


def test_another_model_is_one_key() -> None:
    a = default_plan()
    b = a.with_changes({"model.preset": "llama-3.1-8b"})
    d = plan_diff(a, b)
    assert [k.key for k in d.keys] == ["model"]
    assert d.keys[0].alone is not None and d.keys[0].alone.total == d.delta.total


def test_files_are_compared_after_defaults(tmp_path: Path) -> None:
    a = tmp_path / "a.toml"
    b = tmp_path / "b.toml"
    a.write_text('[model]\npreset = "llama-7b"\n')
    b.write_text('[model]\npreset = "llama-7b"\n[strategy]\nzero_stage = 3\n[training]\nprecision = "bf16-master"\n')
    # zero_stage = 3 is the default plan's: not a difference; precision is unset in A
    assert changes_between(load_plan(a), load_plan(b)) == {"training.precision": (None, "bf16-master")}
