"""Which combinations of settings can work: every rule a valid plan obeys beyond the ranges of its fields, each
broken rule one `PlanError` naming the key to change (what a framework would refuse, or what cannot mean anything).
"""

from __future__ import annotations

from typing import Protocol

from vramplan.core.plan.architecture.config import ModelConfig
from vramplan.core.plan.architecture.families import FAMILIES
from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.helpers.errors import PlanError
from vramplan.core.plan.schema.hardware import HardwareConfig
from vramplan.core.plan.schema.objectives import OBJECTIVES
from vramplan.core.plan.schema.rl import RLConfig, check_rl, rl_settings
from vramplan.core.plan.schema.strategy import StrategyConfig
from vramplan.core.plan.schema.training import TrainingConfig


class PlanTables(Protocol):
    """What the rules read of a plan: its tables and its data-parallel size. A `core.plan.schema.plan.Plan` is one; the
    rules run while it validates, so this module does not import it."""

    @property
    def model(self) -> ModelConfig: ...
    @property
    def hardware(self) -> HardwareConfig: ...
    @property
    def training(self) -> TrainingConfig: ...
    @property
    def strategy(self) -> StrategyConfig: ...
    @property
    def rl(self) -> RLConfig: ...
    @property
    def data_parallel(self) -> int: ...


def check_combinations(p: PlanTables) -> None:
    """Every rule a valid plan obeys beyond its fields' own ranges; the first broken one is a `PlanError` naming
    the key to change."""
    _check_method(p)
    _check_parallel(p)
    _check_offload(p)
    _check_stack(p)


def _check_method(p: PlanTables) -> None:
    """What is trained: a 4-bit base for QLoRA, none for full fine-tuning, no adapters for pretraining, LoRA
    targets the model has, a sequence its learned positions hold, an optimizer PyTorch fuses."""
    t, m = p.training, p.model
    fam = FAMILIES[m.model_type]
    quant = t.base_quantization
    if t.method == "qlora" and quant not in ("nf4", "fp4"):
        raise PlanError(
            'qlora needs a 4-bit base (nf4 or fp4); use method = "lora" for an int8 or 16-bit base',
            "training.quantization",
        )
    if t.method != "full" and t.objective_spec.from_scratch:
        raise PlanError('pretraining trains every weight from scratch: method = "full"', "training.method")
    if t.method == "full" and quant != "none":
        raise PlanError(
            "full fine-tuning trains every weight and cannot keep a quantized base; use lora or qlora",
            "training.quantization",
        )
    if t.method != "full":
        roles = m.arch().roles()
        for target in t.lora_targets:
            if target == "all-linear" or target in roles:
                continue
            if target in ("q", "k", "v") and fam.fused_qkv:
                why = 'one fused query/key/value projection: target "qkv"'
            elif target == "qkv":
                why = "separate q, k, v projections: target them"
            elif target in ("gate", "up") and fam.mlp == "gated_fused":
                why = 'one fused gate/up projection: target "gate_up"'
            elif target == "gate_up":
                why = "no fused gate_up projection"
            else:
                why = f"no {target} projection (its MLP is up -> {m.arch().act} -> down)"
            raise PlanError(
                f"{m.model_type} has {why} (its block: {', '.join(roles)}, or all-linear)", "training.lora_targets"
            )
    if t.vision_tower == "trained" and (t.method != "full" or not m.vision_params):
        why = "needs full fine-tuning" if m.vision_params else "needs a multimodal model (model.vision_params)"
        raise PlanError(f"a trained vision tower {why}", "training.vision_tower")
    positions = m.arch().positions
    if positions and t.seq_len > positions:
        raise PlanError(
            f"{m.model_type} has {positions} learned positions (max_position_embeddings): "
            f"seq_len {t.seq_len} does not fit",
            "training.seq_len",
        )
    if t.optimizer_impl == "fused" and t.optimizer not in ("adamw", "sgd", "sgd-momentum"):
        raise PlanError(f"PyTorch has no fused {t.optimizer}; use auto, foreach or for-loop", "training.optimizer_impl")


