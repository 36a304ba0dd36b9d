#!/usr/bin/env python3
"""Measure what torch.compile saves of one Llama block on the CPU into tests/data/stacks/compile_block.json.

Usage, from the repository root (an environment with torch, transformers and a C++ compiler for inductor):

    python -m bench.data.compile_block [-o tests/data/stacks/compile_block.json]

Method: one block (b=2, s=128, h=256, 8 heads, 2 KV heads, head dim 32, SwiGLU i=768), eager against
``torch.compile(block, fullgraph=True)`` (inductor, CPU): the torchtitan @9dec370 block (`bench.data.torchtitan_llama`;
``tt``, also wrapped before compiling, as torchtitan wraps, in its per-op AC, ``tt_op``, and full AC, ``tt_full``,
the policies of `bench.data.sac_block`) and transformers' ``LlamaDecoderLayer`` with SDPA (``hf``; its RoPE
``position_embeddings`` made by ``LlamaRotaryEmbedding`` before the forward), in bf16 (weights and input cast) and
under ``torch.autocast("cpu", bfloat16)`` (fp32 weights and input; forward and backward inside it, so autocast's
cache of bf16 weight copies lives until the backward ends). The block input is the non-leaf ``leaf * 1``, made in
the forward; the output's gradient is made in the backward. Eager: one forward under `stack_probe.saved_tensors`
(``eager_hooks``, parameters left out) and its backward. Compiled: a first call (compiling, inductor's FX-graph and
AOT-autograd caches off) and its backward, then a second, measured. ``*_retained`` = the allocator's total at the end
of forward minus before it, minus the output; ``*_bwd_peak_above_fwd_end`` = the backward's peak above the end of
forward. ``compiled_partitions``: the forward graph of each partition as inductor's min-cut partitioner
(``torch._functorch.partitioners.min_cut_rematerialization_partition``) returns it: the number of real outputs and the
saved values after them (name, op, shape, dtype, bytes = elements x element size); ``compiled_saved_bytes_excl_params``
sums them less the placeholders other than the block's input (parameters, RoPE tables).

The committed file was first written on 2026-12-01 by the stacks issue's research script (not kept); this script
re-creates it (docs/data.md gives the rerun's result).
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path
from typing import Any

import torch
import torch._functorch.config
import torch._inductor.config
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.utils.checkpoint import create_selective_checkpoint_contexts

from bench.data.sac_block import CONFIG, policy
from bench.data.stack_probe import Trace, aten_matmuls, environment, hooks_bytes, saved_tensors, write_json
from bench.data.torchtitan_llama import ModelArgs, TransformerBlock, precompute_freqs_cis

OUT = Path("tests/data/stacks/compile_block.json")
RUNS = (("tt", "bf16"), ("tt", "autocast"), ("tt_op", "bf16"), ("tt_full", "bf16"), ("hf", "bf16"), ("hf", "autocast"))
PARTITIONS: list[dict[str, Any]] = []


def _record_partitions() -> None:
    """Wrap inductor's partitioner so that each forward graph's saved values are recorded in PARTITIONS."""
    import torch._inductor.compile_fx as cfx
    from torch.fx.experimental.symbolic_shapes import optimization_hint

    original = cfx.min_cut_rematerialization_partition
    if getattr(original, "_recording", False):
        return

    def wrapped(joint: Any, inputs: Any, *args: Any, **kwargs: Any) -> Any:
        fw, bw = original(joint, inputs, *args, **kwargs)
        n_out = kwargs["num_fwd_outputs"]
        outs = next(n for n in fw.graph.nodes if n.op == "output").args[0]
        saved = []
        for node in outs[n_out:]:
            val = node.meta.get("val")
            if not isinstance(val, torch.Tensor):
                continue
            shape = [d if isinstance(d, int) else str(d) for d in val.shape]
            numel = optimization_hint(val.numel())
            saved.append(
                {
                    "name": node.name,
                    "op": "placeholder (forward input)" if node.op == "placeholder" else str(node.target),
                    "shape": shape,
                    "dtype": str(val.dtype).removeprefix("torch."),
                    "bytes": numel * val.element_size(),
                }
            )
        PARTITIONS.append({"num_fwd_outputs": n_out, "saved": saved})
        return fw, bw

    wrapped._recording = True  # type: ignore[attr-defined]
    cfx.min_cut_rematerialization_partition = wrapped


def build(block: str, dtype: torch.dtype) -> tuple[torch.nn.Module, Any]:
    """The block and a function (block, input) -> output with its RoPE tables bound."""
    c = CONFIG
    if block == "hf":
        from transformers import LlamaConfig
        from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

        cfg = LlamaConfig(
            hidden_size=c["h"],
            intermediate_size=c["i"],
            num_attention_heads=c["n_h"],
            num_key_value_heads=c["n_kv"],
            num_hidden_layers=1,
            vocab_size=1024,
            max_position_embeddings=c["s"],
        )
        cfg._attn_implementation = "sdpa"
        layer = LlamaDecoderLayer(cfg, layer_idx=0).to(dtype)
        pos = torch.arange(c["s"]).unsqueeze(0).expand(c["b"], -1)
        probe = torch.zeros(c["b"], c["s"], c["h"], dtype=dtype)
        cos, sin = LlamaRotaryEmbedding(cfg)(probe, pos)

        def hf(m: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
            out = m(x, attention_mask=None, position_ids=pos, position_embeddings=(cos, sin))
            return out[0] if isinstance(out, tuple) else out

        return layer, hf
    args = ModelArgs(dim=c["h"], n_layers=1, n_heads=c["n_h"], n_kv_heads=c["n_kv"], max_seq_len=c["s"])
    m: torch.nn.Module = TransformerBlock(0, args).to(dtype)
    if block == "tt_full":
        m = checkpoint_wrapper(m, preserve_rng_state=False)
    elif block == "tt_op":
        m = checkpoint_wrapper(
            m, context_fn=lambda: create_selective_checkpoint_contexts(policy("op_2412", [])), preserve_rng_state=False
        )
    freqs_cis = precompute_freqs_cis(c["d"], c["s"])
    return m, lambda mod, x: mod(x, freqs_cis)


def measure(
    mod: torch.nn.Module, call: Any, leaf: torch.Tensor, amp: Any, hooks: list[dict[str, Any]] | None
) -> tuple[int, int, bool]:
    """(retained, backward peak above the end of forward, allocator consistent) of one forward + backward."""
    params = list(mod.parameters())
    with Trace() as trace, amp():
        with trace.region("fwd"), saved_tensors(params, hooks) if hooks is not None else contextlib.nullcontext():
            out = call(mod, leaf * 1)
        out_bytes = out.untyped_storage().nbytes()
        with trace.region("bwd"):
            out.backward(torch.ones_like(out))
    fwd, bwd = trace.fig("fwd"), trace.fig("bwd")
    leaf.grad = None
    for p in params:
        p.grad = None
    return fwd.end - fwd.start - out_bytes, bwd.peak - fwd.end, trace.consistent


def run(block: str, precision: str) -> dict[str, Any]:
    torch.manual_seed(0)
    torch._dynamo.reset()
    c = CONFIG
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32

    def amp() -> Any:
        if precision == "autocast":
            return torch.autocast("cpu", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    mod, call = build(block, dtype)
    leaf = torch.randn(c["b"], c["s"], c["h"], dtype=dtype, requires_grad=True)
    hooks: list[dict[str, Any]] = []
    eager_retained, eager_bwd, _ = measure(mod, call, leaf, amp, hooks)
    eager = [r for r in hooks if not r["param"]]
    compiled = torch.compile(mod, fullgraph=True)
    PARTITIONS.clear()
    measure(compiled, call, leaf, amp, None)  # compiles
    partitions = [dict(p) for p in PARTITIONS]
    retained, bwd, _ = measure(compiled, call, leaf, amp, None)
    excl = sum(
        s["bytes"]
        for p in partitions
        for s in p["saved"]
        if not s["op"].startswith("placeholder") or s["name"] == "primals_1"
    )
    return {
        "block": block,
        "precision": precision,
        "eager_hooks": eager,
        "eager_hooks_bytes": hooks_bytes(eager),
        "eager_retained": eager_retained,
        "eager_bwd_peak_above_fwd_end": eager_bwd,
        "compiled_partitions": partitions,
        "compiled_saved_bytes_excl_params": excl,
        "compiled_retained": retained,
        "compiled_bwd_peak_above_fwd_end": bwd,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--out", type=Path, default=OUT)
    ap.add_argument("--only", nargs="*", default=None, help="block:precision pairs, e.g. tt:bf16")
    a = ap.parse_args()
    torch.set_num_threads(2)
    # every graph compiled here, so that the partitioner runs (a cache hit would skip it)
    torch._inductor.config.fx_graph_cache = False
    torch._functorch.config.enable_autograd_cache = False
    _record_partitions()
    c = CONFIG
    config = {**c, "T": c["b"] * c["s"], "torch": torch.__version__}
    runs_wanted = [r for r in RUNS if a.only is None or f"{r[0]}:{r[1]}" in a.only]
    with aten_matmuls():
        runs = [run(b, p) for b, p in runs_wanted]
    write_json(a.out, {"config": config, "runs": runs})
    print(f"wrote {a.out} ({environment()})")


if __name__ == "__main__":
    main()
