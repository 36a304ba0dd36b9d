#!/usr/bin/env python3
"""Measure the optimizer step in backward on the CPU into tests/data/stacks/opt_in_bwd.json.

Usage, from the repository root (an environment with torch and torchtune; torchtune 0.6.1 imports torchao, whose
0.11.0 still has the ``torchao.dtypes.nf4tensor`` that torchtune imports):

    python -m bench.data.opt_in_bwd [-o tests/data/stacks/opt_in_bwd.json]

Method: an 8-block torchtitan Llama (the model code of torchtitan @9dec370, `bench.data.torchtitan_llama`;
b=1, s=32, h=256, 8 heads, 2 KV heads, SwiGLU i=768, V=1024), its weights cast to bf16, untied or with the output
projection tied to the embedding. The usual step is ``AdamW(fused=True)`` stepped after ``loss.backward()``; the
optimizer in backward is torchtune's recipe (``recipes/full_finetune_single_device.py``): one
``AdamW(fused=True)`` per parameter and ``torchtune.training.register_optim_in_bwd_hooks``, which steps and zeroes
each parameter's optimizer in its post-accumulate-grad hook. A first step creates the optimizer states; the second
is measured, its forward (model and torchtitan's loss ``cross_entropy(pred.flatten(0, 1).float(), labels)``),
backward (``del pred`` first, as torchtitan's train.py) and optimizer step each in a region of `stack_probe.Trace`.
Figures are relative to the start of the forward. ``max_grad_bytes_alive`` is the most ``.grad`` bytes alive at
once (by storage), sampled in a post-accumulate-grad hook of every parameter (registered first, so it runs before
torchtune's step) and at the end of backward.

The committed file was first written on 2026-12-01 by the stacks issue's research script (not kept); this script
re-creates it (docs/data.md gives the rerun's result).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from bench.data.stack_probe import Trace, aten_matmuls, out_path, publish
from bench.data.torchtitan_llama import ModelArgs, Transformer
from vramplan.measure.tensors import storage_bytes

OUT = Path("tests/data/stacks/opt_in_bwd.json")
CONFIG: dict[str, Any] = {"b": 1, "s": 32, "h": 256, "n_h": 8, "n_kv": 2, "i": 768, "V": 1024, "L": 8}


def build(tied: bool) -> Transformer:
    c = CONFIG
    args = ModelArgs(dim=c["h"], n_layers=c["L"], n_heads=c["n_h"], n_kv_heads=c["n_kv"], vocab_size=c["V"])
    args.max_seq_len = c["s"]
    model = Transformer(args)
    for p in model.parameters():  # the weights only: the complex64 RoPE buffer stays as it is
        p.data = p.data.to(torch.bfloat16)
    if tied:
        model.output.weight = model.tok_embeddings.weight
    return model


def run(oib: bool, tied: bool) -> dict[str, Any]:
    from torchtune.training import register_optim_in_bwd_hooks

    torch.manual_seed(0)
    c = CONFIG
    model = build(tied)
    params = list(model.parameters())
    grad_peak = [0]

    def sample(_: torch.Tensor) -> None:
        grad_peak[0] = max(grad_peak[0], storage_bytes(p.grad for p in params if p.grad is not None))

    for p in params:
        p.register_post_accumulate_grad_hook(sample)
    if oib:
        optim_dict = {p: torch.optim.AdamW([p], lr=1e-5, fused=True) for p in params}
        register_optim_in_bwd_hooks(model, optim_dict)
    else:
        opt = torch.optim.AdamW(params, lr=1e-5, fused=True)
    tokens = torch.randint(0, c["V"], (c["b"], c["s"]))
    labels = torch.randint(0, c["V"], (c["b"], c["s"]))

    def step(trace: Trace | None) -> None:
        def region(name: str) -> Any:
            return trace.region(name) if trace is not None else _null()

        with region("fwd"):
            loss = torch.nn.functional.cross_entropy(model(tokens).flatten(0, 1).float(), labels.flatten(0, 1))
        with region("bwd"):
            loss.backward()
            sample(loss)
            del loss
        with region("opt"):
            if not oib:
                opt.step()
                opt.zero_grad(set_to_none=True)

    step(None)
    grad_peak[0] = 0
    with Trace() as trace:
        step(trace)
    start = trace.fig("fwd").start
    peaks = {k: trace.fig(k).peak - start for k in ("fwd", "bwd", "opt")}
    top = max(peaks.values())
    return {
        "optimizer_in_backward": oib,
        "tied": tied,
        "param_bytes": storage_bytes(params),
        "largest_param_bytes": max(p.untyped_storage().nbytes() for p in params),
        "phase_peaks_above_start": peaks,
        "peak_phase": next(k for k, v in peaks.items() if v == top),
        "peak_above_start": top,
        "max_grad_bytes_alive": grad_peak[0],
        "end_of_backward_above_start": trace.fig("bwd").end - start,
        "allocator_consistent": trace.consistent,
    }


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def main() -> None:
    out = out_path(__doc__, OUT)
    c = CONFIG
    config = {
        **c,
        "T": c["b"] * c["s"],
        "units": {"TV_fp32": c["b"] * c["s"] * c["V"] * 4, "Vh_bf16": c["V"] * c["h"] * 2},
    }
    config["torch"] = torch.__version__
    with aten_matmuls():
        runs = [run(oib, tied) for tied in (False, True) for oib in (False, True)]
    publish(out, {"config": config, "runs": runs})


if __name__ == "__main__":
    main()
