"""The activations a forward saves for backward, by the method of the oracle (bench/measure/measure_step.py, its
saved pass): one forward + loss under ``torch.autograd.graph.saved_tensors_hooks``. Saved tensors are de-duplicated
by untyped storage (a view counts its whole storage) and classified: ``param`` (storage of a parameter),
``param_copy`` (storage produced by a cast/clone of a parameter, e.g. autocast's bf16 weight copies, seen with a
TorchDispatchMode), ``buffer``, else activation (input ids, labels, RoPE cos/sin and the fp32 log-softmax included).
Region/module = the innermost module running when the storage is first saved; everything from the lm_head's start
on is head_and_loss; logits_like = saved activations whose last dimension is the vocabulary. Any device."""

from __future__ import annotations

import re
import time
from collections import defaultdict
from contextlib import AbstractContextManager
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

CAST_OPS = {"_to_copy", "clone"}


class CastTracker(TorchDispatchMode):  # type: ignore[misc]
    """Remembers the storages that casts/clones of parameter storages produce (autocast's weight copies)."""

    def __init__(self, param_ptrs: dict[int, str]) -> None:
        super().__init__()
        self.src, self.copies, self.keep = param_ptrs, dict[int, str](), list[Any]()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name in CAST_OPS and args and torch.is_tensor(args[0]) and torch.is_tensor(out):
            p = args[0].untyped_storage().data_ptr()
            if p in self.src or p in self.copies:
                self.copies[out.untyped_storage().data_ptr()] = self.src.get(p) or self.copies[p]
                self.keep.append(out)
        return out


def saved_pass(
    model: Any, ids: Any, labels: Any, autocast: AbstractContextManager[Any], grad_accum_steps: int, vocab_size: int
) -> dict[str, Any]:
    """One forward + loss of `model` on (`ids`, `labels`) under the hooks; the summary of what it saved."""
    pptr = {p.untyped_storage().data_ptr(): n for n, p in model.named_parameters()}
    bptr = {b.untyped_storage().data_ptr() for b in model.buffers()}
    stack, state, recs, keep, calls = ["<root>"], {"head": False}, dict[int, dict[str, Any]](), list[Any](), [0]
    names = {m: n for n, m in model.named_modules()}

    def pre(m: Any, *_: Any) -> None:
        n = names[m] or "<root>"
        stack.append(n)
        if n.endswith("lm_head"):
            state["head"] = True

    def post(m: Any, *_: Any) -> None:
        stack.pop()

    hooks = [m.register_forward_pre_hook(pre) for m in model.modules()]
    hooks += [m.register_forward_hook(post) for m in model.modules()]
    tracker = CastTracker(pptr)
    ids_ptr = ids.untyped_storage().data_ptr()

    def pack(t: Any) -> Any:
        calls[0] += 1
        s = t.untyped_storage()
        k = s.data_ptr()
        if k not in recs and s.nbytes():
            keep.append(t)
            cat = (
                "param"
                if k in pptr
                else "param_copy"
                if k in tracker.copies
                else "buffer"
                if k in bptr
                else "input"
                if t is ids or k == ids_ptr
                else "activation"
            )
            recs[k] = {
                "bytes": s.nbytes(),
                "category": cat,
                "dtype": str(t.dtype)[6:],
                "shape": list(t.shape),
                "module": stack[-1],
                "producer": type(t.grad_fn).__name__ if t.grad_fn else None,
                "head": state["head"],
                "src": tracker.copies.get(k),
            }
        return t

    t0 = time.time()
    try:
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), tracker, autocast:
            out = model(input_ids=ids, labels=labels)
            loss = out.loss / grad_accum_steps if grad_accum_steps > 1 else out.loss
        del out, loss
    finally:
        for h in hooks:
            h.remove()
    summary = summarise(vocab_size, recs, calls[0], time.time() - t0, len(set(tracker.copies.values())))
    keep.clear()
    tracker.keep.clear()
    return summary


def _region(r: dict[str, Any], per_layer: dict[int, int], sub: dict[str, int]) -> str:
    mod = r["module"]
    m = re.search(r"\.(?:layers|h)\.(\d+)(?:\.([^.]+))?", mod)
    if r["head"]:
        return "head_and_loss"
    if m:
        per_layer[int(m.group(1))] += r["bytes"]
        sub[m.group(2) or "layer_body"] += r["bytes"]
        return "layers"
    if "embed" in mod or re.search(r"\.(wte|wpe)$", mod):
        return "embedding"
    if re.search(r"(\.norm|ln_f|final_layer_norm)$", mod):
        return "final_norm"
    return "model_other"


def summarise(
    vocab_size: int, recs: dict[int, dict[str, Any]], calls: int, secs: float, n_sources: int
) -> dict[str, Any]:
    """The saved storages by region, dtype and layer; ``bytes`` is the activation total (inputs included)."""
    act = [r for r in recs.values() if r["category"] in ("activation", "input")]
    excl = {k: sum(r["bytes"] for r in recs.values() if r["category"] == k) for k in ("param", "param_copy", "buffer")}
    by_region: dict[str, int] = defaultdict(int)
    per_layer: dict[int, int] = defaultdict(int)
    sub: dict[str, int] = defaultdict(int)
    by_dtype: dict[str, int] = defaultdict(int)
    for r in act:
        r["region"] = region = _region(r, per_layer, sub)
        by_region[region] += r["bytes"]
        by_dtype[r["dtype"]] += r["bytes"]
    total = sum(r["bytes"] for r in act)
    logits = [
        {k: r[k] for k in ("bytes", "dtype", "module", "producer", "shape")}
        for r in act
        if r["shape"] and r["shape"][-1] == vocab_size
    ]
    top = sorted(act, key=lambda r: -r["bytes"])[:12]
    return {
        "bytes": total,
        "by_region": dict(by_region),
        "by_dtype": dict(by_dtype),
        "per_layer": [per_layer[i] for i in sorted(per_layer)],
        "layer_sub_total": dict(sub),
        "excluded": excl,
        "param_copy_sources": n_sources,
        "head_and_loss_bytes": by_region.get("head_and_loss", 0),
        "bytes_excluding_head_and_loss": total - by_region.get("head_and_loss", 0),
        "input_bytes": sum(r["bytes"] for r in act if r["category"] == "input"),
        "lora_module_bytes": sum(r["bytes"] for r in act if ".lora_" in r["module"]),
        "logits_like": logits,
        "logits_like_bytes": sum(x["bytes"] for x in logits),
        "num_distinct_storages": len(act),
        "num_pack_calls": calls,
        "seconds": round(secs, 2),
        "top": [{k: v for k, v in r.items() if k not in ("head", "src")} for r in top],
    }