def _check_parallel(p: PlanTables) -> None:
    """Tensor, pipeline, expert and sequence parallelism: degrees the model and the GPUs divide into."""
    s, m = p.strategy, p.model
    tp, pp = s.tensor_parallel, s.pipeline_parallel
    total = p.hardware.total_gpus
    if total % (tp * pp):
        raise PlanError(
            f"{total} GPUs are not divisible by tensor_parallel x pipeline_parallel = {tp * pp}",
            "strategy.tensor_parallel" if tp > 1 else "strategy.pipeline_parallel",
        )
    if tp > 1 and (m.num_attention_heads % tp or m.num_key_value_heads % tp):
        raise PlanError(
            f"tensor_parallel={tp} must divide num_attention_heads={m.num_attention_heads} and "
            f"num_key_value_heads={m.num_key_value_heads} (Megatron splits heads across ranks)",
            "strategy.tensor_parallel",
        )
    if pp > m.num_hidden_layers:
        raise PlanError(
            f"pipeline_parallel={pp} exceeds num_hidden_layers={m.num_hidden_layers}", "strategy.pipeline_parallel"
        )
    ep = s.expert_parallel
    if ep > 1:
        moe = m.arch().moe
        if moe is None:
            raise PlanError(f"{m.model_type} has no routed experts to shard", "strategy.expert_parallel")
        if moe.n_experts % ep:
            raise PlanError(
                f"expert_parallel={ep} must divide the {moe.n_experts} routed experts", "strategy.expert_parallel"
            )
        dp = total // (tp * pp)
        if dp % ep:
            raise PlanError(
                f"expert_parallel={ep} must divide the data-parallel size {dp} (expert ranks are data-parallel "
                "ranks: DeepSpeed-MoE, Megatron-Core)",
                "strategy.expert_parallel",
            )
    if s.sequence_parallel and tp == 1:
        raise PlanError(
            "sequence parallelism splits along the tensor-parallel group: set tensor_parallel > 1",
            "strategy.sequence_parallel",
        )
    if s.zero_stage >= 2 and pp > 1:
        raise PlanError(
            "ZeRO-2/3 cannot be combined with pipeline parallelism (DeepSpeed's PipelineEngine supports ZeRO-1 only)",
            "strategy.zero_stage",
        )


def _check_offload(p: PlanTables) -> None:
    """DeepSpeed's offload: what each needs of ZeRO."""
    s = p.strategy
    if s.offload_parameters != "none" and s.zero_stage != 3:
        raise PlanError("offload_parameters needs ZeRO-3 (zero_stage = 3)", "strategy.offload_parameters")
    if s.offload_optimizer == "cpu" and s.zero_stage == 0:
        raise PlanError(
            "offload_optimizer needs ZeRO (zero_stage >= 1; DeepSpeed ZeRO-Offload)", "strategy.offload_optimizer"
        )
    if s.offload_optimizer == "nvme" and s.zero_stage != 3:
        raise PlanError("NVMe offload needs ZeRO-3 (ZeRO-Infinity)", "strategy.offload_optimizer")
    if s.offload_parameters != "none" and s.offload_optimizer == "none":
        raise PlanError(
            "offloading parameters without the optimizer is not a DeepSpeed configuration; set offload_optimizer too",
            "strategy.offload_parameters",
        )


