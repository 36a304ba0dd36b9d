"""One micro-batch's forward as `vramplan measure` (`vramplan.measure.run`, `vramplan.measure.saved`) and the
measurement scripts of bench/measure run it, as the oracle's README describes its loop: under the autocast context
of a dtype name, ``labels=input_ids``, ``loss = out.loss`` (divided by the gradient accumulation steps when > 1) and
``del out`` (the logits go before the backward). torch only."""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any

import torch

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def autocast_to(dtype: str | None, device: str) -> AbstractContextManager[Any]:
    """``torch.autocast(device, dtype)`` for a dtype name of `DTYPES` (``bf16``, ``fp16``); nothing for None."""
    if dtype is None:
        return nullcontext()
    ctx: AbstractContextManager[Any] = torch.autocast(device, dtype=DTYPES[dtype])
    return ctx


def forward_loss(model: Any, ids: Any, labels: Any, grad_accum_steps: int) -> Any:
    """One micro-batch's forward: ``model(input_ids=ids, labels=labels)``, its loss divided by `grad_accum_steps`
    when > 1; the output (the logits with it) is dropped here, so only the loss and its graph reach the backward."""
    out = model(input_ids=ids, labels=labels)
    loss = out.loss / grad_accum_steps if grad_accum_steps > 1 else out.loss
    del out
    return loss
