#!/usr/bin/env python3
"""Measure the loss's memory (full and chunked cross-entropy) on the CPU into tests/data/stacks/chunked_ce.json.

Usage, from the repository root (an environment with torch and torchtune; torchtune 0.6.1 imports torchao, whose
0.11.0 still has the ``torchao.dtypes.nf4tensor`` that torchtune imports; the compiled variants need a C++ compiler
for inductor's CPU code):

    python -m bench.data.chunked_ce [-o tests/data/stacks/chunked_ce.json]

Method: the loss alone, b=2, s=256, h=256, V=4096, 8 chunks: final hidden states (a bf16 leaf that requires grad)
and a trainable bf16 ``nn.Linear(h, V, bias=False)`` lm_head, int64 labels. Variants:

- ``tt_full``: torchtitan (@9dec370 train.py ``loss_fn``): ``pred = lm_head(h)``,
  ``cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))``, then ``del pred``;
- ``tune_full``: torchtune 0.6.1 (``modules/transformer.py`` ``TransformerDecoder.forward``'s
  ``self.output(h).float()``, the recipes' ``nn.CrossEntropyLoss`` on ``logits.reshape(-1, V)``);
- ``tune_chunked``: ``TransformerDecoder.chunked_output`` (``lm_head`` per ``h.chunk(8, dim=1)``) and
  ``torchtune.modules.loss.CEWithChunkedOutputLoss(8)``;
- ``tune_chunked_compiled`` / ``tune_full_compiled``: the same with ``torchtune.training.compile_loss`` (inductor):
  only ``compute_cross_entropy`` compiled for the chunked loss, the whole loss module otherwise.

Each variant runs once to warm up (compiling), its gradients are dropped, then runs measured: the head and the loss
(and the ``del`` of the logits) in one region of `stack_probe.Trace`, ``loss.backward()`` in another.
``saved_after_loss`` (the first region's end), ``fwd_peak``, ``bwd_peak`` and ``after_bwd`` (the second region's
end) are relative to the moment before the lm_head runs. ``hooks_saved`` are the tensors autograd saves (the
lm_head's weight left out), `stack_probe.saved_tensors`.

The committed file was first written on 2026-12-01 by the stacks issue's research script (not kept); this script
re-creates it (docs/data.md gives the rerun's result).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from bench.data.stack_probe import Trace, aten_matmuls, hooks_bytes, out_path, publish, saved_tensors

OUT = Path("tests/data/stacks/chunked_ce.json")
CONFIG: dict[str, Any] = {"b": 2, "s": 256, "h": 256, "V": 4096, "chunks": 8}
VARIANTS = ("tt_full", "tune_full", "tune_chunked", "tune_chunked_compiled", "tune_full_compiled")


def loss_of(variant: str) -> Callable[[torch.nn.Linear, torch.Tensor, torch.Tensor], torch.Tensor]:
    """The head + loss of `variant`, as a function of (lm_head, hidden states, labels); the logits die inside."""
    from torchtune.modules.loss import CEWithChunkedOutputLoss
    from torchtune.training import compile_loss

    chunks, compiled = CONFIG["chunks"], variant.endswith("_compiled")
    if variant == "tt_full":

        def tt(head: torch.nn.Linear, h: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
            pred = head(h)
            loss = F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1))
            del pred
            return loss

        return tt
    if variant.startswith("tune_chunked"):
        chunked = CEWithChunkedOutputLoss(num_output_chunks=chunks)
        chunked = compile_loss(chunked) if compiled else chunked

        def tune_chunked(head: torch.nn.Linear, h: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
            logits = [head(c) for c in h.chunk(chunks, dim=1)]
            loss = chunked(logits, labels)
            del logits
            return loss

        return tune_chunked
    full: Any = torch.nn.CrossEntropyLoss(ignore_index=-100)
    full = compile_loss(full) if compiled else full

    def tune_full(head: torch.nn.Linear, h: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = head(h).float()
        logits = logits.reshape(-1, logits.size(-1))
        loss = full(logits, labels.reshape(-1))
        del logits
        return loss

    return tune_full


def run(variant: str) -> dict[str, Any]:
    torch.manual_seed(0)
    c = CONFIG
    head = torch.nn.Linear(c["h"], c["V"], bias=False).to(torch.bfloat16)
    h = torch.randn(c["b"], c["s"], c["h"], dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, c["V"], (c["b"], c["s"]))
    fn = loss_of(variant)
    fn(head, h, labels).backward()  # warm-up (compiles)
    head.weight.grad = h.grad = None
    hooks: list[dict[str, Any]] = []
    with Trace() as trace:
        with trace.region("fwd"), saved_tensors(head.parameters(), hooks):
            loss = fn(head, h, labels)
        with trace.region("bwd"):
            loss.backward()
    fwd, bwd = trace.fig("fwd"), trace.fig("bwd")
    saved = [r for r in hooks if not r["param"]]
    return {
        "variant": variant,
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
    units = {
        "TV_fp32": t * c["V"] * 4,
        "TV_bf16": t * c["V"] * 2,
        "grad_W_bf16": c["V"] * c["h"] * 2,
        "grad_h_bf16": t * c["h"] * 2,
        "labels_int64": t * 8,
    }
    with aten_matmuls():
        runs = [run(v) for v in VARIANTS]
    publish(out, {"config": config, "units": units, "runs": runs})


if __name__ == "__main__":
    main()
