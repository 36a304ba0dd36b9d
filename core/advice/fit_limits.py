"""What fits as is, with the safety margin free (`core.advice.margin`): the largest micro-batch, the largest sequence
length (never past the model's trained context) and the fewest GPUs with the plan's strategies.

Each is a search over one key with everything else kept: memory grows with the micro-batch and the sequence, so
double, then bisect (`largest_fitting`); it shrinks (or stays) with more data-parallel ranks, so bisect over the
GPU counts that can be laid out (`gpu_layout`: one node up to the GPU preset's node size, then whole nodes).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import overload

from vramplan.core.advice.margin import Margin
from vramplan.core.advice.whatif import WhatIf
from vramplan.core.plan.catalogue import presets
from vramplan.core.plan.resolved import plan_rl_settings
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
        t = w.tried({"training.micro_batch_size": b}, margin.keeps)
        return t is not None and t.ok

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


def sequence_search(plan: Plan) -> tuple[str, int]:
    """The key the largest-sequence search varies and the tokens beside it in the trained sequence: an SFT plan's
    ``training.seq_len``; DPO's ``rl.max_length`` (chosen and rejected each); GRPO's and PPO's
    ``rl.max_completion_length`` after the ``max_prompt_length`` prompt (the trained sequence is prompt +
    completion: `core.plan.schema.rl.rl_settings`). An RL plan's ``training.seq_len`` trains nothing."""
    spec = plan.training.objective_spec
    if not spec.post_training:
        return "training.seq_len", 0
    if not spec.generates:
        return "rl.max_length", 0
    return "rl.max_completion_length", plan_rl_settings(plan).prompt_len


def max_seq_len(w: WhatIf, margin: Margin) -> tuple[int, int | None, dict[str, int]]:
    """The largest sequence (prompt + completion for GRPO/PPO) that fits with the margin free and everything else
    as is (0 if not even 1 token), the model's trained context when that is what stopped it (`trained_context`;
    else None): a longer sequence runs, but the model was never trained on it (learned positions: there is no row
    for it), and the change that sets it (`sequence_search`'s key)."""
    key, prompt = sequence_search(w.plan)

    def fits(s: int) -> bool:
        t = w.tried({key: s}, margin.keeps)
        return t is not None and t.ok

    context = trained_context(w.plan)
    ceiling = min(MAX_SEQ_LEN, context) - prompt if context else MAX_SEQ_LEN
    found = largest_fitting(fits, ceiling) if ceiling >= 1 else 0
    seq = prompt + found if found else 0
    return seq, (context if context and seq == context else None), ({key: found} if found else {})


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


class Realizable(Sequence[int]):
    """Data-parallel sizes that `gpu_layout` can lay out, in increasing order: 1 up to a node's worth of TP x PP
    groups, then the multiples that fill whole nodes, up to `MAX_NODES` nodes. Indexed, not listed: the bisection
    of `min_gpus` reads about 20 of its up to 800,000 sizes (listing them was a tenth of a search's time)."""

    def __init__(self, plan: Plan) -> None:
        s, per_node = plan.strategy, node_size(plan)
        unit = s.tensor_parallel * s.pipeline_parallel
        self.in_node = per_node // unit
        self.step = per_node // math.gcd(unit, per_node)
        self.first = self.in_node // self.step + 1
        self.size = self.in_node + max(0, MAX_NODES * per_node // unit // self.step - self.first + 1)

    def __len__(self) -> int:
        return self.size

    @overload
    def __getitem__(self, i: int) -> int: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[int]: ...
    def __getitem__(self, i: int | slice) -> int | Sequence[int]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self.size))]
        if i < 0:
            i += self.size
        if not 0 <= i < self.size:
            raise IndexError(i)
        return i + 1 if i < self.in_node else (self.first + i - self.in_node) * self.step


def min_gpus(w: WhatIf, margin: Margin) -> tuple[int | None, dict[str, int]]:
    """The fewest GPUs that fit with the margin free and the plan's strategies (TP, PP, ZeRO, offload...
    unchanged). Per-GPU memory does not grow with more data-parallel ranks beyond two (ZeRO shards shrink, the rest
    stays), so check one rank, then bisect over the realizable sizes."""
    plan = w.plan
    dps = Realizable(plan)

    def fits(dp: int) -> bool:
        layout = gpu_layout(plan, dp)
        t = None if layout is None else w.tried(layout, margin.keeps)
        return t is not None and t.ok

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


def seq_len_text(seq: int, context: int | None, changes: dict[str, int] | None = None) -> str:
    """``2,048 (capped at the model's 2,048-token context)``: `max_seq_len`'s answer; for an RL plan with its key
    (``1,536: prompt 512 + rl.max_completion_length 1,024``)."""
    if not seq:
        return "none, not even 1 token"
    ((key, value),) = (changes or {"training.seq_len": seq}).items()
    prompt = seq - value
    what = (
        f"{seq:,}"
        if key == "training.seq_len"
        else f"{seq:,} tokens: " + (f"prompt {prompt:,} + {key} {value:,}" if prompt else f"{key} {value:,}")
    )
    return what + (f" (capped at the model's {context:,}-token context)" if context else "")
