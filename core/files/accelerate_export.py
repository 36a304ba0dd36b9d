"""An accelerate config YAML (``accelerate launch --config_file``) matching a plan, with what it cannot carry said
out loud: as comments at the top of the YAML and as `AccelerateExport.not_expressed` (the CLI's warning line).

Keys and values follow huggingface/accelerate 1.15: ``commands/config/config_args.py`` (``ClusterConfig``: its
fields are the top-level keys; an unknown key is refused), ``utils/launch.py`` ``prepare_multi_gpu_env`` (the
``fsdp_config`` keys become ``FSDP_*`` variables) and ``utils/dataclasses.py`` ``FullyShardedDataParallelPlugin``
(``fsdp_version`` 2 = ``fully_shard``, ``fsdp_reshard_after_forward`` true = FULL_SHARD / ZeRO-3, false =
SHARD_GRAD_OP / ZeRO-2; ``fsdp_offload_params`` = CPUOffload of parameters, gradients and the optimizer step).

The plan's sharding is written as FSDP2 (``fsdp_version: 2``, accelerate's recommended version); ZeRO 0 is DDP
(``MULTI_GPU``), or ``NO`` on one GPU. ``mixed_precision: bf16`` with full sharding is FSDP2's MixedPrecisionPolicy
over fp32 sharded parameters: the ``bf16-fsdp`` regime. `core.files.importers.accelerate` reads such a file back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vramplan.core.plan.describe import loading_settings, plan_title
from vramplan.core.plan.schema.plan import Plan

ACCELERATE_SOURCE = "huggingface/accelerate 1.15: commands/config/config_args.py, utils/launch.py, utils/dataclasses.py"


@dataclass(frozen=True)
class AccelerateExport:
    """The config, the plan settings it cannot express (`not_expressed`) and what the training script must do
    (`notes`)."""

    config: dict[str, Any]
    not_expressed: tuple[str, ...]
    notes: tuple[str, ...]
    title: str = ""

    def text(self) -> str:
        from vramplan.core.files.planfile import vramplan_version

        head = [
            f"# accelerate config for {self.title}" if self.title else "# accelerate config",
            f"# written by vramplan {vramplan_version()}; keys checked against {ACCELERATE_SOURCE}",
            "# use: accelerate launch --config_file THIS_FILE train.py",
        ]
        if self.not_expressed:
            head.append("# cannot express (the run will differ from the plan here):")
            head += [f"#   - {line}" for line in self.not_expressed]
        if self.notes:
            head.append("# set in the training script:")
            head += [f"#   - {line}" for line in self.notes]
        import yaml  # PyYAML here only: importing it took 12-17 ms of opening the export dialog

        return "\n".join(head) + "\n" + yaml.safe_dump(self.config, sort_keys=False, default_flow_style=False)

    def warning(self) -> str | None:
        """One line naming what the config cannot express (None when it expresses the whole plan)."""
        if not self.not_expressed:
            return None
        keys = "; ".join(item.split(":", 1)[0] for item in self.not_expressed)
        return f"the accelerate config cannot express: {keys} (see the comments at its top)"


def accelerate_config(plan: Plan) -> AccelerateExport:
    """The accelerate config for ``plan``: every plan setting is in the config, in `notes` (the script's: model,
    optimizer, batch sizes, peft) or in `not_expressed`."""
    lacks: list[str] = []
    notes: list[str] = []
    s, t, hw = plan.strategy, plan.training, plan.hardware
    config: dict[str, Any] = {"compute_environment": "LOCAL_MACHINE", "debug": False}
    fsdp = s.zero_stage >= 1
    if fsdp:
        config["distributed_type"] = "FSDP"
        config["fsdp_config"] = _fsdp(plan, lacks)
    else:
        config["distributed_type"] = "MULTI_GPU" if hw.total_gpus > 1 else "NO"
        if s.gradient_checkpointing != "none":  # no fsdp_config: checkpointing is the model's own
            notes.append(f"{s.gradient_checkpointing} activation checkpointing: model.gradient_checkpointing_enable()")
    config["mixed_precision"] = _mixed_precision(plan, fsdp, lacks)
    config.update(
        {
            "num_machines": hw.nodes,
            "num_processes": hw.total_gpus,
            "machine_rank": 0,
            "main_training_function": "main",
            "rdzv_backend": "static",
            "same_network": True,
            "use_cpu": False,
            "downcast_bf16": "no",
        }
    )
    if hw.nodes > 1:
        notes.append("multi-node: set machine_rank (and main_process_ip / main_process_port) on each node")
    if s.compile:
        config["dynamo_config"] = {"dynamo_backend": "INDUCTOR"}
        notes.append("dynamo_backend INDUCTOR compiles the whole model; the plan assumes per-block torch.compile")
    _unexpressed(plan, lacks)
    notes.append(
        f"per-device batch {t.micro_batch_size}, gradient accumulation {t.grad_accum_steps} "
        f"(Accelerator(gradient_accumulation_steps={t.grad_accum_steps})), sequences of {t.seq_len} tokens"
    )
    clip = f", clip gradients at {t.grad_clip} (accelerator.clip_grad_norm_)" if t.grad_clip else ""
    notes.append(f"optimizer {t.optimizer} ({t.optimizer_impl}){clip}: created in the script")
    if t.method != "full":
        quant = t.base_quantization
        base = f" on a {quant} base (bitsandbytes)" if quant != "none" else ""
        notes.append(f"{t.method} adapters (r={t.lora_rank}, {', '.join(t.lora_targets)}){base} come from peft")
        if quant in ("nf4", "fp4") and fsdp:
            notes.append(
                "QLoRA with FSDP: BitsAndBytesConfig(bnb_4bit_quant_storage=torch.bfloat16) so FSDP can shard it"
            )
    notes.append(f"load the model with {loading_settings(plan)}")
    return AccelerateExport(config, tuple(lacks), tuple(notes), plan_title(plan))


def _fsdp(plan: Plan, lacks: list[str]) -> dict[str, Any]:
    s = plan.strategy
    if s.zero_stage == 1:
        lacks.append(
            "strategy.zero_stage = 1: FSDP has no optimizer-only sharding; written as reshard_after_forward: false "
            "(SHARD_GRAD_OP, ZeRO-2: gradients sharded too)"
        )
    both_cpu = s.offload_optimizer == "cpu" and s.offload_parameters == "cpu"
    if not both_cpu and (s.offload_optimizer != "none" or s.offload_parameters != "none"):
        lacks.append(
            f"strategy.offload_optimizer = {s.offload_optimizer}, offload_parameters = {s.offload_parameters}: FSDP's "
            "CPUOffload moves parameters, gradients and the optimizer step to the host together, and never to NVMe; "
            "written as fsdp_offload_params: false"
        )
    mode = s.gradient_checkpointing
    if mode in ("selective", "op"):
        lacks.append(
            f"strategy.gradient_checkpointing = {mode}: accelerate's fsdp_activation_checkpointing checkpoints whole "
            "blocks (written as true)"
        )
    if s.checkpoint_every > 1:
        lacks.append(f"strategy.checkpoint_every = {s.checkpoint_every}: accelerate checkpoints every block")
    return {
        "fsdp_version": 2,
        "fsdp_reshard_after_forward": s.zero_stage == 3,
        "fsdp_offload_params": both_cpu,
        "fsdp_activation_checkpointing": mode != "none",
        "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "fsdp_state_dict_type": "SHARDED_STATE_DICT",
        "fsdp_cpu_ram_efficient_loading": True,
    }


def _mixed_precision(plan: Plan, fsdp: bool, lacks: list[str]) -> str:
    regime = plan.training.regime
    full_shard = fsdp and plan.strategy.zero_stage == 3
    if regime == "fp32":
        return "no"
    if regime == "bf16-fsdp":
        return "bf16"
    if regime in ("bf16-autocast", "fp16-autocast"):
        half = regime.split("-")[0]
        if full_shard:
            lacks.append(
                f"precision = {regime}: under full sharding accelerate's {half} mixed precision also gathers the "
                "parameters in 16 bit (MixedPrecisionPolicy: bf16-fsdp), not autocast over fp32 weights"
            )
        return half
    if regime == "bf16-pure":
        lacks.append(
            "precision = bf16-pure: no accelerate setting keeps the model and optimizer in bf16; load the model in "
            "bf16 (torch_dtype=torch.bfloat16) and keep mixed_precision: no (written so)"
        )
        return "no"
    half = regime.split("-")[0]  # bf16-master / fp16-master
    lacks.append(
        f"precision = {regime}: 16-bit weights with fp32 master weights is DeepSpeed's regime (export --format "
        f"deepspeed); written as mixed_precision: {half}"
    )
    return half


def _unexpressed(plan: Plan, lacks: list[str]) -> None:
    s = plan.strategy
    if s.tensor_parallel > 1:
        lacks.append(f"strategy.tensor_parallel = {s.tensor_parallel}: not written (accelerate's tp_config is not)")
    if s.pipeline_parallel > 1:
        lacks.append(f"strategy.pipeline_parallel = {s.pipeline_parallel}: accelerate's FSDP has no pipeline stages")
    if s.sequence_parallel:
        lacks.append("strategy.sequence_parallel = true: Megatron sequence parallelism has no accelerate FSDP key")
    if s.expert_parallel > 1:
        lacks.append(f"strategy.expert_parallel = {s.expert_parallel}: no accelerate key shards experts")
    stack = {
        "strategy.optimizer_in_backward": (s.optimizer_in_backward, "the optimizer step in backward is torchtune's"),
        "strategy.activation_offload": (
            s.activation_offload != "none",
            "activation offloading is a saved-tensors hook of the script (torchtune OffloadActivations)",
        ),
        "strategy.loss_chunks": (
            s.loss_chunks > 1,
            "a chunked loss is the model's (torchtune CEWithChunkedOutputLoss)",
        ),
        "strategy.float8": (s.float8, "Float8 linears come from torchao's convert_to_float8_training"),
        "strategy.fused_cross_entropy": (s.fused_cross_entropy, "a fused cross-entropy is the model's (e.g. Liger)"),
        "strategy.activation_compression": (s.activation_compression != "none", "activations are not compressed"),
    }
    for key, (on, why) in stack.items():
        if on:
            lacks.append(f"{key}: {why}")