def _check_stack(p: PlanTables) -> None:
    """The techniques of today's training stacks (torchtune, torchtitan, torchao, bitsandbytes): what each needs."""
    t, s = p.training, p.strategy
    if t.regime == "bf16-fsdp" and s.zero_stage != 3:
        raise PlanError(
            "bf16-fsdp is FSDP2's MixedPrecisionPolicy over fully_shard'ed fp32 parameters: set zero_stage = 3",
            "training.precision",
        )
    if s.checkpoint_every > 1 and s.gradient_checkpointing == "none":
        raise PlanError(
            "checkpoint_every picks which blocks are checkpointed: set gradient_checkpointing too",
            "strategy.checkpoint_every",
        )
    if s.checkpoint_every > p.model.num_hidden_layers:
        raise PlanError(
            f"checkpoint_every={s.checkpoint_every} exceeds num_hidden_layers={p.model.num_hidden_layers}",
            "strategy.checkpoint_every",
        )
    if s.optimizer_in_backward:
        why = ""
        if t.grad_accum_steps > 1:
            why = "gradient accumulation (each gradient is applied and freed as soon as it exists)"
        elif t.grad_clip:
            why = "gradient clipping (the global norm is only known after the whole backward)"
        elif s.offload_optimizer != "none":
            why = "an offloaded optimizer"
        elif s.pipeline_parallel > 1:
            why = "pipeline parallelism"
        if why:
            raise PlanError(
                f"the optimizer step in backward (torchtune optimizer_in_bwd) is not compatible with {why}",
                "strategy.optimizer_in_backward",
            )
    if s.float8:
        gpu = presets.gpu(p.hardware.gpu)
        if not gpu.fp8_tflops:
            raise PlanError(
                f"{gpu.name} has no fp8 tensor cores (Ada, Hopper, Blackwell or MI300 and newer): torchao's Float8 "
                "linears need them",
                "strategy.float8",
            )
        if t.method != "full":
            raise PlanError(
                "torchao's Float8 training converts trained linears; a frozen LoRA/QLoRA base is not converted",
                "strategy.float8",
            )
        if t.regime == "fp32":
            raise PlanError(
                "Float8 linears compute in fp8 from a 16-bit model: choose a 16-bit precision", "strategy.float8"
            )
    if t.optimizer.startswith("paged-") and s.offload_optimizer != "none":
        raise PlanError(
            "a paged optimizer already lets its states spill to host memory: do not offload it as well",
            "training.optimizer",
        )
    if t.kbit_prepare and t.base_quantization == "none":
        raise PlanError(
            "prepare_model_for_kbit_training is for a quantized base (quantization = int8, nf4 or fp4)",
            "training.kbit_prepare",
        )
    check_rl_plan(p)


def check_rl_plan(p: PlanTables) -> None:
    """The rules of a DPO/GRPO/PPO plan that involve other tables: the keys' objective (`check_rl`), GRPO's
    groups (GRPOConfig: the generation batch, ``per_device_train_batch_size x processes x steps_per_generation``,
    must be divisible by ``num_generations``), the models' learned positions, vLLM's tensor parallelism and the
    PPO models' presets."""
    t, s = p.training, p.strategy
    adapters = t.method != "full"
    check_rl(t.objective, p.rl, adapters=adapters)
    spec = OBJECTIVES[t.objective]
    if not spec.post_training:
        return
    r = rl_settings(t.objective, p.rl, adapters=adapters, zero_stage=s.zero_stage)
    if spec.groups:
        completions = t.micro_batch_size * p.data_parallel * t.grad_accum_steps
        if completions % r.num_generations:
            raise PlanError(
                f"GRPO's batch of {completions} completions (micro_batch_size x data-parallel GPUs x grad_accum_steps) "
                f"is not a whole number of groups of num_generations = {r.num_generations}",
                "training.micro_batch_size",
            )
    positions = p.model.arch().positions
    if positions and r.seq_len > positions:
        where = "rl.max_completion_length" if spec.generates else "rl.max_length"
        raise PlanError(f"{r.seq_len} tokens do not fit {positions} learned positions", where)
    if r.generation == "vllm-colocate" and p.hardware.total_gpus % r.vllm_tp:
        raise PlanError(
            f"colocated vLLM engines of {r.vllm_tp} GPUs must divide the {p.hardware.total_gpus} training GPUs",
            "rl.vllm_tensor_parallel_size",
        )
    for key in ("reward_model", "value_model"):
        name = getattr(p.rl, key)
        if name is not None:
            try:
                presets.model_config({"preset": name})
            except PlanError as exc:  # a misspelt preset: its close matches, at this key
                raise PlanError(exc.message, f"rl.{key}") from None
