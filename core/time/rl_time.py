"""Step time of DPO, GRPO and PPO: generation, the scoring forwards and the update, each with its tokens/s.

One optimizer step (``grad_accum_steps`` micro-batches on each GPU) runs, in order:

- **generation** (GRPO/PPO) of the step's completions, ``micro_batch_size x grad_accum_steps`` per GPU (TRL
  ``steps_per_generation`` = gradient accumulation): the prefill is one forward of the prompts (its kernels timed
  as the update's, `core.time.block_time`); each decoding step reads the engine's weights and the KV cache of the
  sequences it runs at once, ``(weights + concurrent x KV per token x mean context) / HBM bandwidth`` (the
  roofline of decoding: Pope et al. 2022, "Efficiently Scaling Transformer Inference", §2), unless the host
  issues its kernels slower: ``model.generate`` runs the model's eager forward token by token (about 46 kernels
  a LLaMA layer, `core.time.launch`), vLLM replays a CUDA graph of its fused layer (`VLLM_LAYER_KERNELS`). vLLM runs as
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
from vramplan.core.time.block_time import block_time
from vramplan.core.time.chip import Chip, plan_chip
from vramplan.core.time.comm import LINK_EFFICIENCY as EFF
from vramplan.core.time.compute import block_setup
from vramplan.core.time.kernels import Work, matmul
from vramplan.core.time.launch import host_costs
from vramplan.core.time.record import Generation, RLTime, StepTime, TimeTerm, time_term

SftStepTime = Callable[[Plan], StepTime]
# vLLM's decoder layer (vllm/model_executor/models/llama.py LlamaDecoderLayer): fused add + RMSNorm, the fused QKV
# projection, rotary, the KV-cache write and the attention kernel, o_proj, fused add + RMSNorm, the fused gate_up
# projection, SiluAndMul, down_proj
VLLM_LAYER_KERNELS = 10
VLLM_MODEL_KERNELS = 4  # the embedding, the final norm, the lm_head, the sampler
DECODE_SRC = (
    "Pope et al. 2022 §2 (decoding reads every weight and the KV cache per token): max(GPU: (weights + KV read) / "
    "usable HBM + kernels' overhead, host: kernels x its time per kernel); model.generate runs the model's eager "
    "forward token by token (core/time/launch.py), vLLM replays CUDA graphs"
)


def forward_pass(plan: Plan, c: Chip, b: int, s: int, tp: int) -> tuple[Work, int]:
    """One forward of ``b`` sequences of ``s`` tokens through the whole model on one GPU of ``tp`` that split it: the
    blocks' forward work and the lm_head's, and its kernels."""
    x = block_setup(plan)._replace(b=b, s=s, full=False, tp=tp, sp=False)
    bt = block_time(x, c)
    arch = x.arch
    head = matmul(b * s, arch.V // x.tp, arch.h, c, x.elem)
    fwd = bt.forward().times(arch.L) + head
    return fwd, fwd.kernels


def decode_step_seconds(
    plan: Plan, c: Chip, concurrent: int, weights: float, kv_read: float, *, tp: int, graphed: bool
) -> float:
    """One decoding step of ``concurrent`` sequences (`DECODE_SRC`): the GPU reads the weights and the KV cache (a
    4-bit base dequantized for a batch, bitsandbytes' gemv reads the 4-bit blocks for one sequence), the host issues
    one forward's kernels."""
    fwd, kernels = forward_pass(plan, c, concurrent, 1, tp)
    if graphed:  # vLLM's fused layer, not the training stack's eager ops
        kernels = plan.model.arch().L * VLLM_LAYER_KERNELS + VLLM_MODEL_KERNELS
    gpu = max((weights + kv_read) / c.hbm, fwd.flops / (c.flops * c.matmul_efficiency)) + kernels * c.kernel_s
    per_kernel = host_costs(compiled=False, graphed=graphed).forward
    return max(gpu, kernels * per_kernel)


def generation_time(plan: Plan, r: RLSettings, c: Chip) -> Generation:
    """The step's generation on one engine (module docstring): waves of ``concurrent`` sequences, each a
    prefill and ``max_completion_length`` decoding steps."""
    t, s = plan.training, plan.strategy
    arch, reg = plan.model.arch(), REGIMES[t.regime]
    gpu = presets.gpu(plan.hardware.gpu)
    per_gpu = t.micro_batch_size * t.grad_accum_steps
    P, C = r.prompt_len, r.completion_len
    sync = 0.0
    if r.generation == "hf":
        split, seqs, concurrent = s.tensor_parallel, per_gpu, per_gpu
        quant = t.base_quantization != "none"
        weights: float = arch.total_params * reg.weight_bytes // split  # as the policy holds them (ZeRO-3: gathered)
        if quant:  # the 4-bit blocks, and for a batch their 16-bit dequantized copy written and read
            stored = sum(qb for _, qb in block_setup(plan).quantized) * arch.L
            weights = stored + (4 * arch.L * arch.layer_weight_params // split if concurrent > 1 else 0)
        kv_tok = tm.kv_bytes_per_token(arch, reg.act_bytes, split)
    else:
        split = r.vllm_tp
        seqs = per_gpu * (plan.data_parallel if r.generation == "vllm-server" else split)
        weights = tm.vllm_weight_bytes(arch.total_params, split)
        kv_tok = tm.kv_bytes_per_token(arch, 2, split)
        budget = tm.vllm_kv_budget_bytes(gpu.memory_bytes, r.vllm_utilization, int(weights))
        concurrent = max(1, min(seqs, budget // max(1, kv_tok * (P + C))))
        if r.generation == "vllm-server":  # TRL VLLMClient.update_named_param: NCCL broadcast of every weight
            sync = arch.total_params * 2 / (gpu.gpu_link_gbs * 1e9 * EFF)
    waves = -(-seqs // concurrent)
    prefill = waves * forward_pass(plan, c, concurrent, P, split)[0].seconds
    kv_read = concurrent * kv_tok * (P + C // 2)  # the mean context over the completion
    step = decode_step_seconds(plan, c, concurrent, weights, kv_read, tp=split, graphed=r.generation != "hf")
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
    c = plan_chip(plan)
    gen = generation_time(plan, r, c) if r.generates else None
    mu = r.num_iterations
    seqs = t.micro_batch_size * t.grad_accum_steps * r.spec.sequences_per_example
    forwards = scoring_forwards(r)
    scored = forwards * seqs * r.seq_len  # per GPU
    one, _ = forward_pass(
        plan, c, t.micro_batch_size * r.spec.sequences_per_example, r.seq_len, plan.strategy.tensor_parallel
    )
    scoring = forwards * t.grad_accum_steps * one.seconds / plan.strategy.pipeline_parallel / mu
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
    extra = [*_rl_terms(plan, r, timing, generation, scoring, forwards, seqs)]
    if value_s > 0:
        extra.append(
            time_term(
                "value_update",
                value_s,
                "compute",
                "the value model's forward and backward on the update's sequences (the SFT step model)",
                source="trl PPOTrainer: PolicyAndValueWrapper trains the value model with the policy",
            )
        )
    flops = up.flops_per_step + scored * dp * fl.forward_matmul_flops(arch) // mu
    return replace(
        up,
        plan=plan,
        step_seconds=update + generation + scoring,
        terms=(*extra, *up.terms),
        flops_per_step=flops,
        hardware_flops_per_step=up.hardware_flops_per_step + flops - up.flops_per_step,
        rl=timing,
        _cache={},
    )


def _rl_terms(
    plan: Plan, r: RLSettings, tt: RLTime, generation: float, scoring: float, forwards: int, seqs: int
) -> list[TimeTerm]:
    """The generation's and the scoring forwards' terms, with this plan's numbers and their sources."""
    out = []
    g = tt.gen
    if g is not None:
        engine = {"hf": "model.generate", "vllm-colocate": "colocated vLLM", "vllm-server": "vLLM server"}
        out.append(time_term(
            "generation", generation, "memory",
            "{}: {} sequences, {} at once: prefill {:.3g} s + {} decode steps x waves {:.3g} s"
            " + weight sync {:.3g} s{}",
            engine[r.generation], g.sequences, g.concurrent, g.prefill_s, r.completion_len, g.decode_s, g.sync_s,
            f", / num_iterations {r.num_iterations}" if r.num_iterations > 1 else "",
            source=DECODE_SRC + "; trl/trainer/grpo_trainer.py _generate",
        ))  # fmt: skip
    out.append(time_term(
        "scoring", scoring, "compute",
        "{} no-grad forwards x {} sequences x {} tokens (the model's forward kernels)", forwards, seqs, r.seq_len,
        source="trl/trainer/grpo_trainer.py training_step (old and reference log-probs), dpo_trainer.py "
        "(reference), PPOTrainer (values, rewards)",
    ))  # fmt: skip
    return out
