"""torchtune recipe YAML -> plan keys (recipes/configs/*.yaml, read by recipes/full_finetune_*.py and
lora_finetune_*.py).

``model._component_`` is a model builder (``torchtune.models.llama2.qlora_llama2_7b``): the model preset where one
matches, the method (``lora_``/``qlora_``: torchtune quantizes only the LoRA-adapted linears to NF4, adapters in the
model's dtype), ``lora_attn_modules``/``apply_lora_to_mlp``/``lora_rank``/``lora_dropout``; ``dtype`` (bf16: the
whole model in bf16, optimizer states too = bf16-pure); ``batch_size``, ``gradient_accumulation_steps``,
``tokenizer.max_seq_len``; ``optimizer._component_`` (torch.optim, bitsandbytes.optim, torchao 8-bit AdamW) with
``fused``/``foreach``; ``optimizer_in_bwd``, ``enable_activation_checkpointing``, ``enable_activation_offloading``,
``compile``, ``clip_grad_norm``; ``loss._component_`` CEWithChunkedOutputLoss (8 chunks, its default). A recipe
with ``fsdp_*`` keys runs distributed (FSDP2 ``fully_shard``: ZeRO-3 unless ``fsdp_reshard_after_forward: false``);
a recipe without them says nothing of its GPUs (``tune run --nproc_per_node N`` does): on the plan's one GPU it is a
single-device recipe, on more it is a distributed one (FSDP2 full sharding, ZeRO-3).
"""

from __future__ import annotations

from typing import Any

from vramplan.core.files.importers import trainer
from vramplan.core.files.importers.config_values import count, flag, lora_targets, number
from vramplan.core.files.importers.models import torchtune_builder
from vramplan.core.files.importers.record import ImportLog, Section

OPTIMIZERS: dict[str, str] = {
    "torch.optim.AdamW": "adamw",
    "torch.optim.Adam": "adamw",
    "torch.optim.SGD": "sgd",
    "bitsandbytes.optim.AdamW8bit": "adamw-8bit",
    "bitsandbytes.optim.PagedAdamW8bit": "paged-adamw-8bit",
    "bitsandbytes.optim.PagedAdamW": "paged-adamw",
    "bitsandbytes.optim.PagedAdamW32bit": "paged-adamw",
    "bitsandbytes.optim.Lion": "lion",
    "torchao.optim.AdamW8bit": "adamw-8bit",
    "torchao.prototype.low_bit_optim.AdamW8bit": "adamw-8bit",
}
CHUNKED_LOSS = "torchtune.modules.loss.CEWithChunkedOutputLoss"
DEFAULT_CHUNKS = 8  # CEWithChunkedOutputLoss(num_output_chunks=8)


def read(data: dict[str, Any], log: ImportLog) -> None:
    top = log.section(data)
    _model(top.sub("model"), log)
    dtype = str(top.get("dtype", "fp32")).lower()
    regimes = {"bf16": "bf16-pure", "fp32": "fp32"}
    if dtype in regimes:
        log.set(
            "dtype" if top.has("dtype") else "(no dtype)",
            dtype,
            "training.precision",
            regimes[dtype],
            "the whole model and optimizer states in this dtype",
        )
    else:
        log.ignore("dtype", dtype, "torchtune trains in bf16 or fp32; the plan's precision is kept")
    trainer.counts(
        top,
        log,
        (
            ("batch_size", "training.micro_batch_size"),
            ("gradient_accumulation_steps", "training.grad_accum_steps"),
        ),
    )
    tok = top.sub("tokenizer")
    seq = count(tok.get("max_seq_len"))
    if seq is not None:
        log.set(tok.key("max_seq_len"), seq, "training.seq_len", seq)
    elif tok.has("max_seq_len"):
        log.ignore(tok.key("max_seq_len"), None, "no limit: the sequence length is the data's; the plan's is kept")
    tok.rest("the tokenizer's files")
    _optimizer(top, log)
    for name, plan_key, on, off in (
        ("optimizer_in_bwd", "strategy.optimizer_in_backward", True, False),
        ("enable_activation_checkpointing", "strategy.gradient_checkpointing", "full", "none"),
        ("enable_activation_offloading", "strategy.activation_offload", "cpu", "none"),
        ("compile", "strategy.compile", True, False),
    ):
        if top.has(name):
            value = flag(top.get(name))
            if value is None:
                log.ignore(name, top.get(name), "not true or false")
            else:
                log.set(name, top.get(name), plan_key, on if value else off)
    clip = top.get("clip_grad_norm")
    if clip is not None:
        norm = number(clip)
        if norm is not None:
            log.set("clip_grad_norm", clip, "training.grad_clip", norm if norm > 0 else None)
        else:
            log.ignore("clip_grad_norm", clip, "not a number")
    loss = top.sub("loss")
    component = str(loss.get("_component_", ""))
    if component:
        if component.endswith("CEWithChunkedOutputLoss"):
            chunks = count(loss.get("num_output_chunks")) or DEFAULT_CHUNKS
            log.set(loss.key("_component_"), component, "strategy.loss_chunks", chunks, "chunked cross-entropy")
        else:
            log.set(loss.key("_component_"), component, "strategy.loss_chunks", 1)
    loss.rest("a loss option with no memory effect")
    _distribution(top, log)
    top.rest()


