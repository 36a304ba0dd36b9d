"""What each training framework runs, so the fit advisor suggests only plans the user's framework can express
(``vramplan fit --framework``): HF Trainer + DeepSpeed, PyTorch FSDP (HF Trainer / Accelerate), Megatron-LM.

Sources: DeepSpeed's config keys and AutoTP training (ZeRO 0-2 only; no pipeline stages or Megatron sequence
parallelism in a JSON config: `core.files.deepspeed_export`); PyTorch FSDP's sharding strategies (NO_SHARD / DDP,
SHARD_GRAD_OP = ZeRO-2, FULL_SHARD = ZeRO-3; CPUOffload of parameters, no NVMe, no ZeRO-1); Megatron-LM's
arguments (--tensor/--pipeline-model-parallel-size, --sequence-parallel, --recompute-granularity
selective/full, --use-distributed-optimizer = ZeRO-1; no parameter sharding, no offload, no PEFT adapters).
"""

from __future__ import annotations

from vramplan.core.plan.schema.plan import Plan

FRAMEWORKS: dict[str, str] = {
    "all": "any framework",
    "hf-deepspeed": "HF Trainer + DeepSpeed",
    "fsdp": "PyTorch FSDP (HF Trainer / Accelerate)",
    "megatron": "Megatron-LM",
}


def unsupported(plan: Plan, framework: str) -> str:
    """Why ``framework`` cannot run ``plan`` as planned ("" when it can, and always for ``all``)."""
    s, t = plan.strategy, plan.training
    if framework == "hf-deepspeed":
        if s.pipeline_parallel > 1:
            return "pipeline stages need DeepSpeed's PipelineModule, not HF Trainer"
        if s.sequence_parallel:
            return "Megatron sequence parallelism has no DeepSpeed key"
        if s.tensor_parallel > 1 and s.zero_stage == 3:
            return "AutoTP training combines with ZeRO 0-2 only"
        if s.gradient_checkpointing in ("selective", "op"):
            return f"{s.gradient_checkpointing} recomputation is not a DeepSpeed/HF setting"
    elif framework == "fsdp":
        if s.zero_stage == 1:
            return "FSDP has no optimizer-only sharding (ZeRO-1)"
        if s.tensor_parallel > 1 or s.pipeline_parallel > 1 or s.sequence_parallel:
            return "HF Trainer's FSDP has no tensor or pipeline parallelism"
        if "nvme" in (s.offload_optimizer, s.offload_parameters):
            return "FSDP offloads to CPU only"
        if s.offload_optimizer != s.offload_parameters:
            return "FSDP's CPUOffload moves parameters, gradients and optimizer state together"
    elif framework == "megatron":
        if s.zero_stage >= 2:
            return "Megatron shards the optimizer only (--use-distributed-optimizer, ZeRO-1)"
        if s.offload_optimizer != "none" or s.offload_parameters != "none":
            return "Megatron does not offload"
        if t.method != "full":
            return "Megatron-LM trains without PEFT adapters"
        if t.optimizer not in ("adamw", "sgd", "sgd-momentum"):
            return f"{t.optimizer} is not a Megatron-LM optimizer (adam, sgd)"
        if s.gradient_checkpointing == "op":
            return "per-op checkpointing is torchtitan's"
    elif framework != "all":
        raise ValueError(f"unknown framework {framework!r}; one of {', '.join(FRAMEWORKS)}")
    return ""
