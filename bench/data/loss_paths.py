#!/usr/bin/env python3
"""Measure the loss paths of transformers' causal-LM loss on the CPU into tests/data/stacks/loss_paths.json.

Usage, from the repository root (an environment with torch):

    python -m bench.data.loss_paths [-o tests/data/stacks/loss_paths.json]

Method: the lm_head and the loss alone, as ``chunked_ce.py`` measures them: b=2, s=256, h=256, V=4096, final hidden
states (a leaf that requires grad) and a trainable ``nn.Linear(h, V, bias=False)`` lm_head in the model's dtype
(bf16, or fp32), int64 labels = the inputs. Each variant is the lines of one transformers version's loss, as the
model's forward, the loss function and the training loop run them (`strategy.loss_path`):

- ``upcast``: transformers >= 4.49 ``loss/loss_utils.py`` ``ForCausalLMLoss``: ``logits = logits.float()``, the
  labels padded with -100 and shifted (``nn.functional.pad(labels, (0, 1))``, ``labels[..., 1:]``), then
  ``fixed_cross_entropy(logits.view(-1, V), ...)``; the model's 16-bit ``logits`` live until its forward returns,
  and the loop drops the output (HF ``Trainer.compute_loss`` returns the loss only);
- ``upcast-shifted``: 4.46-4.48's ``ForCausalLMLoss``: ``logits.float()``, then ``shift_logits =
  logits[..., :-1, :].contiguous()`` (removed by transformers PR #35646);
- ``model-upcast``: before 4.46, ``LlamaForCausalLM.forward``: ``logits = self.lm_head(...)``, ``logits =
  logits.float()``, ``shift_logits = logits[..., :-1, :].contiguous()``, ``CrossEntropyLoss()`` on the flattened
  views; the output holds the fp32 logits, dropped before backward;
- ``model-upcast-kept``: the same model under a loop that keeps its output through backward (Answer.AI's fsdp_qlora
  train.py: ``output = model(...)``, ``loss = output.loss``, ``loss.backward()``, then ``output = None``);
- ``model-dtype``: ``F.cross_entropy(logits.view(-1, V), labels.view(-1))`` on the model's logits, no upcast.

Each variant runs once to warm up, its gradients are dropped, then runs measured: the head and the loss (what the
model and the loop free at the loss) in one region of `stack_probe.Trace`, ``loss.backward()`` in another.
``saved_after_loss``, ``fwd_peak``, ``bwd_peak`` and ``after_bwd`` are relative to the moment before the lm_head
runs; ``hooks_saved_bytes`` are the tensors autograd saves (the lm_head's weight left out).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from bench.data.stack_probe import Trace, aten_matmuls, hooks_bytes, out_path, publish, saved_tensors

OUT = Path("tests/data/stacks/loss_paths.json")
CONFIG: dict[str, Any] = {"b": 2, "s": 256, "h": 256, "V": 4096}
VARIANTS = ("upcast", "upcast-shifted", "model-upcast", "model-upcast-kept", "model-dtype")
DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}
Head = Callable[[torch.nn.Linear, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor | None]]


def loss_of(variant: str) -> Head:
    """The head + loss of `variant`: (loss, what the loop keeps through backward, or None)."""
    V = CONFIG["V"]

    def upcast(head: torch.nn.Linear, h: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, None]:
        logits = head(h)  # the model's output: alive while its forward computes the loss
        upcast = logits.float()
        shift_labels = F.pad(labels, (0, 1), value=-100)[..., 1:].contiguous()
        loss = F.cross_entropy(upcast.view(-1, V), shift_labels.view(-1), ignore_index=-100)
        del upcast, logits  # the loss function returns; the loop drops the output
        return loss, None

    def upcast_shifted(head: torch.nn.Linear, h: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, None]:
        logits = head(h)
        upcast = logits.float()
        shift_logits = upcast[..., :-1, :].contiguous()
        shift_labels = labels[..., 1:].contiguous()
        loss = F.cross_entropy(shift_logits.view(-1, V), shift_labels.view(-1), ignore_index=-100)
        del shift_logits, upcast, logits
        return loss, None

    def model_upcast(head: torch.nn.Linear, h: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, Any]:
        logits = head(h)
        logits = logits.float()  # the 16-bit output is freed here
        shift_logits = logits[..., :-1, :].contiguous()
        shift_labels = labels[..., 1:].contiguous()
        loss = torch.nn.CrossEntropyLoss()(shift_logits.view(-1, V), shift_labels.view(-1))
        del shift_logits
        return loss, logits  # the output's fp32 logits

    def model_dtype(head: torch.nn.Linear, h: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, None]:
        logits = head(h)
        loss = F.cross_entropy(logits.view(-1, V), labels.view(-1))
        del logits
        return loss, None

    if variant in ("model-upcast", "model-upcast-kept"):
        kept = variant == "model-upcast-kept"

        def model(head: torch.nn.Linear, h: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, Any]:
            loss, output_logits = model_upcast(head, h, labels)
            return loss, (output_logits if kept else None)  # HF Trainer drops the output; fsdp_qlora keeps it

        return model
    return {"upcast": upcast, "upcast-shifted": upcast_shifted, "model-dtype": model_dtype}[variant]


def run(variant: str, dtype: str) -> dict[str, Any]:
    torch.manual_seed(0)
    c, dt = CONFIG, DTYPES[dtype]
    head = torch.nn.Linear(c["h"], c["V"], bias=False).to(dt)
    h = torch.randn(c["b"], c["s"], c["h"], dtype=dt, requires_grad=True)
    labels = torch.randint(0, c["V"], (c["b"], c["s"]))
    fn = loss_of(variant)
    loss, kept = fn(head, h, labels)
    loss.backward()  # warm-up
    del loss, kept
    head.weight.grad = h.grad = None
    hooks: list[dict[str, Any]] = []
    with Trace() as trace:
        with trace.region("fwd"), saved_tensors(head.parameters(), hooks):
            loss, kept = fn(head, h, labels)
        with trace.region("bwd"):
            loss.backward()
            del kept  # the loop drops its output after backward
    fwd, bwd = trace.fig("fwd"), trace.fig("bwd")
    saved = [r for r in hooks if not r["param"]]
    return {
        "variant": variant,
        "dtype": dtype,
        "saved_after_loss": fwd.end - fwd.start,
        "fwd_peak": fwd.peak - fwd.start,
        "bwd_peak": bwd.peak - fwd.start,
        "after_bwd": bwd.end - fwd.start,
        "hooks_saved_bytes": hooks_bytes(saved),
        "hooks_saved": saved,
        "allocator_consistent": trace.consistent,
    }


def main() -> None:
    out = out_path(__doc__, OUT)
    c = CONFIG
    t = c["b"] * c["s"]
    config = {**c, "T": t, "torch": torch.__version__}
    units = {"TV_fp32": t * c["V"] * 4, "TV_bf16": t * c["V"] * 2, "bV_fp32": c["b"] * c["V"] * 4}
    with aten_matmuls():
        runs = [run(v, d) for d in DTYPES for v in VARIANTS]
    publish(out, {"config": config, "units": units, "runs": runs})


if __name__ == "__main__":
    main()
