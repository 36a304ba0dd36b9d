"""The [stack] table: the defaults a stack gives the keys a plan leaves unset (core.plan.stack.config)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from vramplan.core.memory.activations.context import plan_ctx
from vramplan.core.memory.peak import estimate
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.schema.plan import Plan, default_plan, plan_from_dict
from vramplan.core.plan.stack.config import FRAMEWORKS, StackConfig, version_tuple
from vramplan.core.plan.stack.defaults import STACK_DEFAULTS, STACK_KEYS, stack_choice

QLORA = {"training.method": "qlora", "strategy.gradient_checkpointing": "full"}


def plan(**changes: object) -> Plan:
    return default_plan().with_changes({**QLORA, **{k.replace("__", "."): v for k, v in changes.items()}})


def test_custom_is_todays_behaviour() -> None:
    p = default_plan()
    assert p.stack.framework == "custom"
    assert p.strategy.checkpoint_impl == "non-reentrant"
    assert (p.training.lora_dtype, p.training.lora_dropout) == ("fp32", 0.0)
    assert (p.training.quantized_modules, p.training.bnb_generation) == ("block-linears", "current")
    assert set(p.stack_chosen) == set(STACK_KEYS)


def test_each_stack_fills_what_the_plan_leaves_unset_and_an_explicit_key_wins() -> None:
    tt = plan(stack__framework="torchtune", stack__torchtune="0.2.1")
    assert (tt.training.lora_dtype, tt.training.quantized_modules) == ("bf16", "adapted")
    assert plan(stack__framework="torchtune").training.quantized_modules == "block-linears"  # 0.3.0+
    assert tt.strategy.checkpoint_impl == "non-reentrant"
    assert plan(stack__framework="hf-trainer", stack__transformers="4.45.2").strategy.checkpoint_impl == "reentrant"
    assert plan(stack__framework="hf-trainer", stack__transformers="5.0.0").strategy.checkpoint_impl == "non-reentrant"
    assert plan(stack__framework="hf-trainer").strategy.checkpoint_impl == "non-reentrant"  # unset: the newest
    assert plan(stack__framework="litgpt").training.lora_dropout == 0.05
    assert plan(stack__framework="litgpt").training.lora_dtype == "bf16"
    assert plan(stack__framework="litgpt", training__precision="bf16-autocast").training.lora_dtype == "fp32"
    assert plan(stack__framework="trl", stack__trl="0.26.0").training.lora_dtype == "bf16"  # QLoRA: cast to bf16
    assert plan(stack__framework="trl", stack__trl="0.26.0", training__method="lora").training.lora_dtype == "fp32"
    mine = plan(stack__framework="torchtune", training__lora_dtype="fp32")
    assert mine.training.lora_dtype == "fp32" and "training.lora_dtype" not in mine.stack_chosen
    # switching stacks re-chooses only what the stack chose: the explicit key stays
    assert mine.with_changes({"stack.framework": "litgpt"}).training.lora_dtype == "fp32"
    assert tt.with_changes({"stack.framework": "litgpt"}).training.quantized_modules == "all-linears"


def test_axolotl_and_llamafactory_ask_for_reentrant_checkpointing_themselves() -> None:
    for framework in ("axolotl", "llamafactory"):
        p = plan(stack__framework=framework, stack__transformers="5.2.0")
        assert p.strategy.checkpoint_impl == "reentrant"


def test_trl_checkpoints_its_own_way_since_0_27() -> None:
    old = plan(stack__framework="trl", stack__trl="0.21.0", stack__transformers="4.46.0")
    assert old.strategy.checkpoint_impl == "reentrant"
    assert (
        plan(stack__framework="trl", stack__trl="0.27.0", strategy__zero_stage=2).strategy.checkpoint_impl
        == "non-reentrant"
    )
    z3 = plan(stack__framework="trl", stack__trl="1.9.0", strategy__zero_stage=3, training__method="lora")
    assert z3.strategy.checkpoint_impl == "reentrant"  # PEFT under ZeRO-3: TRL forces reentrant
    z0 = z3.with_changes({"strategy.zero_stage": 0})
    assert z0.strategy.checkpoint_impl == "non-reentrant"
    full = z3.with_changes({"training.method": "full"})
    assert full.strategy.checkpoint_impl == "non-reentrant"


def test_versions_choose_rows() -> None:
    assert plan(stack__bitsandbytes="0.43.1").training.bnb_generation == "legacy"
    assert plan(stack__bitsandbytes="0.43.2").training.bnb_generation == "current"
    assert plan(stack__bitsandbytes="0.45.0.dev0").training.bnb_generation == "current"
    assert plan(stack__framework="trl", stack__peft="0.10.0").training.lora_dtype == "bf16"
    assert plan(stack__framework="trl", stack__peft="0.13.2", training__method="lora").training.lora_dtype == "fp32"
    assert plan(stack__framework="axolotl", stack__peft="0.10.0").training.lora_dtype == "bf16"
    assert version_tuple("2.5.0+cu124") == (2, 5, 0) and version_tuple("1.0.0rc1") == (1, 0, 0)


def test_kbit_prepare_makes_checkpointing_reentrant_unless_stated() -> None:
    assert plan(training__kbit_prepare=True).strategy.checkpoint_impl == "reentrant"
    p = plan(training__kbit_prepare=True, strategy__checkpoint_impl="non-reentrant")
    assert p.strategy.checkpoint_impl == "non-reentrant"


def test_the_implementation_reaches_the_activation_model() -> None:
    """Reentrant checkpointing runs the forward without autograd: bitsandbytes <= 0.43.1's kept 4-bit inputs are
    dropped in the checkpointed blocks (core/memory/activations/stage.py), so the estimate is lower."""
    legacy = plan(training__bnb_generation="legacy")
    re, nre = (legacy.with_changes({"strategy.checkpoint_impl": v}) for v in ("reentrant", "non-reentrant"))
    assert plan_ctx(re).reentrant and not plan_ctx(nre).reentrant
    assert estimate(re).largest["activations"] < estimate(nre).largest["activations"]
    assert not plan_ctx(re.with_changes({"strategy.gradient_checkpointing": "op"})).reentrant


def test_round_trip_leaves_the_stacks_choices_out_of_the_file() -> None:
    for framework in FRAMEWORKS:
        p = plan(stack__framework=framework, stack__torch="2.5.1")
        raw = p.dump()
        assert "checkpoint_impl" not in raw["strategy"] and "lora_dtype" not in raw["training"]
        assert plan_from_dict(json.loads(json.dumps(raw))) == p
    explicit = plan(strategy__checkpoint_impl="reentrant")
    assert explicit.dump()["strategy"]["checkpoint_impl"] == "reentrant"
    assert plan_from_dict(explicit.dump()) == explicit != plan()


@pytest.mark.parametrize(
    "value", ["", "latest", "1.2.3; rm -rf /", "9" * 70, "1..2", True, 1e30, float("nan"), [1, 2], {"a": 1}]
)
def test_bad_versions_are_one_line_errors(value: object) -> None:
    with pytest.raises(PlanError) as e:
        default_plan().with_changes({"stack.peft": value})
    assert "stack.peft" in str(e.value) and "\n" not in str(e.value) and str(e.value).count("(got") <= 1


def test_unknown_framework_suggests() -> None:
    with pytest.raises(PlanError) as e:
        default_plan().with_changes({"stack.framework": "torchtun"})
    assert "torchtune" in str(e.value)
    assert default_plan().with_changes({"stack.framework": "TorchTune"}).stack.framework == "torchtune"


def test_every_key_has_a_row_for_every_stack_and_every_row_a_source() -> None:
    for key in STACK_KEYS:
        for framework in FRAMEWORKS:
            assert stack_choice(key, StackConfig(framework=framework), lambda k: None).key == key  # type: ignore[arg-type]
    assert all(len(row.source) > 20 for row in STACK_DEFAULTS)


def test_estimate_json_and_headline_name_the_keys_the_stack_chose() -> None:
    args = ["estimate", "--set", "stack.framework=hf-trainer", "--set", "stack.transformers=4.45.2"]
    args += ["--set", "training.method=lora"]
    env = {"VRAMPLAN_DETECT": "0", "PATH": ""}
    r = subprocess.run([sys.executable, "-m", "vramplan", *args, "--json"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    stack = json.loads(r.stdout)["stack"]
    assert stack["framework"] == "hf-trainer"
    assert stack["chose"]["strategy.checkpoint_impl"]["value"] == "reentrant"
    assert "modeling_utils.py" in stack["chose"]["strategy.checkpoint_impl"]["source"]
    assert "training.bnb_generation" not in stack["chose"]  # no 4-bit base: not shown
    r = subprocess.run([sys.executable, "-m", "vramplan", *args], capture_output=True, text=True, env=env)
    words = " ".join(r.stdout.split())  # the line wraps at 80 columns
    assert "stack hf-trainer chose: checkpoint_impl reentrant, lora_dtype fp32, lora_dropout 0.0" in words
    assert all(len(line) <= 80 for line in r.stdout.splitlines() if "chose:" in line)
