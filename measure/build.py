"""The plan's model, adapters and optimizer, built here with random weights (nothing downloaded): the transformers
config from the plan's ``[model]`` keys (`vramplan.measure.recipe`), ``AutoModelForCausalLM.from_config`` on the
meta device, cast to the weights' dtype there, then ``to_empty`` on the target device and ``init_weights()`` (which
also re-ties tied embeddings and recomputes the RoPE buffers). Then, in the order of the oracle
(bench/measure/measure_step.py ``build``): a batch of random token ids drawn right after the model, ``train()``,
gradient checkpointing (``gradient_checkpointing_enable``, reentrant or not), PEFT LoRA (adapters fp32 on a 16-bit
base: ``autocast_adapter_dtype``), the optimizer over the trainable parameters."""

from __future__ import annotations

import warnings
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import torch

from vramplan.measure.forward import DTYPES, autocast_to
from vramplan.measure.recipe import Recipe


@dataclass
class Built:
    """What one measurement trains: the model, its optimizer and the batch (labels = a copy of the ids)."""

    model: Any
    optimizer: Any
    ids: Any
    labels: Any
    built_params: int  # parameters transformers built (tied once), before LoRA


def transformers_config(r: Recipe) -> Any:
    """``AutoConfig.for_model`` of the recipe's family and keys, every dropout 0, no KV cache."""
    import transformers

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = transformers.AutoConfig.for_model(r.model_type, **{**r.config, "use_cache": False})
    for key, value in list(vars(cfg).items()):
        if key.endswith(("dropout", "pdrop")) and isinstance(value, float):
            setattr(cfg, key, 0.0)
        if key in ("pad_token_id", "bos_token_id", "eos_token_id") and isinstance(value, int) and value >= r.vocab_size:
            setattr(cfg, key, None)  # a family default beyond a small vocabulary (Phi-3's 32000): no memory effect
    return cfg


def meta_model(cfg: Any, **kwargs: Any) -> Any:
    """``AutoModelForCausalLM.from_config(cfg, **kwargs)`` on the meta device (shapes, no memory, no weights), its
    warnings silenced."""
    import transformers

    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return transformers.AutoModelForCausalLM.from_config(cfg, **kwargs)


def build(r: Recipe, device: str, seed: int = 0) -> Built:
    """Model (meta, then materialised on `device`), batch, checkpointing, LoRA and optimizer of the recipe."""
    torch.manual_seed(seed)
    cfg = transformers_config(r)
    extra = {"experts_implementation": r.experts} if r.experts else {}
    model = meta_model(cfg, attn_implementation=r.attention, **extra)
    model.to(DTYPES[r.weights_dtype])
    model.to_empty(device=device)
    with torch.no_grad():
        model.init_weights()
    built_params = sum(p.numel() for p in model.parameters())
    # drawn before LoRA's random init, so that a LoRA case trains on the same batch as its base case
    ids = torch.randint(0, r.vocab_size, (r.micro_batch_size, r.seq_len), dtype=torch.int64, device=device)
    model.train()
    if r.checkpointing:
        enable_checkpointing(model, r.reentrant)
    if r.method != "full" and r.lora_modules:
        model = add_lora(model, r.lora_rank, 2 * r.lora_rank, r.lora_dropout, list(r.lora_modules))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = make_optimizer(params, r.optimizer, r.optimizer_impl, r.learning_rate)
    return Built(model, opt, ids, ids.clone(), built_params)


def enable_checkpointing(model: Any, reentrant: bool) -> None:
    """HF's ``gradient_checkpointing_enable`` on every block (non-reentrant also makes the embedding output require
    grad, so a frozen base still checkpoints)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
    if reentrant:
        model.enable_input_require_grads()  # peft/utils/other.py: a reentrant checkpoint needs an input with grad


def add_lora(model: Any, rank: int, alpha: int, dropout: float, targets: list[str] | str) -> Any:
    """``peft.get_peft_model`` with a LoraConfig of the rank, scale, dropout and target modules."""
    import peft

    target: list[str] | str = "all-linear" if targets == ["all-linear"] else targets
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        return peft.get_peft_model(
            model,
            peft.LoraConfig(
                r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=target, task_type="CAUSAL_LM"
            ),
        )


def make_optimizer(params: list[Any], name: str, impl: str, lr: float) -> Any:
    """torch.optim's AdamW (any other name not in torch.optim: AdamW, said by `limits`), SGD (momentum 0.9 for
    sgd-momentum) or Adafactor, with the implementation asked: foreach, for-loop or fused."""
    kind = {"foreach": impl == "foreach"} if impl != "fused" else {"fused": True}
    if name in ("sgd", "sgd-momentum"):
        return torch.optim.SGD(params, lr=lr, momentum=0.9 if name == "sgd-momentum" else 0.0, **kind)
    if name == "adafactor":
        return torch.optim.Adafactor(params, lr=lr, foreach=impl == "foreach")
    return torch.optim.AdamW(params, lr=lr, **kind)


def autocast(r: Recipe, device: str) -> AbstractContextManager[Any]:
    """``torch.autocast`` of the recipe's autocast dtype on `device`, else nothing."""
    return autocast_to(r.autocast, device)


def free(built: Built | None) -> None:
    """Drop the model's gradients and optimizer state, so the memory returns before the caller frees it."""
    if built is None:
        return
    built.optimizer.state.clear()
    for p in built.model.parameters():
        p.grad = None
