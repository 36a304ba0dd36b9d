"""A DeepSpeed JSON config matching a plan, and what it cannot carry, said out loud.

Keys and value types follow DeepSpeed's own definitions, checked against deepspeedai/DeepSpeed at v0.19.6
(commit edaa722):

- ``deepspeed/runtime/config.py`` (`DeepSpeedConfig._initialize_params`, `_batch_assertion`: ``train_batch_size ==
  train_micro_batch_size_per_gpu * gradient_accumulation_steps * data-parallel world size``; unknown top-level
  keys are ignored, so ``"_vramplan"`` below is safe);
- ``deepspeed/runtime/constants.py`` (``gradient_clipping`` float, default 1.0 since v0.19.3: written only when the
  plan sets one;
  ``torch_autocast`` {enabled, dtype});
- ``deepspeed/runtime/precision_config.py`` (``bf16``: enabled, bf16_master_weights_and_grads,
  bf16_optimizer_states; ``fp16``: enabled, loss_scale (float, 0 = dynamic), initial_scale_power,
  loss_scale_window, hysteresis, consecutive_hysteresis, min_loss_scale);
- ``deepspeed/runtime/zero/config.py`` and ``zero/offload_config.py`` (``zero_optimization``: stage, overlap_comm
  (None -> on for stage 3 only), contiguous_gradients, reduce_scatter, reduce_bucket_size, allgather_bucket_size,
  stage3_* aliases, offload_optimizer/offload_param {device: none|cpu|nvme, nvme_path, pin_memory});
- ``deepspeed/runtime/activation_checkpointing/config.py`` (``activation_checkpointing`` booleans);
- ``deepspeed/runtime/tensor_parallel/config.py`` (``tensor_parallel.autotp_size``: AutoTP training, v0.16.4+);
- ``deepspeed/runtime/engine.py`` `_configure_basic_optimizer` (``optimizer.type``: Adam/AdamW/Lion natively,
  anything else from ``torch.optim``; ``torch_adam``) and `_do_optimizer_sanity_check`
  (``zero_allow_untested_optimizer``);
- ``docs/_pages/config-json.md`` (the same keys, documented).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from vramplan.core.memory.overhead import zero_bucket_elements
from vramplan.core.plan.describe import loading_settings
from vramplan.core.plan.helpers.units import MiB
from vramplan.core.plan.schema.plan import Plan
from vramplan.core.plan.schema.precision import REGIMES, resolve_impl

DS_SOURCE = "deepspeedai/DeepSpeed v0.19.6: deepspeed/runtime/config.py, zero/config.py, docs/_pages/config-json.md"
NVME_PATH = "/local_nvme"  # DeepSpeed's documentation example; the plan has no path


@dataclass(frozen=True)
class DeepSpeedExport:
    """The config, plan settings it cannot express (`not_expressed`), and what must be done in code (`notes`)."""

    config: dict[str, Any]
    not_expressed: tuple[str, ...]
    notes: tuple[str, ...]

    def text(self) -> str:
        return json.dumps(self.config, indent=2) + "\n"

    def warning(self) -> str | None:
        """One line naming what the config cannot express (None when it expresses the whole plan)."""
        if not self.not_expressed:
            return None
        keys = "; ".join(item.split(":", 1)[0] for item in self.not_expressed)
        return f'the DeepSpeed config cannot express: {keys} (see "_vramplan" in it)'


class _Builder:
    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.config: dict[str, Any] = {}
        self.not_expressed: list[str] = []
        self.notes: list[str] = []

    def lacks(self, what: str) -> None:
        self.not_expressed.append(what)

    def note(self, what: str) -> None:
        self.notes.append(what)


def deepspeed_config(plan: Plan) -> DeepSpeedExport:
    """The DeepSpeed config for ``plan``. Every plan setting is either in the config, in `notes` (set in code:
    the model, peft, the loss), or in `not_expressed` (DeepSpeed has no such mode)."""
    b = _Builder(plan)
    t = plan.training
    b.config.update(
        {
            "train_batch_size": t.micro_batch_size * t.grad_accum_steps * plan.data_parallel,
            "train_micro_batch_size_per_gpu": t.micro_batch_size,
            "gradient_accumulation_steps": t.grad_accum_steps,
        }
    )
    if t.grad_clip is not None:
        b.config["gradient_clipping"] = float(t.grad_clip)
    else:  # not 0.0 (clipping off): the plan says nothing, so DeepSpeed's or the trainer's default applies
        b.note(
            "no gradient_clipping: the plan sets no training.grad_clip, so DeepSpeed's default applies (1.0 since "
            "v0.19.3, 0 = off before; HF Trainer passes its max_grad_norm)"
        )
    _precision(b)
    _optimizer(b)
    _zero(b)
    _checkpointing(b)
    _parallelism(b)
    _model_side(b)
    from vramplan.core.files.planfile import vramplan_version

    b.config["_vramplan"] = {
        "generated_by": f"vramplan {vramplan_version()}",
        "keys_checked_against": DS_SOURCE,
        "not_expressed": b.not_expressed,
        "notes": b.notes,
    }
    return DeepSpeedExport(b.config, tuple(b.not_expressed), tuple(b.notes))


def _precision(b: _Builder) -> None:
    t, z = b.plan.training, b.plan.strategy.zero_stage
    p = t.regime
    off = {"enabled": False}
    if p == "fp32":
        b.config["fp16"], b.config["bf16"] = off, off
    elif p == "bf16-master":
        b.config["bf16"] = {"enabled": True}
    elif p == "bf16-fsdp":
        b.config["bf16"] = {"enabled": True}
        b.lacks(
            "precision = bf16-fsdp (FSDP2 MixedPrecisionPolicy: fp32 sharded weights and gradients, fp32 gradient "
            "reduction): DeepSpeed bf16 keeps bf16 weights and gradients beside fp32 master weights (the same 16 "
            "bytes per parameter, bf16 reduction)"
        )
    elif p == "bf16-pure":
        if z >= 1:
            b.config["bf16"] = {
                "enabled": True,
                "bf16_master_weights_and_grads": True,
                "bf16_optimizer_states": True,
            }
            b.note("bf16_master_weights_and_grads / bf16_optimizer_states need DeepSpeed >= 0.18.3")
        else:
            b.config["bf16"] = {"enabled": True}
            b.lacks(
                "precision = bf16-pure without ZeRO: DeepSpeed keeps bf16 master weights and optimizer state only "
                "with ZeRO 1-3 (bf16_master_weights_and_grads); its plain bf16 mode keeps fp32 master weights and "
                "state, 10 more bytes per parameter than planned"
            )
    elif p == "fp16-master":
        b.config["fp16"] = {"enabled": True, **_loss_scaling(b)}
    else:  # bf16-autocast / fp16-autocast: fp32 model, torch.autocast matmuls
        half = REGIMES[p].half
        b.config["torch_autocast"] = {"enabled": True, "dtype": "bfloat16" if half == "bf16" else "float16"}
        b.config["fp16"], b.config["bf16"] = off, off
        b.note("torch_autocast needs DeepSpeed >= 0.17.2 (older versions: run the model under torch.autocast)")
        if half == "fp16" and t.loss_scaling != "dynamic":
            b.lacks(
                f"training.loss_scaling = {t.loss_scaling} with fp16-autocast: DeepSpeed's torch_autocast always "
                "scales the loss dynamically (torch.amp.GradScaler)"
            )


def _loss_scaling(b: _Builder) -> dict[str, Any]:
    mode = b.plan.training.loss_scaling
    if mode == "dynamic":
        return {
            "loss_scale": 0.0,
            "initial_scale_power": 16,
            "loss_scale_window": 1000,
            "hysteresis": 2,
            "consecutive_hysteresis": False,
            "min_loss_scale": 1,
        }
    if mode == "static":
        b.note("fp16.loss_scale = 65536.0 (2^16) is a placeholder: the plan asks for a static scale without a value")
        return {"loss_scale": 65536.0}
    b.note("fp16.loss_scale = 1.0: a static scale of 1, i.e. no loss scaling (training.loss_scaling = none)")
    return {"loss_scale": 1.0}


def _optimizer(b: _Builder) -> None:
    t, s = b.plan.training, b.plan.strategy
    # "auto": HF Trainer / Accelerate fill it from TrainingArguments (learning_rate, weight_decay)
    params: dict[str, Any] = {"lr": t.learning_rate if t.learning_rate is not None else "auto", "weight_decay": "auto"}
    b.note(
        'optimizer.params "auto" values are filled by HF Trainer / Accelerate from TrainingArguments; with '
        "deepspeed.initialize directly, replace them with numbers"
    )
    offloaded = s.offload_optimizer != "none"
    impl = resolve_impl(t.optimizer_impl, REGIMES[t.regime])
    untested = False  # ZeRO accepts only its tested optimizers without zero_allow_untested_optimizer
    if t.optimizer == "adamw":
        if impl != "fused" and not offloaded:
            params["torch_adam"] = True  # torch.optim.AdamW rather than DeepSpeed's FusedAdam
            if impl == "for-loop":
                params["foreach"] = False
        name = "AdamW"
    elif t.optimizer == "lion":
        name = "Lion"
    elif t.optimizer in ("sgd", "sgd-momentum"):
        name, untested = "SGD", True
        if t.optimizer == "sgd-momentum":
            params["momentum"] = 0.9
            b.note("optimizer.params.momentum = 0.9 is a placeholder: the plan gives no momentum value")
        if impl in ("foreach", "for-loop", "fused"):
            params["foreach" if impl != "fused" else "fused"] = impl != "for-loop"
    elif t.optimizer == "adafactor":
        name, untested = "Adafactor", True
        b.note("optimizer.type Adafactor is torch.optim.Adafactor (PyTorch >= 2.5)")
    else:  # bitsandbytes: adamw-8bit, paged-adamw, paged-adamw-8bit
        cls = {"adamw-8bit": "AdamW8bit", "paged-adamw": "PagedAdamW", "paged-adamw-8bit": "PagedAdamW8bit"}
        b.lacks(
            f"training.optimizer = {t.optimizer}: bitsandbytes' {cls.get(t.optimizer, t.optimizer)} is not a "
            "DeepSpeed optimizer; create it in code and pass it to deepspeed.initialize(optimizer=...)"
        )
        if s.zero_stage:
            b.config["zero_allow_untested_optimizer"] = True
        return
    b.config["optimizer"] = {"type": name, "params": params}
    if untested and s.zero_stage:
        b.config["zero_allow_untested_optimizer"] = True
    if untested and offloaded:
        b.config["zero_force_ds_cpu_optimizer"] = False  # DeepSpeed's CPU optimizers are Adam, Adagrad, Lion


def _zero(b: _Builder) -> None:
    plan = b.plan
    s, h = plan.strategy, plan.model.hidden_size
    z = s.zero_stage
    zero: dict[str, Any] = {"stage": z}
    if z >= 1:
        bucket = zero_bucket_elements(plan)
        zero.update(
            {
                "overlap_comm": z == 3,  # DeepSpeed's own default; the estimate counts 2 buckets with it, 1 without
                "contiguous_gradients": True,
                "reduce_scatter": True,
                "reduce_bucket_size": bucket,
            }
        )
        if z <= 2:
            zero["allgather_bucket_size"] = bucket
        else:
            zero.update(
                {
                    "stage3_prefetch_bucket_size": int(0.9 * h * h),
                    "stage3_param_persistence_threshold": 10 * h,
                    "stage3_max_live_parameters": 1_000_000_000,
                    "stage3_max_reuse_distance": 1_000_000_000,
                    # save a consolidated 16-bit model (HF save_model), not only the sharded ZeRO checkpoint
                    "stage3_gather_16bit_weights_on_model_save": True,
                }
            )
        grad_bytes = REGIMES[plan.training.regime].grad_bytes
        b.note(
            f"bucket sizes: hidden_size^2 = {bucket:,} elements ({bucket * grad_bytes / MiB:.0f} MiB of gradients "
            "per bucket), as HF Trainer's 'auto' and the estimate's overhead assume, instead of DeepSpeed's 5e8 "
            f"({5e8 * grad_bytes / MiB:.0f} MiB); overhead.zero_bucket_elements overrides it"
            if plan.overhead.zero_bucket_elements is None
            else f"bucket sizes: {bucket:,} elements from overhead.zero_bucket_elements"
        )
    elif plan.data_parallel > 1 and not plan.overhead.ddp_gradient_as_bucket_view:
        b.note(
            "ZeRO stage 0: DeepSpeed all-reduces gradients in its own flattened buffers (engine.allreduce_gradients),"
            " not torch DDP's buckets, so the estimate's ddp_buckets term (a full gradient copy) is an upper bound"
        )
    if s.offload_optimizer != "none":
        zero["offload_optimizer"] = _offload(b, s.offload_optimizer)
    if s.offload_parameters != "none":
        zero["offload_param"] = _offload(b, s.offload_parameters)
    b.config["zero_optimization"] = zero


def _offload(b: _Builder, device: str) -> dict[str, Any]:
    out: dict[str, Any] = {"device": device, "pin_memory": True}
    if device == "nvme":
        out["nvme_path"] = NVME_PATH
        if not any("nvme_path" in n for n in b.notes):
            b.note(f"nvme_path = {NVME_PATH} is a placeholder: point it at the node's NVMe mount")
    return out


def _checkpointing(b: _Builder) -> None:
    mode = b.plan.strategy.gradient_checkpointing
    if mode == "none":
        return
    b.config["activation_checkpointing"] = {
        "partition_activations": False,
        "cpu_checkpointing": False,
        "contiguous_memory_optimization": False,
        "synchronize_checkpoint_boundary": False,
        "profile": False,
    }
    if mode == "full":
        b.note(
            "activation_checkpointing configures deepspeed.checkpointing.checkpoint; the model must still "
            "checkpoint every block (HF: model.gradient_checkpointing_enable())"
        )
    elif mode == "op":
        b.lacks(
            "strategy.gradient_checkpointing = op: torchtitan's per-op selective checkpointing is a "
            "torch.utils.checkpoint policy (create_selective_checkpoint_contexts), not a DeepSpeed setting"
        )
    else:
        b.lacks(
            "strategy.gradient_checkpointing = selective: DeepSpeed has no selective recomputation (Megatron's "
            "--recompute-granularity selective); its checkpointing recomputes whole blocks"
        )
    if b.plan.strategy.checkpoint_every > 1:
        b.lacks(
            f"strategy.checkpoint_every = {b.plan.strategy.checkpoint_every}: which blocks are checkpointed is "
            "the model's choice (wrap every k-th block), not DeepSpeed's"
        )


def _parallelism(b: _Builder) -> None:
    plan = b.plan
    s = plan.strategy
    if s.tensor_parallel > 1:
        b.config["tensor_parallel"] = {"autotp_size": s.tensor_parallel}
        b.note(
            f"tensor_parallel.autotp_size = {s.tensor_parallel}: DeepSpeed AutoTP training (>= 0.16.4) splits "
            "each Linear like Megatron's tensor parallelism, which the estimate models"
        )
        if s.zero_stage == 3:
            b.lacks(
                f"strategy.zero_stage = 3 with tensor_parallel = {s.tensor_parallel}: DeepSpeed's AutoTP training "
                "combines with ZeRO stages 0-2 only (v0.16.4 to at least v0.19.6, tutorials/autotp-training); "
                "use zero_stage = 1 or 2 with AutoTP, or Megatron/FSDP for TP with sharded parameters"
            )
    if s.sequence_parallel:
        b.lacks(
            "strategy.sequence_parallel = true: Megatron sequence parallelism has no DeepSpeed config key "
            "(DeepSpeed-Ulysses splits the sequence differently)"
        )
    if s.pipeline_parallel > 1:
        b.lacks(
            f"strategy.pipeline_parallel = {s.pipeline_parallel}: the JSON cannot carry pipeline stages; wrap "
            f"the model as deepspeed.pipe.PipelineModule(..., num_stages={s.pipeline_parallel}) for DeepSpeed's "
            "pipeline engine"
        )
    if s.tensor_parallel * s.pipeline_parallel > 1:
        b.note(
            f"train_batch_size counts data-parallel ranks only: {plan.hardware.total_gpus} GPUs / (TP "
            f"{s.tensor_parallel} x PP {s.pipeline_parallel}) = {plan.data_parallel}"
        )


def _model_side(b: _Builder) -> None:
    plan = b.plan
    t, s = plan.training, plan.strategy
    if s.activation_compression != "none":
        b.lacks(
            f"strategy.activation_compression = {s.activation_compression}: DeepSpeed does not compress saved "
            "activations"
        )
    if t.method != "full":
        quant = t.base_quantization
        base = f" on a {quant} base (bitsandbytes)" if quant != "none" else ""
        b.note(f"{t.method} adapters (r={t.lora_rank}, {', '.join(t.lora_targets)}){base} come from peft, not here")
        if quant in ("nf4", "fp4") and s.zero_stage == 3:
            b.note(
                "QLoRA with ZeRO-3: set BitsAndBytesConfig(bnb_4bit_quant_storage=torch.bfloat16) (the dtype of "
                "the other weights) so ZeRO-3 can shard the 4-bit weights (PEFT's DeepSpeed guide)"
            )
    b.note(f"load the model with {loading_settings(plan)}")
    if s.fused_cross_entropy:
        b.note("fused cross-entropy (strategy.fused_cross_entropy) is the model's loss (e.g. Liger), not DeepSpeed's")
    stack = {
        "strategy.compile": (s.compile, "torch.compile is the script's (model.compile() per block); DeepSpeed's "
                             "compile key wraps the whole engine"),
        "strategy.optimizer_in_backward": (s.optimizer_in_backward, "DeepSpeed steps the optimizer after backward"),
        "strategy.activation_offload": (s.activation_offload != "none", "torchtune's activation offloading is a "
                                        "saved-tensors hook, not a DeepSpeed setting (cpu_checkpointing moves "
                                        "checkpoints of deepspeed.checkpointing only)"),
        "strategy.loss_chunks": (s.loss_chunks > 1, "a chunked loss is the model's (torchtune "
                                 "CEWithChunkedOutputLoss)"),
        "strategy.float8": (s.float8, "Float8 linears come from torchao's convert_to_float8_training"),
    }  # fmt: skip
    for key, (on, why) in stack.items():
        if on:
            b.lacks(f"{key}: {why}")
