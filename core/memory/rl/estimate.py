"""``rl_estimate(plan)``: per-GPU memory of a DPO, GRPO or PPO step, phase by phase; the peak is the worst phase.

- **generation** (GRPO/PPO): the policy's resident states and ``hf``: its KV cache for the generated batch, one
  decoding step's logits and the prefill's working set, with ZeRO-3 the whole policy gathered (TRL
  ``unwrap_model_for_generation``, GRPOConfig ``ds3_gather_for_generation = True``); ``vllm-colocate``: the vLLM
  engine's share of the GPU; ``vllm-server``: nothing of the engine on the training GPUs.
- **scoring**: forwards without gradients of one micro-batch (old-policy and reference log-probs; PPO: the value
  and reward models too): the frozen models' weights, the forward's working set and TRL's fused lm-head tile.
- **update**: the SFT estimator (`core.memory.peak`) on the sequences the objective trains on (DPO: chosen and
  rejected concatenated, ``2 x micro_batch_size`` sequences of ``max_length``; GRPO/PPO: ``micro_batch_size``
  sequences of prompt + completion), TRL's fused lm-head in place of the logits (its log-probs only), plus
  what stays resident: the frozen models, the vLLM engine unless it sleeps, the generated batch; PPO's value
  model trains beside the policy (its weights, gradients, optimizer states and activations).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from vramplan.core.memory.kinds import ALL_KINDS, RL_KINDS
from vramplan.core.memory.record import Estimate, Phase
from vramplan.core.memory.rl import sizes as tm
from vramplan.core.memory.rl.rl_memory import PhaseMemory, RLMemory, RLTerm
from vramplan.core.memory.terms import Term, headline
from vramplan.core.plan.architecture.arch import Arch
from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.helpers.units import fmt_gib
from vramplan.core.plan.resolved import plan_rl_settings
from vramplan.core.plan.schema.plan import Plan
from vramplan.core.plan.schema.precision import REGIMES
from vramplan.core.plan.schema.rl import RLSettings

SftEstimate = Callable[..., Estimate]
TRL_GRPO = "trl/trainer/grpo_trainer.py"


def settings(plan: Plan) -> RLSettings:
    """The plan's ``[rl]`` keys resolved (`core.plan.schema.rl.rl_settings`)."""
    return plan_rl_settings(plan)


def update_plan(plan: Plan, r: RLSettings) -> Plan:
    """The SFT plan of the update: DPO's concatenated chosen + rejected batch (trl/trainer/dpo_trainer.py
    concatenates both in one forward), GRPO/PPO's prompt + completion sequences, and TRL's fused lm-head
    (trl/trainer/utils.py ``add_fused_lm_head``: no ``[b, s, V]`` logits) as the SFT model's fused loss. The plan
    keeps its objective: the activation model reads it for TRL's head and the padded batch
    (`core.memory.activations.context.plan_ctx`)."""
    t = plan.training
    changes: dict[str, object] = {
        "training.micro_batch_size": t.micro_batch_size * r.spec.sequences_per_example,
        "training.seq_len": r.seq_len,
    }
    if plan.strategy.loss_chunks == 1:
        changes["strategy.fused_cross_entropy"] = True
    return plan.with_changes(changes)


class Models(NamedTuple):
    """The bytes per GPU of what RL adds beside the policy."""

    frozen: int  # reference + reward weights on the GPU
    frozen_host: int  # their weights on the host (frozen_offload)
    engine: int  # a colocated vLLM engine during generation (0 otherwise)
    engine_resident: int  # the engine outside generation (0 with sleep mode)
    server: int  # a vLLM server's engine per server GPU
    short: bool
    value_states: dict[str, int]  # PPO value model: parameters, gradients, optimizer_states, activations
    terms: tuple[RLTerm, ...]


def _frozen_params(arch: Arch, head: bool) -> int:
    """A model's parameters; ``head = False``: a scalar score head (AutoModelForSequenceClassification) in place
    of an untied lm_head."""
    if head or arch.tied:
        return arch.total_params
    return arch.total_params - arch.V * arch.h + arch.h


