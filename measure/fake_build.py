"""The plan's model, adapters and optimizer on fake tensors (`vramplan trace`): nothing is allocated, downloaded or
run on a GPU. The model is built as `vramplan.measure.build` builds it (the same transformers config, meta device,
the weights' dtype, ``train()``, checkpointing, PEFT LoRA), all of it on the meta device; then, inside
``FakeTensorMode`` and the recorder, ``to_empty`` gives every parameter and buffer a fake CPU storage (recorded as
built), ``tie_weights`` re-ties tied embeddings, and the optimizer is made over the trainable parameters. One rank
of a data-parallel plan is sharded by FSDP2 on the meta device, or wrapped in DDP once it has storage
(`vramplan.measure.trace_dist`). LoRA is
added on the meta device because PEFT moves new adapters with ``Module.to``, which must swap a fake tensor's
parameters (``torch.utils.swap_tensors``), and the recorder's weak references forbid that."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from vramplan.measure.build import add_lora, enable_checkpointing, make_optimizer, meta_model, transformers_config
from vramplan.measure.forward import DTYPES
from vramplan.measure.recipe import Recipe
from vramplan.measure.trace_dist import Parallel, shard_meta, wrap_fake
from vramplan.measure.tracer import Recorder, local

# transformers' per-expert loop (experts_implementation "eager") finds each expert's tokens with ``nonzero``, whose
# output size is data-dependent: fake tensors cannot run it, so the grouped kernel is traced (said before the trace)
LOOP_TRACED_AS = {"eager": "grouped_mm"}


@dataclass
class FakeBuilt:
    """The traced model, its optimizer and the fake-tensor mode they live in; ``runner``: the module the step calls
    (DDP's wrapper, else the model)."""

    model: Any
    optimizer: Any
    mode: FakeTensorMode
    built_params: int
    notes: tuple[str, ...] = ()
    runner: Any = None
    shards: tuple[tuple[Any, Any], ...] = ()  # FSDP2: (DTensor parameter, its local shard the optimizer steps)

    def grads_to_shards(self) -> None:
        """FSDP2: each local shard takes its DTensor parameter's local gradient, before the optimizer steps."""
        for p, shard in self.shards:
            shard.grad = None if p.grad is None else local(p.grad)

    def clear_grads(self) -> None:
        """After ``zero_grad(set_to_none=True)`` of the shards: the DTensor parameters' gradients go too."""
        for p, _ in self.shards:
            p.grad = None


def build_fake(r: Recipe, rec: Recorder, par: Parallel | None = None) -> FakeBuilt:
    """Model (meta, then fake CPU storages under `rec`), checkpointing, LoRA and optimizer of the recipe; with
    `par`, one rank of it sharded (FSDP2, on the meta device) or replicated (DDP, once it has storage) in the
    current fake process group (`vramplan.measure.trace_dist`)."""
    cfg = transformers_config(r)
    experts = LOOP_TRACED_AS.get(r.experts or "", r.experts)
    extra = {"experts_implementation": experts} if experts else {}
    notes: list[str] = []
    try:
        model = meta_model(cfg, attn_implementation=r.attention, **extra)
    except ValueError as exc:  # a family transformers runs with eager attention only (Gemma 2: soft-capping)
        if r.attention == "eager" or "attention implementation" not in str(exc):
            raise
        model = meta_model(cfg, attn_implementation="eager", **extra)
        notes.append(f"{type(model).__name__} has no SDPA attention in transformers: eager attention traced")
    bf16_fsdp = par is not None and par.fsdp2 and par.plan.training.regime == "bf16-fsdp"
    model.to(DTYPES["fp32" if bf16_fsdp else r.weights_dtype])  # bf16-fsdp: fp32 shards, bf16 compute
    built_params = sum(p.numel() for p in model.parameters())
    model.train()
    if r.checkpointing:
        enable_checkpointing(model, r.reentrant)
    if r.method != "full" and r.lora_modules:
        with torch.device("meta"):
            model = add_lora(model, r.lora_rank, 2 * r.lora_rank, r.lora_dropout, list(r.lora_modules))
    if par is not None:
        model = shard_meta(model, par)
    mode = FakeTensorMode(allow_non_fake_inputs=True)
    rec.set_phase("build", 0)
    with mode, rec, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.to_empty(device="cpu")
        tie = getattr(model, "tie_weights", None)
        if callable(tie) and (par is None or not par.fsdp2):  # fully_shard keeps tied parameters one DTensor
            tie()
        rec.mark(model.parameters(), "parameter")
        rec.mark(model.buffers(), "buffer")
        first = len(rec.allocs)
        runner = wrap_fake(model, par) if par is not None else model
        for a in rec.allocs[first:]:  # DDP's gradient buckets (torch/csrc/distributed/c10d/reducer.cpp)
            a.op, a.role = "DDP gradient buckets", "workspace"
        params = [p for p in model.parameters() if p.requires_grad]
        # FSDP2: the optimizer steps the local shards, which is what DTensor's foreach ops run on each rank (the
        # same allocations), without DTensor's sharding propagation over every parameter (minutes at 70B)
        shards = tuple((p, local(p)) for p in params) if par is not None and par.fsdp2 else ()
        opt = make_optimizer([s for _, s in shards] or params, r.optimizer, r.optimizer_impl, r.learning_rate)
    return FakeBuilt(model, opt, mode, built_params, tuple(notes), runner, shards)
