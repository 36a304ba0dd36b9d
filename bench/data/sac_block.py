#!/usr/bin/env python3
"""Measure torchtitan's activation checkpointing of Llama blocks on the CPU into tests/data/stacks/sac_block.json.

Usage, from the repository root (an environment with torch):

    python -m bench.data.sac_block [-o tests/data/stacks/sac_block.json]

Method: a stack of L = 1, 2, 4 torchtitan Llama-3 blocks (the model code of torchtitan @9dec370,
`bench.data.torchtitan_llama`; b=2, s=128, h=256, 8 heads, 2 KV heads, head dim 32, SwiGLU i=768), weights cast to
bf16 or kept fp32 (no autocast: FSDP2's ``param_dtype`` computes so). RoPE ``freqs_cis`` (complex64, s rows), a leaf
input and the output's gradient are made before the forward; the block input is the non-leaf ``leaf * 1``, made in
the forward. Modes, each block wrapped as torchtitan wraps it with
``torch.distributed.algorithms._checkpoint.checkpoint_wrapper.checkpoint_wrapper``:

- ``none``; ``full``: ``checkpoint_wrapper(block, preserve_rng_state=False)`` (torchtitan's full AC);
- ``op_2412``: torchtitan @9dec370 ``parallelisms/parallelize_llama.py`` ``_apply_ac_to_transformer_block``'s
  ``_custom_policy`` over its ``_save_list`` (every second ``aten.mm`` recomputed, SDPA outputs saved);
- ``op_new``: torchtitan 0.3.0 ``distributed/activation_checkpoint.py`` ``SelectiveAC`` (the compute-intensive ops
  of ``torch._functorch.partitioners.get_default_op_list`` and its list, every second mm/linear recomputed; its
  ``moe.router.gate`` shapes and CUDA-to-CPU copies do not occur here);
- ``every2``: the layer interval ``selective_ac_option = "2"`` (every second block checkpointed).

In both per-op policies the CPU's ``aten._scaled_dot_product_flash_attention_for_cpu`` stands for CUDA's flash op.
The forward runs in one region of `stack_probe.Trace`, ``out.backward(grad)`` in another. ``retained`` = the
allocator's total at the end of forward minus before it, minus the output: what the forward keeps for backward,
whatever keeps it (autograd, checkpoint closures, the SAC cache); ``bwd_peak_above_fwd_end`` = the backward's peak
above the end of forward. ``hooks_*`` are the tensors autograd saves (`stack_probe.saved_tensors`); ``sac_cache`` is
the per-op policy's log of the first block: each mm (``recomputed`` with its output's shape, or saved) and each saved
op with its outputs. Lists are kept for L=1 only (counts for L > 1). ``formulas`` gives the per-block bytes of
per-op and full AC in closed form, which tests/core/memory/test_stack_mechanisms.py compares.

The committed file was first written on 2026-12-01 by the stacks issue's research script (not kept); this script
re-creates it (docs/data.md gives the rerun's result).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

from bench.data.stack_probe import Trace, aten_matmuls, hooks_bytes, out_path, publish, saved_tensors
from bench.data.torchtitan_llama import ModelArgs, TransformerBlock, precompute_freqs_cis

OUT = Path("tests/data/stacks/sac_block.json")
CONFIG: dict[str, Any] = {"b": 2, "s": 128, "h": 256, "n_h": 8, "n_kv": 2, "d": 32, "i": 768}
MODES = ("none", "full", "op_2412", "op_new", "every2")
CPU_FLASH = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
MM = torch.ops.aten.mm.default
# torchtitan @9dec370 parallelisms/parallelize_llama.py `_save_list`, with the CPU SDPA op for the CUDA ones
SAVE_2412 = {
    MM,
    torch.ops.aten._scaled_dot_product_efficient_attention.default,
    torch.ops.aten._scaled_dot_product_flash_attention.default,
    torch.ops._c10d_functional.reduce_scatter_tensor.default,
    torch.ops.aten.abs.default,
    torch.ops.aten.max.default,
    CPU_FLASH,
}


def save_new() -> set[Any]:
    """torchtitan 0.3.0 distributed/activation_checkpoint.py `_get_default_save_ops` (the ops this torch has)."""
    from torch._functorch.partitioners import get_default_op_list

    ops = {op.default for op in get_default_op_list().compute_intensive_ops}
    ops |= {
        torch.ops.aten._scaled_dot_product_cudnn_attention.default,
        torch.ops.aten._scaled_dot_product_attention_math.default,
        torch.ops.aten._scaled_dot_product_fused_attention_overrideable.default,
        torch.ops.aten.max.default,
        torch.ops.aten.linear.default,
        torch.ops.aten.topk.default,
        torch.ops._c10d_functional.reduce_scatter_tensor.default,
        torch.ops._c10d_functional.all_to_all_single.default,
        CPU_FLASH,
    }
    return ops


def outputs(out: Any) -> list[dict[str, Any]]:
    ts = out if isinstance(out, (tuple, list)) else (out,)
    return [
        {"shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch."), "bytes": t.untyped_storage().nbytes()}
        for t in ts
        if torch.is_tensor(t)
    ]


def policy(mode: str, log: list[dict[str, Any]]) -> Any:
    """The per-op policy of `mode` (both count mms separately in forward and recompute), logging the forward."""
    save = SAVE_2412 if mode == "op_2412" else save_new()
    mm_ops = (MM,) if mode == "op_2412" else (MM, torch.ops.aten.linear.default)
    meta: dict[str, int] = defaultdict(int)

    def fn(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> CheckpointPolicy:
        key = f"{'recompute' if ctx.is_recompute else 'forward'}_mm_count"
        if func in mm_ops:
            meta[key] += 1
        to_save = func in save and not (func in mm_ops and meta[key] % 2 == 0)
        if not ctx.is_recompute and (to_save or func in mm_ops):
            entry: dict[str, Any] = {"op": str(func)}
            if to_save:
                entry["outputs"] = outputs(ctx.op_output)
            else:
                entry["recomputed"] = True
                entry["shape"] = list(ctx.op_output.shape)
            log.append(entry)
        return CheckpointPolicy.MUST_SAVE if to_save else CheckpointPolicy.PREFER_RECOMPUTE

    return fn


def wrap(block: torch.nn.Module, mode: str, index: int, log: list[dict[str, Any]]) -> torch.nn.Module:
    if mode == "none" or (mode == "every2" and (index + 1) % 2):
        return block
    if mode in ("full", "every2"):
        return checkpoint_wrapper(block, preserve_rng_state=False)
    blog = log if index == 0 else []
    return checkpoint_wrapper(
        block,
        context_fn=lambda: create_selective_checkpoint_contexts(policy(mode, blog)),
        preserve_rng_state=False,
    )


def run(mode: str, dtype: torch.dtype, layers: int) -> dict[str, Any]:
    torch.manual_seed(0)
    c = CONFIG
    args = ModelArgs(dim=c["h"], n_layers=layers, n_heads=c["n_h"], n_kv_heads=c["n_kv"], max_seq_len=c["s"])
    log: list[dict[str, Any]] = []
    blocks = [wrap(TransformerBlock(i, args).to(dtype), mode, i, log) for i in range(layers)]
    params = [p for b in blocks for p in b.parameters()]
    freqs_cis = precompute_freqs_cis(c["d"], c["s"])
    leaf = torch.randn(c["b"], c["s"], c["h"], dtype=dtype, requires_grad=True)
    grad = torch.randn_like(leaf)
    hooks: list[dict[str, Any]] = []
    with Trace() as trace:
        with trace.region("fwd"), saved_tensors(params, hooks):
            h = leaf * 1  # a non-leaf block input, as the embedding's output is (its 8 B scalar is saved once)
            for b in blocks:
                h = b(h, freqs_cis)
        out_bytes = h.untyped_storage().nbytes()
        with trace.region("bwd"):
            h.backward(grad)
    fwd, bwd = trace.fig("fwd"), trace.fig("bwd")
    cache_bytes = sum(o["bytes"] for e in log for o in e.get("outputs", []))
    return {
        "mode": mode,
        "dtype": str(dtype).removeprefix("torch."),
        "L": layers,
        "retained": fwd.end - fwd.start - out_bytes,
        "hooks_bytes": hooks_bytes(hooks),
        "hooks_tensors": [r for r in hooks if not r["param"]] if layers == 1 else sum(not r["param"] for r in hooks),
        "sac_cache": log if layers == 1 else None,
        "sac_cache_bytes": cache_bytes * layers,
        "bwd_peak_above_fwd_end": bwd.peak - fwd.end,
        "allocator_consistent": trace.consistent,
    }


def formulas(size: int) -> dict[str, int]:
    """Per-block bytes: per-op AC keeps C·T·(h + n_h·d + n_kv·d + n_h·d + i + h) + 4·b·n_h·s; full AC C·T·h."""
    c = CONFIG
    t = c["b"] * c["s"]
    op = size * t * (2 * c["h"] + 2 * c["n_h"] * c["d"] + c["n_kv"] * c["d"] + c["i"]) + 4 * c["b"] * c["n_h"] * c["s"]
    return {"op_2412": op, "full": size * t * c["h"]}


def main() -> None:
    out = out_path(__doc__, OUT)
    c = CONFIG
    config = {**c, "T": c["b"] * c["s"], "torch": torch.__version__}
    with aten_matmuls():
        runs = [
            run(mode, dtype, layers)
            for dtype in (torch.bfloat16, torch.float32)
            for mode in MODES
            for layers in ((2, 4) if mode == "every2" else (1, 2, 4))
        ]
    data = {"config": config, "formulas": {"bfloat16": formulas(2), "float32": formulas(4)}, "runs": runs}
    publish(out, data)


if __name__ == "__main__":
    main()