def _model(model: Section, log: ImportLog) -> None:
    component = model.get("_component_")
    if not isinstance(component, str):
        log.ignore("model", None, "no model._component_: the plan's model is kept")
        model.rest()
        return
    key = model.key("_component_")
    builder, method, preset = torchtune_builder(component)
    if preset is not None:
        log.set(key, component, "model.preset", preset, f"torchtune builder {builder}")
    else:
        log.ignore(key, component, f"no model preset for torchtune's {builder}: give --model or --hf-config")
    log.set(key, component, "training.method", method)
    if method == "full":
        model.rest("an option of the model builder")
        return
    log.set(key, component, "training.lora_dtype", "bf16", "torchtune's adapters are in the model's dtype")
    if method == "qlora":
        log.set(key, component, "training.quantization", "nf4", "torchao NF4")
        log.set(key, component, "training.quantized_modules", "adapted", "torchtune quantizes the adapted linears")
    rank = count(model.get("lora_rank"))
    if rank is not None:
        log.set(model.key("lora_rank"), rank, "training.lora_rank", rank)
    attn = model.get("lora_attn_modules") or []
    names = [attn] if isinstance(attn, str) else list(attn) if isinstance(attn, list) else [str(attn)]
    if flag(model.get("apply_lora_to_mlp")):
        names += ["w1", "w2", "w3"]
    targets, unknown = lora_targets(names)
    if targets:
        shown = ", ".join(str(n) for n in model.data.get("lora_attn_modules") or [])
        mlp = " + mlp" if flag(model.data.get("apply_lora_to_mlp")) else ""
        log.set(model.key("lora_attn_modules"), f"[{shown}]{mlp}", "training.lora_targets", list(targets))
    for name in unknown:
        log.ignore(model.key("lora_attn_modules"), name, "not a projection the plan adapts")
    if flag(model.get("apply_lora_to_output")):
        log.ignore(
            model.key("apply_lora_to_output"),
            True,
            "an adapter on the output projection (lm_head) is not "
            "modelled: its rank x (hidden + vocab) parameters are left out",
        )
    dropout = number(model.get("lora_dropout"))
    if dropout is not None:
        log.set(model.key("lora_dropout"), dropout, "training.lora_dropout", dropout)
    model.ignore("lora_alpha", "a scale, no memory effect")
    model.rest("an option of the model builder")


def _optimizer(top: Section, log: ImportLog) -> None:
    if not top.has("optimizer"):
        return
    opt = top.sub("optimizer")
    component = str(opt.get("_component_", ""))
    name = OPTIMIZERS.get(component)
    key = opt.key("_component_")
    if name is None:
        log.ignore(key, component, "an optimizer the plan does not model; the plan's is kept")
    else:
        if name == "sgd" and number(opt.get("momentum")):
            name = "sgd-momentum"
        log.set(key, component, "training.optimizer", name)
        if flag(opt.get("fused")):
            log.set(opt.key("fused"), True, "training.optimizer_impl", "fused")
        elif flag(opt.get("foreach")) is False:
            log.set(opt.key("foreach"), False, "training.optimizer_impl", "for-loop")
        elif flag(opt.get("foreach")):
            log.set(opt.key("foreach"), True, "training.optimizer_impl", "foreach")
    lr = number(opt.get("lr"))
    if lr is not None and lr > 0:
        log.set(opt.key("lr"), opt.data["lr"], "training.learning_rate", lr)
    opt.rest("an optimizer hyperparameter with no memory effect")


def _distribution(top: Section, log: ImportLog) -> None:
    distributed = any(
        k in top.data for k in ("fsdp_cpu_offload", "fsdp_reshard_after_forward", "fsdp_sharding_strategy")
    )
    if not distributed:  # the recipe run (single-device or distributed) decides: the plan's GPU count says which
        log.shard_by_gpus = True
        log.set("(no fsdp_cpu_offload)", None, "strategy.offload_optimizer", "none")
        log.set("(no fsdp_cpu_offload)", None, "strategy.offload_parameters", "none")
        return
    reshard = flag(top.get("fsdp_reshard_after_forward", True))
    key = "fsdp_reshard_after_forward" if top.has("fsdp_reshard_after_forward") else "(fsdp_* keys)"
    log.set(key, reshard, "strategy.zero_stage", 3 if reshard is not False else 2, "FSDP2 fully_shard")
    offload = bool(flag(top.get("fsdp_cpu_offload", False)))
    device = "cpu" if offload else "none"
    off_key = "fsdp_cpu_offload" if top.has("fsdp_cpu_offload") else "(no fsdp_cpu_offload)"
    log.set(off_key, offload, "strategy.offload_optimizer", device, "CPUOffloadPolicy: the optimizer steps on the host")
    log.set(off_key, offload, "strategy.offload_parameters", device if reshard is not False else "none")
    top.ignore("fsdp_sharding_strategy", "fsdp_reshard_after_forward decides the sharding")