def _models(plan: Plan, r: RLSettings, est_u: Estimate, value: Estimate | None) -> Models:
    t, s = plan.training, plan.strategy
    arch, reg = plan.model.arch(), REGIMES[t.regime]
    tp, dp = s.tensor_parallel, plan.data_parallel
    cap = presets.gpu(plan.hardware.gpu).memory_bytes
    sharded = r.frozen_sharding == "sharded"
    shard = f" / {dp} (sharded)" if sharded and dp > 1 else " (a full copy per GPU)"
    out: list[RLTerm] = []
    frozen = host = 0
    frozen_src = "trl/models/utils.py prepare_deepspeed (ZeRO-3: sharded; else stage 0) and prepare_fsdp"
    models: list[tuple[str, int]] = []
    if r.reference == "copy":
        full = t.method == "full"
        ref = (
            tm.frozen_weight_bytes(arch.total_params, reg.weight_bytes, tp=tp, dp=dp, sharded=sharded)
            if full
            else est_u.largest["parameters"]
        )
        models.append(("reference", ref))
        out.append(RLTerm("reference_weights", ref, f"{arch.total_params:,} x {reg.weight_bytes} B{shard}", frozen_src))
    elif r.reference == "adapter":
        out.append(RLTerm("reference_weights", 0, "0: the policy with its adapters disabled", "peft disable_adapter()"))
    if r.spec.reward_model:
        r_arch = presets.model_config({"preset": r.reward_model}).arch() if r.reward_model else arch
        n = _frozen_params(r_arch, head=False)
        rew = tm.frozen_weight_bytes(n, reg.weight_bytes, tp=tp, dp=dp, sharded=sharded)
        models.append(("reward", rew))
        out.append(RLTerm("reward_weights", rew, f"{n:,} x {reg.weight_bytes} B{shard}", frozen_src))
    for _name, b in models:
        if r.frozen_offload:
            layer = b * 2 // max(1, arch.L)  # the block being computed and the one prefetched
            host += b
            b = layer
        frozen += b
    engine = resident = server = 0
    short = False
    if r.uses_vllm:
        w = tm.vllm_weight_bytes(arch.total_params, r.vllm_tp)
        one = tm.kv_bytes_per_token(arch, 2, r.vllm_tp) * r.seq_len
        need = tm.vllm_engine_bytes(cap, r.vllm_utilization, w, one)
        short = w + one > int(cap * r.vllm_utilization)
        kv = tm.vllm_kv_budget_bytes(cap, r.vllm_utilization, w)
        src = "vllm/v1/worker/gpu_worker.py determine_available_memory: requested = total x gpu_memory_utilization"
        where = "per server GPU" if r.generation == "vllm-server" else "per training GPU"
        out.append(RLTerm("vllm_weights", w, f"{arch.total_params:,} x 2 B / TP {r.vllm_tp} ({where})", src))
        out.append(RLTerm("vllm_kv_cache", kv, f"{r.vllm_utilization:g} x {fmt_gib(cap)} - weights", src))
        if r.generation == "vllm-server":
            server = need
        else:
            engine = need
            resident = 0 if r.sleep_mode else need
            sleep = "sleep mode: llm.sleep(level=2) after generation" if r.sleep_mode else "no sleep mode: resident"
            out.append(RLTerm("vllm_outside_generation", resident, sleep, "trl/generation/vllm_generation.py"))
    vs: dict[str, int] = {}
    if value is not None:
        v_arch = value.plan.model.arch()
        keep = 1 - (0 if v_arch.tied else v_arch.V * v_arch.h / v_arch.total_params)  # a scalar value head
        vs = {k: int(value.largest.get(k, 0) * keep) for k in ("parameters", "gradients", "optimizer_states")}
        vs["activations"] = value.largest.get("activations", 0)
        total = sum(vs.values())
        src = "TRL PPOTrainer PolicyAndValueWrapper: one optimizer, one backward for both"
        out.append(RLTerm("value_model", total, "the value model's states and activations, as the policy's", src))
    return Models(frozen, host, engine, resident, server, short, vs, tuple(out))


class Batch(NamedTuple):
    b: int  # update micro-batch sequences
    gen: int  # generated sequences per GPU per step
    prompt: int
    completion: int
    seq: int
    logp: int  # per-token log-prob tensors kept for the update


def _batch(plan: Plan, r: RLSettings) -> Batch:
    t = plan.training
    b = t.micro_batch_size * r.spec.sequences_per_example
    gen = t.micro_batch_size * t.grad_accum_steps if r.generates else 0  # TRL steps_per_generation = grad accum
    logp = int(r.scores_old_policy) + int(r.reference != "none")  # log-prob tensors kept for the update
    return Batch(b, gen, r.prompt_len, r.completion_len, r.seq_len, logp)


