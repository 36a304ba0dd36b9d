"""What `vramplan trace` cannot run on fake tensors, said before it starts (`not_traced`), and how those parts enter
its figures: how one rank of a data-parallel plan is traced (`parallel_mode`: FSDP2 and DDP run in a fake process
group; DeepSpeed's ZeRO-1/2/3 and FSDP1, which cannot, by `shard_factors`: each sharded tensor divided by the
degree, no collective run) and parts taken from the formula estimator, marked (`adjustments`). Pure Python: the CLI
lists them before torch is imported."""

from __future__ import annotations

import importlib.util
from typing import Any

from vramplan.core.plan.resolved import fsdp_sharded
from vramplan.core.plan.schema.plan import Plan
from vramplan.measure.recipe import OPTIMIZERS, WEIGHTS_AND_AUTOCAST

MAMBA_KEYS = ("mamba_d_state", "mamba_expand", "mamba_num_heads", "ssm_state_size", "linear_num_value_heads")


def parallel_mode(plan: Plan) -> str:
    """How the traced rank of `plan` runs: ``fsdp2`` (ZeRO-3 as FSDP2's ``fully_shard``: the plan's FSDP version 2,
    outside DeepSpeed's master regimes, no offload) or ``ddp`` (no ZeRO: torch's DistributedDataParallel) in a fake
    process group of the data-parallel degree (`vramplan.measure.trace_dist`); ``divided`` (DeepSpeed's ZeRO-1/2/3,
    FSDP1, which needs an accelerator device, tensor or pipeline parallel beside data parallel: the unsplit model's
    tensors divided by the degree, `shard_factors`); ``""`` for one data-parallel rank."""
    s = plan.strategy
    if plan.data_parallel <= 1:
        return ""
    if s.tensor_parallel > 1 or s.pipeline_parallel > 1 or s.expert_parallel > 1:
        return "divided"
    offload = s.offload_optimizer != "none" or s.offload_parameters != "none"
    if s.zero_stage == 3 and fsdp_sharded(plan) and s.fsdp_version != 1 and not offload:
        return "fsdp2"
    if s.zero_stage == 0:
        return "ddp"
    return "divided"


