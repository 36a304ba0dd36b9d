"""``vramplan measure``: run the plan's real training step on this machine (random weights, nothing downloaded) and
measure what it allocates. The only part of vramplan that imports torch, transformers and peft (the ``measure``
extra), and only inside its modules: importing this package imports nothing (the names below load on first use).

Modules: `records` (the records, pure Python), `recipe` (the plan as the step to run), `limitations` (what this
machine cannot reproduce), `build` (the model, adapters, checkpointing, optimizer), `forward` (autocast and one
micro-batch's forward), `tensors` (bytes by storage), `saved` (saved-tensor hooks: the activations), `cpu` (the CPU
memory method: torch.profiler events), `cuda` (every torch.cuda call), `run` (`measure_plan`: warm-up and steps),
`comparison` (measured against the estimate), `calibrate`, `distributed` (multi-GPU). The measurement scripts of
bench/measure import these rather than copy them (tests/bench/test_bench_imports.py).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["MeasureOptions", "MeasureReport", "Progress", "RankFigures", "measure_plan"]

_HOMES = {
    "MeasureOptions": "records",
    "MeasureReport": "records",
    "Progress": "records",
    "RankFigures": "records",
    "measure_plan": "run",
}


def __getattr__(name: str) -> Any:
    """PEP 562: `vramplan.measure.measure_plan` imports its module on first use."""
    if name in _HOMES:
        return getattr(importlib.import_module(f"vramplan.measure.{_HOMES[name]}"), name)
    raise AttributeError(f"module 'vramplan.measure' has no attribute {name!r}")