def _scores(plan: Plan, r: RLSettings) -> bool:
    """Whether a scoring forward runs: old-policy log-probs (vLLM's importance sampling, ``num_iterations > 1``),
    reference log-probs, PPO's values and rewards."""
    return r.scores_old_policy or r.reference in ("copy", "adapter")


def _phases(plan: Plan, r: RLSettings, est_u: Estimate, mo: Models, bt: Batch, cpu: bool) -> tuple[Phase, ...]:
    """The moments of the step: generation, scoring, then each of the update's (from the SFT estimate)."""
    t, s = plan.training, plan.strategy
    arch, reg = plan.model.arch(), REGIMES[t.regime]
    tp, act = s.tensor_parallel, reg.act_bytes
    scored = bt.b * bt.completion if r.spec.scores_completion else bt.b * (bt.seq - 1)  # DPO: prompt not split out
    n_head = tm.head_positions(bt.b, bt.seq, scored, cpu=cpu)
    P, OS = est_u.largest["parameters"], est_u.largest["optimizer_states"]
    vs = mo.value_states
    rollout = tm.rollout_bytes(bt.gen, bt.prompt, bt.completion, bt.logp)
    resident = {
        "parameters": P + vs.get("parameters", 0),
        "optimizer_states": OS + vs.get("optimizer_states", 0),
        "frozen_models": mo.frozen,
        "rollout": rollout,
    }
    phases: list[Phase] = []
    if r.generates:
        live = dict(resident)
        if r.generation == "hf":
            full = P * plan.data_parallel if s.zero_stage == 3 else P  # ds3_gather_for_generation: all of it
            live["gathered_parameters"] = full - P
            live["kv_cache"] = tm.kv_cache_bytes(arch, bt.gen, bt.seq, act, tp)
            live["logits"] = tm.decode_logits_bytes(arch, bt.gen, act) // tp
            live["temporaries"] = tm.forward_working_bytes(arch, bt.gen, bt.prompt, act, tp)
            what = f"model.generate of {bt.gen} sequences of {bt.prompt} + {bt.completion} tokens"
        else:
            live["vllm_engine"] = mo.engine
            what = "vLLM generates " + ("on the server's GPUs" if r.generation == "vllm-server" else "on this GPU")
        phases.append(Phase("generation", what, _ordered(live)))
    if _scores(plan, r):
        live = dict(resident)
        live["gathered_parameters"] = est_u.largest.get("gathered_parameters", 0)
        live["vllm_engine"] = mo.engine_resident
        live["temporaries"] = tm.forward_working_bytes(arch, bt.b, bt.seq, act, tp)
        live["logits"] = tm.fused_head_forward_bytes(arch, n_head, act, cpu=cpu) // tp
        phases.append(Phase("scoring", f"no-grad forwards of {bt.b} sequences of {bt.seq} tokens", _ordered(live)))
    head = (  # TRL's fused lm-head in place of the SFT loss's logits, at the loss (0) and backward's start (1)
        tm.fused_head_forward_bytes(arch, n_head, act, cpu=cpu) // tp,
        tm.fused_head_backward_bytes(arch, n_head, act, trained_head=t.method == "full", cpu=cpu) // tp,
    )
    for i, p in enumerate(est_u.phases):
        live = dict(p.live)
        if i < 2 and "logits" in live:
            live["logits"] = head[i]
        for k in ("parameters", "optimizer_states", "activations"):
            live[k] = live.get(k, 0) + vs.get(k, 0)
        if p.name != "forward":
            live["gradients"] = live.get("gradients", 0) + vs.get("gradients", 0)
        live |= {"frozen_models": mo.frozen, "vllm_engine": mo.engine_resident, "rollout": rollout}
        phases.append(Phase("update", f"update, {p.name}: {p.moment}", _ordered(live)))
    return tuple(phases)


def _ordered(live: dict[str, int]) -> dict[str, int]:
    """A phase's live bytes by kind in the gauges' order (`core.memory.kinds.ALL_KINDS`)."""
    return {k: live[k] for k in ALL_KINDS if k in live}


def _value_estimate(plan: Plan, up: Plan, r: RLSettings, sft: SftEstimate, cpu: bool) -> Estimate | None:
    """PPO's value model trained beside the policy: the SFT estimate of its architecture on the update's batch."""
    if not r.spec.value_model:
        return None
    vp = up.with_changes({"training.objective": "sft"} | ({"model.preset": r.value_model} if r.value_model else {}))
    return sft(vp, cpu=cpu)