def not_traced(plan: Plan, raw: dict[str, Any] | None = None) -> tuple[str, ...]:
    """Each part of `plan` the trace does not run as planned, and what it does instead (`raw`: the config.json of a
    model without a formula family, traced in place of the plan's model)."""
    t, s = plan.training, plan.strategy
    out: list[str] = []
    if raw is not None:
        out.append(f"model_type {raw.get('model_type')}: no formula family, so no estimate beside the trace; LoRA "
                   "targets are named as LLaMA's (q_proj, ...)")  # fmt: skip
        if any(k in raw for k in MAMBA_KEYS):
            out.append(
                "state-space / linear-attention layers: transformers' PyTorch reference path is traced (mamba_ssm's "
                "and fla's fused CUDA kernels cannot run on fake tensors; they save less)"
            )
    dp, mode = plan.data_parallel, parallel_mode(plan)
    if mode == "fsdp2":
        out.append(
            f"ZeRO-3 as FSDP2 over {dp} ranks: rank 0 traced with fully_shard in a fake process group (collectives "
            "do nothing; NCCL's own buffers, outside the allocator, are the estimate's)"
        )
    elif mode == "ddp":
        out.append(
            f"data parallel over {dp} ranks: rank 0 traced with DDP in a fake process group (its buckets are not "
            "rebuilt after step 1; NCCL's own buffers are the estimate's)"
        )
    elif s.zero_stage and dp > 1:
        why = (
            "FSDP1 (FullyShardedDataParallel) needs an accelerator device"
            if s.fsdp_version == 1 and s.zero_stage >= 2
            else "DeepSpeed's engine cannot run on fake tensors"
        )
        out.append(
            f"ZeRO-{s.zero_stage} over {dp} ranks: {why}; one rank's view, each sharded tensor / {dp}, no collective "
            "runs (all-gathered parameters, buckets: the estimate's terms)"
        )
    elif dp > 1:
        out.append(f"data parallel over {dp} ranks: one rank traced; DDP's buckets: the estimate's terms")
    for name, value in (("tensor", s.tensor_parallel), ("pipeline", s.pipeline_parallel)):
        if value > 1:
            out.append(f"{name} parallel {value}: not traced (one unsplit model)")
    if s.sequence_parallel:
        out.append("sequence parallel: not traced")
    if s.expert_parallel > 1:
        out.append(f"expert parallel {s.expert_parallel}: not traced (every expert on one rank)")
    if s.offload_optimizer != "none" or s.offload_parameters != "none":
        out.append("DeepSpeed offload: not traced (states stay on the GPU in the trace)")
    if t.objective_spec.post_training:
        out.append(f"objective {t.objective}: a supervised step of the policy is traced (no generation, reference)")
    if t.regime not in WEIGHTS_AND_AUTOCAST and not (t.regime == "bf16-fsdp" and mode == "fsdp2"):
        out.append(f"precision {t.regime}: the fp32 master copy of DeepSpeed/FSDP is not built; bf16 weights traced")
    if t.method == "qlora" or t.quantization not in (None, "none"):
        out.append(
            f"quantized base ({t.base_quantization}): bitsandbytes has no fake-tensor kernels; a 16-bit base is "
            "traced and its parameters are the estimate's (marked)"
        )
    if t.method != "full" and t.lora_dtype != "fp32":
        out.append(f"adapters in {t.lora_dtype}: PEFT keeps them fp32 in the trace")
    if raw is None and plan.model.num_experts and s.experts == "loop":
        out.append(
            "experts loop: each expert's tokens come from nonzero (data-dependent sizes fake tensors lack); "
            "the grouped kernel is traced"
        )
    if t.optimizer not in OPTIMIZERS:
        out.append(f"optimizer {t.optimizer}: not in torch.optim; AdamW traced, its states are the estimate's (marked)")
    if s.gradient_checkpointing in ("selective", "op"):
        out.append(f"{s.gradient_checkpointing} checkpointing: not run by HF (whole blocks or nothing); none traced")
    if s.gradient_checkpointing == "full" and s.checkpoint_every > 1:
        out.append("checkpointing every k-th block: HF checkpoints every block")
    for flag, what in (
        (s.compile, "torch.compile (Triton kernels)"),
        (s.optimizer_in_backward, "the optimizer step in backward"),
        (s.activation_offload != "none", "activation offload"),
        (s.loss_chunks > 1, f"the loss in {s.loss_chunks} chunks"),
        (s.activation_compression != "none", "activation compression"),
        (s.fused_cross_entropy, "a fused cross-entropy kernel (Triton: Liger, Unsloth)"),
        (s.float8, "float8 linears (torchao)"),
    ):
        if flag:
            out.append(f"{what}: not run on fake tensors; the plain PyTorch path is traced")
    if importlib.util.find_spec("flash_attn") is None and s.attention == "flash":
        out.append("attention flash: PyTorch SDPA's flash kernel is traced (flash-attn's own package is not needed)")
    return tuple(out)


def shard_factors(plan: Plan) -> dict[str, int]:
    """The divisor of each traced role on one rank of a sharded data-parallel plan: optimizer states from ZeRO-1,
    gradients from ZeRO-2, parameters from ZeRO-3 / FSDP full sharding (`strategy.zero_stage`)."""
    dp, z = plan.data_parallel, plan.strategy.zero_stage
    if dp <= 1 or not z or parallel_mode(plan) != "divided":
        return {}
    out = {"optimizer_state": dp, "optimizer_temporary": dp}  # the step's temporaries are per shard too
    if z >= 2:
        out["gradient"] = dp
    if z >= 3:
        out["parameter"] = dp
    return out


def adjustments(plan: Plan, est: Any, by_role: dict[str, int]) -> tuple[tuple[str, int], ...]:
    """Parts of the peak taken from the estimate where the trace cannot run them (each named, its bytes added to
    the traced peaks): a quantized base's parameters, an optimizer torch.optim does not have, and the
    parameters ZeRO-3 / FSDP gathers at the estimate's peak, the communication buckets the allocator hands out
    (DeepSpeed's, DDP's)."""
    t = plan.training
    out: list[tuple[str, int]] = []
    if t.method == "qlora" or t.quantization not in (None, "none"):
        out.append(("quantized parameters (estimate)", est.largest.get("parameters", 0) - by_role.get("parameter", 0)))
    if t.optimizer not in OPTIMIZERS:
        traced = by_role.get("optimizer_state", 0)
        out.append((f"optimizer {t.optimizer} states (estimate)", est.peak.live.get("optimizer_states", 0) - traced))
    if parallel_mode(plan) in ("fsdp2", "ddp"):
        return tuple(out)  # the rank's all-gathers and buckets are traced
    gathered = est.peak.live.get("gathered_parameters", 0)
    if gathered:
        out.append(("gathered parameters (estimate)", gathered))
    for name in ("zero_buckets", "ddp_buckets"):
        if est.overhead_bytes.get(name):
            out.append((f"{name} (estimate)", est.overhead_bytes[name]))
    return tuple(out)
