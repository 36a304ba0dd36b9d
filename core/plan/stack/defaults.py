"""What each stack does by default (`STACK_DEFAULTS`): one row per default of one (framework, version range), with
the framework file it was read from, and the choices they make for a plan's data (`stack_choices`; those that
matter to a plan: `core.plan.resolved.shown_choices`). The
``[stack]`` table itself and the row's record are `core.plan.stack.config`; ``docs/stacks.md`` is rendered from these
rows (`core.files.docpages`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from vramplan.core.plan.helpers.memo import memoised
from vramplan.core.plan.stack.config import FRAMEWORKS, HF_FAMILY, StackConfig, StackDefault

ALL = FRAMEWORKS
NATIVE_CKPT = ("torchtune", "torchtitan", "litgpt")

# One row per (key, framework, version range); the first match wins. Sources name the file and what it does.
STACK_DEFAULTS: tuple[StackDefault, ...] = (
    # -- gradient checkpointing: reentrant or not --------------------------------------------------------------
    StackDefault(
        "strategy.checkpoint_impl",
        "reentrant",
        ALL,
        "peft/utils/other.py prepare_model_for_kbit_training: gradient_checkpointing_kwargs None -> {}, and "
        "torch/utils/checkpoint.py falls back to use_reentrant=True",
        when=(("training.kbit_prepare", (True,)),),
    ),
    StackDefault(
        "strategy.checkpoint_impl",
        "non-reentrant",
        NATIVE_CKPT,
        "torch/distributed/algorithms/_checkpoint/checkpoint_wrapper.py checkpoint_wrapper(checkpoint_impl="
        "CheckpointImpl.NO_REENTRANT), which torchtune (training/memory.py set_activation_checkpointing), torchtitan "
        "(activation checkpointing's ptd_checkpoint_wrapper) and Lightning's FSDPStrategy apply per block",
    ),
    StackDefault(
        "strategy.checkpoint_impl",
        "reentrant",
        ("axolotl", "llamafactory"),
        'axolotl src/axolotl/core/builders (SFT): gradient_checkpointing_kwargs defaults to {"use_reentrant": True}; '
        "LLaMA-Factory model/model_utils/checkpointing.py: use_reentrant_gc defaults to True",
    ),
    StackDefault(
        "strategy.checkpoint_impl",
        "reentrant",
        ("trl",),
        "trl/trainer/sft_trainer.py SFTTrainer.__init__ (0.27+): PEFT under DeepSpeed ZeRO-3 forces "
        '{"use_reentrant": True}',
        package="trl",
        since=(0, 27),
        when=(("strategy.zero_stage", (3,)), ("training.method", ("lora", "qlora"))),
    ),
    StackDefault(
        "strategy.checkpoint_impl",
        "non-reentrant",
        ("trl",),
        "trl/trainer/sft_trainer.py (0.27+; sft_config.py __post_init__ in 0.27): gradient_checkpointing_kwargs"
        '.setdefault("use_reentrant", False)',
        package="trl",
        since=(0, 27),
    ),
    StackDefault(
        "strategy.checkpoint_impl",
        "reentrant",
        ("hf-trainer", "trl", "accelerate", "axolotl", "llamafactory"),
        "transformers modeling_utils.py gradient_checkpointing_enable: kwargs None -> "
        '{"use_reentrant": True} (4.38-4.57; 4.35-4.37 and Trainer before 4.45 pass {}, and torch/utils/'
        "checkpoint.py falls back to use_reentrant=True)",
        package="transformers",
        before=(5,),
    ),
    StackDefault(
        "strategy.checkpoint_impl",
        "non-reentrant",
        ("hf-trainer", "trl", "accelerate", "axolotl", "llamafactory"),
        "transformers modeling_utils.py (5.0+) gradient_checkpointing_enable / activation_checkpointing_enable: "
        'kwargs None -> {"use_reentrant": False}',
    ),
    StackDefault(
        "strategy.checkpoint_impl",
        "reentrant",
        ("deepspeed", "megatron"),
        "deepspeed/runtime/activation_checkpointing/checkpointing.py CheckpointFunction and megatron/core/"
        "tensor_parallel/random.py CheckpointFunction: torch.autograd.Function recompute (reentrant)",
    ),
    StackDefault(
        "strategy.checkpoint_impl",
        "non-reentrant",
        ("unsloth", "custom"),
        "torch/utils/checkpoint.py checkpoint(use_reentrant=False), as torch recommends (vramplan's custom stack)",
    ),
    # -- LoRA adapters' dtype ----------------------------------------------------------------------------------
    StackDefault(
        "training.lora_dtype",
        "bf16",
        ("torchtune",),
        "torchtune recipes/lora_finetune_single_device.py: the model, adapters included, is built under "
        "training.set_default_dtype(bf16)",
    ),
    StackDefault(
        "training.lora_dtype",
        "bf16",
        ("litgpt",),
        "litgpt finetune/lora.py under --precision bf16-true: the whole model, adapters included, in bf16 "
        "(litgpt/utils.py's default bf16-mixed keeps fp32 weights)",
        when=(("training.precision", (None, "bf16-pure")),),
    ),
    StackDefault(
        "training.lora_dtype",
        "bf16",
        ("trl",),
        "trl/trainer/sft_trainer.py (0.26+): on a quantized model every trainable parameter is cast to bfloat16",
        package="trl",
        since=(0, 26),
        when=(("training.method", ("qlora",)),),
    ),
    StackDefault(
        "training.lora_dtype",
        "bf16",
        HF_FAMILY,
        "peft tuners_utils.py: autocast_adapter_dtype (PEFT >= 0.12) upcasts adapters to fp32; before it they "
        "took the base layer's dtype",
        package="peft",
        before=(0, 12),
    ),
    StackDefault(
        "training.lora_dtype",
        "fp32",
        ALL,
        "peft tuners_utils.py BaseTuner._cast_adapter_dtype (autocast_adapter_dtype=True): bf16/fp16 adapters "
        "upcast to fp32",
    ),
    # -- LoRA dropout ------------------------------------------------------------------------------------------
    StackDefault(
        "training.lora_dropout",
        0.05,
        ("litgpt",),
        "litgpt finetune/lora.py: lora_dropout: float = 0.05",
    ),
    StackDefault(
        "training.lora_dropout",
        0.0,
        ALL,
        "peft tuners/lora/config.py LoraConfig.lora_dropout = 0.0; torchtune's LoRA builders lora_dropout=0.0",
    ),
    # -- which linears a 4-bit base quantizes ----------------------------------------------------------------
    StackDefault(
        "training.quantized_modules",
        "adapted",
        ("torchtune",),
        "torchtune modules/peft/lora.py (before 0.3.0): LoRALinear(quantize_base=True) holds its base weight as "
        "torchao NF4Tensor; linears without an adapter stay bf16",
        package="torchtune",
        before=(0, 3),
    ),
    StackDefault(
        "training.quantized_modules",
        "block-linears",
        ("torchtune",),
        "torchtune models/llama3/_component_builders.py (0.3.0+): non-adapted block linears are FrozenNF4Linear; "
        "output_proj is not quantized",
    ),
    StackDefault(
        "training.quantized_modules",
        "all-linears",
        ("litgpt",),
        "lightning/fabric/plugins/precision/bitsandbytes.py _convert_layers: every nn.Linear, lm_head included",
    ),
    StackDefault(
        "training.quantized_modules",
        "block-linears",
        ALL,
        "transformers integrations/bitsandbytes.py replace_with_bnb_linear: modules_to_not_convert keeps lm_head",
    ),
    # -- FSDP1 (FullyShardedDataParallel) or FSDP2 (fully_shard) under zero_stage 2/3 ------------------------------
    StackDefault(
        "strategy.fsdp_version",
        1,
        ("torchtune",),
        "torchtune recipes/lora_finetune_distributed.py and full_finetune_distributed.py (0.1.0-0.2.1): "
        "FullyShardedDataParallel(model, auto_wrap_policy=...)",
        package="torchtune",
        before=(0, 3),
    ),
    StackDefault(
        "strategy.fsdp_version",
        2,
        ("torchtune", "torchtitan"),
        "torchtune training/_distributed.py shard_model (0.3.0+): fully_shard(module, reshard_after_forward=True); "
        "torchtitan models/llama3/infra/parallelize.py apply_fsdp: fully_shard per block and the root",
    ),
    StackDefault(
        "strategy.fsdp_version",
        2,
        ("litgpt",),
        "litgpt finetune/lora.py (0.5.11+): ModelParallelStrategy(parallelize_fn), which fully_shard's the "
        "trainable Linears, each Block and the root",
        package="litgpt",
        since=(0, 5, 11),
        when=(("training.method", ("lora", "qlora")),),
    ),
    StackDefault(
        "strategy.fsdp_version",
        1,
        ("litgpt",),
        "litgpt finetune/lora.py (before 0.5.11) and finetune/full.py (0.5.13): lightning/fabric/strategies/fsdp.py "
        "FSDPStrategy wraps the model in FullyShardedDataParallel (limit_all_gathers=True)",
    ),
    StackDefault(
        "strategy.fsdp_version",
        1,
        ("hf-trainer", "trl", "accelerate", "axolotl", "llamafactory"),
        "accelerate utils/dataclasses.py FullyShardedDataParallelPlugin.__post_init__ (1.6+): fsdp_version = "
        'int(os.environ.get("FSDP_VERSION", "1")) (before 1.6: FSDP1 only); axolotl and LLaMA-Factory pass '
        "fsdp_version through to accelerate (DeepSpeed's master regimes are not FSDP: the next row)",
        when=(("training.precision", (None, "fp32", "bf16-autocast", "fp16-autocast", "bf16-pure", "bf16-fsdp")),),
    ),
    StackDefault(
        "strategy.fsdp_version",
        2,
        ALL,
        "vramplan's custom stack: each parameter sharded on its own (torch/distributed/fsdp/_fully_shard/"
        "_fsdp_param.py FSDPParam: a DTensor Shard(0) per parameter), as DeepSpeed ZeRO-3 partitions each "
        "parameter (deepspeed/runtime/zero/partition_parameters.py)",
    ),
    # -- FSDP1 LoRA: do the adapters share their block's FlatParameter? -----------------------------------------
    StackDefault(
        "strategy.fsdp_adapter_wrap",
        "block",
        ("litgpt",),
        "lightning/fabric/strategies/fsdp.py FSDPStrategy.setup_module_and_optimizers: use_orig_params=True; "
        "litgpt finetune/lora.py wraps each Block, so a Block's FlatParameter holds its frozen weights and its "
        "LoRA A/B (torch/distributed/fsdp/_flat_param.py: requires_grad is the OR over the unit's parameters)",
    ),
    StackDefault(
        "strategy.fsdp_adapter_wrap",
        "own",
        ALL,
        "peft utils/other.py fsdp_auto_wrap_policy (installed by transformers' Trainer._fsdp_qlora_plugin_updates "
        "for LoRA models) wraps each trainable leaf module alone; with use_orig_params=False (accelerate's "
        "default) _flat_param.py refuses a unit of mixed requires_grad",
    ),
    # -- FSDP under gradient accumulation: reduce-scatter every micro-batch, or hold unsharded gradients ------------
    StackDefault(
        "strategy.fsdp_grad_sync",
        "last",
        ("litgpt",),
        "litgpt finetune/lora.py and full.py (lit-gpt 8641822 to 0.5.x): with fabric.no_backward_sync(model, "
        "enabled=is_accumulating); lightning/fabric/strategies/fsdp.py _FSDPBackwardSyncControl.no_backward_sync "
        "returns FullyShardedDataParallel.no_sync(), model_parallel.py _FSDPNoSync calls "
        "set_requires_gradient_sync(False) on every FSDPModule",
    ),
    StackDefault(
        "strategy.fsdp_grad_sync",
        "last",
        ("hf-trainer", "trl", "accelerate", "axolotl", "llamafactory", "unsloth"),
        "transformers trainer.py _inner_training_loop: each micro-batch but the last under accelerator.no_sync "
        "(not under DeepSpeed; before 4.46 accelerator.accumulate, which enters no_sync unless sync_each_batch); "
        "accelerate accelerator.py Accelerator.no_sync: FSDP1 model.no_sync(), FSDP2 "
        "set_requires_gradient_sync(False)",
    ),
    StackDefault(
        "strategy.fsdp_grad_sync",
        "each",
        ALL,
        "torchtune recipes/full_finetune_distributed.py and lora_finetune_distributed.py, torchtitan train.py "
        "train_step: loss.backward() per micro-batch, no no_sync, so fully_shard reduce-scatters each; DeepSpeed "
        "engine.py no_sync refuses ZeRO-2/3 (gradients partitioned every micro-batch); vramplan's custom stack",
    ),
    # -- the unfused loss's logits: where they are upcast to fp32, what copies them ------------------------------
    StackDefault(
        "strategy.loss_path",
        "model-upcast",
        ("hf-trainer", "trl", "accelerate", "axolotl", "llamafactory", "custom"),
        "transformers models/llama/modeling_llama.py LlamaForCausalLM.forward (before 4.46): logits = "
        "logits.float(), shift_logits = logits[..., :-1, :].contiguous(), CrossEntropyLoss; the output holds the "
        "fp32 logits, which trainer.py Trainer.compute_loss drops before backward (it returns the loss only)",
        package="transformers",
        before=(4, 46),
    ),
    StackDefault(
        "strategy.loss_path",
        "upcast-shifted",
        ("hf-trainer", "trl", "accelerate", "axolotl", "llamafactory", "custom"),
        "transformers loss/loss_utils.py ForCausalLMLoss (4.46-4.48): logits = logits.float(), then shift_logits = "
        "logits[..., :-1, :].contiguous() while the model's 16-bit logits live (removed by PR #35646)",
        package="transformers",
        before=(4, 49),
    ),
    StackDefault(
        "strategy.loss_path",
        "upcast",
        ALL,
        "transformers loss/loss_utils.py ForCausalLMLoss (4.49+): logits.float(), the labels padded and shifted "
        "(nn.functional.pad(labels, (0, 1), value=ignore_index)), no copy of the logits; torchtitan train.py "
        "cross_entropy(pred.flatten(0, 1).float(), ...)",
    ),
    # -- the bitsandbytes generation ---------------------------------------------------------------------------
    StackDefault(
        "training.bnb_generation",
        "legacy",
        ALL,
        "bitsandbytes autograd/_functions.py MatMul4Bit.forward: ctx.tensors = (A, B) kept each 4-bit linear's "
        "input until its backward (removed in 0.43.2)",
        package="bitsandbytes",
        before=(0, 43, 2),
    ),
    StackDefault(
        "training.bnb_generation",
        "current",
        ALL,
        "bitsandbytes autograd/_functions.py MatMul4Bit.forward (0.43.2+): ctx.tensors = (None, B)",
    ),
)

STACK_KEYS: tuple[str, ...] = tuple(dict.fromkeys(row.key for row in STACK_DEFAULTS))


Choices = tuple[tuple[str, StackDefault], ...]  # (plan key, the row that gives its value)

# The plan keys the rows read in their ``when`` conditions: with the stack, what the choices depend on
WHEN_KEYS: tuple[str, ...] = tuple(dict.fromkeys(k for row in STACK_DEFAULTS for k, _ in row.when))


def stack_choice(key: str, stack: StackConfig, value_of: Callable[[str], Any]) -> StackDefault:
    """The row of `STACK_DEFAULTS` that gives ``key`` its value under ``stack`` (``value_of``: a plan key's value,
    as the plan states it or its field's default)."""
    for row in STACK_DEFAULTS:
        if row.key == key and row.matches(stack, value_of):
            return row
    raise LookupError(key)  # every key has an ALL row last: unreachable


def stack_choices(
    stack: StackConfig, unset: Callable[[str], bool], value_of: Callable[[str], Any]
) -> dict[str, StackDefault]:
    """The rows that fill each stack key the plan leaves ``unset``. Memoised on the stack, the unset keys and the
    values the rows' conditions read (`WHEN_KEYS`): every plan change chooses them again."""
    unset_keys = tuple(key for key in STACK_KEYS if unset(key))
    values = tuple(value_of(k) for k in WHEN_KEYS)
    try:
        return dict(_choices(stack, unset_keys, values))
    except TypeError:  # an unhashable value (a list where a name goes): the plan's validation refuses it after
        return dict(_choose(stack, unset_keys, values))


@memoised(4096)
def _choices(stack: StackConfig, unset_keys: tuple[str, ...], values: tuple[Any, ...]) -> Choices:
    return _choose(stack, unset_keys, values)


def _choose(stack: StackConfig, unset_keys: tuple[str, ...], values: tuple[Any, ...]) -> Choices:
    value_of = dict(zip(WHEN_KEYS, values, strict=True)).__getitem__
    return tuple((key, stack_choice(key, stack, value_of)) for key in unset_keys)
