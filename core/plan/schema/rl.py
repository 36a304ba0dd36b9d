"""The plan's ``[rl]`` table: preference and RL post-training (``training.objective = "dpo" | "grpo" | "ppo"``).

Keys are named after TRL's arguments so that an engineer recognises them. Every key is optional: unset, it takes
TRL's default for the plan's objective (`rl_settings` resolves them, each with where its default comes from):

- DPO (trl/trainer/dpo_config.py ``DPOConfig``): ``max_length`` 1024, ``beta`` 0.1, ``precompute_ref_log_probs``
  False (here ``reference = "precomputed"``).
- GRPO (trl/trainer/grpo_config.py ``GRPOConfig``): ``num_generations`` 8, ``max_completion_length`` 512, ``beta``
  0.0 (no reference model is loaded: grpo_trainer.py ``GRPOTrainer.__init__``), ``use_vllm`` False (here
  ``generation = "hf"``), ``vllm_mode`` "colocate", ``vllm_gpu_memory_utilization`` 0.3,
  ``vllm_tensor_parallel_size`` 1, ``vllm_enable_sleep_mode`` False, ``num_iterations`` 1. TRL 1.x has no
  ``max_prompt_length``; vramplan's 512 is TRL 0.x's GRPOConfig default and verl's ``data.max_prompt_length``.
- PPO (trl/trainer/ppo_config.py ``PPOConfig``, on OnPolicyConfig): ``kl_coef`` 0.05 (here ``beta``),
  ``response_length`` 53 (here ``max_completion_length``); the reward and value models are separate models
  (``reward_model_path``, a value model of the same backbone with a scalar head).

The reference model (``reference``): a frozen ``copy`` (TRL builds it with ``create_model_from_path`` and shards it
like the policy under ZeRO-3/FSDP: trl/models/utils.py ``prepare_deepspeed``, ``prepare_fsdp``), the ``adapter``-
disabled base under LoRA (peft ``disable_adapter()``: no second copy), ``precomputed`` log-probs (DPO only), or
``none``. Unset: ``none`` when ``beta`` is 0 (GRPO's default), ``adapter`` under LoRA/QLoRA, else ``copy``.

A key that does not apply to the objective (``num_generations`` on a DPO plan, any key on an SFT plan) is an error
naming the key, never silently ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.helpers.field_values import FROZEN_TABLE, caseless_choices, count_value, strict_scalars
from vramplan.core.plan.schema.objectives import OBJECTIVES, POST_TRAINING, Objective

Reference = Literal["copy", "adapter", "precomputed", "none"]
Generation = Literal["hf", "vllm-colocate", "vllm-server"]
RL_OBJECTIVES = POST_TRAINING

MAX_TOKENS = 10_000_000

# Which objectives each key applies to (a key set on another objective's plan is an error).
APPLIES: dict[str, tuple[str, ...]] = {
    "max_prompt_length": ("grpo", "ppo"),
    "max_completion_length": ("grpo", "ppo"),
    "max_length": ("dpo",),
    "reference": RL_OBJECTIVES,
    "beta": RL_OBJECTIVES,
    "num_generations": ("grpo",),
    "num_iterations": ("grpo",),
    "generation": ("grpo", "ppo"),
    "vllm_gpu_memory_utilization": ("grpo", "ppo"),
    "vllm_tensor_parallel_size": ("grpo", "ppo"),
    "vllm_enable_sleep_mode": ("grpo", "ppo"),
    "reward_model": ("ppo",),
    "value_model": ("ppo",),
    "frozen_sharding": RL_OBJECTIVES,
    "frozen_offload": RL_OBJECTIVES,
    "prompts": RL_OBJECTIVES,
    "padding_free": RL_OBJECTIVES,
}
VLLM_KEYS = ("vllm_gpu_memory_utilization", "vllm_tensor_parallel_size", "vllm_enable_sleep_mode")


class RLConfig(BaseModel):
    """``[rl]``: the keys of DPO, GRPO and PPO plans (all optional: unset, TRL's default for the objective)."""

    model_config = FROZEN_TABLE
    TABLE: ClassVar[str] = "rl"

    max_prompt_length: int | None = Field(
        default=None, ge=1, le=MAX_TOKENS, description="GRPO/PPO prompt tokens; unset: 512 (TRL 0.x, verl)"
    )
    max_completion_length: int | None = Field(
        default=None,
        ge=1,
        le=MAX_TOKENS,
        description="GRPO/PPO generated tokens; unset: 512 (GRPOConfig), 53 (PPOConfig response_length)",
    )
    max_length: int | None = Field(
        default=None, ge=1, le=MAX_TOKENS, description="DPO prompt + longest response tokens; unset: 1024 (DPOConfig)"
    )
    reference: Reference | None = Field(
        default=None,
        description="the reference model: copy, adapter (LoRA's disabled adapters), precomputed (DPO), none; "
        "unset: none when beta = 0, adapter under LoRA/QLoRA, else copy",
    )
    beta: float | None = Field(
        default=None, ge=0, le=1e6, description="KL coefficient; unset: DPO 0.1, GRPO 0.0 (no reference), PPO 0.05"
    )
    num_generations: int | None = Field(
        default=None, ge=2, le=1_000_000, description="GRPO completions per prompt (>= 2); unset: 8 (GRPOConfig)"
    )
    num_iterations: int | None = Field(
        default=None, ge=1, le=10_000, description="GRPO updates per generated batch (mu); unset: 1 (GRPOConfig)"
    )
    generation: Generation | None = Field(
        default=None,
        description="hf: model.generate in the training process; vllm-colocate: a vLLM engine on each training GPU; "
        "vllm-server: vLLM on separate GPUs (TRL use_vllm + vllm_mode); unset: hf (use_vllm = False)",
    )
    vllm_gpu_memory_utilization: float | None = Field(
        default=None,
        gt=0,
        le=1,
        description="vLLM's share of each GPU's memory (weights + KV cache); unset: 0.3 colocate (GRPOConfig), "
        "0.9 server (trl vllm-serve)",
    )
    vllm_tensor_parallel_size: int | None = Field(
        default=None, ge=1, le=1024, description="GPUs per vLLM engine (server: the server's GPUs); unset: 1"
    )
    vllm_enable_sleep_mode: bool | None = Field(
        default=None, description="colocate: vLLM frees its weights and KV cache outside generation; unset: false"
    )
    reward_model: str | None = Field(
        default=None, description="PPO reward model: a model preset; unset: the policy's architecture"
    )
    value_model: str | None = Field(
        default=None, description="PPO value model (trained): a model preset; unset: the policy's architecture"
    )
    frozen_sharding: Literal["auto", "sharded", "replicated"] | None = Field(
        default=None,
        description="reference/reward weights: sharded over data-parallel ranks or a full copy per GPU; unset/auto: "
        "sharded under ZeRO-3/FSDP, else replicated (TRL prepare_deepspeed)",
    )
    frozen_offload: Literal["none", "cpu"] | None = Field(
        default=None, description="reference/reward weights kept on the host, streamed per layer; unset: none"
    )

    padding_free: bool | None = Field(
        default=None,
        description="the update batch carries no padding (TRL padding_free: sequences flattened for flash "
        "attention, or every completion at max length); unset: false, padded: SDPA saves a [b, 1, s, s] mask "
        "per layer",
    )
    prompts: int | None = Field(
        default=None,
        ge=1,
        le=10**15,
        description="prompts (DPO: preference pairs) to train on, for time to train (epochs x dataset rows); "
        "unset: training.tokens",
    )

    @model_validator(mode="before")
    @classmethod
    def _caseless(cls, data: Any) -> Any:
        return caseless_choices(cls, strict_scalars(cls, data, cls.TABLE))

    @field_validator(
        "max_prompt_length",
        "max_completion_length",
        "max_length",
        "num_generations",
        "num_iterations",
        "vllm_tensor_parallel_size",
        "prompts",
        mode="before",
    )
    @classmethod
    def _counts(cls, v: Any, info: Any) -> Any:
        return count_value(v, f"rl.{info.field_name}")

    def stated(self) -> dict[str, Any]:
        """The keys the plan sets (not None)."""
        return {k: v for k, v in self.model_dump().items() if v is not None}


@dataclass(frozen=True)
class RLSettings:
    """The ``[rl]`` keys resolved for one plan: each unset key at TRL's default for the objective."""

    objective: str
    prompt_len: int  # GRPO/PPO: max_prompt_length; DPO: 0 (in max_length)
    completion_len: int  # GRPO/PPO: max_completion_length; DPO: 0
    seq_len: int  # the tokens of one trained sequence: DPO max_length, else prompt + completion
    reference: str
    beta: float
    num_generations: int  # GRPO; 1 otherwise
    num_iterations: int
    generation: str  # "none" for DPO
    vllm_utilization: float
    vllm_tp: int
    sleep_mode: bool
    reward_model: str | None
    value_model: str | None
    frozen_sharding: str  # "sharded" | "replicated"
    frozen_offload: bool
    padding_free: bool = False  # the update batch has no padding (no attention mask reaches SDPA)

    @property
    def uses_vllm(self) -> bool:
        return self.generation.startswith("vllm")

    @property
    def spec(self) -> Objective:
        """The objective's record (`core.plan.schema.objectives`)."""
        return OBJECTIVES[self.objective]

    @property
    def generates(self) -> bool:
        return self.spec.generates

    @property
    def scores_old_policy(self) -> bool:
        """Old-policy log-probs are scored before the update: always (PPO), or when generation is off-policy
        (GRPO: vLLM's importance sampling, or ``num_iterations`` > 1; grpo_trainer.py training_step)."""
        when = self.spec.old_logprobs
        return when == "always" or (when == "off-policy" and (self.uses_vllm or self.num_iterations > 1))

    def summary(self, micro_batch: int) -> str:
        """``GRPO: 8 completions/GPU of 512 + 512 tokens, 8 per prompt, beta 0, reference none, vllm-colocate
        (0.3 of the GPU)``: the objective's line of a report."""
        spec = self.spec
        o = spec.label
        ref = f"beta {self.beta:g}, reference {self.reference}"
        if not spec.generates:
            return f"{o}: {micro_batch} {spec.example}/GPU of {self.seq_len} tokens (chosen + rejected), {ref}"
        engine = self.generation
        if self.generation == "vllm-colocate":
            engine += f" ({self.vllm_utilization:g} of the GPU{', sleep mode' if self.sleep_mode else ''})"
        elif self.generation == "vllm-server":
            engine += f" ({self.vllm_tp} GPU{'s' if self.vllm_tp > 1 else ''})"
        group = f", {self.num_generations} per prompt" if spec.groups else ""
        return (
            f"{o}: {micro_batch} {spec.example}/GPU of {self.prompt_len} + {self.completion_len} tokens{group}, "
            f"{ref}, {engine}"
        )


def rl_settings(objective: str, rl: RLConfig, *, adapters: bool, zero_stage: int) -> RLSettings:
    """``rl`` resolved for ``objective`` (see the module docstring for each default's source). ``adapters``:
    LoRA/QLoRA (the adapter-disabled base can be the reference); ``zero_stage`` 3 shards frozen models."""
    o, spec = objective, OBJECTIVES[objective]
    beta = rl.beta if rl.beta is not None else spec.default_beta
    if rl.reference is not None:
        reference = rl.reference
    elif spec.reference_needs_beta and beta == 0:
        reference = "none"
    else:
        reference = "adapter" if adapters else "copy"
    generates = spec.generates
    generation = rl.generation or ("hf" if generates else "none")
    prompt = (rl.max_prompt_length or 512) if generates else 0
    completion = (rl.max_completion_length or spec.default_completion_len) if generates else 0
    seq = (rl.max_length or spec.default_max_length) if spec.default_max_length else prompt + completion
    util = rl.vllm_gpu_memory_utilization
    if util is None:
        util = 0.9 if generation == "vllm-server" else 0.3
    sharding = rl.frozen_sharding or "auto"
    if sharding == "auto":
        sharding = "sharded" if zero_stage == 3 else "replicated"
    return RLSettings(
        objective=o,
        prompt_len=prompt,
        completion_len=completion,
        seq_len=seq,
        reference=reference,
        beta=beta,
        num_generations=(rl.num_generations or 8) if spec.groups else 1,
        num_iterations=rl.num_iterations or 1,
        generation=generation,
        vllm_utilization=util,
        vllm_tp=rl.vllm_tensor_parallel_size or 1,
        sleep_mode=bool(rl.vllm_enable_sleep_mode),
        reward_model=rl.reward_model,
        value_model=rl.value_model,
        frozen_sharding=sharding,
        frozen_offload=rl.frozen_offload == "cpu",
        padding_free=bool(rl.padding_free),
    )


def check_rl(objective: str, rl: RLConfig, *, adapters: bool) -> None:
    """The ``[rl]`` keys that cannot mean anything for ``objective``, or contradict each other: a `PlanError`
    naming the key to change."""
    stated = rl.stated()
    spec = OBJECTIVES[objective]
    if not spec.post_training:
        if stated:
            key = next(iter(stated))
            raise PlanError(
                'applies to preference/RL plans: set training.objective = "dpo", "grpo" or "ppo" (or remove it)',
                f"rl.{key}",
            )
        return
    for key in stated:
        if objective not in APPLIES[key]:
            raise PlanError(f"is a key of {'/'.join(APPLIES[key])} plans, not of a {objective} plan", f"rl.{key}")
    generation = rl.generation or "hf"
    for key in VLLM_KEYS:
        if key in stated and not generation.startswith("vllm"):
            raise PlanError('configures vLLM: set rl.generation = "vllm-colocate" or "vllm-server"', f"rl.{key}")
    if rl.vllm_enable_sleep_mode and generation == "vllm-server":
        raise PlanError(
            "sleep mode frees a colocated engine's memory; a vLLM server has GPUs of its own",
            "rl.vllm_enable_sleep_mode",
        )
    s = rl_settings(objective, rl, adapters=adapters, zero_stage=0)
    if s.reference == "adapter" and not adapters:
        raise PlanError(
            'needs LoRA/QLoRA (training.method): "adapter" is the base with the adapters disabled', "rl.reference"
        )
    if s.reference == "precomputed" and not spec.precomputable_reference:
        raise PlanError(
            "precomputed log-probs need a fixed dataset (DPO precompute_ref_log_probs); "
            f"{objective} scores fresh completions each step",
            "rl.reference",
        )
    if spec.reference_needs_beta and s.beta == 0 and s.reference != "none":
        raise PlanError(
            f"{spec.label} with beta = 0 loads no reference model (GRPOTrainer): set rl.beta > 0", "rl.reference"
        )
    if s.reference == "none" and s.beta > 0:
        raise PlanError(
            f"beta = {s.beta:g} needs reference log-probs: choose a reference or set rl.beta = 0", "rl.reference"
        )
