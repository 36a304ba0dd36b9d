"""Counting the bytes of tensors the way the oracle does (bench/measure/measure_step.py): distinct untyped storages,
so a view or a tied weight counts once and a view counts its whole storage."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

import torch


def local(t: Any) -> Any:
    """A DTensor's (FSDP2's sharded parameters, gradients and optimizer states) shard on this rank; else `t`."""
    return t.to_local() if hasattr(t, "to_local") else t


def storage_bytes(tensors: Iterable[Any]) -> int:
    """Bytes of the distinct storages behind `tensors` (keyed by data pointer)."""
    seen: dict[int, int] = {}
    for t in tensors:
        s = local(t).untyped_storage()
        seen[s.data_ptr()] = s.nbytes()
    return sum(seen.values())


def optimizer_state(opt: Any) -> dict[str, Any]:
    """Every tensor in ``optimizer.state``: total bytes, bytes per state key (exp_avg, ...) and their number."""
    by_key: dict[str, int] = defaultdict(int)
    n = 0
    for st in opt.state.values():
        for k, v in st.items():
            if torch.is_tensor(v):
                by_key[k] += local(v).untyped_storage().nbytes()
                n += 1
    return {"bytes": sum(by_key.values()), "by_key": dict(by_key), "num_tensors": n}


def grads_info(model: Any) -> dict[str, Any]:
    """The distinct ``.grad`` storages of the model's parameters."""
    g = [p.grad for p in model.parameters() if p.grad is not None]
    return {"bytes": storage_bytes(g), "num_tensors": len(g), "dtypes": sorted({str(x.dtype)[6:] for x in g})}


def params_info(model: Any) -> dict[str, Any]:
    """Parameter counts (tied weights once, as ``model.parameters()`` yields them) and the bytes of their storages."""
    params = list(model.parameters())
    return {
        "total": sum(q.numel() for q in params),
        "trainable": sum(q.numel() for q in params if q.requires_grad),
        "bytes": storage_bytes(params),
        "buffers_bytes": storage_bytes(list(model.buffers())),
    }
