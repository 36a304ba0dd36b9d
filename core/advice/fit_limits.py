"""What fits as is, with the safety margin free (`core.advice.margin`): the largest micro-batch, the largest sequence
length (never past the model's trained context) and the fewest GPUs with the plan's strategies.

Each is a search over one key with everything else kept: memory grows with the micro-batch and the sequence, so
double, then bisect (`largest_fitting`); it shrinks (or stays) with more data-parallel ranks, so bisect over the
GPU counts that can be laid out (`gpu_layout`: one node up to the GPU preset's node size, then whole nodes).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from vramplan.core.advice.margin import Margin
from vramplan.core.advice.whatif import WhatIf
from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.schema.plan import Plan

MAX_MICRO_BATCH = 1_000_000  # the plan's own limit (training.micro_batch_size)
MAX_SEQ_LEN = 1 << 24  # 16M tokens: the search's ceiling (the plan's own limit is 1e8)
MAX_NODES = 100_000  # the plan's own limit (hardware.nodes)


def largest_fitting(fits: Callable[[int], bool], ceiling: int) -> int:
    """The largest n in 1..ceiling with ``fits(n)`` (0 if not even 1), for ``fits`` true up to some n and false
    above: double, then bisect."""
    if not fits(1):
        return 0
    lo, hi = 1, 2
    while hi <= ceiling and fits(hi):
        lo, hi = hi, hi * 2
    hi = min(hi, ceiling + 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def max_micro_batch_size(w: WhatIf, margin: Margin) -> int:
    """The largest micro-batch that fits with the margin free and everything else as is (0 if not even 1)."""

    def fits(b: int) -> bool:
        est = w.memory({"training.micro_batch_size": b})
        return est is not None and margin.keeps(est)

    return largest_fitting(fits, MAX_MICRO_BATCH)


def trained_context(plan: Plan) -> int | None:
    """The longest sequence the model was trained on: its learned position rows (``max_position_embeddings``,
    GPT-2's n_positions), else its preset's ``context`` (config.json's max_position_embeddings); None: unknown."""
    positions = plan.model.arch().positions or plan.model.max_position_embeddings
    if positions:
        return positions
    if plan.model.preset is None:
        return None
    try:
        return presets.model_preset(plan.model.preset).context
    except ValueError:  # PlanError: a preset no longer registered
        return None


def max_seq_len(w: WhatIf, margin: Margin) -> tuple[int, int | None]:
    """The largest sequence length that fits with the margin free and everything else as is (0 if not even 1
    token), and the model's trained context when that is what stopped it (`trained_context`; else None): a longer
    sequence runs, but the model was never trained on it (learned positions: there is no row for it)."""

    def fits(s: int) -> bool:
        est = w.memory({"training.seq_len": s})
        return est is not None and margin.keeps(est)

    context = trained_context(w.plan)
    ceiling = min(MAX_SEQ_LEN, context) if context else MAX_SEQ_LEN
    seq = largest_fitting(fits, ceiling)
    return seq, (context if context and seq == context else None)


def node_size(plan: Plan) -> int:
    """GPUs in one node for `gpu_layout`: the GPU preset's typical node (``node_gpus``, 8 by default), or the plan's
    own ``gpus_per_node`` when larger."""
    return max(plan.hardware.gpus_per_node, presets.gpu(plan.hardware.gpu).node_gpus)


def gpu_layout(plan: Plan, dp: int) -> dict[str, int] | None:
    """``hardware.gpus_per_node`` and ``hardware.nodes`` for ``dp`` data-parallel ranks of the plan's TP x PP: one
    node while they fit in one (`node_size`), else whole nodes (None when the count does not fill them)."""
    s, per_node = plan.strategy, node_size(plan)
    total = s.tensor_parallel * s.pipeline_parallel * dp
    if total <= per_node:
        return {"hardware.gpus_per_node": total, "hardware.nodes": 1}
    if total % per_node == 0 and total // per_node <= MAX_NODES:
        return {"hardware.gpus_per_node": per_node, "hardware.nodes": total // per_node}
    return None


def realizable(plan: Plan) -> Iterable[int]:
    """Data-parallel sizes that `gpu_layout` can lay out, in increasing order."""
    s, per_node = plan.strategy, node_size(plan)
    unit = s.tensor_parallel * s.pipeline_parallel
    yield from range(1, per_node // unit + 1)
    step = per_node // math.gcd(unit, per_node)
    first = per_node // unit // step + 1
    last = MAX_NODES * per_node // unit // step
    yield from (k * step for k in range(first, last + 1))


def min_gpus(w: WhatIf, margin: Margin) -> tuple[int | None, dict[str, int]]:
    """The fewest GPUs that fit with the margin free and the plan's strategies (TP, PP, ZeRO, offload...
    unchanged). Per-GPU memory does not grow with more data-parallel ranks beyond two (ZeRO shards shrink, the rest
    stays), so check one rank, then bisect over the realizable sizes."""
    plan = w.plan
    dps = list(realizable(plan))

    def fits(dp: int) -> bool:
        layout = gpu_layout(plan, dp)
        est = None if layout is None else w.memory(layout)
        return est is not None and margin.keeps(est)

    def answer(dp: int) -> tuple[int, dict[str, int]]:
        layout = gpu_layout(plan, dp)
        assert layout is not None
        return layout["hardware.gpus_per_node"] * layout["hardware.nodes"], layout

    if fits(dps[0]):
        return answer(dps[0])
    lo, hi = 0, len(dps) - 1  # dps[lo] does not fit
    if hi == 0 or not fits(dps[hi]):
        return None, {}
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(dps[mid]) else (mid, hi)
    return answer(dps[hi])


def layout_text(layout: dict[str, int]) -> str:
    """``1 node x 5 GPUs``, ``2 nodes x 8 GPUs``: a `gpu_layout`."""
    nodes, per_node = layout["hardware.nodes"], layout["hardware.gpus_per_node"]
    return f"{nodes} node{'s' if nodes > 1 else ''} x {per_node} GPU{'s' if per_node > 1 else ''}"


def seq_len_text(seq: int, context: int | None) -> str:
    """``2,048 (capped at the model's 2,048-token context)``: `max_seq_len`'s answer."""
    if not seq:
        return "none, not even 1 token"
    return f"{seq:,}" + (f" (capped at the model's {context:,}-token context)" if context else "")
