"""The fit advisor: the smallest sets of changes that make a plan fit, ranked by what they cost in step time.

``advise(plan)`` searches the memory moves of `core.advice.moves` (checkpointing, flash attention, fused cross-entropy,
ZeRO stages, offload, a smaller micro-batch with more accumulation, 8-bit AdamW, int8 activations, another
precision regime, LoRA/QLoRA, tensor and pipeline parallelism on the GPUs the plan has): every single move, then
pairs and triples of moves from different dimensions (those that lower the peak on their own, and the lowest sets
of the size before extended by any move: a lever that helps only once another has moved the peak), keeping only
*minimal* sets (no subset already fits) and
dropping any set whose changes contain another fitting set's. A few thousand candidate plans at most, each
estimated once (~100 us); only those that fit are timed (`core.time.step`).

Each set is then made as fast as its headroom allows (`core.advice.speedup`: memory freed beyond the goal pays for
less recomputation, no offload...), and suggestions are ordered by ``relative_step_time`` (new step time /
current; the global batch is kept, so this is also the time per token), one notion of fastest: tier 0 keeps the
training the same and tier 1 changes numerics (8-bit states, int8 activations, precision), ranked together; tier
2 changes the method (LoRA, QLoRA) and comes after them, since it trains something else.

The goal: every suggestion leaves the safety margin free (`core.advice.margin`: ``advice.headroom_percent``, else the
estimate's expected-error band, at least fragmentation's 10%), whether the plan fits or not: none proposes a plan at
0% free. Besides the suggestions, with the same margin: the largest micro-batch and sequence length that fit as is
(the sequence length also capped at the model's trained context), and the fewest GPUs that fit with the plan's
strategies (filling a node of the GPU preset's size first).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

from vramplan.core.advice.fit_limits import gpu_layout, max_micro_batch_size, max_seq_len, min_gpus
from vramplan.core.advice.frameworks import unsupported
from vramplan.core.advice.margin import Margin, fixed_margin, safety_margin
from vramplan.core.advice.moves import TIER_TEXT, Move, memory_moves
from vramplan.core.advice.speedup import combined, speed_up, title
from vramplan.core.advice.whatif import Effect, WhatIf
from vramplan.core.memory.record import Estimate
from vramplan.core.plan.schema.plan import Plan

__all__ = ["Advice", "Suggestion", "advise", "gpu_layout", "rank", "suggestions"]


@dataclass(frozen=True)
class Suggestion:
    effect: Effect
    moves: tuple[Move, ...]  # the memory moves: a minimal set that reaches the goal
    speedups: tuple[Move, ...] = ()  # speed moves the memory freed pays for (`core.advice.speedup`)

    @property
    def tier(self) -> int:
        return max(mv.tier for mv in (*self.moves, *self.speedups))

    @property
    def same_model(self) -> bool:
        """Whether it trains what the plan trains (any tier but a change of method)."""
        return self.tier < 2

    @property
    def title(self) -> str:
        return self.effect.title

    @property
    def changes(self) -> dict[str, Any]:
        return dict(self.effect.changes)

    def to_json(self) -> dict[str, Any]:
        """The effect as what-if serialises it (`Effect.to_json`: the same keys as ``check --json``'s fixes), and
        what ranked the suggestion."""
        return {
            **self.effect.to_json(),
            "moves": len(self.moves),
            "speedups": len(self.speedups),
            "tier": self.tier,
            "kind": TIER_TEXT[self.tier],
        }


@dataclass(frozen=True)
class Advice:
    plan: Plan
    est: Estimate
    step_seconds: float
    margin: Margin  # what every suggestion, the largest micro-batch and sequence length and fewest GPUs leave free
    suggestions: tuple[Suggestion, ...]
    max_micro_batch_size: int  # 0: not even a micro-batch of 1 fits
    min_gpus: int | None  # None: no number of GPUs fits with these strategies
    min_gpus_changes: dict[str, int]
    searched: int  # candidate plans estimated
    max_seq_len: int = 0  # the largest sequence length that fits as is (0: not even 1 token)
    context_len: int | None = None  # the model's trained context, where max_seq_len stopped at it (else None)

    @property
    def goal_headroom(self) -> float:
        """The share of the GPU a suggestion leaves free (for the plan as it is: a change of method keeps its own
        estimate's band unless the margin was set)."""
        return self.margin.fraction

    @property
    def fits(self) -> bool:
        return self.est.fits

    @property
    def needed(self) -> bool:
        """Whether the plan needs changes: it does not fit, or fits with less than the margin free."""
        return not self.margin.keeps(self.est)

    def to_json(self) -> dict[str, Any]:
        return {
            "fits": self.fits,
            "memory_total": self.est.total,
            "gpu_capacity": self.est.gpu_capacity,
            "headroom_fraction": round(self.est.headroom_fraction, 4),
            "step_seconds": self.step_seconds,
            "goal_headroom_fraction": round(self.goal_headroom, 4),
            "margin": {"kind": self.margin.kind, "reason": self.margin.reason},
            "ranking": "relative_step_time (new step time / current, same global batch), changes of method "
            "(tier 2) after those that train the same model (tier 0 same training, 1 different numerics)",
            "suggestions": [s.to_json() for s in self.suggestions],
            "max_micro_batch_size": self.max_micro_batch_size,
            "max_seq_len": self.max_seq_len,
            "context_len": self.context_len,
            "min_gpus": self.min_gpus,
            "min_gpus_changes": self.min_gpus_changes,
            "searched": self.searched,
        }


def _search(
    w: WhatIf, moves: Sequence[Move], ok: Callable[[Estimate], bool], max_moves: int, beam: int = 8
) -> list[tuple[int, ...]]:
    """Index sets of minimal fitting move combinations (no subset fits), by increasing size.

    Two kinds of candidates at each size: combinations of the moves that lower the peak on their own, and the
    ``beam`` lowest non-fitting sets of the size before in each tier, each extended by any other move. The second
    finds levers that only help once another has moved the peak (full checkpointing does nothing while the
    optimizer step is the peak; once the optimizer step moves into backward it is what makes a 24 GB card fit an 8B
    full fine-tune, as torchtune's RTX 4090 row shows)."""
    base = w.est.on_gpu
    fitting: list[tuple[int, ...]] = []
    frontier: list[tuple[int, tuple[int, ...]]] = []  # (on-GPU bytes, set) that lowered the peak but do not fit
    for i, mv in enumerate(moves):
        est = w.memory(dict(mv.changes))
        if est is None:
            continue
        if ok(est):
            fitting.append((i,))
        elif est.on_gpu < base:
            frontier.append((est.on_gpu, (i,)))
    savers = [combo[0] for _, combo in frontier]
    found = set(fitting)
    tried: set[tuple[int, ...]] = set()
    for size in range(2, max_moves + 1):
        candidates = set(combinations(savers, size))
        for tier in {max(moves[i].tier for i in combo) for _, combo in frontier}:
            lowest = sorted(f for f in frontier if max(moves[i].tier for i in f[1]) == tier)[:beam]
            for _, combo in lowest:
                candidates.update(tuple(sorted((*combo, j))) for j in range(len(moves)) if j not in combo)
        frontier = []
        for combo in sorted(candidates - tried):
            tried.add(combo)
            if any(sub in found for k in range(1, size) for sub in combinations(combo, k)):
                continue  # a subset already fits: not minimal
            changes = combined([moves[i] for i in combo])
            if changes is None:
                continue
            est = w.memory(changes)
            if est is None:
                continue
            if ok(est):
                fitting.append(combo)
                found.add(combo)
            elif est.on_gpu < base:
                frontier.append((est.on_gpu, combo))
    return fitting


def suggestions(
    w: WhatIf, margin: Margin | float, limit: int = 10, max_moves: int = 3, framework: str = "all"
) -> tuple[tuple[Suggestion, ...], int]:
    """Minimal sets of moves that fit with ``margin`` free (a float: that share of the GPU for every plan), ranked;
    only plans ``framework`` runs (`core.advice.frameworks`)."""
    moves = memory_moves(w.plan)
    keep = margin if isinstance(margin, Margin) else fixed_margin(margin)

    def ok(est: Estimate) -> bool:
        """Leaves the margin free on the GPU, and what it offloads fits in the node's host memory and NVMe
        (`core.plan.node`: a plan over them does not run, however well it fits on the GPU)."""
        return keep.keeps(est) and not unsupported(est.plan, framework)

    combos = _search(w, moves, ok, max_moves)
    sets = []
    for combo in combos:
        picked = tuple(moves[i] for i in combo)
        changes = combined(picked)
        assert changes is not None
        sets.append((picked, changes))
    # a set whose changes contain another fitting set's changes is not minimal either (ZeRO-1 + offload vs ZeRO-1)
    items = [frozenset(WhatIf.key(ch)) for _, ch in sets]
    minimal = [s for s, it in zip(sets, items, strict=True) if not any(o < it for o in items)]
    out = []
    seen: set[frozenset[tuple[str, Any]]] = set()
    for picked, changes in minimal:
        key = WhatIf.key(changes)
        if key in seen:
            continue
        seen.add(key)
        effect = w.measure(title(picked), changes)
        if effect is None:
            continue
        faster, added = speed_up(w, picked, effect, ok)
        out.append(Suggestion(faster, picked, added))
    out = list({WhatIf.key(s.effect.changes): s for s in reversed(out)}.values())  # the same plan by two routes
    out.sort(key=rank)
    return _keep(out, limit), len(out)


def rank(s: Suggestion) -> tuple[bool, float, int, int]:
    """The one order of suggestions: those that train the same model first, then by step time (the global batch
    is kept, so also time per token), then fewer changes, then less memory."""
    return (not s.same_model, s.effect.relative_step_time, len(s.moves) + len(s.speedups), s.effect.memory_on_gpu)


def _keep(ranked: list[Suggestion], limit: int, per_tier: int = 3) -> tuple[Suggestion, ...]:
    """The first ``limit`` suggestions, but each tier keeps its best ``per_tier`` (when the limit allows), so a
    long list of same-training changes does not hide a much faster change of method."""
    tiers = sorted({s.tier for s in ranked})
    reserved = [s for t in tiers for s in [x for x in ranked if x.tier == t][:per_tier]][:limit]
    rest = [s for s in ranked if s not in reserved][: max(0, limit - len(reserved))]
    chosen = set(map(id, reserved + rest))
    return tuple(s for s in ranked if id(s) in chosen)


def advise(
    plan: Plan, *, limit: int = 10, max_moves: int = 3, est: Estimate | None = None, framework: str = "all"
) -> Advice:
    """The fit advice for ``plan`` (see the module docstring). Suggestions only when the plan needs them."""
    w = WhatIf(plan, est)
    base = w.est
    margin = safety_margin(base)
    found: tuple[Suggestion, ...] = ()
    if not margin.keeps(base):
        found, _ = suggestions(w, margin, limit, max_moves, framework)
    mb = max_micro_batch_size(w, margin)
    seq, context = max_seq_len(w, margin)
    gpus, layout = min_gpus(w, margin)
    return Advice(plan, base, w.st.step_seconds, margin, found, mb, gpus, layout, w.estimated, seq, context)