def rl_estimate(plan: Plan, sft: SftEstimate, *, cpu: bool = False) -> Estimate:
    """Per-GPU memory of a DPO/GRPO/PPO step (module docstring); ``sft`` is the SFT estimator
    (`core.memory.peak.sft_estimate`), used for the update phase and PPO's value model."""
    r = settings(plan)
    up = update_plan(plan, r)
    est_u = sft(up, cpu=cpu)
    mo = _models(plan, r, est_u, _value_estimate(plan, up, r, sft, cpu))
    bt = _batch(plan, r)
    phases = _phases(plan, r, est_u, mo, bt, cpu)
    peak = max(phases, key=lambda p: p.total)
    largest: dict[str, int] = {}
    for p in phases:
        for k, v in p.live.items():
            largest[k] = max(largest.get(k, 0), v)
    by_phase: dict[str, Phase] = {}
    for p in phases:
        if p.name not in by_phase or p.total > by_phase[p.name].total:
            by_phase[p.name] = p
    memory = RLMemory(
        objective=r.objective,
        phases=tuple(PhaseMemory(p.name, p.total, p.live, p.moment) for p in by_phase.values()),
        peak_phase=peak.name,
        terms=mo.terms + _batch_terms(plan, r, bt),
        update_sequences=bt.b,
        update_seq_len=bt.seq,
        generation_sequences=bt.gen,
        server_gpus=r.vllm_tp if r.generation == "vllm-server" else 0,
        server_gpu_bytes=mo.server,
        engine_short=mo.short,
    )

    gpus_node = plan.hardware.gpus_per_node
    return Estimate(
        plan=plan,
        params_total=est_u.params_total,
        params_trainable=est_u.params_trainable,
        largest=largest,
        phases=phases,
        peak=peak,
        overhead_bytes=est_u.overhead_bytes,
        gpu_capacity=est_u.gpu_capacity,
        cpu_per_node=est_u.cpu_per_node + mo.frozen_host * gpus_node,
        nvme_per_node=est_u.nvme_per_node,
        node=est_u.node,
        stage=est_u.stage,
        headlines=(*est_u.headlines, *_kind_headlines(memory)),
        overhead_terms=est_u.overhead_terms,
        rl=memory,
    )


def _batch_terms(plan: Plan, r: RLSettings, bt: Batch) -> tuple[RLTerm, ...]:
    arch = plan.model.arch()
    act = REGIMES[plan.training.regime].act_bytes
    tp = plan.strategy.tensor_parallel
    out = [
        RLTerm(
            "update_batch",
            0,
            f"{bt.b} sequences of {bt.seq} tokens per micro-batch"
            + (" (chosen + rejected concatenated)" if r.spec.sequences_per_example == 2 else " (prompt + completion)"),
            "trl/trainer/dpo_trainer.py (concatenated forward)" if r.spec.sequences_per_example == 2 else TRL_GRPO,
        )
    ]
    if r.generation == "hf":
        kv = tm.kv_cache_bytes(arch, bt.gen, bt.seq, act, tp)
        f = f"2 x {arch.L} layers x {arch.kv} kv heads x {arch.d} x {act} B x {bt.gen} seqs x {bt.seq} tokens"
        out.append(RLTerm("kv_cache", kv, f, "transformers cache_utils.py DynamicCache (one k, v per layer)"))
    if bt.gen:
        ro = tm.rollout_bytes(bt.gen, bt.prompt, bt.completion, bt.logp)
        f = f"{bt.gen} x ({bt.seq} x 2 x 8 B ids/masks + {bt.completion} x 4 B x {bt.logp} log-prob tensors)"
        out.append(RLTerm("rollout", ro, f, f"{TRL_GRPO} _generate_and_score_completions"))
    return tuple(out)


def _kind_headlines(memory: RLMemory) -> tuple[Term, ...]:
    """The formula and source of each RL kind, from its terms."""
    terms = {t.name: t for t in memory.terms}
    pick = {
        "frozen_models": ("reference_weights", "reward_weights"),
        "vllm_engine": ("vllm_weights", "vllm_kv_cache", "vllm_outside_generation"),
        "kv_cache": ("kv_cache",),
        "rollout": ("rollout",),
    }
    out = []
    for kind in RL_KINDS:
        parts = [terms[n] for n in pick[kind] if n in terms]
        formula = "; ".join(f"{t.name}: {t.formula}" for t in parts) or "0"
        out.append(headline(kind, "{}", formula, source="; ".join(dict.fromkeys(t.source for t in parts)) or "-"))
    return tuple(out)
