"""Step time of DPO, GRPO and PPO: generation, the scoring forwards and the update, each with its tokens/s.

One optimizer step (``grad_accum_steps`` micro-batches on each GPU) runs, in order:

- **generation** (GRPO/PPO) of the step's completions, ``micro_batch_size x grad_accum_steps`` per GPU (TRL
  ``steps_per_generation`` = gradient accumulation): the prefill is compute-bound, ``2 N x prompt tokens`` at the
  plan's MFU; each decoding step reads the engine's weights and the KV cache of the sequences it runs at once
  and is bound by memory bandwidth, ``(weights + concurrent x KV per token x mean context) / HBM bandwidth``
  (the roofline of decoding: Pope et al. 2022, "Efficiently Scaling Transformer Inference", §2). vLLM runs as
  many sequences at once as its KV budget holds (vllm/v1/core/sched/scheduler.py admits requests while KV
  blocks are free; TRL sets ``max_num_seqs`` to the generation batch), ``hf`` all of them (a static batch).
  Every completion is taken to reach ``max_completion_length`` (an upper bound: EOS ends some earlier).
- **scoring**: forwards without gradients over the generated batch (old-policy log-probs under vLLM's importance
  sampling or ``num_iterations > 1``, reference log-probs, PPO's values and rewards): ``2 N`` FLOPs per token each.
- **update**: the SFT step-time model (`core.time.step`) on the update's sequences; PPO's value model adds its own.

With ``num_iterations = mu`` (GRPO), one generated batch serves mu optimizer steps: generation and scoring count
``1/mu`` per step. Time to train counts prompts (``rl.prompts``): ``ceil(prompts / prompts per step)`` steps.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from vramplan.core.memory.rl import sizes as tm
from vramplan.core.memory.rl.estimate import settings, update_plan
from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.schema.plan import Plan
from vramplan.core.plan.schema.precision import REGIMES
from vramplan.core.plan.schema.rl import RLSettings
from vramplan.core.time import flops as fl
from vramplan.core.time.comm import LINK_EFFICIENCY as EFF
from vramplan.core.time.step_record import Generation, RLTime, StepTime, TimeTerm

SftStepTime = Callable[[Plan], StepTime]
DECODE_SRC = "Pope et al. 2022 §2 (decoding reads every weight and the KV cache per token); HBM at 80% of peak"


def decode_step_seconds(weights_bytes: int, kv_read_bytes: int, flops: float, hbm_bps: float, peak: float) -> float:
    """One decoding step: ``max((weights + KV read) / HBM, FLOPs / peak)`` (the roofline; `DECODE_SRC`)."""
    return max((weights_bytes + kv_read_bytes) / hbm_bps, flops / peak)


def generation_time(plan: Plan, r: RLSettings, peak: float, mfu: float) -> Generation:
    """The step's generation on one engine (module docstring): waves of ``concurrent`` sequences, each a
    prefill and ``max_completion_length`` decoding steps."""
    t, s = plan.training, plan.strategy
    arch, reg = plan.model.arch(), REGIMES[t.regime]
    gpu = presets.gpu(plan.hardware.gpu)
    hbm = gpu.memory_bandwidth_gbs * 1e9 * EFF
    per_gpu = t.micro_batch_size * t.grad_accum_steps
    P, C = r.prompt_len, r.completion_len
    n_flops = fl.forward_matmul_flops(arch)
    sync = 0.0
    if r.generation == "hf":
        split, seqs, concurrent = s.tensor_parallel, per_gpu, per_gpu
        weights = arch.total_params * reg.weight_bytes // split  # as the policy holds them (ZeRO-3: gathered)
        kv_tok = tm.kv_bytes_per_token(arch, reg.act_bytes, split)
    else:
        split = r.vllm_tp
        seqs = per_gpu * (plan.data_parallel if r.generation == "vllm-server" else split)
        weights = tm.vllm_weight_bytes(arch.total_params, split)
        kv_tok = tm.kv_bytes_per_token(arch, 2, split)
        budget = tm.vllm_kv_budget_bytes(gpu.memory_bytes, r.vllm_utilization, weights)
        concurrent = max(1, min(seqs, budget // max(1, kv_tok * (P + C))))
        if r.generation == "vllm-server":  # TRL VLLMClient.update_named_param: NCCL broadcast of every weight
            sync = arch.total_params * 2 / (gpu.gpu_link_gbs * 1e9 * EFF)
    waves = -(-seqs // concurrent)
    prefill = waves * concurrent * P * n_flops / split / (peak * mfu)
    kv_read = concurrent * kv_tok * (P + C // 2)  # the mean context over the completion
    step = decode_step_seconds(weights, kv_read, concurrent * n_flops / split, hbm, peak)
    decode = waves * C * step
    tokens = per_gpu * plan.data_parallel * C
    return Generation(prefill + decode + sync, prefill, decode, sync, seqs, concurrent, tokens)


def scoring_forwards(r: RLSettings) -> int:
    """Forwards over the generated (DPO: the preference) batch per step: old-policy log-probs (GRPO under vLLM's
    importance sampling or ``num_iterations > 1``: grpo_trainer.py ``training_step``; PPO always), the reference
    (copy or adapter), PPO's value and reward models (trl PPOTrainer rollout)."""
    ref = r.reference in ("copy", "adapter")
    return int(r.scores_old_policy) + int(ref) + int(r.spec.value_model) + int(r.spec.reward_model)


