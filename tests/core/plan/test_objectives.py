"""The objective records (`core.plan.schema.objectives`): one per value of training.objective, and what the estimator
and the reports read from them."""

from __future__ import annotations

from typing import get_args

from vramplan.core.memory.peak import estimate
from vramplan.core.plan.resolved import plan_rl_settings
from vramplan.core.plan.schema.objectives import GENERATING, OBJECTIVES, POST_TRAINING, ObjectiveName
from vramplan.core.plan.schema.plan import default_plan
from vramplan.core.plan.schema.rl import APPLIES
from vramplan.core.plan.schema.training import TrainingConfig


def test_one_record_per_value_of_the_key() -> None:
    assert tuple(OBJECTIVES) == get_args(ObjectiveName)
    assert get_args(TrainingConfig.model_fields["objective"].annotation) == get_args(ObjectiveName)
    assert all(name == o.name for name, o in OBJECTIVES.items())
    assert POST_TRAINING == ("dpo", "grpo", "ppo") and GENERATING == ("grpo", "ppo")
    # every [rl] key applies to post-training objectives only
    assert {o for objectives in APPLIES.values() for o in objectives} == set(POST_TRAINING)


def test_trl_defaults_resolve_from_the_records() -> None:
    """DPOConfig beta 0.1 and max_length 1024; GRPOConfig beta 0, 512 completion tokens, 8 generations (no
    reference at beta 0); PPOConfig kl_coef 0.05 and response_length 53."""
    base = default_plan()
    dpo = plan_rl_settings(base.with_changes({"training.objective": "dpo"}))
    grpo = plan_rl_settings(base.with_changes({"training.objective": "grpo"}))
    ppo = plan_rl_settings(base.with_changes({"training.objective": "ppo"}))
    assert (dpo.beta, dpo.seq_len, dpo.generation) == (0.1, 1024, "none")
    assert (grpo.beta, grpo.completion_len, grpo.num_generations, grpo.reference) == (0.0, 512, 8, "none")
    assert (ppo.beta, ppo.completion_len, ppo.num_generations) == (0.05, 53, 1)


def test_dpo_trains_two_sequences_per_pair() -> None:
    """trl/trainer/dpo_trainer.py concatenates chosen and rejected in one forward: 2 x micro_batch_size
    sequences of max_length; GRPO trains micro_batch_size completions of prompt + completion."""
    base = default_plan().with_changes({"training.micro_batch_size": 2})
    dpo = estimate(base.with_changes({"training.objective": "dpo"})).rl
    grpo = estimate(base.with_changes({"training.objective": "grpo", "rl.max_completion_length": 256})).rl
    assert dpo is not None and grpo is not None
    assert (dpo.update_sequences, dpo.update_seq_len) == (4, 1024)
    assert (grpo.update_sequences, grpo.update_seq_len) == (2, 512 + 256)


def test_pretraining_is_full_fine_tunings_memory_and_step_from_scratch() -> None:
    """Issue 43.3: a from-scratch plan is pretraining. The step is SFT's (the next-token loss on every position:
    torchtitan train.py, transformers run_clm.py ``from_config``), so every memory term and the step time are full
    fine-tuning's; what differs is its label, its learning rate and that it trains no adapters."""
    from vramplan.core.plan.describe import method_label
    from vramplan.core.time.step import step_time

    pre = OBJECTIVES["pretrain"]
    assert pre.from_scratch and not pre.post_training and not OBJECTIVES["sft"].from_scratch
    sft = default_plan()
    plan = sft.with_changes({"training.objective": "pretrain"})
    assert estimate(plan).to_json("x") == estimate(sft).to_json("x") | {"plan": plan.dump()}
    assert step_time(plan).to_json() == step_time(sft).to_json()
    assert (method_label(plan.training), method_label(plan.training, compact=True)) == ("pretraining", "pretrain")
    assert method_label(sft.training) == "full fine-tuning"


def test_a_pretraining_plan_keeps_its_objective_in_its_file_and_has_no_rl_table() -> None:
    """`Plan.dump` leaves out only the default objective (sft): a pretraining plan loaded back is pretraining."""
    from vramplan.core.plan.schema.plan import plan_from_dict

    plan = default_plan().with_changes({"training.objective": "pretrain"})
    data = plan.dump()
    assert data["training"]["objective"] == "pretrain" and "rl" not in data
    assert plan_from_dict(data) == plan
    assert "objective" not in default_plan().dump()["training"]
    fast = plan.with_changes({"training.micro_batch_size": 4})  # the fast path keeps the objective too
    assert fast == plan.with_changes({"training.micro_batch_size": 4}, whole=True)
    assert fast.training.objective == "pretrain"


def test_pretraining_refuses_adapters_in_one_line() -> None:
    import pytest

    from vramplan.core.plan.helpers.errors import PlanError

    for adapters in ({"training.method": "lora"}, {"training.method": "qlora", "training.quantization": "nf4"}):
        with pytest.raises(PlanError) as raised:
            default_plan().with_changes({"training.objective": "pretrain", **adapters})
        assert raised.value.where == "training.method"
        assert raised.value.message == 'pretraining trains every weight from scratch: method = "full"'
