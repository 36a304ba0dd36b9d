"""Spend the memory a change frees on speed: one notion of "fastest" for the fit advisor and the checklist.

A memory move often frees more than the goal needs (8-bit AdamW frees 10 GiB of optimizer states on BLOOM-7B1
over 4 x A100-40GB); the rest can pay for a faster plan (no activation checkpointing: x0.74 instead of x0.97).
`speed_up` adds the `core.advice.moves.speed_moves` that still reach the goal, greedily, fastest first, so the
advisor's suggestions (`core.advice.advisor`) and the checklist's memory fix (`core.advice.checks.oom`) are ranked
by the step time of what they would actually run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from vramplan.core.advice.moves import Move, speed_moves
from vramplan.core.advice.whatif import Effect, WhatIf
from vramplan.core.memory.record import Estimate

MAX_SPEED_MOVES = 2  # at most this many speed moves added to one set


def combined(moves: Sequence[Move]) -> dict[str, Any] | None:
    """The union of the moves' changes, or None when two moves share a dimension or a key."""
    if len({mv.dim for mv in moves}) < len(moves):
        return None
    out: dict[str, Any] = {}
    for mv in moves:
        for k, v in mv.changes:
            if k in out:
                return None
            out[k] = v
    return out


def title(moves: Sequence[Move]) -> str:
    return " + ".join(mv.title for mv in moves)


def speed_up(
    w: WhatIf, picked: Sequence[Move], effect: Effect, ok: Callable[[Estimate], bool]
) -> tuple[Effect, tuple[Move, ...]]:
    """``effect`` (the change set of the memory moves ``picked``) with the speed moves that keep ``ok`` and lower
    the step time, added one at a time (the fastest each round); the speed moves added, in order."""
    speeds = speed_moves(w.plan)
    added: list[Move] = []
    best = effect
    while len(added) < MAX_SPEED_MOVES:
        found: tuple[Effect, Move] | None = None
        for mv in speeds:
            if mv in added:
                continue
            moves = [*picked, *added, mv]
            changes = combined(moves)
            if changes is None:
                continue
            est = w.memory(changes)
            if est is None or not ok(est):
                continue
            e = w.measure(title(moves), changes, est)
            if e is not None and e.relative_step_time < (found[0] if found else best).relative_step_time * 0.995:
                found = (e, mv)
        if found is None:
            break
        best = found[0]
        added.append(found[1])
    return best, tuple(added)
