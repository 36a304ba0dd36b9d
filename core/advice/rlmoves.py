"""The memory moves of DPO/GRPO/PPO plans (the checklist's remedies and the fit advisor's moves; none for SFT).

Each names the TRL (or verl) setting it changes: a smaller vLLM share of the GPU (``vllm_gpu_memory_utilization``),
vLLM's sleep mode (``vllm_enable_sleep_mode``), the vLLM server on separate GPUs (``vllm_mode = "server"``),
vLLM instead of ``model.generate``, precomputed reference log-probs (DPO ``precompute_ref_log_probs``), the
adapter-disabled base as the reference under LoRA, the frozen models' weights on the host (verl
``ref.fsdp_config.param_offload``), and, as changes of the training itself, a shorter ``max_completion_length`` or
fewer ``num_generations`` per prompt.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

from vramplan.core.memory.rl import sizes as tm
from vramplan.core.memory.rl.estimate import settings
from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.schema.plan import Plan

RL_TARGET = "rl"  # what these moves free: the kinds whose `KindSpec.advice` is "rl" (`kinds_freed_by`)
UTILIZATION_STEP = 0.05


class MoveSpec(NamedTuple):
    """A move's fields, made into a `core.advice.moves.Move` by `memory_moves` (which imports this module)."""

    title: str
    changes: dict[str, Any]
    dim: str
    targets: tuple[str, ...]
    tier: int = 0


def _move(title: str, changes: dict[str, Any], dim: str, targets: tuple[str, ...], tier: int = 0) -> MoveSpec:
    return MoveSpec(title, changes, dim, targets, tier)


def needed_utilization(plan: Plan) -> float:
    """The smallest ``vllm_gpu_memory_utilization`` (in steps of 0.05) whose KV cache holds every sequence of the
    step's generation batch at full length: ``(weights + batch x KV per sequence) / GPU memory``
    (`core.memory.rl.sizes.vllm_engine_bytes`)."""
    r = settings(plan)
    t = plan.training
    arch = plan.model.arch()
    cap = presets.gpu(plan.hardware.gpu).memory_bytes
    seqs = t.micro_batch_size * t.grad_accum_steps * r.vllm_tp
    need = tm.vllm_weight_bytes(arch.total_params, r.vllm_tp) + seqs * tm.kv_bytes_per_token(arch, 2, r.vllm_tp) * (
        r.seq_len
    )
    return min(1.0, math.ceil(need / cap / UTILIZATION_STEP) * UTILIZATION_STEP)


def rl_moves(plan: Plan) -> list[MoveSpec]:
    """Every RL move that could lower the plan's peak memory (empty for an SFT plan)."""
    t = plan.training
    spec = t.objective_spec
    if not spec.post_training:
        return []
    r = settings(plan)
    out: list[MoveSpec] = []
    rl = (RL_TARGET,)
    if r.generation == "vllm-colocate":
        need = needed_utilization(plan)
        if need < r.vllm_utilization - 1e-9:
            title = f"vLLM share {r.vllm_utilization:g} -> {need:g} of the GPU (still holds the batch's KV cache)"
            out.append(_move(title, {"rl.vllm_gpu_memory_utilization": round(need, 2)}, "vllm_share", rl))
        if not r.sleep_mode:
            out.append(_move("vLLM sleep mode", {"rl.vllm_enable_sleep_mode": True}, "vllm_sleep", rl))
    if r.generation == "hf":
        colocate = {"rl.generation": "vllm-colocate", "rl.vllm_enable_sleep_mode": True}
        out.append(_move("vLLM colocated with sleep mode", colocate, "generation", rl))
    if r.generation != "vllm-server" and r.generates:
        server: dict[str, Any] = {"rl.generation": "vllm-server"}
        if r.sleep_mode:
            server["rl.vllm_enable_sleep_mode"] = False
        out.append(_move("vLLM server on separate GPUs", server, "generation", rl))
    if r.reference == "copy":
        if spec.precomputable_reference:
            out.append(_move("precomputed reference log-probs", {"rl.reference": "precomputed"}, "reference", rl))
        if t.method != "full":
            out.append(_move("LoRA reference (adapters disabled)", {"rl.reference": "adapter"}, "reference", rl))
    if (r.reference == "copy" or spec.reward_model) and not r.frozen_offload:
        out.append(_move("reference/reward weights on the host", {"rl.frozen_offload": "cpu"}, "frozen_offload", rl))
    if r.generates and r.completion_len >= 128:
        half = r.completion_len // 2
        title = f"max_completion_length {r.completion_len} -> {half}"
        out.append(_move(title, {"rl.max_completion_length": half}, "completion", ("activations", RL_TARGET), 2))
    g, b = r.num_generations, t.micro_batch_size
    if spec.groups and g >= 4 and g % 2 == 0 and b % 2 == 0:
        title = f"num_generations {g} -> {g // 2} per prompt, micro-batch {b} -> {b // 2} (same prompts)"
        changes = {"rl.num_generations": g // 2, "training.micro_batch_size": b // 2}
        out.append(_move(title, changes, "generations", ("activations", RL_TARGET), 2))
    return out
