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
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from vramplan.measure.forward import forward_loss

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


class SavedTensors:
    """Saved-tensor hooks over the forwards of `models`, run inside `active`: each storage saved for backward is
    recorded once (``recs``, by data pointer, with its bytes, category, dtype, shape, module, producer, whether the
    head had started, and the parameter it is a cast copy of). The module is the innermost one running when the
    storage is first saved; the categories are ``param``, ``param_copy`` (`CastTracker`), ``buffer``, ``input``
    (a storage of `input_ptrs`), else ``activation``. The head starts when a module whose name `head_enters`
    accepts starts (default: the lm_head) or when one that `head_leaves` accepts returns (a stack whose head never
    calls the lm_head module, as TRL's fused one); it never ends."""

    def __init__(
        self,
        models: list[Any],
        input_ptrs: set[int],
        head_enters: Callable[[str], bool] = lambda name: name.endswith("lm_head"),
        head_leaves: Callable[[str], bool] = lambda name: False,
    ) -> None:
        self.pptr = {p.untyped_storage().data_ptr(): n for m in models for n, p in m.named_parameters()}
        self.bptr = {b.untyped_storage().data_ptr() for m in models for b in m.buffers()}
        self.input_ptrs = input_ptrs
        self.recs: dict[int, dict[str, Any]] = {}
        self.keep: list[Any] = []  # the saved tensors, alive until `clear` (a freed storage's address is reused)
        self.calls = 0
        self.stack, self.head = ["<root>"], False
        self.tracker = CastTracker(self.pptr)
        self.hooks: list[Any] = []
        for m in models:
            for name, module in m.named_modules():
                self.hooks.append(module.register_forward_pre_hook(self._enter(name or "<root>", head_enters)))
                self.hooks.append(module.register_forward_hook(self._leave(name or "<root>", head_leaves)))

    def _enter(self, name: str, head_enters: Callable[[str], bool]) -> Callable[..., None]:
        def hook(*_: Any) -> None:
            self.stack.append(name)
            self.head = self.head or head_enters(name)

        return hook

    def _leave(self, name: str, head_leaves: Callable[[str], bool]) -> Callable[..., None]:
        def hook(*_: Any) -> None:
            self.stack.pop()
            self.head = self.head or head_leaves(name)

        return hook

    def pack(self, t: Any) -> Any:
        """The pack hook: records `t`'s storage the first time it is saved; `t` itself is saved unchanged."""
        self.calls += 1
        s = t.untyped_storage()
        k = s.data_ptr()
        if k not in self.recs and s.nbytes():
            self.keep.append(t)
            cat = (
                "param"
                if k in self.pptr
                else "param_copy"
                if k in self.tracker.copies
                else "buffer"
                if k in self.bptr
                else "input"
                if k in self.input_ptrs
                else "activation"
            )
            self.recs[k] = {
                "bytes": s.nbytes(),
                "category": cat,
                "dtype": str(t.dtype)[6:],
                "shape": list(t.shape),
                "module": self.stack[-1],
                "producer": type(t.grad_fn).__name__ if t.grad_fn else None,
                "head": self.head,
                "src": self.tracker.copies.get(k),
            }
        return t

    @property
    def copy_sources(self) -> int:
        """The parameters of which a cast copy was made (saved or not)."""
        return len(set(self.tracker.copies.values()))

    @contextmanager
    def active(self) -> Iterator[None]:
        """The hooks and the cast tracker on for the body; the module hooks are removed at its end."""
        try:
            with torch.autograd.graph.saved_tensors_hooks(self.pack, lambda t: t), self.tracker:
                yield
        finally:
            for h in self.hooks:
                h.remove()

    def clear(self) -> None:
        """Let the saved tensors and the cast copies go."""
        self.keep.clear()
        self.tracker.keep.clear()


def saved_pass(
    model: Any, ids: Any, labels: Any, autocast: AbstractContextManager[Any], grad_accum_steps: int, vocab_size: int
) -> dict[str, Any]:
    """One forward + loss of `model` on (`ids`, `labels`) under the hooks; the summary of what it saved."""
    saved = SavedTensors([model], {ids.untyped_storage().data_ptr()})
    t0 = time.time()
    with saved.active(), autocast:
        loss = forward_loss(model, ids, labels, grad_accum_steps)
    del loss
    summary = summarise(vocab_size, saved.recs, saved.calls, time.time() - t0, saved.copy_sources)
    saved.clear()
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
