"""Pipeline stages: the part of the model one stage holds, and which stages bound the others."""

from __future__ import annotations

from typing import NamedTuple

from vramplan.core.plan.helpers.memo import memoised


class Stage(NamedTuple):
    """The part of the model one pipeline stage holds (before ZeRO), per tensor-parallel rank."""

    first: bool
    last: bool
    layers: int
    in_flight: int  # micro-batches whose activations this stage holds at once (1F1B schedule)


@memoised(256)
def stages(L: int, pp: int, grad_accum: int) -> tuple[Stage, ...]:
    """Stage 0 and the last stage bound every other one: stage 0 has the most micro-batches in flight (``p``
    with 1F1B, Narayanan et al. 2021 §2.2; fewer if there are fewer micro-batches), the last has the head."""
    per = -(-L // pp)
    if pp == 1:
        return (Stage(first=True, last=True, layers=L, in_flight=1),)
    return (
        Stage(first=True, last=False, layers=per, in_flight=min(pp, grad_accum)),
        Stage(first=False, last=True, layers=per, in_flight=1),
    )
