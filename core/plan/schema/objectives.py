"""The training objectives (``training.objective``) as records: what one example trains on, whether the step
generates, which models it holds beside the policy, and TRL's defaults for it. Every question about an objective
is a field of its `Objective`, read where it is asked, never a comparison of its name.

Sources: trl/trainer/dpo_config.py ``DPOConfig`` and dpo_trainer.py (chosen and rejected concatenated in one
forward, ``max_length`` 1024, ``beta`` 0.1, ``precompute_ref_log_probs``); trl/trainer/grpo_config.py
``GRPOConfig`` and grpo_trainer.py (``num_generations`` 8 completions per prompt, ``max_completion_length`` 512,
``beta`` 0.0 loads no reference model, old-policy log-probs when generation is off-policy: vLLM's importance
sampling or ``num_iterations`` > 1); trl/trainer/ppo_config.py ``PPOConfig`` (``kl_coef`` 0.05,
``response_length`` 53, a reward model and a value model trained beside the policy). Pretraining is SFT's
next-token loss on every position from randomly initialized weights (torchtitan train.py builds the model on the
meta device and calls ``init_weights``; transformers examples/pytorch/language-modeling/run_clm.py without
``model_name_or_path``: ``AutoModelForCausalLM.from_config``, "Training new model from scratch"): the same memory
and step, every weight trained, a pretraining learning rate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ObjectiveName = Literal["pretrain", "sft", "dpo", "grpo", "ppo"]
OldLogProbs = Literal["never", "off-policy", "always"]


@dataclass(frozen=True)
class Objective:
    """One training objective and everything the estimator, the advice and the reports ask of it."""

    name: str  # the value of training.objective
    label: str  # "DPO": what reports and the planner call it
    about: str  # the planner's palette entry, after "objective <label>"
    post_training: bool  # preference/RL: its keys are the [rl] table's; SFT has none
    sequences_per_example: int  # update sequences per micro_batch_size unit: DPO's chosen + rejected, concatenated
    example: str  # what micro_batch_size counts: "sequences", "pairs" (DPO), "completions" (GRPO, PPO)
    prompt: str  # what rl.prompts counts: "prompts", or "pairs" for DPO
    generates: bool  # the step generates completions (GRPO, PPO)
    scores_completion: bool  # the loss scores the completion's tokens (GRPO, PPO), else every position but the last
    groups: bool  # several completions per prompt (GRPO's num_generations)
    reward_model: bool  # a frozen reward model is held (PPO)
    value_model: bool  # a value model is trained beside the policy (PPO)
    precomputable_reference: bool  # reference log-probs can be computed once over a fixed dataset (DPO)
    reference_needs_beta: bool  # with beta = 0 the trainer loads no reference model (GRPO)
    old_logprobs: OldLogProbs  # when old-policy log-probs are scored before the update
    default_beta: float  # KL coefficient when rl.beta is unset
    default_completion_len: int  # generated tokens when rl.max_completion_length is unset (0: does not generate)
    default_max_length: int  # trained tokens when rl.max_length is unset (0: prompt + completion)
    from_scratch: bool = False  # random initial weights (pretraining): every weight trained, no LoRA/QLoRA


SFT = Objective(
    name="sft",
    label="SFT",
    about="(next-token loss)",
    post_training=False,
    sequences_per_example=1,
    example="sequences",
    prompt="prompts",
    generates=False,
    scores_completion=False,
    groups=False,
    reward_model=False,
    value_model=False,
    precomputable_reference=False,
    reference_needs_beta=False,
    old_logprobs="never",
    default_beta=0.0,
    default_completion_len=0,
    default_max_length=0,
)
OBJECTIVES: dict[str, Objective] = {
    "pretrain": Objective(
        name="pretrain",
        label="Pretrain",
        about="(next-token loss, from scratch)",
        post_training=False,
        sequences_per_example=1,
        example="sequences",
        prompt="prompts",
        generates=False,
        scores_completion=False,
        groups=False,
        reward_model=False,
        value_model=False,
        precomputable_reference=False,
        reference_needs_beta=False,
        old_logprobs="never",
        default_beta=0.0,
        default_completion_len=0,
        default_max_length=0,
        from_scratch=True,
    ),
    "sft": SFT,
    "dpo": Objective(
        name="dpo",
        label="DPO",
        about="(preference pairs, TRL DPOTrainer)",
        post_training=True,
        sequences_per_example=2,
        example="pairs",
        prompt="pairs",
        generates=False,
        scores_completion=False,
        groups=False,
        reward_model=False,
        value_model=False,
        precomputable_reference=True,
        reference_needs_beta=False,
        old_logprobs="never",
        default_beta=0.1,
        default_completion_len=0,
        default_max_length=1024,
    ),
    "grpo": Objective(
        name="grpo",
        label="GRPO",
        about="(generated groups, TRL GRPOTrainer)",
        post_training=True,
        sequences_per_example=1,
        example="completions",
        prompt="prompts",
        generates=True,
        scores_completion=True,
        groups=True,
        reward_model=False,
        value_model=False,
        precomputable_reference=False,
        reference_needs_beta=True,
        old_logprobs="off-policy",
        default_beta=0.0,
        default_completion_len=512,
        default_max_length=0,
    ),
    "ppo": Objective(
        name="ppo",
        label="PPO",
        about="(reward and value models)",
        post_training=True,
        sequences_per_example=1,
        example="completions",
        prompt="prompts",
        generates=True,
        scores_completion=True,
        groups=False,
        reward_model=True,
        value_model=True,
        precomputable_reference=False,
        reference_needs_beta=False,
        old_logprobs="always",
        default_beta=0.05,
        default_completion_len=53,
        default_max_length=0,
    ),
}
POST_TRAINING: tuple[str, ...] = tuple(name for name, o in OBJECTIVES.items() if o.post_training)
GENERATING: tuple[str, ...] = tuple(name for name, o in OBJECTIVES.items() if o.generates)


def objective(name: str) -> Objective:
    """The record of ``training.objective`` (validated by the plan: always one of `OBJECTIVES`)."""
    return OBJECTIVES[name]