def rl_step_time(plan: Plan, sft: SftStepTime) -> StepTime:
    """The StepTime of a DPO/GRPO/PPO plan (module docstring); ``sft`` is the SFT model (`core.time.step`)."""
    t = plan.training
    r = settings(plan)
    up = sft(update_plan(plan, r))
    update = up.step_seconds
    if r.spec.value_model:
        vp = update_plan(plan, r)
        update += sft(vp.with_changes({"model.preset": r.value_model}) if r.value_model else vp).step_seconds
    arch = plan.model.arch()
    peak, mfu = up.peak_flops, up.mfu_setting
    gen = generation_time(plan, r, peak, mfu) if r.generates else None
    mu = r.num_iterations
    seqs = t.micro_batch_size * t.grad_accum_steps * r.spec.sequences_per_example
    forwards = scoring_forwards(r)
    scored = forwards * seqs * r.seq_len  # per GPU
    split = plan.strategy.tensor_parallel * plan.strategy.pipeline_parallel
    scoring = scored * fl.forward_matmul_flops(arch) / split / (peak * mfu) / mu
    generation = (gen.seconds if gen else 0.0) / mu
    dp = plan.data_parallel
    prompts = t.micro_batch_size * t.grad_accum_steps * dp // r.num_generations
    timing = RLTime(
        objective=r.objective,
        generation_s=generation,
        scoring_s=scoring,
        update_s=update,
        generated_tokens=gen.tokens if gen else 0,
        scored_tokens=scored * dp,
        update_tokens=up.tokens_per_step,
        prompts_per_step=max(1, prompts),
        prompts=plan.rl.prompts,
        server_gpus=r.vllm_tp if r.generation == "vllm-server" else 0,
        gen=gen,
    )
    value_s = update - up.step_seconds
    extra = [
        TimeTerm("generation", generation, generation, "memory"),
        TimeTerm("scoring", scoring, scoring, "compute"),
    ]
    if value_s > 0:
        extra.append(TimeTerm("value_update", value_s, value_s, "compute"))
    flops = up.flops_per_step + scored * dp * fl.forward_matmul_flops(arch) // mu
    rl_formulas = _formulas(plan, r, timing, forwards, seqs)

    def explain() -> dict[str, tuple[str, str]]:
        return {**up.explainer(), **rl_formulas}

    return replace(
        up,
        plan=plan,
        step_seconds=update + generation + scoring,
        terms=(*extra, *up.terms),
        flops_per_step=flops,
        hardware_flops_per_step=up.hardware_flops_per_step + flops - up.flops_per_step,
        explainer=explain,
        rl=timing,
        _cache={},
    )


def _formulas(plan: Plan, r: RLSettings, tt: RLTime, forwards: int, seqs: int) -> dict[str, tuple[str, str]]:
    """The RL terms' formulas with this plan's numbers, and their sources."""
    out: dict[str, tuple[str, str]] = {}
    g = tt.gen
    if g is not None:
        engine = {"hf": "model.generate", "vllm-colocate": "colocated vLLM", "vllm-server": "vLLM server"}
        out["generation"] = (
            f"{engine[r.generation]}: {g.sequences} sequences, {g.concurrent} at once: prefill {g.prefill_s:.3g} s"
            f" + {r.completion_len} decode steps x waves {g.decode_s:.3g} s + weight sync {g.sync_s:.3g} s"
            + (f", / num_iterations {r.num_iterations}" if r.num_iterations > 1 else ""),
            DECODE_SRC + "; trl/trainer/grpo_trainer.py _generate",
        )
    out["scoring"] = (
        f"{forwards} no-grad forwards x {seqs} sequences x {r.seq_len} tokens x 2N FLOPs / (peak x MFU)",
        "trl/trainer/grpo_trainer.py training_step (old and reference log-probs), dpo_trainer.py (reference), "
        "PPOTrainer (values, rewards)",
    )
    if r.spec.value_model:
        out["value_update"] = (
            "the value model's forward and backward on the update's sequences (the SFT step model)",
            "trl PPOTrainer: PolicyAndValueWrapper trains the value model with the policy",
        )
    return out
